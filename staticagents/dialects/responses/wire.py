"""OpenAI Responses: the request parser and the reply renderer.

Pure: no Django, no I/O. A request's ``input`` (a string, or a list of items:
messages, ``function_call`` and ``function_call_output`` items, ``reasoning``
items) is read into ``Item`` values, the conversation as the rules see it;
``instructions`` is the system prompt. Unknown keys and item types are ignored,
since the SDKs send many optional ones. A follow-up naming
``previous_response_id`` continues the items the service stored for that
response (``ResponsesRequest.conversation``).

Replies are written as the ``openai`` SDK parses them: a ``response`` object
whose ``output`` holds a reasoning item (when the reply thinks), a message, and
a ``function_call`` item per tool call; or, streamed, the typed events
(``response.created``, ``response.in_progress``, per item ``output_item.added``
... ``output_item.done`` with its deltas, then ``response.completed``), each
numbered by ``sequence_number``. A reply cut short (``length``,
``content_filter``) is an ``incomplete`` response.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from staticagents.core.replies import Reply, ToolCall
from staticagents.core.timing import Slots, TimedFrame
from staticagents.core.values import value_class
from staticagents.dialects.llm.wire import (
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
    type_name,
)

ROLES = ("user", "assistant", "system", "developer")
SYSTEM_ROLES = ("system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")
RESULT_ITEMS = ("function_call_output", "custom_tool_call_output")
# The kinds of conversation item the rules look at (``Item.kind``).
USER, SYSTEM, ASSISTANT, CALL, RESULT, REASONING = (
    "user",
    "system",
    "assistant",
    "call",
    "result",
    "reasoning",
)
# Finish reasons that end a response short of completion, and the reason OpenAI gives.
INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


# -- requests ------------------------------------------------------------------------


@value_class
class Item:
    """One item of a conversation, as the rules see it: its kind and its text."""

    kind: str  # USER, SYSTEM, ASSISTANT, CALL (text: the tool's name), RESULT or REASONING
    text: str


@value_class
class ResponsesRequest:
    """What a ``POST /v1/responses`` body says."""

    model: str
    instructions: str | None
    items: tuple[Item, ...]  # the new input
    tools: tuple[str, ...]  # the names of the function tools offered
    metadata: Mapping[str, Any] | None
    stream: bool
    store: bool
    previous_response_id: str | None
    settings: Mapping[str, Any]  # what the response object repeats from the request

    def conversation(self, history: Sequence[Item] = ()) -> Conversation:
        """What the request says about the inquiry, continuing ``history``.

        ``history`` is the stored conversation of ``previous_response_id``. The
        query is the last user message, the turn counts user messages, the tool
        result is that of the items that end the conversation. Only this
        request's instructions apply, as in OpenAI's API; system and developer
        messages count wherever they are.
        """
        items = [*history, *self.items] if history else self.items
        questions = [item.text for item in items if item.kind == USER]
        system = joined([self.instructions or "", *(i.text for i in items if i.kind == SYSTEM)])
        return Conversation(
            model=self.model,
            query=questions[-1] if questions else "",
            system=system,
            turn=len(questions),
            tool_result=trailing_results(items),
            context=inquiry_context(
                system=system, model=self.model, tools=self.tools, metadata=self.metadata
            ),
            stream=self.stream,
        )


def parse_responses_request(payload: Mapping[str, Any]) -> ResponsesRequest:
    """Read a ``POST /v1/responses`` body, or raise InvalidRequest naming the field."""
    model: str = required(payload, "model", str)
    if payload.get("conversation") is not None:
        raise InvalidRequest(
            "conversation",
            "conversations are not kept by this service: continue one with "
            "previous_response_id, or send the whole conversation as input",
        )
    metadata = optional(payload, "metadata", dict)
    store = optional(payload, "store", bool)
    return ResponsesRequest(
        model=model,
        instructions=optional(payload, "instructions", str),
        items=read_input(payload.get("input")),
        tools=tuple(tool_names(payload)),
        metadata=metadata,
        stream=bool(optional(payload, "stream", bool)),
        store=store is not False,  # OpenAI stores responses unless told not to
        previous_response_id=optional(payload, "previous_response_id", str) or None,
        settings=_settings(payload, metadata, store is not False),
    )


def read_input(value: Any) -> tuple[Item, ...]:
    """``input``: a string (one user message) or a list of items; absent, nothing."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (Item(USER, value),)
    if not isinstance(value, list):
        raise InvalidRequest(
            "input", f"must be a string or an array of items, not {type_name(value)}"
        )
    read = (
        _read_item(item, f"input[{index}]") for index, item in enumerate(objects(value, "input"))
    )
    return tuple(item for item in read if item is not None)


