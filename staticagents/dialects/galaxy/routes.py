"""Galaxy's reply POSTs on the lean reply routes: the agent routes and ``/api/chat``.

They answer on the event loop from the snapshot, as the model routes do; the
turn's reads and writes (a chat exchange) are journal jobs, committed with the
journal's rounds. The DRF views of ``views.py`` keep these paths' other methods
and their schema, and parse, answer and render through the same functions, so
both answer alike: Galaxy's error bodies, its validation, the same journal.
``/api/chat/stream`` is in ``stream.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar
from urllib.parse import parse_qsl

from django.urls import re_path

from staticagents.core.replies import Reply
from staticagents.core.timing import TimedFrame
from staticagents.dialects.galaxy import exchanges as chat_exchanges
from staticagents.dialects.galaxy import wire as galaxy
from staticagents.dialects.galaxy.exchanges import ExchangeNotFound
from staticagents.dialects.galaxy.wire import GalaxyRequestInvalid
from staticagents.replying.answer import aanswer_inquiry
from staticagents.replying.journal import journal
from staticagents.serving import access
from staticagents.serving.route import ReplyRoute, RequestRejected

T = TypeVar("T")
POST = frozenset({"POST"})


def always(reply: Reply) -> bool:
    return True


class GalaxyRejection(RequestRejected):
    """A rejected request that keeps Galaxy's error code."""

    def __init__(self, invalid: GalaxyRequestInvalid) -> None:
        super().__init__(invalid.status, invalid.message)
        self.body = invalid.body()


class GalaxyRoute(ReplyRoute):
    """Galaxy's keys (x-api-key, ?key= or Bearer) and error bodies for a lean route."""

    key_sources = access.GALAXY

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

    def parsed(self, parse: Callable[[], T]) -> T:
        """What ``parse`` returns; a GalaxyRejection for what it refuses."""
        try:
            return parse()
        except GalaxyRequestInvalid as invalid:
            raise GalaxyRejection(invalid) from None

    @property
    def params(self) -> dict[str, str]:
        return dict(parse_qsl(self.scope.get("query_string", b"").decode("latin-1")))

    async def answer_turn(
        self,
        chat: galaxy.ChatRequest,
        body: bytes,
        started: float,
        save_with_entry: Callable[[Reply], bool],
    ) -> chat_exchanges.ChatTurn:
        """The chat turn answered (``exchanges.aanswer_chat_turn``); ``ExchangeNotFound``
        when it names an exchange there is not."""
        work = chat_exchanges.aanswer_chat_turn(
            chat,
            headers=self.request_headers,
            route=self.scope["path"],
            body=body,
            started=started,
            save_with_entry=save_with_entry,
        )
        return await self.answering(work, lambda turn: turn.answer.entry_id)


class AgentRoute(GalaxyRoute):
    """``POST /api/ai/agents/{query,error-analysis,custom-tool}`` (``views.AgentView``)."""

    only_methods = POST
    route: ClassVar[str] = galaxy.AGENT_QUERY

    async def respond(self, body: bytes) -> None:
        started = time.perf_counter()
        agent = self.parsed(lambda: galaxy.parse_agent_request(self.route, body))
        inquiry = galaxy.galaxy_inquiry(
            query=agent.query,
            agent_type=agent.agent_type,
            context=agent.context,
            headers=self.request_headers,
        )
        work = aanswer_inquiry(inquiry, route=self.scope["path"], body=body)
        reply = (await self.answering(work, lambda answer: answer.entry_id)).reply
        exchange_id = None
        if galaxy.saves_exchange(agent, reply):
            saved = galaxy.render_agent_response(reply)
            job = chat_exchanges.save_turn_job(inquiry, reply.content, saved)
            exchange_id = await journal.run(job)
        took = time.perf_counter() - started
        status, answer, headers = galaxy.render_agent_reply(agent, reply, took, exchange_id)
        await self.send_json(
            status, answer, [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        )


class AgentQueryRoute(AgentRoute):
    route = galaxy.AGENT_QUERY


class ErrorAnalysisRoute(AgentRoute):
    route = galaxy.ERROR_ANALYSIS


class CustomToolRoute(AgentRoute):
    route = galaxy.CUSTOM_TOOL


class ChatRoute(GalaxyRoute):
    """``POST /api/chat?agent_type=…``: HTTP 200 once the body parses (``views.ChatView``)."""

    only_methods = POST

    async def respond(self, body: bytes) -> None:
        started = time.perf_counter()
        chat = self.parsed(lambda: galaxy.parse_chat_request(body, self.params))
        if chat.query is None:
            await self.send_json(200, galaxy.missing_query_response())
            return
        try:
            turn = await self.answer_turn(chat, body, started, save_with_entry=always)
        except ExchangeNotFound as missing:
            failure = galaxy.chat_failure(404, str(missing), exchange_id=missing.exchange_id)
            await self.send_json(200, failure)
            return
        await self.send_json(200, await chat_exchanges.afinish_chat_turn(turn))


http_routes = [
    re_path(r"^api/ai/agents/query$", AgentQueryRoute.as_asgi()),
    re_path(r"^api/ai/agents/error-analysis$", ErrorAnalysisRoute.as_asgi()),
    re_path(r"^api/ai/agents/custom-tool$", CustomToolRoute.as_asgi()),
    re_path(r"^api/chat$", ChatRoute.as_asgi()),
]
