"""What the model-dialect reply routes (OpenAI, Anthropic) share.

The agent type of an inquiry comes from the ``/agents/{agent_type}/`` prefix of
the route, else the ``X-Agent-Type`` header, else the requested model when it is
named after an agent type (``GET /v1/models`` lists one per type), else
``router``. The session is the ``X-Static-Session`` header (these dialects carry
no conversation id), else the global session.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from staticagents.core.inquiry import Inquiry, session_key
from staticagents.core.matching import Ruleset
from staticagents.core.routing import RECORD_ON_MISS
from staticagents.core.timing import TimedFrame
from staticagents.dialects.llm.wire import (
    Conversation,
    Envelope,
    InvalidRequest,
    choose_agent_type,
)
from staticagents.replying.answer import Answer, aanswer_inquiry, amatch, proxy_target
from staticagents.replying.snapshot import current_ruleset
from staticagents.serving.route import ReplyRoute, RequestRejected, parse_json_object, sse_frames

# Every model-dialect route also answers under /agents/{agent_type}/ (see the module doc).
AGENT_PREFIX = r"^(?:agents/(?P<agent_type>[^/]+)/)?"


class ModelReplyRoute(ReplyRoute):
    """A reply route of a model dialect: parse, answer, then a JSON body or a paced stream."""

    dialect = ""
    id_prefix = ""
    request_id_header = b"x-request-id"  # where the dialect's SDK reads the request id
    # The inquiry and snapshot read by ``forwarded``, for ``answer`` to use.
    asked: tuple[Inquiry, Ruleset] | None = None

    def require_method(self, method: str) -> None:
        actual = self.scope.get("method", "")
        if actual != method:
            path = self.scope.get("path", "")
            raise RequestRejected(405, f"method {actual} is not allowed on {path}: use {method}")

    def parse(
        self, parser: Callable[[Mapping[str, Any]], Conversation], body: bytes
    ) -> Conversation:
        try:
            return parser(parse_json_object(body))
        except InvalidRequest as invalid:
            raise RequestRejected(400, invalid.message, param=invalid.param) from None

    async def answer(self, conversation: Conversation, body: bytes) -> Answer:
        if self.asked is not None:
            inquiry, ruleset = self.asked
            route = self.scope.get("path", "")
            work = aanswer_inquiry(inquiry, route=route, body=body, ruleset=ruleset, loop=self.loop)
        else:
            work = answer_conversation(
                conversation,
                dialect=self.dialect,
                prefix=self.agent_prefix,
                headers=self.request_headers,
                route=self.scope.get("path", ""),
                body=body,
            )
        answer = await self.answering(work, lambda answer: answer.entry_id)
        self.fault = answer.reply.fault
        return answer

    @property
    def agent_prefix(self) -> str | None:
        agent_type: str | None = self.scope.get("url_route", {}).get("kwargs", {}).get("agent_type")
        return agent_type

    async def forwarded(self, conversation: Conversation, body: bytes) -> bool:
        """Forward the request as it is when its agent type's upstream speaks this dialect
        (``dialects/llm/forward.py``); whether it did. Otherwise ``answer`` answers it."""
        ruleset = await current_ruleset(self.loop)
        inquiry = conversation_inquiry(
            conversation,
            dialect=self.dialect,
            prefix=self.agent_prefix,
            headers=self.request_headers,
            ruleset=ruleset,
        )
        self.asked = (inquiry, ruleset)
        target = proxy_target(ruleset, inquiry)
        if target is None or target.upstream.dialect != self.dialect:
            return False
        missed = target.mode != RECORD_ON_MISS or (
            await amatch(ruleset, inquiry, ruleset.deadline(inquiry)) is None
        )
        if not missed:
            return False
        # Imported here: only a proxied agent type forwards (and loads the upstreams' client).
        from staticagents.dialects.llm.forward import Forward

        await Forward(self, target, inquiry).run(body)
        return True

    def request_id_headers(self, envelope: Envelope) -> list[tuple[bytes, bytes]]:
        """The response id, where the dialect's SDK looks for a request id."""
        return [(self.request_id_header, envelope.id.encode())]

    def envelope(self, answer: Answer, model: str) -> Envelope:
        """The response's identity; the id names the journal entry, to find it again."""
        suffix = f"static{answer.entry_id}" if answer.entry_id else uuid.uuid4().hex[:24]
        return Envelope(id=f"{self.id_prefix}{suffix}", created=int(time.time()), model=model)

    async def stream(
        self,
        frames: Iterable[TimedFrame],
        headers: Sequence[tuple[bytes, bytes]] = (),
        *,
        closing: bytes = b"",
        cut_off: Callable[[float], TimedFrame],
    ) -> None:
        """Send the frames on their schedule, then ``closing`` and the end of the response.

        A stream that the maximum duration cuts off ends instead with the
        dialect's ``cut_off`` frame, made for that limit.
        """
        await self.start_sse(headers)
        stopped = await self.send_paced(frames, closing)
        if stopped is not None:
            await self.end_stream(sse_frames([cut_off(stopped.limit)]))


async def answer_conversation(
    conversation: Conversation,
    *,
    dialect: str,
    prefix: str | None,
    headers: Mapping[str, str],
    route: str,
    body: bytes,
) -> Answer:
    """Complete the inquiry from the route and headers, then answer and journal it."""
    header = headers.get("x-agent-type")
    # Only a request that names no agent type needs the rule snapshot to read its model.
    ruleset = None if (prefix or header) else await current_ruleset()
    inquiry = conversation_inquiry(
        conversation, dialect=dialect, prefix=prefix, headers=headers, ruleset=ruleset
    )
    return await aanswer_inquiry(inquiry, route=route, body=body, ruleset=ruleset)


def conversation_inquiry(
    conversation: Conversation,
    *,
    dialect: str,
    prefix: str | None,
    headers: Mapping[str, str],
    ruleset: Ruleset | None,
) -> Inquiry:
    """The inquiry of a conversation, completed from the route and the headers (and the
    snapshot's agent types, read only when neither names one)."""
    header = headers.get("x-agent-type")
    known = ruleset.agent_types if ruleset is not None and not (prefix or header) else ()
    agent_type = choose_agent_type(
        prefix=prefix, header=header, model=conversation.model, known=known
    )
    return conversation.inquiry(
        dialect=dialect, agent_type=agent_type, session=session_key(headers), headers=headers
    )


def retry_headers(retry_after: float | None) -> list[tuple[bytes, bytes]]:
    """Retry-After in whole seconds (as HTTP has it) and retry-after-ms, which both SDKs prefer."""
    if retry_after is None:
        return []
    return [
        (b"retry-after", str(math.ceil(retry_after)).encode()),
        (b"retry-after-ms", str(round(retry_after * 1000)).encode()),
    ]
