"""Django views served with the whole request in one thread hop (the control API).

Django's ASGI handler runs each request on a thread of its own, hops to it once
per middleware and for the view, and opens and closes a database connection
each time: about 3 ms a request on the machines of this project, where the view
itself takes 0.2 to 1 ms. A test that drives the control API pays that several
times per test. ``OneHopDjango`` runs Django's synchronous handler (the same
middleware, views and error handling) in one call on a small pool of threads
that keep their database connections from one request to the next. The testing
kit's plain calls take no hop at all where the database allows
(``control.lean.lean_on_loop``: on a SQLite file, once a first control call has
imported the control views).
"""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable

from django.core.handlers.asgi import ASGIRequest
from django.core.handlers.base import BaseHandler
from django.http import HttpResponseBase
from django.urls import set_script_prefix

from staticagents.replying.database import ConnectionThreads
from staticagents.serving.guards import ASGIApp, Message, Receive, Scope, Send

THREADS = 4


class OneHopDjango:
    """Serves the HTTP requests under ``prefix`` through Django's synchronous handler;
    hands every other request to ``others`` (Django's ASGI application).

    The body is read whole first (``serving.guards.RequestGuard`` in front has
    bounded it), then the request runs on one of ``THREADS`` threads.
    """

    def __init__(self, prefix: str, others: ASGIApp) -> None:
        self.prefix = prefix
        self.others = others
        self.handler = BaseHandler()
        self.handler.load_middleware(is_async=False)
        self.threads = ConnectionThreads(THREADS, name="static-agents-django")
        # Set by the first request, on its thread (importing the views is no work for the
        # event loop).
        self.lean: Callable[[Scope, bytes], Awaitable[tuple[Message, bytes] | None]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith(self.prefix):
            await self.others(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return  # the client left
        answer = None
        if self.lean is not None:  # the testing kit's plain calls, on the loop's connection
            answer = await self.lean(scope, body)
        if answer is None:
            answer = await self.threads.run(self.respond, scope, body)
        start, content = answer
        await send(start)
        await send({"type": "http.response.body", "body": content})

    def respond(self, scope: Scope, body: bytes) -> tuple[Message, bytes]:
        """Run the request through Django, on this thread; the response's start and body.
        The testing kit's plain calls skip Django's middleware and DRF (``control.lean``)."""
        # Imported here: the control views would otherwise load before the first reply.
        from staticagents.control.lean import lean_response

        lean = lean_response(scope, body)
        if self.lean is None:  # imported now: from here on the loop tries it first
            from staticagents.control.lean import lean_on_loop

            self.lean = lean_on_loop
        return lean if lean is not None else self.through_django(scope, body)

    def through_django(self, scope: Scope, body: bytes) -> tuple[Message, bytes]:
        """The request through Django's middleware and view, on this thread."""
        set_script_prefix(scope.get("root_path", "") or "/")
        request = ASGIRequest(scope, io.BytesIO(body))
        response: HttpResponseBase = self.handler.get_response(request)
        content = b"".join(response) if response.streaming else response.content  # type: ignore[attr-defined]
        start = {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": response_headers(response),
        }
        return start, content


async def read_body(receive: Receive) -> bytes | None:
    """The whole request body; None when the client disconnected first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def response_headers(response: HttpResponseBase) -> list[tuple[bytes, bytes]]:
    """Django's headers and cookies, as ASGI has them (as Django's ASGI handler sends them)."""
    headers = [(name.encode("ascii"), value.encode("latin-1")) for name, value in response.items()]
    headers += [
        (b"Set-Cookie", cookie.output(header="").encode("ascii").strip())
        for cookie in response.cookies.values()
    ]
    return headers
