"""uvicorn's protocols as ``serve`` runs them (``serving.protocol``): what they write, and in
how many writes."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
import weakref
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from staticagents.serving.protocol import (
    BODY_ARRIVED,
    RESPOND_WHOLE,
    SEND_MANY,
    HeadWithBody,
    KeepAliveTimer,
    ServiceHttpProtocol,
    websocket_protocol,
)
from tests.conftest import free_port


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

    def set_protocol(self, protocol: Any) -> None:  # a WebSocket upgrade's
        pass


def served(
    app: Any,
    request: bytes,
    protocol_class: Any = ServiceHttpProtocol,
    protocols: list[Any] | None = None,
    default_headers: list[tuple[bytes, bytes]] | None = None,
) -> Connection:
    """``request`` through uvicorn's ``protocol_class`` (ours) serving ``app``, the loop
    let turn a few times; the connection's transport. ``protocols`` gets the protocol;
    ``default_headers`` are those the server adds to every response (its date, its name)."""
    transport = Connection()
    state = ServerState()
    state.default_headers = default_headers or []

    async def main() -> None:
        config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
        config.load()
        protocol = protocol_class(
            config=config,
            server_state=state,
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


# -- keep-alive -----------------------------------------------------------------------


class ClockedLoop:
    """The two things ``KeepAliveTimer`` asks of its loop, on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[tuple[float, Any]] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Any) -> None:
        self.timers.append((self.now + delay, callback))

    def run_until(self, moment: float) -> None:
        while due := sorted((t for t in self.timers if t[0] <= moment), key=lambda t: t[0]):
            self.timers.remove(due[0])
            self.now = due[0][0]
            due[0][1]()
        self.now = moment


class KeptConnection:
    """What the timer reads of a connection, and when it was closed."""

    def __init__(self, loop: ClockedLoop, timeout: float) -> None:
        self.loop, self.timeout_keep_alive = loop, timeout
        self.idle_since: float | None = None
        self.closed_at: float | None = None

    def timeout_keep_alive_handler(self) -> None:
        self.closed_at = self.loop.now


def test_the_keep_alive_timer_closes_a_connection_idle_for_its_timeout() -> None:
    loop = ClockedLoop()
    timer = KeepAliveTimer(loop)  # type: ignore[arg-type]
    idle, busy, back = (KeptConnection(loop, 4.0) for _ in range(3))
    for connection in (idle, busy, back):
        timer.add(connection)  # type: ignore[arg-type]
    loop.run_until(0.5)
    idle.idle_since = back.idle_since = 0.5  # their first responses ended
    loop.run_until(3.0)
    back.idle_since = None  # its next request came
    loop.run_until(3.2)
    back.idle_since = 3.2
    loop.run_until(20.0)

    assert idle.closed_at is not None and 4.5 <= idle.closed_at <= 4.5 + 4.0 / 4
    assert back.closed_at is not None and 7.2 <= back.closed_at <= 7.2 + 4.0 / 4
    assert busy.closed_at is None  # mid-request: never idle

    timer.discard(busy)  # type: ignore[arg-type]
    timer.discard(idle)  # type: ignore[arg-type]
    timer.discard(back)  # type: ignore[arg-type]
    loop.run_until(30.0)
    assert loop.timers == []  # no connection left: the timer stops looking


