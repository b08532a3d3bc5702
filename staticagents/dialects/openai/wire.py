"""OpenAI Chat Completions: the request parser and the reply renderer.

Pure: no Django, no I/O. Requests are read as the API reads them (unknown keys
ignored, since clients send many optional parameters); replies are written in
the shapes the official ``openai`` SDK parses: a ``chat.completion`` body, or
``chat.completion.chunk`` events ending with ``data: [DONE]``. Thinking goes out
as ``reasoning_content`` (the field DeepSeek-style servers use and pydantic-ai
reads); tool calls stream as fragments, the first naming the call, the rest
carrying pieces of its arguments.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from staticagents.core.replies import Reply, ReplyError, ToolCall
from staticagents.core.timing import Slots, TimedFrame, iter_chunks, plan_stream
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
)

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
SYSTEM_ROLES = ("system", "developer")
TOOL_ROLES = ("tool", "function")  # "function" is the deprecated form of a tool result
PLAIN_ROLES = ("user", "system", "developer", "assistant")  # no field but role and content
# Our finish reasons are OpenAI's own words.
FINISH_REASONS = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
}
FINGERPRINT = "fp_static_agents"
DONE = b"data: [DONE]\n\n"
OWNER = "static-agents"


# -- requests ------------------------------------------------------------------------


def parse_chat_request(payload: Mapping[str, Any]) -> Conversation:
    """Read a ``POST /v1/chat/completions`` body, or raise InvalidRequest naming the field."""
    model: str = required(payload, "model", str)
    messages = objects(required(payload, "messages", list), "messages")
    if not messages:
        raise InvalidRequest("messages", "must contain at least one message")
    turns = [_read_message(message, index) for index, message in enumerate(messages)]
    stream = bool(optional(payload, "stream", bool))
    options = optional(payload, "stream_options", dict) or {}
    include_usage = bool(optional(options, "include_usage", bool, "stream_options."))
    query, turn, instructions = "", 0, []
    for role, text in turns:
        if role == "user":
            query, turn = text, turn + 1  # the query is the last user message
        elif role in SYSTEM_ROLES:
            instructions.append(text)
    system = joined(instructions)
    return Conversation(
        model=model,
        query=query,
        system=system,
        turn=turn,
        tool_result=_trailing_tool_results(turns),
        context=inquiry_context(
            system=system,
            model=model,
            tools=tool_names(payload),
            metadata=optional(payload, "metadata", dict),
        ),
        stream=stream,
        include_usage=include_usage,
    )


def _read_message(message: Mapping[str, Any], index: int) -> tuple[str, str]:
    """A message's role and its text (the text parts of its content, joined)."""
    role, content = message.get("role"), message.get("content")
    if type(role) is str and role in PLAIN_ROLES and type(content) is str:
        return role, content  # most messages: nothing to check further
    return _checked_message(message, f"messages[{index}]")


def _checked_message(message: Mapping[str, Any], path: str) -> tuple[str, str]:
    role: str = required(message, "role", str, f"{path}.")
    if role not in ROLES:
        raise InvalidRequest(f"{path}.role", f"must be one of {', '.join(ROLES)}, not {role!r}")
    if role == "tool":
        required(message, "tool_call_id", str, f"{path}.")
    if role != "assistant" and message.get("content") is None:
        # Only an assistant message may leave its content out (when it calls tools).
        raise InvalidRequest(f"{path}.content", f"field required for a {role} message")
    return role, content_text(message.get("content"), f"{path}.content")


def content_text(content: Any, path: str) -> str:
    """The text of a message's content: a string, or the text of a list of parts."""
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidRequest(path, "must be a string or an array of content parts")
    texts = []
    for index, part in enumerate(objects(content, path)):
        kind = required(part, "type", str, f"{path}[{index}].")
        if kind == "text":
            texts.append(required(part, "text", str, f"{path}[{index}]."))
    return joined(texts)


def _trailing_tool_results(turns: Sequence[tuple[str, str]]) -> str | None:
    """The text of the tool results that end the conversation (parallel calls: all of them)."""
    results: list[str] = []
    for role, text in reversed(turns):
        if role not in TOOL_ROLES:
            break
        results.insert(0, text)
    return "\n".join(results) if results else None


def tool_names(payload: Mapping[str, Any]) -> list[str]:
    """The names of the tools the request offers (function and custom tools)."""
    names = []
    for index, tool in enumerate(objects(optional(payload, "tools", list) or [], "tools")):
        where = f"tools[{index}]."
        kind = optional(tool, "type", str, where) or "function"
        if kind in ("function", "custom"):
            spec = required(tool, kind, dict, where)
            names.append(required(spec, "name", str, f"{where}{kind}."))
    return names


