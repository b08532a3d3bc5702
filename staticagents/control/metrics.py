"""``GET /metrics``: the service's Prometheus metrics (``serving.metrics``).

Who may read them: ``STATIC_AGENTS_METRICS``, ``token`` (the default: the control
token as ``Authorization: Bearer …``, as for the control API) or ``open``.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from staticagents.conf import settings
from staticagents.control.views import control_token_matches
from staticagents.serving.metrics import scraped_registry


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The metrics in Prometheus' text format; a 401 without the control token unless open."""
    if settings.STATIC_AGENTS_METRICS != "open" and not presents_control_token(request):
        message = "send the control token as Authorization: Bearer <token> (STATIC_AGENTS_METRICS)"
        error = {"path": "", "message": message, "code": "not_authenticated"}
        response = JsonResponse({"errors": [error]}, status=401)
        response["WWW-Authenticate"] = 'Bearer realm="static-agents-control"'
        return response
    return HttpResponse(generate_latest(scraped_registry()), content_type=CONTENT_TYPE_LATEST)


def presents_control_token(request: HttpRequest) -> bool:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and control_token_matches(token.strip())
