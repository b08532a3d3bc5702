"""Forward a model-dialect request to an upstream of the same dialect, and relay its answer.

The body goes on as the client sent it (the model swapped for the upstream's, when it
names one); the answer comes back as the upstream sent it: its status, its body, a
stream chunk by chunk as each arrives, so tool calls, thinking, usage and finish
reasons pass untouched. A client that leaves stops the relay, which closes the
upstream connection. An upstream error keeps its status, body and Retry-After; an
upstream that cannot be reached is a 502 in the dialect's own error shape.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import TYPE_CHECKING, Any

import orjson

from staticagents.conf import settings
from staticagents.core.inquiry import Inquiry
from staticagents.core.routing import Target
from staticagents.proxying.client import UpstreamFailure, astream
from staticagents.proxying.record import arecord
from staticagents.proxying.wire import Relayed, StreamReader, read_response
from staticagents.replying.answer import upstream_entry
from staticagents.replying.journal import journal
from staticagents.serving.route import RESPONDING, RequestRejected, parse_json_object

if TYPE_CHECKING:
    import httpx

    from staticagents.dialects.llm.routes import ModelReplyRoute

log = logging.getLogger(__name__)
# The upstream's response headers a client of the same dialect reads.
RELAYED_HEADERS = (
    "content-type",
    "cache-control",
    "retry-after",
    "retry-after-ms",
    "x-request-id",
    "request-id",
)


# The event that ends each dialect's stream.
END_MARKERS = {"openai": b"data: [DONE]", "anthropic": b"event: message_stop"}


class Forward:
    """One request forwarded to ``target``'s upstream by ``route``."""

    def __init__(self, route: ModelReplyRoute, target: Target, inquiry: Inquiry) -> None:
        self.route = route
        self.target = target
        self.upstream = target.upstream
        self.inquiry = inquiry
        self.started = time.perf_counter()
        self.journaled = False

    async def run(self, body: bytes) -> None:
        route = self.route
        route.phase = RESPONDING
        route.watch()  # a client that leaves cancels this handler, and so the upstream request
        try:
            async with astream(self.upstream, self.request_body(body), route.request_headers) as (
                response,
                latency,
            ):
                await self.journal("proxied", response.status_code, latency, body)
                await self.relay(response)
        except UpstreamFailure as failure:
            await self.journal("upstream_error", failure.status, failure.latency, body)
            await self.fail(failure)
        except asyncio.CancelledError:
            if route.client_left and not self.journaled:
                await self.journal("cancelled", 499, time.perf_counter() - self.started, body)
            raise

    def request_body(self, body: bytes) -> bytes:
        if not self.upstream.model:
            return body
        payload: dict[str, Any] = parse_json_object(body)
        payload["model"] = self.upstream.model
        return orjson.dumps(payload)

    async def relay(self, response: httpx.Response) -> None:
        """Send the upstream's response on as it arrives; record it, then end it.

        When recording, a stream's end marker is held back until the exchange is
        recorded: a client that asks again as soon as its stream ended finds the rule.
        """
        import httpx  # loaded already: the response is its (proxying.client)

        route = self.route
        headers = [
            (name.encode(), value.encode())
            for name in RELAYED_HEADERS
            if (value := response.headers.get(name)) is not None
        ]
        await route.send_start(response.status_code, headers)
        streamed = "text/event-stream" in response.headers.get("content-type", "")
        reader = StreamReader(self.upstream.dialect) if streamed else None
        recording = self.target.records and response.status_code < 300
        whole: list[bytes] = []
        held = b""  # from the end marker on, when recording
        try:
            async for data in response.aiter_raw():
                if reader is not None:
                    reader.feed(data, time.perf_counter() - self.started)
                else:
                    whole.append(data)
                if recording and reader is not None:
                    data, held = self.hold_end(held, data)
                if data:
                    await route.send_chunk(data)
        except httpx.HTTPError:
            log.warning("upstream %r broke off its answer", self.upstream.name)
            await route.end_stream(held)
            return
        if recording:
            relayed = reader.relayed() if reader is not None else self.read(b"".join(whole))
            await arecord(self.upstream, self.inquiry, relayed)
        await route.end_stream(held)

    def hold_end(self, held: bytes, data: bytes) -> tuple[bytes, bytes]:
        """(what to send now, what to hold back): the end marker and all after it."""
        if held:
            return b"", held + data
        at = data.find(END_MARKERS[self.upstream.dialect])
        return (data, b"") if at < 0 else (data[:at], data[at:])

    def read(self, body: bytes) -> Relayed:
        try:
            return read_response(self.upstream.dialect, orjson.loads(body))
        except orjson.JSONDecodeError:
            return Relayed()

    async def fail(self, failure: UpstreamFailure) -> None:
        """The upstream's own error body when it sent one (this dialect's), else the
        dialect's error naming the upstream."""
        retry: list[tuple[bytes, bytes]] = []
        if failure.retry_after is not None:
            seconds = failure.retry_after
            retry = [
                (b"retry-after", str(math.ceil(seconds)).encode()),
                (b"retry-after-ms", str(round(seconds * 1000)).encode()),
            ]
        if failure.body is not None:
            headers = [(b"content-type", b"application/json"), *retry]
            await self.route.send_start(failure.status, headers)
            await self.route.end_stream(failure.body)
            return
        rejection = RequestRejected(failure.status, failure.message, failure.kind)
        await self.route.send_json(failure.status, self.route.error_body(rejection), retry)

    async def journal(self, outcome: str, status: int, latency: float, body: bytes) -> None:
        self.journaled = True
        if not settings.STATIC_AGENTS_JOURNAL:
            return
        entry = upstream_entry(
            self.inquiry,
            upstream=self.upstream.name,
            outcome=outcome,
            status=status,
            latency=latency,
            route=self.route.scope.get("path", ""),
            body=body,
            started=self.started,
        )
        self.route.entry_id = await journal.record(entry)