def _read_item(item: Mapping[str, Any], path: str) -> Item | None:
    """One input item; None for the kinds the rules do not see (built-in tools' calls...)."""
    kind = item.get("type")
    if kind is None or kind == "message":  # a message may leave its type out
        return _read_message(item, path)
    if type(kind) is not str:
        raise InvalidRequest(f"{path}.type", f"must be a string, not {type_name(kind)}")
    if kind == "function_call":
        required(item, "call_id", str, f"{path}.")
        required(item, "arguments", str, f"{path}.")
        return Item(CALL, required(item, "name", str, f"{path}."))
    if kind in RESULT_ITEMS:
        required(item, "call_id", str, f"{path}.")
        if "output" not in item:
            raise InvalidRequest(f"{path}.output", "field required")
        return Item(RESULT, _content_text(item["output"], f"{path}.output"))
    if kind == "reasoning":
        optional(item, "summary", list, f"{path}.")
        return Item(REASONING, "")
    return None


def _read_message(item: Mapping[str, Any], path: str) -> Item:
    role, content = item.get("role"), item.get("content")
    if type(role) is str and role == "user" and type(content) is str:
        return Item(USER, content)  # most messages: nothing to check further
    role = required(item, "role", str, f"{path}.")
    if role not in ROLES:
        raise InvalidRequest(f"{path}.role", f"must be one of {', '.join(ROLES)}, not {role!r}")
    if content is None:
        raise InvalidRequest(f"{path}.content", "field required")
    kind = SYSTEM if role in SYSTEM_ROLES else role
    return Item(kind, _content_text(content, f"{path}.content"))


