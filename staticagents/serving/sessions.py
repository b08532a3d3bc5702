"""Session-bound base URLs: ``/sessions/{key}/...`` serves the rest of the path in session ``key``.

A client that only takes a base URL (``base_url=http://host/sessions/ci-42/v1``)
is then isolated as if it sent ``X-Static-Session: ci-42``: ``SessionPrefix``
stands in front of every route, HTTP and WebSocket, and sets that header (the
path's key wins over one the client sent). No route needs to know: the prefix
becomes part of ``root_path``, the ASGI mount point, so the reply routes,
Django and Channels all route on the path after it, the journal records the
path as the client sent it, and the URLs Django builds keep the prefix. It
combines with the agent prefix: ``/sessions/{key}/agents/{type}/v1/...``.

A key is 1 to ``MAX_KEY_LENGTH`` printable ASCII characters without spaces;
another is refused with a 400 in the error shape of the API the rest of the
path belongs to (on a WebSocket, an ``error`` event and close code 4400).
"""

from __future__ import annotations

import functools

import orjson

from staticagents.serving.fallback import error_body
from staticagents.serving.guards import ASGIApp, Receive, Scope, Send
from staticagents.serving.telemetry import Observed

PREFIX = "/sessions/"
HEADER = b"x-static-session"
MAX_KEY_LENGTH = 200  # the journal's session column
CLOSE_BAD_REQUEST = 4400


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot name a session in a path, or None."""
    if not key:
        return "the session key is empty: put it between /sessions/ and the route"
    if len(key) > MAX_KEY_LENGTH:
        return f"the session key is {len(key)} characters long: at most {MAX_KEY_LENGTH}"
    if not (key.isascii() and key.isprintable()) or " " in key:
        return f"the session key {key!r} must be printable ASCII characters without spaces"
    return None


class SessionPrefix:
    """Wraps the whole ASGI application (see staticagents/asgi.py)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path")
        if path is None or PREFIX not in path:  # the reply path's one check
            await self.app(scope, receive, send)
            return
        await self.bind(scope, receive, send, path)

    async def bind(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        root = scope.get("root_path", "")
        # The ASGI path includes root_path (a server mounted below a prefix).
        start = len(root) if path.startswith(root) else 0
        end = path.find("/", start + len(PREFIX))
        if not path.startswith(PREFIX, start) or end < 0:
            # Not a prefix, or "/sessions/{key}" alone: no route, Django's 404.
            await self.app(scope, receive, send)
            return
        key = path[start + len(PREFIX) : end]
        problem = key_problem(key)
        if problem is not None:
            refusal = functools.partial(refuse, rest=path[end:], message=f"{problem} (in {path})")
            await Observed(refusal)(scope, receive, send)  # counted and logged as any request
            return
        headers = [(name, value) for name, value in scope["headers"] if name.lower() != HEADER]
        headers.append((HEADER, key.encode("ascii")))
        await self.app({**scope, "root_path": path[:end], "headers": headers}, receive, send)


async def refuse(scope: Scope, receive: Receive, send: Send, rest: str, message: str) -> None:
    """A 400 for the API of ``rest`` (the path after the prefix); on a WebSocket, its event."""
    if scope["type"] == "websocket":
        # The WebSocket's wire module, only once a WebSocket comes (asgi.WebSocketApplication).
        from staticagents.dialects.websocket import wire as websocket

        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        event = websocket.error_event("invalid_session", message, 400)
        await send({"type": "websocket.send", "text": orjson.dumps(event).decode()})
        await send({"type": "websocket.close", "code": CLOSE_BAD_REQUEST})
        return
    headers = {
        name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
    }
    payload = orjson.dumps(error_body(rest, headers, 400, message))
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"%d" % len(payload)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})
