"""``POST /api/chat/stream?agent_type=…``: Galaxy's chat turn as server-sent events.

``progress`` events while the turn runs (the reply's text rides along in
``delta`` events on the rule's schedule), then exactly one ``result`` carrying
the ChatResponse that ``/api/chat`` would answer, then ``done``. The exchange
is saved just before the result, so a client that leaves mid-stream leaves no
half-told turn behind.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

from channels.db import database_sync_to_async
from django.urls import re_path

from staticagents.conf import settings
from staticagents.dialects.galaxy import exchanges as chat_exchanges
from staticagents.dialects.galaxy import wire as galaxy
from staticagents.dialects.galaxy.exchanges import ExchangeNotFound
from staticagents.dialects.galaxy.wire import GalaxyRequestInvalid, StreamEvent
from staticagents.serving import access
from staticagents.serving.route import ReplyRoute, RequestRejected, sse

ROUTE = "/api/chat/stream"


class GalaxyRejection(RequestRejected):
    """A rejected request that keeps Galaxy's error code."""

    def __init__(self, invalid: GalaxyRequestInvalid) -> None:
        super().__init__(invalid.status, invalid.message)
        self.body = invalid.body()


class GalaxyStreamRoute(ReplyRoute):
    key_sources = access.GALAXY  # Galaxy's x-api-key header or ?key= (or Bearer)

    def key_refusal(self, refusal: access.Refusal) -> RequestRejected:
        invalid = GalaxyRequestInvalid(
            refusal.message, status=401, err_code=galaxy.AUTHENTICATION_FAILED
        )
        return GalaxyRejection(invalid)

    def error_body(self, rejection: RequestRejected) -> Any:
        if isinstance(rejection, GalaxyRejection):
            return rejection.body
        return galaxy.error_body(rejection.status, rejection.message)

    async def respond(self, body: bytes) -> None:
        started = time.perf_counter()
        if self.scope.get("method") != "POST":
            raise RequestRejected(405, f"Method {self.scope.get('method')} not allowed: use POST")
        params = dict(parse_qsl(self.scope.get("query_string", b"").decode("latin-1")))
        try:
            chat = galaxy.parse_chat_request(body, params)
        except GalaxyRequestInvalid as invalid:
            raise GalaxyRejection(invalid) from None
        await self.start_sse()
        if chat.query is None:
            await self.finish(galaxy.missing_query_events(chat.agent_type))
            return
        work = database_sync_to_async(chat_exchanges.answer_chat_turn)(
            chat, headers=self.request_headers, route=ROUTE, body=body, started=started
        )
        try:
            turn = await self.answering(work, lambda turn: turn.answer.entry_id)
        except ExchangeNotFound as missing:
            failure = galaxy.chat_failure(404, str(missing), exchange_id=missing.exchange_id)
            failed = galaxy.progress("responding", str(missing), "failed", chat.agent_type)
            await self.finish(
                [StreamEvent(0.0, "progress", failed), *galaxy.result_events(failure)]
            )
            return
        events = galaxy.stream_events(
            turn.answer.reply, agent_type=chat.agent_type, routed=chat.routed
        )
        if not await self.send_paced(frames(events)):
            # Cut off at the maximum duration: Galaxy's client still gets its one result.
            limit = settings.STATIC_AGENTS_MAX_STREAM_SECONDS
            failure = galaxy.chat_failure(504, f"Stream cut off after {limit:g} s")
            await self.finish(galaxy.result_events(failure))
            return
        result = await database_sync_to_async(chat_exchanges.finish_chat_turn)(turn)
        await self.finish(galaxy.result_events(result))

    async def finish(self, events: list[StreamEvent]) -> None:
        """Send the last events at once and close the stream."""
        *head, last = events
        for event in head:
            await self.send_chunk(sse(event.data, event.event))
        await self.end_stream(sse(last.data, last.event))


def frames(events: Iterable[StreamEvent]) -> Iterable[tuple[float, bytes]]:
    return ((event.at, sse(event.data, event.event)) for event in events)


http_routes = [re_path(r"^api/chat/stream$", GalaxyStreamRoute.as_asgi())]
