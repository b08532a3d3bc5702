"""ASGI middleware: no NUL in paths and queries; bodies within the limit, not content-coded.

``PathGuard`` stands in front of every route (HTTP and WebSocket): a path or
query holding a NUL character (``%00``) is refused with a 400, since the
service could not store the values it carries (see ``core.storable``);
``OPTIONS *`` is answered in JSON.

Django's ASGI handler reads a whole body (spooling it to disk) before any
middleware or view runs, and checks ``DATA_UPLOAD_MAX_MEMORY_SIZE`` only when
a view reads it. This guard refuses sooner: a declared ``Content-Length`` over
``STATIC_AGENTS_MAX_BODY_BYTES`` at once, a chunked body as soon as it grows
past the limit, and any ``Content-Encoding`` (the service decodes none, so a
gzip body would otherwise reach the JSON parser as binary noise). The answer
is a 413 or 415 in the error shape of the API the path belongs to. The reply
routes check the same in ``serving.route.ReplyRoute``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from staticagents.conf import settings
from staticagents.core.numbers import is_ascii_number
from staticagents.core.storable import NUL_PROBLEM
from staticagents.serving.fallback import error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

IDENTITY = ("", "identity")


def unsupported_encoding(headers: dict[str, str]) -> str | None:
    """The request's content coding when it is one the service cannot read, else None."""
    encoding = headers.get("content-encoding", "").strip().lower()
    return None if encoding in IDENTITY else encoding


def encoding_message(encoding: str) -> str:
    return f"Content-Encoding {encoding!r} is not supported: send the body uncompressed"


def too_large_message(limit: int) -> str:
    return f"Request body too large: the limit is {limit} bytes (STATIC_AGENTS_MAX_BODY_BYTES)"


def declared_length(headers: dict[str, str]) -> int | None:
    value = headers.get("content-length", "").strip()
    return int(value) if is_ascii_number(value) else None


class PathGuard:
    """Wraps the whole ASGI application (see project/asgi.py)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] in ("http", "websocket") and (
            "\x00" in path or b"%00" in scope.get("query_string", b"")
        ):
            if scope["type"] == "websocket":  # refuse the handshake
                await send({"type": "websocket.close", "code": 1008})
                return
            headers = {
                name.decode("latin-1").lower(): value.decode("latin-1")
                for name, value in scope.get("headers", [])
            }
            message = f"The path or query {NUL_PROBLEM}"
            await refuse(send, path.replace("\x00", ""), headers, 400, message)
            return
        if scope["type"] == "http" and path == "*":  # OPTIONS *: the server as a whole
            await answer_server_options(send, scope["method"])
            return
        await self.app(scope, receive, send)


ALLOWED_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


async def answer_server_options(send: Send, method: str) -> None:
    """``OPTIONS *``: the methods the service takes, in JSON (``Allow`` too); any other
    method on ``*`` names no resource, a 404 in the default error shape."""
    if method != "OPTIONS":
        await refuse(send, "*", {}, 404, f"Unknown path: {method} *")
        return
    payload = orjson.dumps({"allow": ALLOWED_METHODS})
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
        (b"allow", ", ".join(ALLOWED_METHODS).encode()),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class RequestGuard:
    """Wraps the Django ASGI application (see project/asgi.py)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", [])
        }
        # Every Django route, the admin's too: its login page is open to anyone.
        path, limit = scope.get("path", ""), settings.STATIC_AGENTS_MAX_BODY_BYTES
        encoding = unsupported_encoding(headers)
        if encoding is not None:
            await refuse(send, path, headers, 415, encoding_message(encoding))
            return
        length = declared_length(headers)
        if length is not None and length > limit:
            await refuse(send, path, headers, 413, too_large_message(limit))
            return
        if length is not None:
            # The server holds a body to its declared length: nothing more to count.
            await self.app(scope, receive, send)
            return
        await self.chunked(scope, receive, send, headers, limit)

    async def chunked(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[str, str], limit: int
    ) -> None:
        """A body of unknown length: read it here, up to the limit, then hand it on whole."""
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > limit:
                await refuse(send, scope.get("path", ""), headers, 413, too_large_message(limit))
                return
            if not message.get("more_body"):
                break
        await self.app(scope, replay(bytes(body), receive), send)


def replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body read already, then whatever the client sends next."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


async def refuse(send: Send, path: str, headers: dict[str, str], status: int, message: str) -> None:
    payload = orjson.dumps(error_body(path, headers, status, message))
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
