"""uvicorn's protocols as ``serve`` runs them (``serving.protocol``): what they write, and in
how many writes."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from staticagents.serving.protocol import (
    SEND_MANY,
    HeadWithBody,
    ServiceHttpProtocol,
    websocket_protocol,
)


class Recording:
    """A transport that records each write (and can be closing)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing or self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return f"extra {name}"


def held(steps: Any) -> Recording:
    """Run ``steps(head_with_body, transport)`` on a loop, then let the loop turn; the
    transport's writes."""
    transport = Recording()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        steps(HeadWithBody(transport, loop), transport)  # type: ignore[arg-type]
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(main())
    return transport


def test_a_head_and_its_body_written_in_one_turn_leave_in_one_write() -> None:
    def reply(writer: HeadWithBody, transport: Recording) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n")
        assert transport.writes == []
        writer.write(b"{}")

    assert held(reply).writes == [b"HTTP/1.1 200 OK\r\n\r\n{}"]


def test_a_lone_write_leaves_at_the_end_of_the_turn() -> None:
    def head(writer: HeadWithBody, transport: Recording) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\n\r\n")

    assert held(head).writes == [b"HTTP/1.1 200 OK\r\n\r\n"]


def test_the_writes_keep_their_order_in_pairs() -> None:
    def stream(writer: HeadWithBody, transport: Recording) -> None:
        for part in (b"head", b"one", b"two", b"three", b"end"):
            writer.write(part)

    assert held(stream).writes == [b"headone", b"twothree", b"end"]


def test_closing_sends_what_is_held_first() -> None:
    def close(writer: HeadWithBody, transport: Recording) -> None:
        writer.write(b"head")
        writer.close()
        assert transport.writes == [b"head"] and transport.closed

    assert held(close).writes == [b"head"]


def test_a_held_write_to_a_client_gone_meanwhile_is_dropped() -> None:
    def gone(writer: HeadWithBody, transport: Recording) -> None:
        writer.write(b"head")
        transport.closing = True

    assert held(gone).writes == []


def test_the_rest_is_the_transports_own() -> None:
    def ask(writer: HeadWithBody, transport: Recording) -> None:
        assert writer.get_extra_info("peername") == "extra peername"
        assert not writer.is_closing()
        transport.closing = True
        assert writer.is_closing()

    held(ask)


async def reply_app(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"{}"})


class Connection(Recording):
    """The rest of a TCP transport that uvicorn's protocol asks for."""

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 8000) if name in ("sockname", "peername") else None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def served(
    app: Any,
    request: bytes,
    protocol_class: Any = ServiceHttpProtocol,
    protocols: list[Any] | None = None,
) -> Connection:
    """``request`` through uvicorn's ``protocol_class`` (ours) serving ``app``, the loop
    let turn a few times; the connection's transport. ``protocols`` gets the protocol."""
    transport = Connection()

    async def main() -> None:
        config = uvicorn.Config(app, lifespan="off", log_level="warning")
        config.load()
        protocol = protocol_class(
            config=config,
            server_state=ServerState(),
            app_state={},
            _loop=asyncio.get_running_loop(),
        )
        if protocols is not None:
            protocols.append(protocol)
        protocol.connection_made(transport)
        protocol.data_received(request)
        for _ in range(5):
            await asyncio.sleep(0)

    asyncio.run(main())
    return transport


def test_uvicorns_protocol_sends_a_reply_in_one_write() -> None:
    transport = served(reply_app, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
    [reply] = transport.writes
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and reply.endswith(b"\r\n\r\n{}")


def test_a_responses_last_write_leaves_once_it_is_complete() -> None:
    """A server shutdown right after a stream ended closes the transport itself: nothing
    of the stream may still be held then."""
    protocols: list[ServiceHttpProtocol] = []

    async def stream_app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        await send({"type": "http.response.body", "body": b"two"})
        protocols[0].shutdown()  # as uvicorn's, when told to stop

    transport = served(stream_app, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", protocols=protocols)
    assert transport.closed
    assert b"".join(transport.writes).endswith(b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n")


HANDSHAKE = (
    b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
)


def test_websocket_messages_sent_together_go_in_one_write_each_its_own_frame() -> None:
    scopes: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        scopes.append(scope)
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": SEND_MANY, "texts": ["one", "two", "three"]})
        await send({"type": "websocket.send", "text": "four"})

    transport = served(app, HANDSHAKE, websocket_protocol)  # as serve makes it
    assert SEND_MANY in scopes[0]["extensions"]
    handshake, together, alone = transport.writes
    assert handshake.startswith(b"HTTP/1.1 101")
    # Unmasked server frames: FIN + text opcode (0x81), the length, the text.
    assert together == b"\x81\x03one\x81\x03two\x81\x05three"
    assert alone == b"\x81\x04four"
