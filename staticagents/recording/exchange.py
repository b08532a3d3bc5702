"""What a real model answered, and the rule that replays it (pure: no Django, no I/O)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from staticagents.core.credentials import REDACTED, redact
from staticagents.core.inquiry import Inquiry
from staticagents.core.literals import escaped
from staticagents.core.timing import chunk_text
from staticagents.document.terms import recorded_time
from staticagents.proxying.wire import ANTHROPIC_FINISH, OPENAI_FINISH, REPLY_FINISH_REASONS

# The upstreams' finish reasons (OpenAI's and Anthropic's words) in the fixture's words.
FINISH_REASONS = {
    **{reason: reason for reason in REPLY_FINISH_REASONS},
    **OPENAI_FINISH,
    **ANTHROPIC_FINISH,
}
MAX_DELAY_MS = 600_000  # the fixture's limit on a scripted delay
HASH_LENGTH = 12


@dataclass(frozen=True)
class RecordedReply:
    content: str
    tool_calls: tuple[dict[str, Any], ...] = ()  # each {"name": str, "arguments": dict}
    thinking: str | None = None
    finish_reason: str | None = None  # the upstream's, in the upstream dialect's words
    usage: dict[str, int] | None = None  # {"input_tokens": n, "output_tokens": n}
    chunks: tuple[tuple[float, str], ...] | None = None  # (seconds since the request, text)


@dataclass(frozen=True)
class Exchange:
    upstream: str  # the upstream's name in the fixture
    inquiry: Inquiry  # as the rules would have matched it
    reply: RecordedReply


def rule_name(exchange: Exchange, *, match_model: bool) -> str:
    """``<upstream>-<hash>``: the same question at the same point of a conversation (and to
    the same model, when the model is matched) is always the same rule."""
    inquiry = exchange.inquiry
    key = [
        inquiry.agent_type,
        inquiry.query,
        inquiry.turn,
        inquiry.tool_result is not None,
        inquiry.model if match_model else None,
    ]
    digest = hashlib.sha256(orjson.dumps(key)).hexdigest()[:HASH_LENGTH]
    upstream = re.sub(r"[^-a-zA-Z0-9_]", "-", exchange.upstream)[:180] or "upstream"
    name = f"{upstream}-{digest}"
    return name


def recorded_rule(
    exchange: Exchange,
    *,
    at: datetime,
    match_model: bool = False,
    keep_timing: bool = False,
    patterns: Sequence[re.Pattern[str]] = (),
) -> dict[str, Any]:
    """The rule document that answers ``exchange``'s question as the upstream did, with
    credentials and whatever ``patterns`` match masked out of the reply."""
    inquiry = exchange.inquiry
    match: dict[str, Any] = {
        "agent_type": inquiry.agent_type,
        "query": _exact(inquiry.query, patterns),
    }
    if match_model:
        match["model"] = _exact(inquiry.model, patterns)
    match["turn"] = inquiry.turn
    match["tool_result"] = inquiry.tool_result is not None
    return {
        "name": rule_name(exchange, match_model=match_model),
        "match": match,
        "response": recorded_response(exchange.reply, keep_timing=keep_timing, patterns=patterns),
        "recorded": {"upstream": exchange.upstream, "at": recorded_time(at), "reviewed": False},
    }


def recorded_response(
    reply: RecordedReply, *, keep_timing: bool, patterns: Sequence[re.Pattern[str]]
) -> dict[str, Any]:
    response: dict[str, Any] = {}
    if reply.content or not reply.tool_calls:  # a tool call's reply inherits no content
        response["content"] = redact(reply.content, patterns)
    if reply.thinking:
        response["thinking"] = redact(reply.thinking, patterns)
    if reply.tool_calls:
        response["tool_calls"] = [
            {"name": call["name"], "arguments": _redacted(call.get("arguments") or {}, patterns)}
            for call in reply.tool_calls
        ]
    finish = FINISH_REASONS.get((reply.finish_reason or "").lower())
    if finish is not None:
        response["finish_reason"] = finish
    if reply.usage is not None:
        response["usage"] = {
            "input_tokens": int(reply.usage.get("input_tokens", 0)),
            "output_tokens": int(reply.usage.get("output_tokens", 0)),
        }
    if reply.chunks:
        stream = recorded_stream(reply, keep_timing=keep_timing)
        if stream:
            response["stream"] = stream
    return response


def recorded_stream(reply: RecordedReply, *, keep_timing: bool) -> dict[str, Any]:
    """The stream spec that cuts the reply into the chunks it came in (as far as the
    fixture's chunking can: by word, character or a fixed size), and with ``keep_timing``
    sends them on the measured schedule: the first chunk when it came, the others at the
    mean interval."""
    chunks = reply.chunks or ()
    texts = [text for _, text in chunks]
    stream: dict[str, Any] = {}
    chunk = chunking(reply.content, reply.thinking or "", texts)
    if chunk != "word":
        stream["chunk"] = chunk
    if keep_timing and chunks:
        first, last = chunks[0][0], chunks[-1][0]
        step = (last - first) / (len(chunks) - 1) if len(chunks) > 1 else 0.0
        # A replay streams the thinking first, on the same schedule: when only the
        # content's chunks were timed, the thinking's go before them.
        unseen = (
            0
            if texts != chunk_text(reply.content, chunk)
            else len(chunk_text(reply.thinking or "", chunk))
        )
        stream["first_delay_ms"] = _ms(first - unseen * step)
        stream["word_delay_ms"] = _ms(step)
    return stream


def chunking(content: str, thinking: str, texts: Sequence[str]) -> str | int:
    """The fixture's ``chunk`` that cuts the reply into ``texts``: ``word`` when none does."""
    candidates: list[str | int] = ["word", "char"]
    if texts and len(texts[0]) > 1:
        candidates.append(len(texts[0]))
    wanted = list(texts)
    for chunk in candidates:
        content_only = chunk_text(content, chunk)
        if wanted in (content_only, chunk_text(thinking, chunk) + content_only):
            return chunk
    return "word"


def _ms(seconds: float) -> int:
    return max(0, min(MAX_DELAY_MS, round(seconds * 1000)))


def _exact(text: str, patterns: Sequence[re.Pattern[str]]) -> str:
    """An anchored regex that matches ``text`` alone, with any credential in it left out
    (matched by ``.+`` instead): the rule must not hold what the reply may not."""
    parts = redact(text, patterns).split(REDACTED)
    return "^" + ".+".join(escaped(part) for part in parts) + "$"


def _redacted(value: Any, patterns: Iterable[re.Pattern[str]]) -> Any:
    patterns = tuple(patterns)
    if isinstance(value, str):
        return redact(value, patterns)
    if isinstance(value, dict):
        return {key: _redacted(item, patterns) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(item, patterns) for item in value]
    return value
