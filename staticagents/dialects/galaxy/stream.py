"""``POST /api/chat/stream?agent_type=…``: Galaxy's chat turn as server-sent events.

``progress`` events while the turn runs (the reply's text rides along in
``delta`` events on the rule's schedule), then exactly one ``result`` carrying
the ChatResponse that ``/api/chat`` would answer, then ``done``. The exchange
is saved just before the result, so a client that leaves mid-stream leaves no
half-told turn behind (a stream due all at once is saved with its journal
entry, before its headers go out). A stream that would outlast the maximum duration is cut
off there and still ends with one ``result`` (a 504 failure), then ``done``.
"""

from __future__ import annotations

import itertools
import time

from django.urls import re_path

from staticagents.core.replies import Reply
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
        if chat.query is None:
            await self.finish(galaxy.missing_query_events(chat.agent_type))
            return
        try:
            turn = await self.answer_turn(chat, body, started, save_with_entry=due_at_once)
        except ExchangeNotFound as missing:
            await self.finish(
                galaxy.missing_exchange_events(str(missing), missing.exchange_id, chat.agent_type)
            )
            return
        events = galaxy.stream_events(
            turn.answer.reply, agent_type=chat.agent_type, routed=chat.routed
        )
        self.fault = turn.answer.reply.fault
        if turn.saved:
            # Due all at once: saved with the journal entry, then the headers and the
            # whole stream sent back to back, unpaced (a short stream in one write).
            ending = galaxy.result_events(await chat_exchanges.afinish_chat_turn(turn))
            await self.start_sse(watch=False)
            await self.send_paced(itertools.chain(events, ending), closing=b"", paced=False)
            return
        await self.start_sse()
        stopped = await self.send_paced(events)
        if stopped is not None:
            await self.end_stream(sse_frames(galaxy.cut_off_events(stopped.limit)))
            return
        result = await chat_exchanges.afinish_chat_turn(turn)
        await self.end_stream(sse_frames(galaxy.result_events(result)))

    async def finish(self, events: list[TimedFrame]) -> None:
        """A stream of ``events`` alone, sent at once (a turn that was never answered)."""
        await self.send_stream_whole(sse_frames(events))


def due_at_once(reply: Reply) -> bool:
    """Whether the reply's stream is sent whole at once (then saved with its entry)."""
    return reply.fault is None and not paced(reply.timing)


http_routes = [re_path(r"^api/chat/stream$", GalaxyStreamRoute.as_asgi())]
