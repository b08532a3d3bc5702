"""Answers for requests that no view takes, in the error shape of the API the path belongs to.

Django's own answers to an unknown path, a body it refuses or a failure outside
a view are HTML pages; a client of ``/v1/`` or ``/api/`` expects JSON it can
read. ``error_body`` picks the shape from the path (and, for ``/v1/models``,
the Anthropic SDK's ``anthropic-version`` header): Galaxy's ``{err_msg,
err_code}`` under ``/api/``, the control API's ``{"errors": [...]}`` under
``/control/``, Google's ``{"error": {code, message, status}}`` under ``/v1beta/``
and for a method on a model (``/v1/models/{model}:embedContent``) or a Google
client under ``/v1/``, the OpenAI or Anthropic error under ``/v1/`` (and
``/agents/{type}/v1/``), FastAPI's ``{"detail": ...}`` on the ADK routes; a
``/sessions/{key}`` prefix (``serving/sessions.py``) changes nothing of that.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt

from staticagents.core.inquiry import mask_headers, session_key
from staticagents.dialects.anthropic import wire as anthropic
from staticagents.dialects.gemini import wire as gemini
from staticagents.dialects.openai import wire as openai
from staticagents.replying.journal import journal

log = logging.getLogger(__name__)

_SESSION_PREFIX = re.compile(r"^/sessions/[^/]+(?=/)")  # serving/sessions.py
_AGENT_PREFIX = re.compile(r"^/agents/[^/]+(?=/)")
_ADK = re.compile(r"^/(?:run|run_sse|list-apps|apps)(?:/|$)")
_GEMINI = re.compile(r"^/(?:v1beta(?:/|$)|v1/models/[^/]+:)")

# Each provider's word for an HTTP status, where it has its own.
_ANTHROPIC_KINDS = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
}
_OPENAI_CODES = {404: "unknown_url", 413: "request_too_large", 415: "unsupported_media_type"}
_CONTROL_CODES = {
    400: "parse_error",
    404: "not_found",
    413: "too_large",
    415: "unsupported_media_type",
    500: "server_error",
}


def api_of(path: str, headers: Mapping[str, str]) -> str:
    """Which API a path belongs to: galaxy, control, gemini, openai, anthropic, adk or admin."""
    path = _SESSION_PREFIX.sub("", path, count=1)
    if path.startswith("/api/") or path == "/api":
        return "galaxy"
    if path.startswith("/control/") or path == "/control":
        return "control"
    if path.startswith("/admin/"):
        return "admin"
    if _ADK.match(path):
        return "adk"
    model_path = _AGENT_PREFIX.sub("", path)
    if _GEMINI.match(model_path) or (
        model_path.startswith("/v1/") and gemini.is_google_client(headers)
    ):
        return "gemini"
    if model_path.startswith("/v1/messages") or (
        model_path.startswith("/v1/") and "anthropic-version" in headers
    ):
        return "anthropic"
    return "openai"


def error_body(path: str, headers: Mapping[str, str], status: int, message: str) -> dict[str, Any]:
    """The JSON error body the client of ``path`` expects for ``status``."""
    api = api_of(path, headers)
    if api == "galaxy":
        # Galaxy's wire module (its pydantic bodies) is imported with its routes, else by
        # its first error here: not at start-up (bench/README.md, the testing kit, step 22).
        from staticagents.dialects.galaxy import wire as galaxy

        return galaxy.error_body(status, message)
    if api == "control":
        code = _CONTROL_CODES.get(status, "invalid")
        return {"errors": [{"path": "", "message": message, "code": code}]}
    if api == "adk":
        return {"detail": message}
    if api == "gemini":
        return gemini.error_body(status, message)
    if api == "anthropic":
        kind = "api_error" if status >= 500 else "invalid_request_error"
        return anthropic.error_body(message, _ANTHROPIC_KINDS.get(status, kind))
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return openai.error_body(message, kind, code=_OPENAI_CODES.get(status))


def json_error(request: HttpRequest, status: int, message: str) -> JsonResponse:
    headers = {name.lower(): value for name, value in request.headers.items()}
    return JsonResponse(error_body(request.path, headers, status, message), status=status)


@csrf_exempt  # any method, any caller: there is nothing here to protect
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Every path that no route serves (the admin keeps its own pages), journaled."""
    method = request.method or "GET"
    headers = {name.lower(): value for name, value in request.headers.items()}
    entry = unknown_route_entry(method, request.path, headers, _body_text(request))
    if entry is not None:
        try:
            journal.record_now(entry)
        except DatabaseError:  # the 404 is owed all the same
            log.exception("could not journal the unknown route %s %s", method, request.path)
    return json_error(request, 404, f"Unknown path: {method} {request.path}")


def unknown_route_entry(
    method: str, path: str, headers: Mapping[str, str], body: str = "", *, dialect: str = ""
) -> dict[str, Any] | None:
    """The journal row of a request to a path no route serves (outcome ``unknown_route``):
    its dialect guessed from the path (``api_of``) unless given, credentials masked.
    None for the control API and the admin: their misses are not agent traffic.
    """
    api = dialect or api_of(path, headers)
    if api in ("control", "admin"):
        return None
    prefix = _AGENT_PREFIX.match(_SESSION_PREFIX.sub("", path, count=1))
    agent_type = unquote(prefix.group(0).removeprefix("/agents/")) if prefix else ""
    return dict(
        dialect=api,
        route=path[:300],
        method=method[:10],
        session=session_key(headers),
        agent_type=agent_type[:200],
        body=body,
        headers=mask_headers(headers),
        outcome="unknown_route",
        status=404,
    )


def _body_text(request: HttpRequest) -> str:
    """The body as sent, or nothing when Django refuses to read it (over its limit)."""
    try:
        return request.body.decode("utf-8", "replace")
    except RequestDataTooBig:
        return ""


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Django's 400 (a request it found suspicious or could not read), as JSON.

    A body over the limit is Django's lazy ``RequestDataTooBig``: a 413, not a 400.
    """
    if _is_admin(request):
        return defaults.bad_request(request, exception or Exception())
    if isinstance(exception, RequestDataTooBig):
        return json_error(request, 413, f"Request body too large: {exception}")
    return json_error(request, 400, f"Bad request: {exception or 'the request could not be read'}")


def server_error(request: HttpRequest) -> HttpResponse:
    """A failure outside any view's own error handling (logged by Django), as JSON."""
    if _is_admin(request):
        return defaults.server_error(request)
    return json_error(request, 500, "internal error in Static Agents")


def _is_admin(request: HttpRequest) -> bool:
    """The admin is a site of HTML pages: its errors stay Django's pages."""
    return request.path_info.startswith("/admin/")
