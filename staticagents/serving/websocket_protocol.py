"""uvicorn's WebSocket protocol as ``serve`` runs it (through ``protocol.websocket_protocol``):
a handshake it refuses gets the JSON body of ``protocol.error_json``, and the
``SEND_MANY`` extension sends several messages in one write.
"""

from __future__ import annotations

import http
from typing import Any

from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.datastructures import Headers
from websockets.exceptions import InvalidState
from websockets.http11 import Request, Response
from websockets.server import ServerProtocol

from staticagents.serving.protocol import SEND_MANY, error_json


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
