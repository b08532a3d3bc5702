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

uvicorn also arms a timer after each response, to close the connection if no
request follows within ``timeout_keep_alive``, and cancels it when the next one
arrives: a timer made and dropped for every request. Here a connection notes
when it went idle, and one timer a loop (``KeepAliveTimer``) closes those idle
too long.

A reply sent whole (a JSON body) need not be two ASGI messages either: the scope's
extension ``RESPOND_WHOLE`` sends head and body in one call, with no await, no
message dicts and no second pass over the headers (``ServiceCycle.respond_whole``);
and ``BODY_ARRIVED`` hands over a request body that has all arrived, where
``receive`` would wait on an event already set and copy it into a message
(``ServiceCycle.body_arrived``). With both, the server ran 466,005 instructions a
reply where it ran 479,476 (bench/README.md, "sixth session").

The WebSocket protocol (``serving.websocket_protocol``) sends several messages in
one write (``SEND_MANY``), for a stream's messages due at once.
"""

from __future__ import annotations

import asyncio
import re
from types import MappingProxyType
from typing import Any, cast

import orjson
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from staticagents.serving.loop_local import LoopLocal

# An ASGI extension of the WebSocket protocol here: ``{"type": SEND_MANY, "texts": [...]}``
# sends several text messages in one write (the scope's ``extensions`` name it).
SEND_MANY = "static_agents.websocket.send_many"
# An ASGI extension of the HTTP protocol here: ``scope["extensions"][RESPOND_WHOLE]`` is
# ``respond_whole(send, status, headers, body) -> bool``, for the request's own ``send``:
# False, when the response must go as ASGI messages after all.
RESPOND_WHOLE = "static_agents.http.respond_whole"
# And ``scope["extensions"][BODY_ARRIVED]`` is ``body_arrived(receive) -> bytes | None``:
# the whole request body when it has all arrived and nothing read it yet; else None
# (then read it with ``receive``).
BODY_ARRIVED = "static_agents.http.body_arrived"


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


class KeepAliveTimer:
    """A loop's HTTP connections, and the one timer that closes those idle (between a
    response and their next request) for their protocol's ``timeout_keep_alive``.

    In place of uvicorn's timer a response: making and cancelling one cost a reply
    1.6 µs of its 76 under wrk (bench/README.md, "fifth session"); a connection only
    notes when it went idle. The timer looks every quarter of the shortest timeout,
    so a connection is closed at most a quarter of its timeout late.
    """

    SHORTEST_LOOK_SECONDS = 0.05

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.open: set[ServiceHttpProtocol] = set()
        self.timer: asyncio.TimerHandle | None = None

    def add(self, protocol: ServiceHttpProtocol) -> None:
        self.open.add(protocol)
        if self.timer is None:
            self.look_again()

    def discard(self, protocol: ServiceHttpProtocol) -> None:
        self.open.discard(protocol)

    def close_idle(self) -> None:
        now = self.loop.time()
        for protocol in list(self.open):  # closing one discards it, later
            since = protocol.idle_since
            if since is not None and now - since >= protocol.timeout_keep_alive:
                protocol.idle_since = None
                protocol.timeout_keep_alive_handler()
        self.timer = None
        if self.open:
            self.look_again()

    def look_again(self) -> None:
        shortest = min(protocol.timeout_keep_alive for protocol in self.open)
        delay = max(shortest / 4, self.SHORTEST_LOOK_SECONDS)
        self.timer = self.loop.call_later(delay, self.close_idle)


keep_alive_timers = LoopLocal(KeepAliveTimer)


class ServiceCycle(RequestResponseCycle):
    """uvicorn's request-response cycle, with ``body_arrived`` and ``respond_whole`` (see
    the module doc)."""

    def body_arrived(self) -> bytes | None:
        """The whole body, taken as ``receive`` takes it (0.55), if it has all arrived and
        nothing took it yet: the parser marked the message complete and set the event
        ``receive`` would wait on."""
        if (
            self.more_body
            or not self.message_event.is_set()
            or self.waiting_for_100_continue
            or self.disconnected
            or self.response_complete
        ):
            return None
        self.message_event.clear()
        body = bytes(self.body)
        self.body = bytearray()
        return body

    def respond_whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        """Send the whole response now (its content-length added here); False, when it
        must be sent as ASGI messages after all: it began already, the client reads too
        slowly or left, its status is not HTTP's or a header is not valid in HTTP."""
        status_line = STATUS_LINE.get(status)
        if (
            status_line is None
            or self.response_started
            or self.flow.write_paused
            or self.disconnected
        ):
            return False
        lines = b"".join([name + b": " + value + b"\r\n" for name, value in headers])
        if HEADER_LINES.fullmatch(lines) is None:
            return False
        # What uvicorn's ``send`` does for the response's start and its last body (0.55).
        self.response_started = True
        self.waiting_for_100_continue = False
        head = [status_line, server_lines(self.default_headers), lines]
        head.append(b"content-length: %d\r\n" % len(body))
        if not self.keep_alive:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        if self.scope["method"] != "HEAD":
            head.append(body)
        # Straight to the connection's transport: ``HeadWithBody`` holds nothing of a
        # response not yet begun (a cycle's class is this one only beside it).
        cast(HeadWithBody, self.transport).transport.write(b"".join(head))
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()
        return True


