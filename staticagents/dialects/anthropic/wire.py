"""Anthropic Messages: the request parser and the reply renderer.

Pure: no Django, no I/O. Requests are read as the API reads them (``model``,
``max_tokens`` and ``messages`` required, unknown keys ignored); replies are
written in the shapes the official ``anthropic`` SDK parses: a ``message`` body,
or the named events of a stream (``message_start``, a ``ping``, one
``content_block_start`` / ``content_block_delta`` ... / ``content_block_stop``
run per block, ``message_delta`` with the stop reason and usage, then
``message_stop``). Thinking comes first, as a ``thinking`` block with a
signature, as the SDK and multi-turn clients expect.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from staticagents.core.replies import Reply, ReplyError
from staticagents.core.timing import Slots, TimedFrame
from staticagents.dialects.llm.wire import (
    DEFAULT_MODEL,
    SLOT,
    Conversation,
    Envelope,
    InvalidRequest,
    TextTemplate,
    arguments_json,
    inquiry_context,
    joined,
    objects,
    optional,
    required,
    required_int,
)

ROLES = ("user", "assistant")
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


# -- requests ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Turn:
    role: str
    text: str
    tool_results: tuple[str, ...] | None  # set when a user message carries tool results


def parse_messages_request(payload: Mapping[str, Any]) -> Conversation:
    """Read a ``POST /v1/messages`` body, or raise InvalidRequest naming the field."""
    model: str = required(payload, "model", str)
    required_int(payload, "max_tokens", minimum=1)
    messages = objects(required(payload, "messages", list), "messages")
    if not messages:
        raise InvalidRequest("messages", "must contain at least one message")
    turns = [_read_message(message, f"messages[{i}]") for i, message in enumerate(messages)]
    optional(payload, "thinking", dict)
    system = system_text(payload.get("system"))
    questions = [t for t in turns if t.role == "user" and t.tool_results is None]
    last = turns[-1]
    return Conversation(
        model=model,
        query=questions[-1].text if questions else "",
        system=system,
        turn=len(questions),
        tool_result="\n".join(last.tool_results) if last.tool_results is not None else None,
        context=inquiry_context(
            system=system,
            model=model,
            tools=tool_names(payload),
            metadata=optional(payload, "metadata", dict),
        ),
        stream=bool(optional(payload, "stream", bool)),
    )


def _read_message(message: Mapping[str, Any], path: str) -> Turn:
    role: str = required(message, "role", str, f"{path}.")
    if role not in ROLES:
        raise InvalidRequest(f"{path}.role", f"must be one of {', '.join(ROLES)}, not {role!r}")
    if "content" not in message:
        raise InvalidRequest(f"{path}.content", "field required")
    content = message["content"]
    if isinstance(content, str):
        return Turn(role, content, None)
    if not isinstance(content, list):
        raise InvalidRequest(f"{path}.content", "must be a string or an array of content blocks")
    blocks = objects(content, f"{path}.content")
    texts, results = [], []
    for index, block in enumerate(blocks):
        where = f"{path}.content[{index}]."
        kind = required(block, "type", str, where)
        if kind == "text":
            texts.append(required(block, "text", str, where))
        elif kind == "tool_result":
            required(block, "tool_use_id", str, where)
            results.append(_result_text(block.get("content"), f"{where}content"))
        elif kind == "tool_use":
            required(block, "id", str, where)
            required(block, "name", str, where)
    has_results = role == "user" and bool(results)
    return Turn(role, joined(texts), tuple(results) if has_results else None)


def _result_text(content: Any, path: str) -> str:
    """A tool result's text: a string, or the text blocks of a list."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidRequest(path, "must be a string or an array of content blocks")
    texts = []
    for index, block in enumerate(objects(content, path)):
        if required(block, "type", str, f"{path}[{index}].") == "text":
            texts.append(required(block, "text", str, f"{path}[{index}]."))
    return joined(texts)


def system_text(system: Any) -> str:
    """The system prompt: a string, or the text of a list of text blocks."""
    if system is None or isinstance(system, str):
        return system or ""
    if not isinstance(system, list):
        raise InvalidRequest("system", "must be a string or an array of text blocks")
    texts = []
    for index, block in enumerate(objects(system, "system")):
        texts.append(required(block, "text", str, f"system[{index}]."))
    return joined(texts)


def tool_names(payload: Mapping[str, Any]) -> list[str]:
    tools = objects(optional(payload, "tools", list) or [], "tools")
    return [required(tool, "name", str, f"tools[{index}].") for index, tool in enumerate(tools)]


# -- replies --------------------------------------------------------------------------


