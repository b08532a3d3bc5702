"""``GET /metrics``: the service's Prometheus metrics (``serving.metrics``).

Who may read them: ``STATIC_AGENTS_METRICS``, ``token`` (the default: the control
token as ``Authorization: Bearer …``, as for the control API) or ``open``.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from staticagents.conf import settings
from staticagents.control.views import control_token_matches
from staticagents.serving.metrics import scraped_registry


@csrf_exempt  # read with a token, never with a session: nothing for a forged request to use
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The metrics in Prometheus' text format; a 401 without the control token unless open.

    Errors have the control API's shape.
    """
    if request.method not in ("GET", "HEAD"):
        response = error(405, "method_not_allowed", f"method {request.method} not allowed: GET")
        response["Allow"] = "GET, HEAD"
        return response
    if settings.STATIC_AGENTS_METRICS != "open" and not presents_control_token(request):
        message = "send the control token as Authorization: Bearer <token> (STATIC_AGENTS_METRICS)"
        response = error(401, "not_authenticated", message)
        response["WWW-Authenticate"] = 'Bearer realm="static-agents-control"'
        return response
    return HttpResponse(generate_latest(scraped_registry()), content_type=CONTENT_TYPE_LATEST)


def error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"errors": [{"path": "", "message": message, "code": code}]}, status=status)


def presents_control_token(request: HttpRequest) -> bool:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and control_token_matches(token.strip())
