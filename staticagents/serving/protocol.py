"""uvicorn's protocols, answering what they refuse themselves in the service's error shape,
and sending each HTTP response's head with its body.

uvicorn answers bytes that are no HTTP request with a ``text/plain`` 400, and a
WebSocket handshake it cannot complete (a missing key, no upgrade, the
application failing before it accepted) with a ``text/plain`` 4xx or 500,
before or without any application code. Here those answers are JSON in the
shape every unknown path gets (OpenAI's: the path is unknown too). ``serve``
and the test server give these classes to uvicorn as its ``http`` protocol
(httptools, which ``uvicorn[standard]`` installs and ``http="auto"`` picks)
and its ``ws`` protocol (websockets' sans-I/O one, which ``ws="auto"`` picks).

uvicorn writes a response's head (status line and headers) as soon as the
application starts the response, and its body in a write of its own: two
system calls, two TCP segments and two wake-ups of the client for every JSON
reply. ``ServiceHttpProtocol`` holds a response's first write until its next
one or the end of the loop's turn (``HeadWithBody``), so a reply sent whole
leaves in one write, and a stream's head leaves no later than the turn it was
started in.

The WebSocket protocol sends several messages in one write (``SEND_MANY``), for
a stream's messages due at once.
"""

from __future__ import annotations

import asyncio
import http
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.datastructures import Headers
from websockets.exceptions import InvalidState
from websockets.http11 import Request, Response
from websockets.server import ServerProtocol

# An ASGI extension of the WebSocket protocol here: ``{"type": SEND_MANY, "texts": [...]}``
# sends several text messages in one write (the scope's ``extensions`` name it).
SEND_MANY = "static_agents.websocket.send_many"


def error_json(message: str, status: int = 400) -> bytes:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    error = {"message": message, "type": kind, "param": None, "code": None}
    return orjson.dumps({"error": error})


def unparsable_response(message: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    body = error_json(message)
    head = [b"HTTP/1.1 400 Bad Request"]
    head += [name + b": " + value for name, value in default_headers]
    head += [
        b"content-type: application/json",
        b"content-length: " + str(len(body)).encode(),
        b"connection: close",
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class HeadWithBody:
    """A connection's transport as its responses write to it: a write is held until the
    next write (then both leave in one) or the end of the loop's turn, whichever comes
    first. Everything but ``write``, ``close`` and ``is_closing`` is the transport's own."""

    __slots__ = ("held", "loop", "transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport = transport
        self.loop = loop
        self.held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self.held
        if held is None:
            self.held = data
            self.loop.call_soon(self.flush)
        else:
            self.held = None
            self.transport.write(held + data)

    def flush(self) -> None:
        held = self.held
        if held is not None:
            self.held = None
            if not self.transport.is_closing():  # the client left: nothing to send to
                self.transport.write(held)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class ServiceHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol: unparsable bytes get the JSON 400, and each request's
    response writes through ``HeadWithBody`` (see the module doc)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.head_with_body = HeadWithBody(transport, self.loop)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle  # the request's, unless it was a WebSocket upgrade
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = self.head_with_body  # type: ignore[assignment]

    def on_response_complete(self) -> None:
        # Nothing is held once a response is complete: the protocol may close the
        # transport itself from here on (a shutdown, unparsable bytes).
        self.head_with_body.flush()
        super().on_response_complete()

    def send_400_response(self, msg: str) -> None:
        self.head_with_body.flush()
        headers = self.server_state.default_headers
        self.transport.write(unparsable_response(f"Invalid HTTP request: {msg}", headers))
        self.transport.close()


class _JSONRejections(ServerProtocol):
    """websockets' server side of a handshake, its refusals in JSON."""

    def reject(self, status: http.HTTPStatus | int, text: str) -> Response:
        response = super().reject(status, text)
        message = text.strip() or f"WebSocket connection refused: {response.reason_phrase}"
        body = error_json(message, response.status_code)
        headers = Headers(response.headers)
        del headers["Content-Type"], headers["Content-Length"]
        headers.update({"Content-Type": "application/json", "Content-Length": str(len(body))})
        return Response(response.status_code, response.reason_phrase, headers, body)


class JSONErrorsWebSocketProtocol(WebSocketsSansIOProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        made = self.conn
        self.conn = _JSONRejections(
            extensions=made.available_extensions, max_size=made.max_size, logger=made.logger
        )

    def handle_connect(self, event: Request) -> None:
        super().handle_connect(event)
        self.scope["extensions"][SEND_MANY] = {}

    async def send(self, message: Any) -> None:
        if message["type"] != SEND_MANY:
            await super().send(message)
            return
        # Several text messages due at once, one frame each, in one write: a stream's
        # messages each in a write of its own cost a system call (and a wake-up of the
        # client) apiece. Past the handshake and before the close, as uvicorn's own send.
        texts: list[str] = message["texts"]
        if not self.handshake_complete or self.close_sent or self.initial_response is not None:
            for text in texts:
                await super().send({"type": "websocket.send", "text": text})
            return
        await self.writable.wait()
        if self.disconnected:
            raise ClientDisconnected()
        try:
            for text in texts:
                self.conn.send_text(text.encode())
        except InvalidState:
            raise ClientDisconnected() from None
        self.transport.write(b"".join(self.conn.data_to_send()))