def message_body(reply: Reply, envelope: Envelope) -> dict[str, Any]:
    """A whole ``message``: what a request without ``stream`` gets."""
    blocks: list[dict[str, Any]] = []
    if reply.thinking:
        blocks.append(
            {"type": "thinking", "thinking": reply.thinking, "signature": signature(reply.thinking)}
        )
    if _has_text_block(reply):
        blocks.append({"type": "text", "text": reply.content})
    blocks += [
        {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
        for call in reply.tool_calls
    ]
    return {
        **_message(envelope),
        "content": blocks,
        "stop_reason": STOP_REASONS[reply.finish_reason],
        "usage": usage_body(reply.usage.input_tokens, reply.usage.output_tokens),
    }


def _has_text_block(reply: Reply) -> bool:
    """Text, or an empty text block when nothing else answers (clients read content[0].text)."""
    return bool(reply.content) or not reply.tool_calls


def signature(thinking: str) -> str:
    """A stable stand-in for the signature Anthropic puts on a thinking block."""
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


def stream_events(reply: Reply, envelope: Envelope) -> Iterator[TimedFrame]:
    """The named events of a streamed reply, each at its scripted time, rendered one by
    one as they are sent."""
    start = {
        **_message(envelope),
        "content": [],
        "stop_reason": None,
        "usage": usage_body(reply.usage.input_tokens, 0),
    }
    yield _event(0.0, {"type": "message_start", "message": start})
    yield _event(0.0, {"type": "ping"})
    slots = Slots(reply.timing)
    yield from _content_blocks(reply, slots)
    end = slots.end
    delta = {"stop_reason": STOP_REASONS[reply.finish_reason], "stop_sequence": None}
    usage = {"output_tokens": reply.usage.output_tokens}
    yield _event(end, {"type": "message_delta", "delta": delta, "usage": usage})
    yield _event(end, {"type": "message_stop"})


def _content_blocks(reply: Reply, slots: Slots) -> Iterator[TimedFrame]:
    """Thinking, text and tool-use blocks in order; tool input streams after the text."""
    blocks = Blocks()
    if reply.thinking:
        closing = {"type": "signature_delta", "signature": signature(reply.thinking)}
        block: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = Deltas("thinking_delta", "thinking", slots.pieces(reply.thinking))
        yield from blocks.block(block, deltas, slots.first, closing)
    if _has_text_block(reply):
        due = slots.end  # with the thinking's last piece, and never before the first delay
        deltas = Deltas("text_delta", "text", slots.pieces(reply.content))
        yield from blocks.block({"type": "text", "text": ""}, deltas, due)
    for call in reply.tool_calls:
        begin = slots.take()
        json_deltas = Deltas(
            "input_json_delta", "partial_json", slots.pieces(arguments_json(call.arguments))
        )
        block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        yield from blocks.block(block, json_deltas, begin)


@dataclass(frozen=True, slots=True)
class Deltas:
    """The timed pieces of one content block, and the delta type and field that carry them."""

    type: str
    field: str
    pieces: Iterator[tuple[float, str]]


class Blocks:
    """Renders content blocks as start, deltas, stop events, numbering them as it goes."""

    def __init__(self) -> None:
        self.index = 0

    def block(
        self,
        block: dict[str, Any],
        deltas: Deltas,
        due: float,
        closing: dict[str, Any] | None = None,
    ) -> Iterator[TimedFrame]:
        """The block's events: it starts when due, or with its first piece if that is sooner."""
        pieces = deltas.pieces
        first = next(pieces, None)
        begin = due if first is None else min(due, first[0])
        index, self.index = self.index, self.index + 1
        yield _event(begin, {"type": "content_block_start", "index": index, "content_block": block})
        end = begin
        if first is not None:
            template = TextTemplate(
                _delta_body(index, {"type": deltas.type, deltas.field: SLOT}), "content_block_delta"
            )
            for end, piece in itertools.chain([first], pieces):
                yield template.at(end, piece)
        if closing is not None:
            yield _event(end, _delta_body(index, closing))
        yield _event(end, {"type": "content_block_stop", "index": index})


def _delta_body(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


def _event(at: float, data: dict[str, Any]) -> TimedFrame:
    """Anthropic names every event after its type, on an ``event:`` line."""
    return TimedFrame(at, data, data["type"])


def _message(envelope: Envelope) -> dict[str, Any]:
    return {
        "id": envelope.id,
        "type": "message",
        "role": "assistant",
        "model": envelope.model,
        "stop_sequence": None,
    }


def usage_body(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


# -- errors and listings ----------------------------------------------------------------


def error_body(message: str, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def scripted_error_body(error: ReplyError) -> dict[str, Any]:
    return error_body(error.message, error.type)


def cut_off_event(limit_seconds: float) -> TimedFrame:
    """The ``error`` event sent in place of the rest of a stream that ran too long."""
    message = f"stream cut off: it would outlast the maximum stream duration of {limit_seconds:g} s"
    return TimedFrame(0.0, error_body(message, "timeout_error"), "error")


def fault_event(at: float) -> TimedFrame:
    """A scripted ``error_event`` fault: the ``error`` event of an overloaded API."""
    return TimedFrame(at, error_body("Overloaded", "overloaded_error"), "error")


def models_body(agent_types: Sequence[str]) -> dict[str, Any]:
    """``GET /v1/models`` as Anthropic lists models (sent when the client is Anthropic's)."""
    ids = [DEFAULT_MODEL, *(t for t in agent_types if t != DEFAULT_MODEL)]
    data = [
        {"type": "model", "id": i, "display_name": i, "created_at": "1970-01-01T00:00:00Z"}
        for i in ids
    ]
    return {"data": data, "has_more": False, "first_id": ids[0], "last_id": ids[-1]}
