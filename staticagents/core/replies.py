"""Turn a matched rule (or the fallback) into a dialect-independent Reply."""

from __future__ import annotations

import hashlib
import json
import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from string import Template
from typing import Any

from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import CompiledRule, Ruleset
from staticagents.core.values import value_class

DEFAULT_CONFIDENCE = "medium"
FAIL_FIRST_ERROR = {"status": 503, "type": "overloaded", "message": "Scripted transient failure"}
EXHAUSTED_ERROR = {
    "status": 500,
    "type": "script_exhausted",
    "message": "Script exhausted: rule {rule!r} has no reply left for this session",
}


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ReplyError:
    status: int
    type: str
    message: str


@dataclass(frozen=True, slots=True)
class Timing:
    first_delay_ms: int = 0
    word_delay_ms: int = 0
    chunk: str | int = "word"


@dataclass(frozen=True, slots=True)
class Fault:
    """A stream that fails after ``after_chunks`` of its events (``serving/stream.py``)."""

    after_chunks: int
    kind: str  # disconnect | malformed | error_event | stall


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int


@value_class
class Reply:
    """What to answer, before any wire format is chosen."""

    content: str
    confidence: str
    agent_type: str
    suggestions: Sequence[Mapping[str, Any]] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    reasoning: str | None = None
    thinking: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    error: ReplyError | None = None
    retry_after: float | None = None
    timing: Timing = Timing()
    fault: Fault | None = None  # a stream's scripted failure midway
    usage: Usage = Usage(0, 0)
    embedding: tuple[float, ...] | None = None  # a pinned vector, for an embeddings request
    embedding_like: str | None = None  # or: the text whose vector to give
    rule: str | None = None  # None: the fallback answered
    outcome: str = "answered"  # answered | error | failed_first


@dataclass(frozen=True, slots=True)
class Step:
    """Which of a rule's responses answers, decided from the session's counters."""

    index: int = 0  # position in the rule's responses (past the end: exhausted)
    failing: bool = False  # a fail_first attempt that must fail
    request: int = 0  # a chaos response's request number in the session (from 1)


FIRST_STEP = Step()  # a rule with no session state answers with its first response


def select_response(rule: CompiledRule, step: Step) -> Mapping[str, Any] | None:
    """The response at ``step``; None when the script is exhausted and must fail."""
    if step.index < len(rule.responses):
        return rule.responses[step.index]
    if rule.on_exhausted == "error":
        return None
    return rule.responses[-1]


def build_reply(
    ruleset: Ruleset, inquiry: Inquiry, rule: CompiledRule | None, step: Step = FIRST_STEP
) -> Reply:
    reply = _build_reply(ruleset, inquiry, rule, step)
    if step.request and rule is not None and reply.error is None:
        response = select_response(rule, step)
        chaos = response.get("chaos") if response is not None else None
        if chaos:
            return replace(
                reply, fault=chaos_fault(chaos, inquiry.session, rule.name, step.request)
            )
    return reply


def chaos_fault(chaos: Mapping[str, Any], session: str, rule: str, request: int) -> Fault | None:
    """The fault a ``chaos`` response draws for the ``request``-th request of ``session``
    to ``rule``: a pure function of those and the seed, so a run replays exactly."""
    digest = hashlib.sha256(f"{chaos.get('seed', 0)}:{session}:{rule}:{request}".encode()).digest()
    draw = int.from_bytes(digest[:8], "big") / 2**64
    if draw >= float(chaos["probability"]):
        return None
    kinds = chaos.get("kinds") or ("disconnect", "malformed", "error_event", "stall")
    kind = kinds[int.from_bytes(digest[8:16], "big") % len(kinds)]
    return Fault(after_chunks=int(chaos.get("after_chunks", 1)), kind=str(kind))


def _build_reply(
    ruleset: Ruleset, inquiry: Inquiry, rule: CompiledRule | None, step: Step
) -> Reply:
    if rule is None:
        return _from_snapshot(ruleset, inquiry, ruleset.fallback or {}, None, 0)
    response = select_response(rule, step)
    if response is None:
        message = EXHAUSTED_ERROR["message"].format(rule=rule.name)  # type: ignore[attr-defined]
        exhausted = {"error": {**EXHAUSTED_ERROR, "message": message}}
        return render_response(ruleset, inquiry, exhausted, rule_name=rule.name)
    if step.failing:
        failure = {"error": response.get("error") or FAIL_FIRST_ERROR}
        if "retry_after" in response:
            failure["retry_after"] = response["retry_after"]
        reply = render_response(ruleset, inquiry, failure, rule_name=rule.name)
        return _with_outcome(reply, "failed_first")
    if response.get("fail_first"):
        # The failures are over: this attempt answers normally.
        response = {k: v for k, v in response.items() if k not in ("error", "retry_after")}
    if step.index >= len(rule.responses):
        # Past the end of the script (its last reply repeats): the tool-call ids
        # differ at every position, so there is nothing worth remembering.
        salt = f"{rule.name}.{step.index}"
        return render_response(ruleset, inquiry, response, rule_name=rule.name, call_salt=salt)
    return _from_snapshot(ruleset, inquiry, response, rule, step.index)


