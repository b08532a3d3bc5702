"""``POST /api/chat/stream?agent_type=…``: Galaxy's chat turn as server-sent events.

``progress`` events while the turn runs (the reply's text rides along in
``delta`` events on the rule's schedule), then exactly one ``result`` carrying
the ChatResponse that ``/api/chat`` would answer, then ``done``. The exchange
is saved just before the result, so a client that leaves mid-stream leaves no
half-told turn behind. A stream that would outlast the maximum duration is cut
off there and still ends with one ``result`` (a 504 failure), then ``done``.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qsl

from channels.db import database_sync_to_async
from django.urls import re_path

from staticagents.core.timing import TimedFrame
from staticagents.dialects.galaxy import exchanges as chat_exchanges
from staticagents.dialects.galaxy import wire as galaxy
from staticagents.dialects.galaxy.exchanges import ExchangeNotFound
from staticagents.dialects.galaxy.wire import GalaxyRequestInvalid
from staticagents.serving import access
from staticagents.serving.route import ReplyRoute, RequestRejected, sse_frames


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

    def fault_frame(self, at: float) -> TimedFrame:
        return TimedFrame(at, galaxy.fault_result(), "result")

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
            chat, headers=self.request_headers, route=self.scope["path"], body=body, started=started
        )
        try:
            turn = await self.answering(work, lambda turn: turn.answer.entry_id)
        except ExchangeNotFound as missing:
            await self.finish(
                galaxy.missing_exchange_events(str(missing), missing.exchange_id, chat.agent_type)
            )
            return
        events = galaxy.stream_events(
            turn.answer.reply, agent_type=chat.agent_type, routed=chat.routed
        )
        self.fault = turn.answer.reply.fault
        stopped = await self.send_paced(events)
        if stopped is not None:
            await self.finish(galaxy.cut_off_events(stopped.limit))
            return
        result = await database_sync_to_async(chat_exchanges.finish_chat_turn)(turn)
        await self.finish(galaxy.result_events(result))

    async def finish(self, events: list[TimedFrame]) -> None:
        """Send the last events at once and close the stream."""
        await self.end_stream(sse_frames(events))


http_routes = [re_path(r"^api/chat/stream$", GalaxyStreamRoute.as_asgi())]
