"""Answer an inquiry from its agent type's upstream, translated: the query (and the system
prompt) asked in the upstream's dialect, not streamed, its reply made a ``Reply`` that the
client's dialect renders as it renders any other (``proxying/``).

A request in the upstream's own dialect is forwarded as it is instead
(``dialects/llm/forward.py``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from staticagents.core.inquiry import Inquiry
from staticagents.core.replies import Reply, ReplyError, ToolCall, Usage
from staticagents.core.routing import Target, Upstream
from staticagents.proxying.client import UpstreamFailure, apost, post
from staticagents.proxying.wire import Relayed, read_response, translated_request


@dataclass(frozen=True)
class Proxied:
    reply: Reply
    relayed: Relayed | None  # None: the upstream failed
    latency: float  # seconds


def proxied_reply(inquiry: Inquiry, target: Target) -> Proxied:
    """Ask the upstream (synchronous callers)."""
    upstream = target.upstream
    try:
        payload, latency = post(upstream, _request(upstream, inquiry), inquiry.headers)
    except UpstreamFailure as failure:
        return Proxied(failed_reply(inquiry, upstream, failure), None, failure.latency)
    return _answered(inquiry, upstream, payload, latency)


async def aproxied_reply(inquiry: Inquiry, target: Target) -> Proxied:
    """Ask the upstream (the event loop)."""
    upstream = target.upstream
    try:
        payload, latency = await apost(upstream, _request(upstream, inquiry), inquiry.headers)
    except UpstreamFailure as failure:
        return Proxied(failed_reply(inquiry, upstream, failure), None, failure.latency)
    return _answered(inquiry, upstream, payload, latency)


def _request(upstream: Upstream, inquiry: Inquiry) -> dict[str, object]:
    return translated_request(upstream.dialect, inquiry, upstream.model or inquiry.model)


def _answered(inquiry: Inquiry, upstream: Upstream, payload: object, latency: float) -> Proxied:
    relayed = read_response(upstream.dialect, payload)
    return Proxied(relayed_reply(inquiry, upstream, relayed), relayed, latency)


def relayed_reply(inquiry: Inquiry, upstream: Upstream, relayed: Relayed) -> Reply:
    """The Reply of what the upstream answered."""
    usage = relayed.usage or {}
    return Reply(
        content=relayed.content,
        confidence="medium",
        agent_type=inquiry.agent_type,
        metadata={"upstream": upstream.name},
        thinking=relayed.thinking,
        tool_calls=tuple(
            ToolCall(call["id"] or f"call_{uuid.uuid4().hex[:24]}", call["name"], call["arguments"])
            for call in relayed.tool_calls
        ),
        finish_reason=relayed.reply_finish_reason(upstream.dialect),
        usage=Usage(usage.get("input_tokens", 0), usage.get("output_tokens", 0)),
        outcome="proxied",
    )


def failed_reply(inquiry: Inquiry, upstream: Upstream, failure: UpstreamFailure) -> Reply:
    """The Reply of an upstream that failed: its status, its message, its Retry-After."""
    return Reply(
        content="",
        confidence="medium",
        agent_type=inquiry.agent_type,
        metadata={"upstream": upstream.name},
        error=ReplyError(failure.status, failure.kind, failure.message),
        retry_after=failure.retry_after,
        outcome="upstream_error",
    )