# Header lines as HTTP allows them: a name with no separator or control character, and
# a value with no control character but tab (what uvicorn's ``send`` checks of each
# header, in one pass over all of them).
HEADER_LINES = re.compile(
    rb'(?:[^\x00-\x1f\x7f()<>@,;:\[\]={} \t\\"]+: [^\x00-\x08\x0a-\x1f\x7f]*\r\n)*'
)
_server_lines: tuple[list[tuple[bytes, bytes]], bytes] = ([], b"")


def server_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The server's own header lines (its date and configured headers), made once for
    each list of them: uvicorn makes a new list as the date changes, once a second."""
    global _server_lines
    made, lines = _server_lines
    if made is not headers:
        lines = b"".join([name + b": " + value + b"\r\n" for name, value in headers])
        _server_lines = (headers, lines)
    return lines


# The extensions name these functions rather than the cycle's methods: the scope would
# then hold the cycle that holds the scope, a reference cycle a request that only the
# cyclic collector frees (under load, a pause of a second at each collection).


def respond_whole(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
    """``ServiceCycle.respond_whole`` for the cycle whose ``send`` this is (else False)."""
    cycle = getattr(send, "__self__", None)
    return isinstance(cycle, ServiceCycle) and cycle.respond_whole(status, headers, body)


def body_arrived(receive: Any) -> bytes | None:
    """``ServiceCycle.body_arrived`` for the cycle whose ``receive`` this is (else None)."""
    cycle = getattr(receive, "__self__", None)
    return cycle.body_arrived() if isinstance(cycle, ServiceCycle) else None


# Every request's: read-only, as it is shared.
HTTP_EXTENSIONS = MappingProxyType({RESPOND_WHOLE: respond_whole, BODY_ARRIVED: body_arrived})


class ServiceHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol: unparsable bytes get the JSON 400, each request's
    response writes through ``HeadWithBody``, and its loop's ``KeepAliveTimer`` closes the
    connection once idle too long (see the module doc)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.head_with_body = HeadWithBody(transport, self.loop)
        self.idle_since: float | None = None  # the loop's time its last response ended
        self.keep_alive = keep_alive_timers.get(self.loop)
        self.keep_alive.add(self)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle  # the request's, unless it was a WebSocket upgrade
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = self.head_with_body  # type: ignore[assignment]
            cycle.__class__ = ServiceCycle  # uvicorn makes the cycle; its class has no slots
            if not cycle.access_log:  # else uvicorn's line for each response: its own sends
                cycle.scope["extensions"] = HTTP_EXTENSIONS  # type: ignore[typeddict-item]

    def on_response_complete(self) -> None:
        # Nothing is held once a response is complete: the protocol may close the
        # transport itself from here on (a shutdown, unparsable bytes).
        self.head_with_body.flush()
        # uvicorn's own steps (0.55), but for its keep-alive timer: see KeepAliveTimer.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:  # a request sent before this response ended: its turn now
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
        else:
            self.idle_since = self.loop.time()

    def _unset_keepalive_if_required(self) -> None:
        # uvicorn calls this as data arrives (and as the connection is lost).
        self.idle_since = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.keep_alive.discard(self)
        super().connection_lost(exc)

    def handle_websocket_upgrade(self) -> None:
        self.keep_alive.discard(self)  # the WebSocket protocol has the transport now
        super().handle_websocket_upgrade()

    def send_400_response(self, msg: str) -> None:
        self.head_with_body.flush()
        headers = self.server_state.default_headers
        self.transport.write(unparsable_response(f"Invalid HTTP request: {msg}", headers))
        self.transport.close()


def websocket_protocol(*args: Any, **kwargs: Any) -> asyncio.Protocol:
    """uvicorn's WebSocket protocol for one upgraded connection: its module and websockets
    (with the package metadata reader it imports) are imported at the first upgrade, not at
    start-up (bench/README.md, the testing kit, step 22)."""
    from staticagents.serving.websocket_protocol import JSONErrorsWebSocketProtocol

    return JSONErrorsWebSocketProtocol(*args, **kwargs)
