"""The admin's CSS and JS, straight from the installed apps (no collectstatic, any DEBUG).

Django's handler answers a missing file with an HTML page, and a path that
climbs out of the static folders (``/static/%2e%2e/…``) with a bare 500; here
both are a JSON 404 in the service's error shape, and nothing is read.
"""

from __future__ import annotations

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponseBase

from staticagents.serving.fallback import json_error


class StaticFiles(ASGIStaticFilesHandler):
    def serve(self, request: HttpRequest) -> HttpResponseBase:  # type: ignore[override]
        try:
            return super().serve(request)
        except (Http404, SuspiciousOperation):
            return json_error(request, 404, f"No static file at {request.path}")