def _content_text(content: Any, path: str) -> str:
    """The text of a message's content or a tool's output: a string, or its text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidRequest(
            path, f"must be a string or an array of content parts, not {type_name(content)}"
        )
    texts = []
    for index, part in enumerate(objects(content, path)):
        where = f"{path}[{index}]."
        if required(part, "type", str, where) in TEXT_PARTS:
            texts.append(required(part, "text", str, where))
    return joined(texts)


def trailing_results(items: Sequence[Item]) -> str | None:
    """The text of the tool results that end the conversation (parallel calls: all of them).

    The calls and reasoning among them belong to the same step; a message ends it.
    """
    results: list[str] = []
    for item in reversed(items):
        if item.kind == RESULT:
            results.insert(0, item.text)
        elif item.kind not in (CALL, REASONING):
            break
    return "\n".join(results) if results else None


def tool_names(payload: Mapping[str, Any]) -> list[str]:
    """The names of the function (and custom) tools offered; built-in tools have none."""
    names = []
    for index, tool in enumerate(objects(optional(payload, "tools", list) or [], "tools")):
        where = f"tools[{index}]."
        if required(tool, "type", str, where) in ("function", "custom"):
            names.append(required(tool, "name", str, where))
    return names


# What the response object repeats from the request: (key, kinds, their name, the default).
_REPEATED: tuple[tuple[str, tuple[type, ...], str, Any], ...] = (
    ("max_output_tokens", (int,), "an integer", None),
    ("parallel_tool_calls", (bool,), "a boolean", True),
    ("reasoning", (dict,), "an object", {"effort": None, "summary": None}),
    ("temperature", (int, float), "a number", 1.0),
    ("text", (dict,), "an object", {"format": {"type": "text"}}),
    ("tool_choice", (str, dict), "a string or an object", "auto"),
    ("tools", (list,), "an array", []),
    ("top_p", (int, float), "a number", 1.0),
    ("truncation", (str,), "a string", "disabled"),
    ("user", (str,), "a string", None),
    ("background", (bool,), "a boolean", False),
)


def _settings(payload: Mapping[str, Any], metadata: Any, store: bool) -> dict[str, Any]:
    settings = {"metadata": metadata or {}, "store": store}
    for key, kinds, name, default in _REPEATED:
        value = payload.get(key)
        if value is None:
            settings[key] = default
        elif (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise InvalidRequest(key, f"must be {name}, not {type_name(value)}")
        else:
            settings[key] = value
    return settings


# -- replies --------------------------------------------------------------------------


class ItemIds:
    """The ids of a response's output items, derived from the response's own."""

    def __init__(self, response_id: str) -> None:
        self.suffix = response_id.removeprefix("resp_")

    @property
    def reasoning(self) -> str:
        return f"rs_{self.suffix}"

    @property
    def message(self) -> str:
        return f"msg_{self.suffix}"

    def call(self, index: int) -> str:
        return f"fc_{self.suffix}_{index}"


def response_body(reply: Reply, envelope: Envelope, request: ResponsesRequest) -> dict[str, Any]:
    """The whole ``response`` object: what a request without ``stream`` gets, what is stored."""
    incomplete = INCOMPLETE.get(reply.finish_reason)
    return {
        **_response(envelope, request, "incomplete" if incomplete else "completed"),
        "completed_at": None if incomplete else envelope.created,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "output": output_items(reply, ItemIds(envelope.id)),
        "usage": usage_body(reply),
    }


def _response(envelope: Envelope, request: ResponsesRequest, status: str) -> dict[str, Any]:
    """A response object's fields but its output and usage, in the given status."""
    return {
        "id": envelope.id,
        "object": "response",
        "created_at": envelope.created,
        "status": status,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": request.instructions,
        "model": envelope.model,
        "output": [],
        "previous_response_id": request.previous_response_id,
        "service_tier": "default",
        **request.settings,
        "usage": None,
    }


def output_items(reply: Reply, ids: ItemIds) -> list[dict[str, Any]]:
    """Reasoning (when the reply thinks), the message, then a function call per tool call."""
    items = []
    if reply.thinking:
        items.append(_reasoning(ids.reasoning, reply.thinking, "completed"))
    if _has_message(reply):
        items.append(_message(ids.message, [_text_part(reply.content)], _message_status(reply)))
    items += [
        _function_call(ids.call(i), call, "completed") for i, call in enumerate(reply.tool_calls)
    ]
    return items


def conversation_items(reply: Reply) -> list[Item]:
    """What the reply adds to the conversation, for a follow-up to continue."""
    items = [Item(REASONING, "")] if reply.thinking else []
    if _has_message(reply):
        items.append(Item(ASSISTANT, reply.content))
    return items + [Item(CALL, call.name) for call in reply.tool_calls]


def _message_status(reply: Reply) -> str:
    return "incomplete" if reply.finish_reason in INCOMPLETE else "completed"


def _has_message(reply: Reply) -> bool:
    """Text, or an empty message when nothing else answers (clients read ``output_text``)."""
    return bool(reply.content) or not reply.tool_calls


def _reasoning(item_id: str, thinking: str, status: str) -> dict[str, Any]:
    summary = [{"type": "summary_text", "text": thinking}] if thinking else []
    return {"id": item_id, "type": "reasoning", "summary": summary, "status": status}


