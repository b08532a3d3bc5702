"""``POST /api/chat/stream?agent_type=…``: Galaxy's chat turn as server-sent events.

``progress`` events while the turn runs (the reply's text rides along in
``delta`` events on the rule's schedule), then exactly one ``result`` carrying
the ChatResponse that ``/api/chat`` would answer, then ``done``. The exchange
is saved just before the result, so a client that leaves mid-stream leaves no
half-told turn behind. A stream that would outlast the maximum duration is cut
off there and still ends with one ``result`` (a 504 failure), then ``done``.
"""

from __future__ import annotations

import itertools
import time

from django.urls import re_path

from staticagents.core.timing import TimedFrame
from staticagents.dialects.galaxy import exchanges as chat_exchanges
from staticagents.dialects.galaxy import wire as galaxy
from staticagents.dialects.galaxy.exchanges import ExchangeNotFound
from staticagents.dialects.galaxy.routes import GalaxyRoute
from staticagents.serving.route import RequestRejected, sse_frames
from staticagents.serving.stream import paced


class GalaxyStreamRoute(GalaxyRoute):
    async def respond(self, body: bytes) -> None:
        started = time.perf_counter()
        if self.scope.get("method") != "POST":
            raise RequestRejected(405, f"Method {self.scope.get('method')} not allowed: use POST")
        chat = self.parsed(lambda: galaxy.parse_chat_request(body, self.params))
        await self.start_sse()
        if chat.query is None:
            await self.finish(galaxy.missing_query_events(chat.agent_type))
            return
        work = chat_exchanges.aanswer_chat_turn(
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
        if self.fault is None and not paced(turn.answer.reply.timing):
            # Due all at once (no delays scripted): saved first, then sent unpaced,
            # a short stream in one write.
            result = await chat_exchanges.afinish_chat_turn(turn)
            ending = galaxy.result_events(result)
            await self.send_paced(itertools.chain(events, ending), closing=b"", paced=False)
            return
        stopped = await self.send_paced(events)
        if stopped is not None:
            await self.finish(galaxy.cut_off_events(stopped.limit))
            return
        result = await chat_exchanges.afinish_chat_turn(turn)
        await self.finish(galaxy.result_events(result))

    async def finish(self, events: list[TimedFrame]) -> None:
        """Send the last events at once and close the stream."""
        await self.end_stream(sse_frames(events))


http_routes = [re_path(r"^api/chat/stream$", GalaxyStreamRoute.as_asgi())]