def _from_snapshot(
    ruleset: Ruleset,
    inquiry: Inquiry,
    response: Mapping[str, Any],
    rule: CompiledRule | None,  # None: the fallback
    index: int,
) -> Reply:
    """``render_response`` of the response at ``index`` of ``rule``'s script: what does
    not depend on the inquiry is rendered once per snapshot (``_rendered_replies``),
    so a request only adds its agent type, its usage and a template's substitution.
    """
    rendered_replies = _rendered_replies(ruleset)
    key = (rule.position, index) if rule is not None else None
    rendered = rendered_replies.get(key)
    if rendered is None:
        name = rule.name if rule is not None else None
        salt = f"{name}.{index}" if rule is not None else ""
        rendered = render_response(ruleset, None, response, rule_name=name, call_salt=salt)
        rendered_replies[key] = rendered
    content = rendered.content
    if response.get("template"):
        content = _substitute(content, inquiry)
        output = count_output_tokens(content, rendered.tool_calls)
        usage = _usage(response.get("usage"), inquiry, output)
    elif "usage" in response:
        usage = _usage(response["usage"], inquiry, rendered.usage.output_tokens)
    else:  # the content's own count is the snapshot's
        asked = count_tokens(inquiry.system) + count_tokens(inquiry.query)
        usage = Usage(asked, rendered.usage.output_tokens)
    return Reply(
        content=content,
        confidence=rendered.confidence,
        agent_type=rendered.agent_type if "agent_type" in response else inquiry.agent_type,
        suggestions=rendered.suggestions,
        metadata=rendered.metadata,
        reasoning=rendered.reasoning,
        thinking=rendered.thinking,
        tool_calls=rendered.tool_calls,
        finish_reason=rendered.finish_reason,
        error=rendered.error,
        retry_after=rendered.retry_after,
        timing=rendered.timing,
        fault=rendered.fault,
        usage=usage,
        embedding=rendered.embedding,
        embedding_like=rendered.embedding_like,
        rule=rendered.rule,
        outcome=rendered.outcome,
    )


# The responses of each snapshot rendered so far, by (rule position, response index;
# a session's script has a negative position of its own),
# the fallback's under None; kept while the snapshot lives. The latest is at hand
# beside the weak mapping: a process answers from one snapshot at a time.
RenderedReplies = dict[tuple[int, int] | None, Reply]
_rendered: weakref.WeakKeyDictionary[Ruleset, RenderedReplies] = weakref.WeakKeyDictionary()
_latest: tuple[Ruleset, RenderedReplies] | None = None


def _rendered_replies(ruleset: Ruleset) -> RenderedReplies:
    global _latest
    latest = _latest
    if latest is not None and latest[0] is ruleset:
        return latest[1]
    rendered = _rendered.setdefault(ruleset, {})
    _latest = (ruleset, rendered)
    return rendered


def render_response(
    ruleset: Ruleset,
    inquiry: Inquiry | None,
    response: Mapping[str, Any],
    *,
    rule_name: str | None,
    call_salt: str = "",
) -> Reply:
    """Galaxy's rendering rules plus the scripting fields (DESIGN 2.2).

    Without an inquiry, only what does not depend on one: the agent type only
    if the response names it, a template unfilled, the usage of the content alone.
    """
    fallback = ruleset.fallback or {}
    defaults = ruleset.defaults
    error = _error(response.get("error"))
    tool_calls = _tool_calls(response.get("tool_calls") or (), call_salt or rule_name or "fallback")
    silent = error is not None or bool(tool_calls)
    content = response.get("content", "" if silent else fallback.get("content", ""))
    if inquiry is not None and response.get("template"):
        content = _substitute(content, inquiry)
    finish_reason = response.get("finish_reason") or ("tool_calls" if tool_calls else "stop")
    return Reply(
        content=content,
        confidence=response.get("confidence", defaults.get("confidence", DEFAULT_CONFIDENCE)),
        agent_type=response.get("agent_type", inquiry.agent_type if inquiry else ""),
        suggestions=tuple(response.get("suggestions") or ()),
        metadata={**(response.get("metadata") or {}), "static_backend": True},
        reasoning=response.get("reasoning"),
        thinking=response.get("thinking"),
        tool_calls=tool_calls,
        finish_reason=finish_reason,
        error=error,
        retry_after=response.get("retry_after"),
        timing=_timing(response.get("stream"), defaults.get("stream")),
        fault=_fault(response.get("fault")),
        usage=_usage(response.get("usage"), inquiry, count_output_tokens(content, tool_calls))
        if inquiry
        else Usage(0, count_output_tokens(content, tool_calls)),
        embedding=tuple(response["embedding"]) if "embedding" in response else None,
        embedding_like=response.get("embedding_like"),
        rule=rule_name,
        outcome="error" if error else "answered",
    )