def _message(item_id: str, content: list[dict[str, Any]], status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "role": "assistant",
        "content": content,
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _function_call(
    item_id: str, call: ToolCall, status: str, arguments: str | None = None
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments_json(call.arguments) if arguments is None else arguments,
    }


def usage_body(reply: Reply) -> dict[str, Any]:
    prompt, completion = reply.usage.input_tokens, reply.usage.output_tokens
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


# -- streams ----------------------------------------------------------------------------


def stream_events(
    reply: Reply, envelope: Envelope, request: ResponsesRequest
) -> Iterator[TimedFrame]:
    """The typed events of a streamed reply, each at its scripted time, numbered in order,
    rendered one by one as they are sent.

    Thinking and text stream on the reply's schedule; each tool call's item
    and argument pieces follow on the later slots, as in a chat stream.
    """
    return numbered(_events(reply, envelope, request))


def _events(reply: Reply, envelope: Envelope, request: ResponsesRequest) -> Iterator[TimedFrame]:
    slots = Slots(reply.timing)
    ids = ItemIds(envelope.id)
    opening = _response(envelope, request, "in_progress")
    events = EventWriter()
    yield events.event(0.0, {"type": "response.created", "response": opening})
    yield events.event(0.0, {"type": "response.in_progress", "response": opening})
    if reply.thinking:
        yield from events.reasoning(ids.reasoning, reply.thinking, slots.pieces(reply.thinking))
    if _has_message(reply):
        due = slots.end  # with the thinking's last piece, and never before the first delay
        pieces = slots.pieces(reply.content)
        yield from events.message(ids.message, reply.content, _message_status(reply), pieces, due)
    for index, call in enumerate(reply.tool_calls):
        begin = slots.take()
        pieces = slots.pieces(arguments_json(call.arguments))
        yield from events.function_call(ids.call(index), call, begin, pieces)
    final = response_body(reply, envelope, request)
    kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    yield events.event(slots.end, {"type": kind, "response": final})


Pieces = Iterator[tuple[float, str]]


class EventWriter:
    """Renders the events of each output item in order, counting the items as it goes."""

    def __init__(self) -> None:
        self.index = 0  # the output index of the next item

    @staticmethod
    def event(at: float, payload: dict[str, Any]) -> TimedFrame:
        return TimedFrame(at, payload, payload["type"])

    @staticmethod
    def deltas(
        payload: dict[str, Any], first: tuple[float, str], pieces: Pieces
    ) -> Iterator[TimedFrame]:
        """The delta events of ``first`` and the ``pieces`` after it."""
        template = TextTemplate(payload, payload["type"])
        for at, piece in itertools.chain([first], pieces):
            yield template.at(at, piece)

    def item(self, at: float, added: dict[str, Any]) -> tuple[TimedFrame, dict[str, Any]]:
        """Open an output item: its event, and the fields its events name it by."""
        where = {"item_id": added["id"], "output_index": self.index}
        payload = {"type": "response.output_item.added", "output_index": self.index, "item": added}
        return self.event(at, payload), where

    def done(self, at: float, item: dict[str, Any]) -> TimedFrame:
        payload = {"type": "response.output_item.done", "output_index": self.index, "item": item}
        self.index += 1
        return self.event(at, payload)

    def reasoning(self, item_id: str, thinking: str, pieces: Pieces) -> Iterator[TimedFrame]:
        first = next(pieces)  # a thinking text has at least one piece
        begin = end = first[0]
        added, where = self.item(begin, _reasoning(item_id, "", "in_progress"))
        where = {**where, "summary_index": 0}
        part = {"type": "summary_text", "text": ""}
        yield added
        yield self.event(
            begin, {"type": "response.reasoning_summary_part.added", **where, "part": part}
        )
        delta = {"type": "response.reasoning_summary_text.delta", **where, "delta": SLOT}
        for frame in self.deltas(delta, first, pieces):
            yield frame
            end = frame.at
        yield self.event(
            end, {"type": "response.reasoning_summary_text.done", **where, "text": thinking}
        )
        done = {**part, "text": thinking}
        yield self.event(
            end, {"type": "response.reasoning_summary_part.done", **where, "part": done}
        )
        yield self.done(end, _reasoning(item_id, thinking, "completed"))

    def message(
        self, item_id: str, text: str, status: str, pieces: Pieces, due: float
    ) -> Iterator[TimedFrame]:
        first = next(pieces, None)
        begin = end = due if first is None else min(due, first[0])
        added, where = self.item(begin, _message(item_id, [], "in_progress"))
        where = {**where, "content_index": 0}
        yield added
        yield self.event(
            begin, {"type": "response.content_part.added", **where, "part": _text_part("")}
        )
        if first is not None:
            delta = {"type": "response.output_text.delta", **where, "delta": SLOT, "logprobs": []}
            for frame in self.deltas(delta, first, pieces):
                yield frame
                end = frame.at
        yield self.event(
            end, {"type": "response.output_text.done", **where, "text": text, "logprobs": []}
        )
        yield self.event(
            end, {"type": "response.content_part.done", **where, "part": _text_part(text)}
        )
        yield self.done(end, _message(item_id, [_text_part(text)], status))

    def function_call(
        self, item_id: str, call: ToolCall, begin: float, pieces: Pieces
    ) -> Iterator[TimedFrame]:
        end = begin
        added, where = self.item(begin, _function_call(item_id, call, "in_progress", arguments=""))
        yield added
        first = next(pieces, None)
        if first is not None:
            delta = {"type": "response.function_call_arguments.delta", **where, "delta": SLOT}
            for frame in self.deltas(delta, first, pieces):
                yield frame
                end = frame.at
        arguments = arguments_json(call.arguments)
        yield self.event(
            end,
            {
                "type": "response.function_call_arguments.done",
                **where,
                "name": call.name,
                "arguments": arguments,
            },
        )
        yield self.done(end, _function_call(item_id, call, "completed"))


def numbered(events: Iterable[TimedFrame], start: int = 0) -> Iterator[TimedFrame]:
    """The events with their ``sequence_number``, counted from ``start``.

    A delta rendered from a template (bytes: a JSON object, so it ends with
    ``}``) has the number spliced in, which keeps it one concatenation.
    """
    for number, event in enumerate(events, start):
        data = event.data
        if type(data) is bytes:
            data = data[:-1] + b',"sequence_number":%d}' % number
        else:
            data = {**data, "sequence_number": number}
        yield TimedFrame(event.at, data, event.event)


def failed_event(
    envelope: Envelope, request: ResponsesRequest, message: str, sequence_number: int
) -> tuple[dict[str, Any], TimedFrame]:
    """The failed response, and the ``response.failed`` event that announces it."""
    failed = {
        **_response(envelope, request, "failed"),
        "error": {"code": "server_error", "message": message},
    }
    event = TimedFrame(0.0, {"type": "response.failed", "response": failed}, "response.failed")
    return failed, next(numbered([event], sequence_number))


# -- other bodies -----------------------------------------------------------------------


FAULT_MESSAGE = "The server is overloaded: scripted stream fault"


def error_event(at: float, message: str, sequence_number: int) -> TimedFrame:
    """The ``error`` event of a stream that fails midway (a scripted ``error_event`` fault)."""
    payload = {"type": "error", "code": "server_error", "message": message, "param": None}
    return next(numbered([TimedFrame(at, payload, "error")], sequence_number))


def cut_off_message(limit_seconds: float) -> str:
    return f"stream cut off: it would outlast the maximum stream duration of {limit_seconds:g} s"


def deleted_body(response_id: str) -> dict[str, Any]:
    return {"id": response_id, "object": "response.deleted", "deleted": True}
