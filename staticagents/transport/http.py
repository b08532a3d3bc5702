"""The base of every model-dialect reply route: a lean Channels HTTP consumer.

It admits a request on its headers first (the API key when keys are
configured, no content coding), reads the body (with a size limit), runs the
dialect's handler as a task so that a client disconnect can cancel a stream at
once, and gives dialects small helpers for JSON bodies and paced SSE streams.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import orjson
from channels.consumer import get_handler_name
from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.http import AsyncHttpConsumer
from channels.layers import channel_layers
from django.conf import settings

from staticagents import access
from staticagents.answering import mark_cancelled
from staticagents.core.storable import NUL_PROBLEM, nul_in_json

log = logging.getLogger(__name__)
T = TypeVar("T")

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


# An alias registered as "no layer", so looking it up per request costs a dict lookup
# instead of a failed settings lookup.
NO_CHANNEL_LAYER = "static-agents-no-layer"
channel_layers.set(NO_CHANNEL_LAYER, None)


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


class ReplyConsumer(AsyncHttpConsumer):
    """Subclasses implement ``respond(body)`` and ``error_body(rejection)``.

    ``key_sources`` says where the dialect's clients send an API key, and
    ``key_refusal`` words the 401 when ``STATIC_AGENTS_API_KEYS`` is set.
    """

    # Reply routes never use the channel layer; skipping it saves a channel per request.
    channel_layer_alias = NO_CHANNEL_LAYER
    key_sources = access.OPENAI

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.size = 0
        self.task: asyncio.Task[None] | None = None
        self.headers_sent = False
        self.entry_id: int | None = None  # the journal entry, marked if the client leaves
        self.admitted = False  # the headers passed admission (checked on the first chunk)

    # -- to implement ------------------------------------------------------------

    async def respond(self, body: bytes) -> None:
        raise NotImplementedError

    def error_body(self, rejection: RequestRejected) -> Any:
        return {"error": {"message": rejection.message, "type": rejection.kind}}

    def key_refusal(self, refusal: access.Refusal) -> RequestRejected:
        return RequestRejected(401, refusal.message, "authentication_error")

    # -- admission -------------------------------------------------------------------

    def admission(self) -> RequestRejected | None:
        """Why the request is refused on its headers alone (before its body is read), or None."""
        headers = self.request_headers
        refusal = access.check_key(self.key_sources, headers, self.scope.get("query_string", b""))
        if refusal is not None:
            return self.key_refusal(refusal)
        encoding = headers.get("content-encoding", "").strip().lower()
        if encoding not in ("", "identity"):
            message = f"Content-Encoding {encoding!r} is not supported: send the body uncompressed"
            return RequestRejected(415, message)
        return None

    # -- ASGI plumbing -------------------------------------------------------------

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels closes stale ORM connections before every message, a thread hop
        # each time. Reply routes never touch the ORM on the event loop: their
        # database work runs in threads that manage their own connections.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        await handler(message)

    async def http_request(self, message: dict[str, Any]) -> None:
        if not self.admitted:
            rejection = self.admission()
            if rejection is not None:
                await self.send_json(rejection.status, self.error_body(rejection))
                raise StopConsumer
            self.admitted = True
        chunk = message.get("body", b"")
        self.size += len(chunk)
        if self.size > settings.STATIC_AGENTS_MAX_BODY_BYTES:
            rejection = RequestRejected(
                413,
                f"request body exceeds {settings.STATIC_AGENTS_MAX_BODY_BYTES} bytes "
                "(STATIC_AGENTS_MAX_BODY_BYTES)",
                "request_too_large",
            )
            await self.send_json(413, self.error_body(rejection))
            raise StopConsumer
        self.body.append(chunk)
        if not message.get("more_body"):
            self.task = asyncio.ensure_future(self._run(b"".join(self.body)))

    async def http_disconnect(self, message: dict[str, Any]) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            await database_sync_to_async(mark_cancelled)(self.entry_id, "cancelled")
        raise StopConsumer

    async def answering(self, work: Awaitable[T], entry_of: Callable[[T], int | None]) -> T:
        """Await the answer phase and remember its journal entry.

        The answer is shielded: a client that leaves while it is being worked
        out cancels this request at once, but the work finishes and its journal
        entry is then marked cancelled, like a stream the client left.
        """
        task = asyncio.ensure_future(work)
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(functools.partial(_cancel_when_recorded, entry_of))
            raise
        self.entry_id = entry_of(result)
        return result

    async def _run(self, body: bytes) -> None:
        try:
            await self.respond(body)
        except RequestRejected as rejection:
            await self.reject(rejection)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reply route %s failed", self.scope.get("path"))
            await self.reject(RequestRejected(500, "internal error in Static Agents", "api_error"))

    async def reject(self, rejection: RequestRejected) -> None:
        if self.headers_sent:
            return
        await self.send_json(rejection.status, self.error_body(rejection))

    # -- helpers for dialects ------------------------------------------------------

    @property
    def request_headers(self) -> dict[str, str]:
        return {
            k.decode("latin-1").lower(): v.decode("latin-1")
            for k, v in self.scope.get("headers", [])
        }

    async def send_json(
        self, status: int, payload: Any, headers: Iterable[tuple[bytes, bytes]] = ()
    ) -> None:
        self.headers_sent = True
        await self.send_headers(status=status, headers=[*JSON_HEADERS, *headers])
        await self.send_body(orjson.dumps(payload))

    async def start_sse(self, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
        self.headers_sent = True
        await self.send_headers(status=200, headers=[*SSE_HEADERS, *headers])

    async def send_chunk(self, data: bytes) -> None:
        await self.send_body(data, more_body=True)

    async def end_stream(self, data: bytes = b"") -> None:
        await self.send_body(data)

    async def send_paced(self, frames: Iterable[tuple[float, bytes]]) -> bool:
        """Send each frame at its offset (seconds from now); False if cut off.

        Offsets are absolute from the stream's start, so drift never accumulates;
        frames that are already due when the loop gets to them (a busy server)
        go out together in one write, so a late stream catches up at once. A
        stream that would outlast the configured maximum is cut off there.
        """
        loop = asyncio.get_running_loop()
        start = loop.time()
        limit = settings.STATIC_AGENTS_MAX_STREAM_SECONDS
        due: list[bytes] = []
        for offset, data in frames:
            if offset > limit:
                if due:
                    await self.send_chunk(b"".join(due))
                await asyncio.sleep(max(0.0, start + limit - loop.time()))
                await database_sync_to_async(mark_cancelled)(self.entry_id, "cut_off")
                return False
            delay = start + offset - loop.time()
            if delay > 0:
                if due:
                    await self.send_chunk(b"".join(due))
                    due = []
                    delay = start + offset - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            due.append(data)
        if due:
            await self.send_chunk(b"".join(due))
        return True


_marking: set[asyncio.Future[None]] = set()  # keeps the marking tasks alive until done


def _cancel_when_recorded(entry_of: Callable[[Any], int | None], task: asyncio.Future[Any]) -> None:
    if task.cancelled() or task.exception() is not None:
        return
    entry_id = entry_of(task.result())
    if entry_id is not None:
        marking = asyncio.ensure_future(
            database_sync_to_async(mark_cancelled)(entry_id, "cancelled")
        )
        _marking.add(marking)
        marking.add_done_callback(_marking.discard)


def sse(payload: Any, event: str | None = None) -> bytes:
    """One server-sent event with a JSON payload."""
    data = orjson.dumps(payload)
    return (b"event: " + event.encode() + b"\n" if event else b"") + b"data: " + data + b"\n\n"


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
    return payload