# -- replies --------------------------------------------------------------------------


def completion_body(reply: Reply, envelope: Envelope) -> dict[str, Any]:
    """A whole ``chat.completion``: what a request without ``stream`` gets."""
    message: dict[str, Any] = {
        "role": "assistant",
        # OpenAI sends null content beside tool calls, and a string otherwise.
        "content": reply.content if reply.content or not reply.tool_calls else None,
        "refusal": None,
        "annotations": [],
    }
    if reply.thinking:
        message["reasoning_content"] = reply.thinking
    if reply.tool_calls:
        message["tool_calls"] = [_tool_call(call) for call in reply.tool_calls]
    return {
        **_identity(envelope, "chat.completion"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": FINISH_REASONS[reply.finish_reason],
            }
        ],
        "usage": usage_body(reply),
    }


def stream_events(reply: Reply, envelope: Envelope, *, include_usage: bool) -> Iterator[TimedFrame]:
    """The ``chat.completion.chunk`` events of a streamed reply, each at its scripted time,
    rendered one by one as they are sent.

    The role comes at once; thinking, then content, then tool-call fragments
    follow on the reply's schedule; the finish (and usage) chunk closes it.
    ``DONE`` is sent after these by the route.
    """

    def chunk(at: float, delta: dict[str, Any], finish: str | None = None) -> TimedFrame:
        return TimedFrame(at, _chunk(envelope, delta, finish, include_usage))

    def text(key: str) -> TextTemplate:
        return TextTemplate(_chunk(envelope, {key: SLOT}, None, include_usage))

    content, thinking = text("content"), text("reasoning_content")
    slots = Slots(reply.timing)
    yield chunk(0.0, {"role": "assistant", "content": ""})
    for p in plan_stream(reply, slots):
        yield (thinking if p.kind == "thinking" else content).at(p.at, p.text)
    for index, call in enumerate(reply.tool_calls):
        for fragment in _tool_call_fragments(index, call, reply.timing.chunk):
            yield chunk(slots.take(), {"tool_calls": [fragment]})
    end = slots.end
    yield chunk(end, {}, FINISH_REASONS[reply.finish_reason])
    if include_usage:
        usage_chunk = {**_identity(envelope, "chat.completion.chunk"), "choices": []}
        yield TimedFrame(end, {**usage_chunk, "usage": usage_body(reply)})


def _chunk(
    envelope: Envelope, delta: dict[str, Any], finish: str | None, include_usage: bool
) -> dict[str, Any]:
    chunk = {
        **_identity(envelope, "chat.completion.chunk"),
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if include_usage:
        chunk["usage"] = None  # as OpenAI does: null on every chunk but the last
    return chunk


def _tool_call_fragments(index: int, call: ToolCall, chunk: str | int) -> Iterator[dict[str, Any]]:
    """The first fragment names the call; the others carry its arguments, piece by piece."""
    first = {
        "index": index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": ""},
    }
    yield first
    for piece in iter_chunks(arguments_json(call.arguments), chunk):
        yield {"index": index, "function": {"arguments": piece}}


def _tool_call(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments_json(call.arguments)},
    }


def _identity(envelope: Envelope, kind: str) -> dict[str, Any]:
    return {
        "id": envelope.id,
        "object": kind,
        "created": envelope.created,
        "model": envelope.model,
        "system_fingerprint": FINGERPRINT,
    }


def usage_body(reply: Reply) -> dict[str, int]:
    prompt, completion = reply.usage.input_tokens, reply.usage.output_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


# -- errors and listings ----------------------------------------------------------------


def error_body(
    message: str,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def scripted_error_body(error: ReplyError) -> dict[str, Any]:
    return error_body(error.message, error.type)


def cut_off_event(limit_seconds: float) -> TimedFrame:
    """The error sent in place of the rest of a stream that would outlast the maximum duration."""
    message = f"stream cut off: it would outlast the maximum stream duration of {limit_seconds:g} s"
    return TimedFrame(0.0, error_body(message, "server_error", code="stream_timeout"))


def fault_event(at: float) -> TimedFrame:
    """A scripted ``error_event`` fault: OpenAI's error object as a stream chunk."""
    message = "The server is overloaded: scripted stream fault"
    return TimedFrame(at, error_body(message, "server_error", code="overloaded"))


def models_body(agent_types: Sequence[str]) -> dict[str, Any]:
    """``GET /v1/models``: the default model, then one named after each agent type."""
    ids = [DEFAULT_MODEL, *(t for t in agent_types if t != DEFAULT_MODEL)]
    return {
        "object": "list",
        "data": [{"id": i, "object": "model", "created": 0, "owned_by": OWNER} for i in ids],
    }
