"""The WebSocket chat dialect (``/ws/chat/``): message parsing and stream events.

Pure: no Django, no I/O. The client sends one JSON object per inquiry::

    {"query": "...", "agent_type": "router", "context": {...}, "session": "..."}

``query`` is required; the rest are optional. Two optional extensions:
``request_id`` (a string or number the server echoes on every event of that
inquiry, for clients that keep several in flight) and ``tool_result`` (the text of a tool's
result, so a tool loop can run over the socket). Any other key is an error.

The server answers with JSON events, in this order::

    {"type": "thinking", "text": ...}     one per chunk of the scripted thinking
    {"type": "delta", "text": ...}        one per chunk of the content
    {"type": "tool_call", "id", "name", "arguments"}
    {"type": "result", "response": AgentResponse, "finish_reason", "usage", "session"}
    {"type": "done"}

or, instead of all of them, one ``{"type": "error", "error": {status, type,
message}}``: for a scripted error, a message that cannot be read, or a stream
cut off at the maximum duration.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from staticagents.core.inquiry import Inquiry
from staticagents.core.replies import Reply
from staticagents.core.storable import NUL_PROBLEM, nul_in_json
from staticagents.core.timing import Slots, TimedFrame, plan_stream
from staticagents.dialects.galaxy.wire import render_agent_response
from staticagents.dialects.llm.wire import SLOT, TextTemplate
from staticagents.document.schema import pydantic_errors

DEFAULT_AGENT_TYPE = "router"


class ChatMessage(BaseModel):
    """One inquiry as the client sends it; unknown keys are refused, so typos surface."""

    model_config = ConfigDict(extra="forbid")

    query: StrictStr = Field(min_length=1)
    agent_type: StrictStr = Field(default=DEFAULT_AGENT_TYPE, min_length=1, max_length=200)
    context: dict[str, Any] | None = None
    session: StrictStr | None = Field(default=None, max_length=200)
    request_id: StrictStr | StrictInt | None = None
    tool_result: StrictStr | None = None


class MessageInvalid(Exception):
    """A message the server cannot read: answered with an ``error`` event, the socket stays open."""

    def __init__(self, message: str, request_id: str | int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.request_id = request_id


def parse_message(text: str | None, data: bytes | None = None) -> ChatMessage:
    """A client frame as a ChatMessage, or MessageInvalid naming the problem and its field."""
    raw = text if text is not None else data
    if not raw or not raw.strip():
        raise MessageInvalid("message is empty: send a JSON object with a query")
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MessageInvalid(f"message is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise MessageInvalid(f"message must be a JSON object, not {type(payload).__name__}")
    where = nul_in_json(raw, payload)
    if where is not None:
        raise MessageInvalid(f"{where}: {NUL_PROBLEM}")
    try:
        return ChatMessage.model_validate(payload)
    except ValidationError as exc:
        problems = "; ".join(error.format() for error in pydantic_errors(exc))
        request_id = payload.get("request_id")
        echoed = request_id if isinstance(request_id, str | int) else None
        raise MessageInvalid(problems, echoed) from None


def build_inquiry(
    message: ChatMessage, *, session: str, turn: int, headers: Mapping[str, str]
) -> Inquiry:
    return Inquiry(
        query=message.query,
        agent_type=message.agent_type,
        context=message.context,
        dialect="websocket",
        turn=turn,
        tool_result=message.tool_result,
        session=session,
        headers=headers,
    )


def stream_events(
    reply: Reply, *, session: str, request_id: str | int | None = None
) -> Iterator[TimedFrame]:
    """Every event of a reply, timed on the reply's script, rendered one by one as they are
    sent; one error event for an error."""
    if reply.error is not None:
        error = reply.error
        yield TimedFrame(0.0, error_event(error.type, error.message, error.status, request_id))
        return
    # Deltas differ only in their text: each kind is rendered once around the slot.
    templates = {
        kind: TextTemplate(tagged({"type": name, "text": SLOT}, request_id))
        for kind, name in (("text", "delta"), ("thinking", "thinking"))
    }
    slots = Slots(reply.timing)
    for piece in plan_stream(reply, slots):
        yield templates[piece.kind].at(piece.at, piece.text)
    closing = [
        tool_call_event(call.id, call.name, dict(call.arguments)) for call in reply.tool_calls
    ]
    closing += [result_event(reply, session), {"type": "done"}]
    for event in closing:
        yield TimedFrame(slots.end, tagged(event, request_id))


def tool_call_event(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


def result_event(reply: Reply, session: str) -> dict[str, Any]:
    return {
        "type": "result",
        "response": render_agent_response(reply),
        "finish_reason": reply.finish_reason,
        "usage": {
            "input_tokens": reply.usage.input_tokens,
            "output_tokens": reply.usage.output_tokens,
        },
        "session": session,
    }


def error_event(
    kind: str, message: str, status: int = 400, request_id: str | int | None = None
) -> dict[str, Any]:
    return tagged(
        {"type": "error", "error": {"status": status, "type": kind, "message": message}}, request_id
    )


def fault_event(request_id: str | int | None = None) -> dict[str, Any]:
    """A scripted ``error_event`` fault: an ``error`` event, 503 overloaded."""
    return error_event(
        "overloaded", "The agent is overloaded: scripted stream fault", 503, request_id
    )


def cut_off_event(limit_seconds: float, request_id: str | int | None = None) -> dict[str, Any]:
    message = f"stream cut off: it would outlast the maximum of {limit_seconds:g} s"
    return error_event("stream_cut_off", message, 504, request_id)


def tagged(event: dict[str, Any], request_id: str | int | None) -> dict[str, Any]:
    """The event with the client's ``request_id`` echoed, when it sent one."""
    return event if request_id is None else {**event, "request_id": request_id}
