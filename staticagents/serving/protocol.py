"""uvicorn's protocols, answering what they refuse themselves in the service's error shape.

uvicorn answers bytes that are no HTTP request with a ``text/plain`` 400, and a
WebSocket handshake it cannot complete (a missing key, no upgrade, the
application failing before it accepted) with a ``text/plain`` 4xx or 500,
before or without any application code. Here those answers are JSON in the
shape every unknown path gets (OpenAI's: the path is unknown too). ``serve``
and the test server give these classes to uvicorn as its ``http`` protocol
(httptools, which ``uvicorn[standard]`` installs and ``http="auto"`` picks)
and its ``ws`` protocol (websockets' sans-I/O one, which ``ws="auto"`` picks).

Two speed-ups of uvicorn's writes, each saving system calls (and wake-ups of the
client): a response's head goes out with its first body bytes when they follow in
the same turn of the loop (``_HeadWithBody``), and the WebSocket protocol sends
several messages in one write (``SEND_MANY``), for a stream's messages due at once.
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


class _HeadWithBody:
    """A response's side of the transport that holds its first write (the head: status
    line and headers) until the next one, or the end of the loop's turn.

    uvicorn writes the head as soon as the response starts and the body after it: two
    system calls, and two wake-ups of the client, for a reply whose bytes are all known
    at once (a JSON body, a stream due at once). Joined, they are one write.
    """

    __slots__ = ("_held", "_loop", "_started", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._started = False

    def write(self, data: bytes) -> None:
        if not self._started:
            self._started = True
            self._held = data
            self._loop.call_soon(self._flush)
            return
        held = self._held
        if held is not None:
            self._held = None
            data = held + data
        self._transport.write(data)

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class JSONErrorsHttpProtocol(HttpToolsProtocol):
    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:  # a new request's
            cycle.transport = _HeadWithBody(self.transport, self.loop)  # type: ignore[assignment]

    def send_400_response(self, msg: str) -> None:
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
