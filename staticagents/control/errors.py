"""One error shape for the API: ``{"errors": [{"path", "message", "code"}]}`` with a 4xx.

DRF calls ``exception_handler`` for every exception a view raises (settings
``REST_FRAMEWORK["EXCEPTION_HANDLER"]``). Whatever went wrong, the client gets
JSON naming what and where; an unexpected failure is logged and becomes a
plain 500, never a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import set_rollback

from staticagents.document.terms import DocumentInvalid

log = logging.getLogger(__name__)

ErrorItem = dict[str, Any]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    set_rollback()
    if isinstance(exc, DocumentInvalid):
        return error_response(400, [_document_error(error) for error in exc.errors])
    api_exc = _as_api_exception(exc)
    if api_exc is None:
        view = context.get("view")
        log.exception("%s failed", type(view).__name__ if view else "API view")
        return error_response(500, [item("internal error in Static Agents", "server_error")])
    return error_response(
        api_exc.status_code, list(detail_items(api_exc.detail)), _headers(api_exc)
    )


def error_response(
    status: int, errors: list[ErrorItem], headers: dict[str, str] | None = None
) -> Response:
    return Response({"errors": errors}, status=status, headers=headers)


def item(message: str, code: str, path: str = "") -> ErrorItem:
    return {"path": path, "message": message, "code": code}


def detail_items(detail: Any, path: str = "") -> Iterator[ErrorItem]:
    """Flatten DRF's nested error detail (dicts by field, lists by index) into path + message."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            yield from detail_items(value, _join(path, key))
    elif isinstance(detail, list):
        for index, value in enumerate(detail):
            nested = isinstance(value, dict | list)
            yield from detail_items(value, f"{path}[{index}]" if nested else path)
    else:
        yield item(str(detail), str(getattr(detail, "code", None) or "invalid"), path)


def _join(path: str, key: Any) -> str:
    if key in (api_settings.NON_FIELD_ERRORS_KEY, "__all__"):
        return path
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _document_error(error: Any) -> ErrorItem:
    found = item(error.message, error.code, error.path)
    if error.line is not None:
        found["line"] = error.line
    return found


def _as_api_exception(exc: Exception) -> exceptions.APIException | None:
    """Django's own exceptions as their DRF counterparts; None for anything unexpected."""
    if isinstance(exc, exceptions.APIException):
        return exc
    if isinstance(exc, Http404 | ObjectDoesNotExist):
        message = str(exc) if str(exc) and "matching query" not in str(exc) else "not found"
        return exceptions.NotFound(message)
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied(str(exc) or None)
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        return exceptions.ValidationError(detail)
    if isinstance(exc, RequestDataTooBig):
        too_big = exceptions.APIException(str(exc) or "request body too large", "too_large")
        too_big.status_code = 413
        return too_big
    if isinstance(exc, SuspiciousOperation):
        return exceptions.ParseError(str(exc) or "bad request")
    return None


def _headers(exc: exceptions.APIException) -> dict[str, str]:
    headers = {}
    auth_header = getattr(exc, "auth_header", None)
    if auth_header:
        headers["WWW-Authenticate"] = auth_header
    wait = getattr(exc, "wait", None)
    if wait:
        headers["Retry-After"] = str(int(wait))
    return headers
