"""uvicorn's protocols as ``serve`` runs them: what they write, and in how many writes."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from staticagents.serving.protocol import (
    SEND_MANY,
    JSONErrorsHttpProtocol,
    JSONErrorsWebSocketProtocol,
    _HeadWithBody,
)

HANDSHAKE = (
    b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
)


class Transport(asyncio.Transport):
    """Keeps each write apart, as the socket would receive it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(
            name, default
        )

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def test_a_head_leaves_with_the_body_that_follows_it_in_the_same_turn() -> None:
    transport = Transport()
    held = _HeadWithBody(transport, asyncio.get_running_loop())
    held.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert transport.writes == []
    held.write(b"body")
    held.write(b"more")
    assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"more"]


async def test_a_head_without_a_body_in_its_turn_leaves_at_the_end_of_the_turn() -> None:
    transport = Transport()
    held = _HeadWithBody(transport, asyncio.get_running_loop())
    held.write(b"head")
    await asyncio.sleep(0)
    assert transport.writes == [b"head"]
    held.write(b"later")
    assert transport.writes == [b"head", b"later"]


async def test_closing_sends_a_head_still_held_first() -> None:
    transport = Transport()
    held = _HeadWithBody(transport, asyncio.get_running_loop())
    held.write(b"head")
    held.close()
    assert transport.writes == [b"head"] and transport.closed


def served(app: Any, protocol_class: type[asyncio.Protocol]) -> tuple[Any, Transport]:
    config = Config(app=app, lifespan="off", log_level="warning")
    config.load()
    protocol = protocol_class(config=config, server_state=ServerState(), app_state={})  # type: ignore[call-arg]
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport


async def test_a_json_reply_is_one_write() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    protocol, transport = served(app, JSONErrorsHttpProtocol)
    protocol.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    for _ in range(5):
        await asyncio.sleep(0)
    [write] = transport.writes
    assert write.startswith(b"HTTP/1.1 200 OK\r\n")
    assert write.endswith(b"\r\n\r\n2\r\n{}\r\n0\r\n\r\n")  # the head, then the body


async def test_websocket_messages_sent_together_go_in_one_write_each_its_own_frame() -> None:
    scopes: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        scopes.append(scope)
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": SEND_MANY, "texts": ["one", "two", "three"]})
        await send({"type": "websocket.send", "text": "four"})

    protocol, transport = served(app, JSONErrorsWebSocketProtocol)
    protocol.data_received(HANDSHAKE)
    for _ in range(5):
        await asyncio.sleep(0)
    assert SEND_MANY in scopes[0]["extensions"]
    handshake, together, alone = transport.writes
    assert handshake.startswith(b"HTTP/1.1 101")
    # Unmasked server frames: FIN + text opcode (0x81), the length, the text.
    assert together == b"\x81\x03one\x81\x03two\x81\x05three"
    assert alone == b"\x81\x04four"
