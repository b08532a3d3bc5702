"""The base of every model-dialect reply route: a lean ASGI request handler.

The reply routes are the service's hot path, so they are plain ASGI apps rather
than Channels consumers: one handler object per request, no channel, no task
per message. A handler admits the request on its headers (the API key when keys
are configured, no content coding, a declared length within the limit), reads
the body (with the same limit), and then runs the dialect's ``respond``. A small
watcher task listens for the client leaving once there is time for it to:

* while the answer is worked out (``answering``) for longer than
  ``watchlist.WATCH_AFTER_SECONDS``, the work finishes and its journal entry is then
  marked cancelled;
* while a stream is paced out (``send_paced``, through ``serving/stream.py``),
  the handler stops at once and the entry is marked cancelled.

A JSON reply answered within that moment is sent straight away, unwatched: a
watcher per request would cost the hot path more than all its matching.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, ClassVar, TypeVar

import orjson

from staticagents.conf import settings
from staticagents.core.numbers import is_ascii_number
from staticagents.core.replies import Fault
from staticagents.core.storable import MAX_DEPTH, NUL_PROBLEM, nul_in_json, too_deep_in_json
from staticagents.core.timing import TimedFrame
from staticagents.replying.journal import journal
from staticagents.replying.recorded import current_request
from staticagents.serving import access
from staticagents.serving.pacer import pacer
from staticagents.serving.protocol import BODY_ARRIVED, RESPOND_WHOLE
from staticagents.serving.stream import CutOff, Faulted, send_paced
from staticagents.serving.telemetry import Observation, finished
from staticagents.serving.turns import turnstile
from staticagents.serving.watchlist import watchlist

log = logging.getLogger(__name__)
T = TypeVar("T")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON_TYPE = (b"content-type", b"application/json")
NO_EXTENSIONS: dict[str, Any] = {}
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]

FAULT_MESSAGE = "The server is overloaded: scripted stream fault"

# What a handler is doing when the client leaves (see the module doc).
READING, ANSWERING, RESPONDING, DONE = range(4)


class RequestRejected(Exception):
    """A request the route cannot serve: rendered as the dialect's own 4xx error."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code


class ClientLeft(Exception):
    """The client disconnected while its answer was worked out; the entry is marked."""


class StreamFaulted(Exception):
    """A stream failed midway as its reply scripted (``Fault``); its response has ended.

    ``drop``: a ``disconnect``, raised on to the server so that it drops the
    connection without ending the response (the server logs it as an error).
    """

    def __init__(self, kind: str) -> None:
        super().__init__(f"scripted stream fault: {kind}")
        self.drop = kind == "disconnect"