def count_tokens(text: str) -> int:
    """A deterministic token estimate: whitespace-separated words.

    Counted a slice at a time, each cut at a space: splitting a long text whole
    would make a string of every word of it at once (120 MB for 10 MB of words).
    """
    size = len(text)
    if size <= _COUNT_SLICE:
        return len(text.split())
    count, start = 0, 0
    while start < size:
        cut = _SPACE.search(text, start + _COUNT_SLICE) if start + _COUNT_SLICE < size else None
        end = cut.start() if cut else size
        count += len(text[start:end].split())
        start = end
    return count


_SPACE = re.compile(r"\s")  # the whitespace str.split() splits at
_COUNT_SLICE = 64 * 1024


def count_output_tokens(content: str, tool_calls: Sequence[ToolCall] = ()) -> int:
    """The reply's output estimate: its text, plus each tool call's name and its
    arguments serialized as JSON, counted as text is (``count_tokens``)."""
    calls = sum(
        count_tokens(call.name) + count_tokens(json.dumps(call.arguments, sort_keys=True))
        for call in tool_calls
    )
    return count_tokens(content) + calls


def _with_outcome(reply: Reply, outcome: str) -> Reply:
    return replace(reply, outcome=outcome)


def _substitute(content: str, inquiry: Inquiry) -> str:
    return Template(content).safe_substitute(
        query=inquiry.query,
        agent_type=inquiry.agent_type,
        model=inquiry.model,
        turn=str(inquiry.turn),
        session=inquiry.session,
        tool_result=inquiry.tool_result or "",
    )


def _error(spec: Mapping[str, Any] | None) -> ReplyError | None:
    if not spec:
        return None
    return ReplyError(
        status=int(spec.get("status", 500)),
        type=str(spec.get("type", "api_error")),
        message=str(spec.get("message", "Scripted error")),
    )


def _tool_calls(specs: Sequence[Mapping[str, Any]], salt: str) -> tuple[ToolCall, ...]:
    return tuple(
        ToolCall(
            id=spec.get("id") or _call_id(salt, index, spec["name"]),
            name=spec["name"],
            arguments=spec.get("arguments") or {},
        )
        for index, spec in enumerate(specs)
    )


def _call_id(salt: str, index: int, name: str) -> str:
    """A stable id, so a scripted run is identical every time it is replayed."""
    digest = hashlib.sha1(f"{salt}:{index}:{name}".encode()).hexdigest()[:24]
    return f"call_{digest}"


_UNTIMED = Timing()


def _timing(spec: Mapping[str, Any] | None, default: Mapping[str, Any] | None) -> Timing:
    if not spec and not default:
        return _UNTIMED  # most replies: nothing to merge
    merged = {**(default or {}), **(spec or {})}
    return Timing(
        first_delay_ms=int(merged.get("first_delay_ms", 0)),
        word_delay_ms=int(merged.get("word_delay_ms", 0)),
        chunk=merged.get("chunk", "word"),
    )


def _fault(spec: Mapping[str, Any] | None) -> Fault | None:
    if not spec:
        return None
    return Fault(after_chunks=int(spec["after_chunks"]), kind=str(spec["kind"]))


def _usage(spec: Mapping[str, Any] | None, inquiry: Inquiry, output: int) -> Usage:
    computed = Usage(count_tokens(inquiry.system) + count_tokens(inquiry.query), output)
    if not spec:
        return computed
    return Usage(
        int(spec.get("input_tokens", computed.input_tokens)),
        int(spec.get("output_tokens", computed.output_tokens)),
    )