def test_an_idle_keep_alive_connection_is_closed_after_its_timeout_not_before() -> None:
    port = free_port()
    config = uvicorn.Config(
        reply_app,
        port=port,
        lifespan="off",
        log_level="warning",
        http=ServiceHttpProtocol,
        timeout_keep_alive=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
            request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
            for _ in range(3):  # requests one after another keep it open
                client.sendall(request)
                assert client.recv(4096).endswith(b"\r\n\r\n{}")
            answered = time.monotonic()
            closed = client.recv(4096)  # blocks until the server closes the connection
            idle_for = time.monotonic() - answered
    finally:
        server.should_exit = True
        thread.join(10)

    assert closed == b""
    # The server counts from the moment its response was complete, a little before the
    # client had read it: here a connection may look idle for up to that less.
    assert idle_for >= 0.95


def test_a_connection_leaves_its_loops_keep_alive_timer_when_lost_or_upgraded() -> None:
    protocols: list[ServiceHttpProtocol] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.accept"})
            return
        await reply_app(scope, receive, send)

    timers: list[KeepAliveTimer] = []

    def lose(protocol: ServiceHttpProtocol) -> None:
        timers.append(protocol.keep_alive)
        assert protocol in protocol.keep_alive.open
        assert protocol.idle_since is not None  # its response ended
        protocol.connection_lost(None)

    served(app, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", protocols=protocols)
    lose(protocols[0])
    assert protocols[0] not in timers[0].open
    served(app, HANDSHAKE, protocols=protocols)
    assert protocols[1] not in protocols[1].keep_alive.open


def test_pipelined_requests_are_answered_in_turn_and_counted() -> None:
    """A request sent before the previous response ended waits its turn (the branch of
    ``on_response_complete`` that starts it), and every response counts toward uvicorn's
    ``--limit-max-requests``."""
    protocols: list[ServiceHttpProtocol] = []
    request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"

    transport = served(reply_app, request * 3, protocols=protocols)

    replies = b"".join(transport.writes)
    assert replies.count(b"HTTP/1.1 200 OK\r\n") == 3 and replies.endswith(b"\r\n\r\n{}")
    assert protocols[0].server_state.total_requests == 3
    assert protocols[0].idle_since is not None  # idle once the last one was answered


# -- a reply sent whole (RESPOND_WHOLE) -------------------------------------------------

JSON = [(b"content-type", b"application/json")]


def whole_app(status: int = 201, headers: list[tuple[bytes, bytes]] = JSON) -> Any:
    """An app that sends its reply whole, and as ASGI messages if it may not."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        sent = scope["extensions"][RESPOND_WHOLE](send, status, headers, b'{"a":1}')
        scope["state"]["sent whole"] = sent
        if not sent:
            start = {"type": "http.response.start", "status": 200, "headers": [*JSON]}
            await send({**start, "headers": [*JSON, (b"content-length", b"7")]})
            await send({"type": "http.response.body", "body": b'{"a":1}'})

    return app


POST = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"


def test_a_reply_sent_whole_is_one_write_with_the_servers_headers_and_its_length() -> None:
    protocols: list[ServiceHttpProtocol] = []
    server = [(b"date", b"Sat, 05 Dec 2026 18:00:00 GMT"), (b"server", b"uvicorn")]
    transport = served(whole_app(), POST, protocols=protocols, default_headers=server)

    [reply] = transport.writes
    head, _, body = reply.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    assert status == b"HTTP/1.1 201 Created" and body == b'{"a":1}'
    names = [line.split(b": ")[0] for line in lines]
    assert names == [b"date", b"server", b"content-type", b"content-length"]
    assert b"content-length: 7" in lines
    protocol = protocols[0]
    assert protocol.cycle.response_complete and protocol.server_state.total_requests == 1
    assert protocol.idle_since is not None and not transport.closed  # kept alive


def test_a_reply_sent_whole_carries_the_servers_date_of_the_moment() -> None:
    # The server makes a new list of its headers as the date changes: each reply has its own.
    for second in ("00", "01", "00"):
        server = [(b"date", b"Sat, 05 Dec 2026 18:00:%s GMT" % second.encode())]
        [reply] = served(whole_app(), POST, default_headers=server).writes
        assert b"\r\ndate: Sat, 05 Dec 2026 18:00:%s GMT\r\n" % second.encode() in reply


def test_replies_sent_whole_answer_pipelined_requests_in_turn() -> None:
    protocols: list[ServiceHttpProtocol] = []
    transport = served(whole_app(), POST * 3, protocols=protocols)

    assert b"".join(transport.writes).count(b"HTTP/1.1 201 Created\r\n") == 3
    assert protocols[0].server_state.total_requests == 3


def test_a_reply_sent_whole_closes_a_connection_the_client_asked_to_close() -> None:
    closing = POST.replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n")
    protocols: list[ServiceHttpProtocol] = []
    transport = served(whole_app(), closing, protocols=protocols)

    [reply] = transport.writes
    assert b"\r\nconnection: close\r\n" in reply and transport.closed
    assert protocols[0].cycle.scope["state"]["sent whole"] is True


def test_a_head_request_gets_the_length_of_a_reply_sent_whole_but_not_its_body() -> None:
    protocols: list[ServiceHttpProtocol] = []
    head = b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n"
    transport = served(whole_app(200), head, protocols=protocols)

    [reply] = transport.writes
    assert b"content-length: 7\r\n" in reply and reply.endswith(b"\r\n\r\n")
    assert protocols[0].cycle.scope["state"]["sent whole"] is True


def test_a_reply_goes_as_asgi_messages_when_it_cannot_go_whole() -> None:
    bad_value = [(b"x-note", b"two\r\nlines")]
    bad_name = [(b"x note", b"one")]
    for app in (whole_app(999), whole_app(headers=bad_value), whole_app(headers=bad_name)):
        protocols: list[ServiceHttpProtocol] = []
        transport = served(app, POST, protocols=protocols)
        assert protocols[0].cycle.scope["state"]["sent whole"] is False
        [reply] = transport.writes  # the messages' head and body, held into one write
        assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and reply.endswith(b'{"a":1}')


def test_a_reply_to_a_client_that_reads_too_slowly_waits_for_it_as_asgi_messages() -> None:
    transport = Connection()

    async def main() -> ServiceHttpProtocol:
        config = uvicorn.Config(whole_app(), lifespan="off", access_log=False)
        config.load()
        protocol = ServiceHttpProtocol(
            config=config,
            server_state=ServerState(),
            app_state={},
            _loop=asyncio.get_running_loop(),
        )
        protocol.connection_made(transport)  # type: ignore[arg-type]
        protocol.pause_writing()  # the transport's buffer is full
        protocol.data_received(POST)
        for _ in range(5):
            await asyncio.sleep(0)
        assert transport.writes == []  # uvicorn's send waits for the client to read
        protocol.resume_writing()
        for _ in range(5):
            await asyncio.sleep(0)
        return protocol

    protocol = asyncio.run(main())
    assert protocol.cycle.scope["state"]["sent whole"] is False
    [reply] = transport.writes
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n") and reply.endswith(b'{"a":1}')


def test_a_reply_sent_whole_leaves_no_reference_cycle_behind() -> None:
    """A request's cycle is freed as soon as it is done with, not by the cyclic collector:
    under load, each of its collections would pause the service."""
    protocols: list[ServiceHttpProtocol] = []
    gc.disable()
    try:
        served(whole_app(), POST, protocols=protocols)
        cycle = weakref.ref(protocols[0].cycle)
        protocols[0].cycle = None  # type: ignore[assignment]
        assert cycle() is None
    finally:
        gc.enable()


# -- a request body that has all arrived (BODY_ARRIVED) ---------------------------------


def body_app(taken: list[Any]) -> Any:
    """An app that takes its body as it arrived (else by ``receive``), answers, and then
    listens as a disconnect watcher does."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        body = scope["extensions"][BODY_ARRIVED](receive)
        taken.append(body)
        if body is None:
            message = await receive()
            taken.append(message["body"])
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        taken.append((await receive())["type"])  # the response is complete: a disconnect

    return app


def test_a_body_that_has_all_arrived_is_taken_without_receive() -> None:
    taken: list[Any] = []
    transport = served(body_app(taken), POST)

    assert taken == [b"{}", "http.disconnect"]
    assert transport.writes[0].endswith(b"\r\n\r\nok")


def test_a_body_still_arriving_or_awaiting_a_100_continue_is_read_with_receive() -> None:
    partial: list[Any] = []
    protocols: list[ServiceHttpProtocol] = []
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"
    transport = Connection()

    async def main() -> None:
        config = uvicorn.Config(body_app(partial), lifespan="off", access_log=False)
        config.load()
        loop = asyncio.get_running_loop()
        protocol = ServiceHttpProtocol(
            config=config, server_state=ServerState(), app_state={}, _loop=loop
        )
        protocols.append(protocol)
        protocol.connection_made(transport)  # type: ignore[arg-type]
        protocol.data_received(head)  # the body comes later
        for _ in range(3):
            await asyncio.sleep(0)
        protocol.data_received(b"{}")
        for _ in range(5):
            await asyncio.sleep(0)

    asyncio.run(main())
    assert partial == [None, b"{}", "http.disconnect"]

    expecting: list[Any] = []
    continued = POST.replace(b"Host: x\r\n", b"Host: x\r\nExpect: 100-continue\r\n")
    served(body_app(expecting), continued)
    assert expecting == [None, b"{}", "http.disconnect"]