class ReplyRoute:
    """Subclasses implement ``respond(body)`` and ``error_body(rejection)``.

    ``key_sources`` says where the dialect's clients send an API key, and
    ``key_refusal`` words the 401 when ``STATIC_AGENTS_API_KEYS`` is set.
    """

    key_sources: ClassVar[access.KeySources] = access.OPENAI
    # The methods the route takes, when not all: the router passes others on (router.py).
    only_methods: ClassVar[frozenset[str] | None] = None

    def __init__(self, scope: Scope, send: Send) -> None:
        self.scope = scope
        self._send = send
        self.observation = Observation()  # for the metrics and the access log
        self.entry_id: int | None = None  # the journal entry, marked if the client leaves
        self.fault: Fault | None = None  # the reply's scripted stream fault
        self.phase = READING
        self.client_left = False
        self._headers: dict[str, str] | None = None
        self._receive: Receive | None = None
        self._main: asyncio.Task[Any] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # set once the body is read
        self._watcher: asyncio.Task[None] | None = None

    @classmethod
    def as_asgi(cls) -> Any:
        """The route as an ASGI application (typed Any: Django's URL patterns expect views).

        The reply router skips this wrapper: it makes the handler itself
        (``handler_class``), one coroutine fewer per request.
        """

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            await cls(scope, send).run(receive)

        app.handler_class = cls  # type: ignore[attr-defined]
        return app

    # -- to implement ------------------------------------------------------------

    async def respond(self, body: bytes) -> None:
        raise NotImplementedError

    def error_body(self, rejection: RequestRejected) -> Any:
        return {"error": {"message": rejection.message, "type": rejection.kind}}

    def key_refusal(self, refusal: access.Refusal) -> RequestRejected:
        return RequestRejected(401, refusal.message, "authentication_error")

    def fault_frame(self, at: float) -> TimedFrame:
        """The error a stream's ``error_event`` fault sends, in the dialect's own shape."""
        return TimedFrame(at, {"error": {"message": FAULT_MESSAGE, "type": "server_error"}})

    # -- admission -------------------------------------------------------------------

    def admission(self) -> RequestRejected | None:
        """Why the request is refused on its headers alone (before its body is read), or None."""
        headers, query = self.request_headers, self.scope.get("query_string", b"")
        # ``find``, not ``in``: on bytes, ``in`` first tries its operand as an integer, and
        # makes and drops a TypeError with its message (1,500 instructions on 3.11).
        if query.find(b"%00") >= 0 or "\x00" in self.scope.get("path", ""):
            return RequestRejected(400, f"The path or query {NUL_PROBLEM}")
        refusal = access.check_key(self.key_sources, headers, query)
        if refusal is not None:
            return self.key_refusal(refusal)
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            message = f"Content-Encoding {encoding!r} is not supported: send the body uncompressed"
            return RequestRejected(415, message)
        length = headers.get("content-length", "").strip()
        if is_ascii_number(length) and int(length) > settings.STATIC_AGENTS_MAX_BODY_BYTES:
            return self.too_large()
        return None

    def too_large(self) -> RequestRejected:
        limit = settings.STATIC_AGENTS_MAX_BODY_BYTES
        message = f"request body exceeds {limit} bytes (STATIC_AGENTS_MAX_BODY_BYTES)"
        return RequestRejected(413, message, "request_too_large")

    # -- ASGI plumbing -------------------------------------------------------------

    async def run(self, receive: Receive) -> None:
        """Serve the request, and count and log it when it ends (``serving.telemetry``)."""
        reset = current_request.set(self.observation)  # the journal notes its entry there
        try:
            await self.handle(receive)
        finally:
            current_request.reset(reset)
            finished(self.scope, self.observation)

    async def handle(self, receive: Receive) -> None:
        try:
            refused = self.admission()
            if refused is not None:
                await self.send_json(refused.status, self.error_body(refused))
                return
            body = await self.read_body(receive)
            if body is None:
                return  # refused, or the client left before its body arrived
            # The running loop, found once: each lookup is a system call (getpid) on 3.11.
            self.loop = loop = asyncio.get_running_loop()
            waiting = turnstile(loop).ticket()
            if waiting is not None:
                await waiting
            self._receive, self._main = receive, asyncio.current_task(loop)
            await self.respond(body)
        except RequestRejected as rejection:
            await self.reject(rejection)
        except ClientLeft:
            pass
        except StreamFaulted as faulted:
            if faulted.drop:
                raise
        except asyncio.CancelledError:
            if not self.client_left:  # a server shutdown, not our watcher
                raise
        except Exception:
            log.exception("reply route %s failed", self.scope.get("path"))
            await self.reject(RequestRejected(500, "internal error in Static Agents", "api_error"))
        finally:
            self.phase = DONE

    async def read_body(self, receive: Receive) -> bytes | None:
        """The whole request body, or None when it was refused or the client left."""
        limit = settings.STATIC_AGENTS_MAX_BODY_BYTES
        arrived = self.scope.get("extensions", NO_EXTENSIONS).get(BODY_ARRIVED)
        body: bytes | None = arrived(receive) if arrived is not None else None  # no message
        if body is not None and len(body) <= limit:
            return body
        chunks: list[bytes] = [] if body is None else [body]
        size = 0 if body is None else len(body)
        while size <= limit:
            message = await receive()
            if message["type"] != "http.request":
                return None  # http.disconnect
            chunk = message.get("body", b"")
            size += len(chunk)
            chunks.append(chunk)
            if not message.get("more_body") and size <= limit:
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        rejection = self.too_large()
        await self.send_json(rejection.status, self.error_body(rejection))
        return None

    def watch(self) -> None:
        """Start listening for the client leaving (once; it ends with the response)."""
        if self._watcher is None and self._receive is not None and self._main is not None:
            loop = asyncio.get_running_loop()
            self._watcher = loop.create_task(self._watch(self._receive, self._main))

    async def _watch(self, receive: Receive, main: asyncio.Task[Any]) -> None:
        """Wait for the client to leave, and act on what the handler was doing then.

        The server also reports a disconnect once the response is complete; the
        handler's phase is DONE by then, and there is nothing to do.
        """
        while (await receive())["type"] != "http.disconnect":
            pass
        if self.phase == DONE:
            return
        self.client_left = True
        if self.phase == ANSWERING:
            return  # ``answering`` marks the entry once the work is done
        main.cancel()
        await journal.mark(self.entry_id, "cancelled")

    async def answering(self, work: Awaitable[T], entry_of: Callable[[T], int | None]) -> T:
        """Await the answer phase and remember its journal entry.

        A client that leaves meanwhile does not interrupt the work (its journal
        entry is written whole); the entry is then marked cancelled and the
        handler stops.
        """
        self.phase = ANSWERING
        answers = watchlist(self.loop)
        answers.add(self, self.watch)
        try:
            result = await work
        finally:
            answers.discard(self)
        self.entry_id = entry_of(result)
        if self.client_left:
            await journal.mark(self.entry_id, "cancelled")
            raise ClientLeft
        self.phase = RESPONDING
        return result

    async def reject(self, rejection: RequestRejected) -> None:
        if self.headers_sent:
            return
        await self.send_json(rejection.status, self.error_body(rejection))

    # -- helpers for dialects ------------------------------------------------------

    @property
    def headers_sent(self) -> bool:
        return self.observation.status != 0

    async def send_start(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """Start a response whose body follows in pieces (``send_chunk``, ``end_stream``)."""
        self.observation.responds(status)
        await self._send({"type": "http.response.start", "status": status, "headers": [*headers]})

    @property
    def request_headers(self) -> dict[str, str]:
        if self._headers is None:
            self._headers = {
                k.decode("latin-1").lower(): v.decode("latin-1")
                for k, v in self.scope.get("headers", [])
            }
        return self._headers

    async def send_json(
        self, status: int, payload: Any, headers: Iterable[tuple[bytes, bytes]] = ()
    ) -> None:
        body, head = orjson.dumps(payload), [JSON_TYPE, *headers]
        if not self.sent_whole(status, head, body):
            await self.send_messages(status, head, body)

    async def send_stream_whole(self, body: bytes) -> None:
        """A stream whose every event is due at once, rendered whole (``body``), as one
        response of known length: the head and the events in one write."""
        self.phase = DONE
        if not self.sent_whole(200, SSE_HEADERS, body):
            await self.send_messages(200, SSE_HEADERS, body)

    def sent_whole(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bool:
        """Send a whole response in one write, its length added, where the server takes it so
        (``RESPOND_WHOLE``); whether it did. Not a coroutine: most replies end here."""
        self.observation.responds(status)
        respond_whole = self.scope.get("extensions", NO_EXTENSIONS).get(RESPOND_WHOLE)
        return respond_whole is not None and respond_whole(self._send, status, headers, body)

    async def send_messages(
        self, status: int, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> None:
        """A whole response as the two ASGI messages, its length added."""
        length = (b"content-length", b"%d" % len(body))
        await self._send(
            {"type": "http.response.start", "status": status, "headers": [*headers, length]}
        )
        await self._send({"type": "http.response.body", "body": body})

    async def start_sse(
        self, headers: Iterable[tuple[bytes, bytes]] = (), *, watch: bool = True
    ) -> None:
        """Start the response of a stream; ``watch=False`` for one sent whole at once."""
        if watch:
            self.watch()  # a stream lasts: a client that leaves it stops it
        await self.send_start(200, [*SSE_HEADERS, *headers])

    async def send_chunk(self, data: bytes) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": True})

    async def end_stream(self, data: bytes = b"") -> None:
        self.phase = DONE
        await self._send({"type": "http.response.body", "body": data})

    async def send_paced(
        self, frames: Iterable[TimedFrame], closing: bytes | None = None, *, paced: bool = True
    ) -> CutOff | None:
        """Send the frames as server-sent events, each at its offset from the stream's
        start (``serving/stream.py``); a ``CutOff`` if the maximum duration cut it off.

        With ``closing``, a stream that runs its course ends the response with
        those bytes, in the same write as its last frames; a stream cut off
        leaves the response open, for the dialect's own word on why it ended.
        ``paced=False``: every frame is due at once (``stream.paced``).
        """
        finish = None if closing is None else self.closer(closing)
        timer = pacer(self.loop)
        sent = await send_paced(
            frames,
            self.render_frames,
            self.send_chunk,
            finish=finish,
            entry_id=self.entry_id,
            timer=timer,
            fault=self.fault,
            error_frame=self.fault_frame,
            paced=paced,
        )
        return await self.unless_faulted(sent)

    async def unless_faulted(self, sent: CutOff | Faulted | None) -> CutOff | None:
        """What ``send_paced`` returned, unless the stream faulted: then the response
        ends without its end marker (or the connection drops) and ``StreamFaulted``
        stops the handler."""
        if isinstance(sent, Faulted):
            if sent.kind != "disconnect":
                await self.end_stream()
            raise StreamFaulted(sent.kind)
        return sent

    def render_frames(self, frames: list[TimedFrame]) -> bytes:
        """The frames due together, as the bytes of one write."""
        return sse_frames(frames)

    def closer(self, closing: bytes) -> Callable[[bytes], Awaitable[None]]:
        """A last write that ends the response with ``closing``."""

        async def close(body: bytes) -> None:
            await self.end_stream(body + closing)

        return close


def sse(payload: Any, event: str | None = None) -> bytes:
    """One server-sent event with a JSON payload."""
    return sse_frame(orjson.dumps(payload), event)


def sse_frame(data: bytes, event: str | None = None) -> bytes:
    """One server-sent event around JSON that is already rendered."""
    if event is None:
        return b"data: " + data + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def sse_frames(frames: Iterable[TimedFrame]) -> bytes:
    """Timed frames as server-sent events, rendered now, in one piece."""
    parts: list[bytes] = []
    add = parts.append
    for frame in frames:
        event = frame.event
        add(b"data: " if event is None else _event_head(event))
        add(frame.json())
        add(b"\n\n")
    return b"".join(parts)


@functools.lru_cache(maxsize=64)
def _event_head(event: str) -> bytes:
    """What precedes an ``event`` frame's JSON: a stream names a few events, many times."""
    return b"event: " + event.encode() + b"\ndata: "


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a RequestRejected naming what is wrong."""
    if not body.strip():
        raise RequestRejected(400, "request body is empty: a JSON object is required")
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestRejected(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise RequestRejected(400, "request body must be a JSON object")
    where = nul_in_json(body, payload)
    if where is not None:
        raise RequestRejected(400, f"{where}: {NUL_PROBLEM}", param=where)
    # Requests are stored and echoed (metadata, stored responses): no deeper than renderers go.
    where = too_deep_in_json(body, payload)
    if where is not None:
        message = f"{where}: nested deeper than {MAX_DEPTH} levels"
        raise RequestRejected(400, message, param=where)
    return payload
