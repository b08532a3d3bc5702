"""The front door (``/``) and the health of the service (``/health``).

The front door names the service and links what a person looks for first:
the admin, the API documentation and the health; ``/health`` is its JSON, for
a person or a load balancer.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt

from staticagents.models import RulesetState
from staticagents.replying.snapshot import active_ruleset
from staticagents.serving import fallback

DISTRIBUTION = "static-agents"
READS = ("GET", "HEAD")


def service_version() -> str:
    # Imported at the first health check: the URLconf imports this module, and reading
    # package metadata would cost the start-up 20 ms (bench/README.md, step 22).
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def health_status() -> dict[str, Any]:
    """What is served now: the enabled rules in the snapshot and the ruleset's version."""
    state = RulesetState.objects.filter(pk=1).values_list("version", flat=True).first()
    return {
        "status": "ok",
        "version": service_version(),
        "rules": len(active_ruleset().rules),
        "ruleset_version": state or 0,
    }


@csrf_exempt  # nothing is written: a POST gets the JSON 404 of a wrong base URL, not a 403 page
def front_door(request: HttpRequest) -> HttpResponse:
    if request.method not in READS:  # an agent posting to a wrong base URL: its API's 404
        return fallback.not_found(request)
    return render(request, "staticagents/front_door.html", health_status())


@csrf_exempt
def health(request: HttpRequest) -> HttpResponse:
    if request.method not in READS:
        return fallback.not_found(request)
    return JsonResponse(health_status())
