"""The Google ADK REST dialect (``adk api_server``): request parsing and event rendering.

Pure: no Django, no I/O. Requests are read as ADK's FastAPI server reads them
(camelCase or snake_case keys, unknown keys ignored) and rejected with the
``{"detail": [...]}`` list FastAPI answers a 422 with. Events are written as
ADK's server writes them: camelCase, ``None`` fields left out.

One reply becomes one model event (thought parts first, then the text, then the
``functionCall`` parts), or an ``errorCode``/``errorMessage`` event for a
scripted error. When streamed, partial events carrying the text deltas come
first; they share the final event's id, as in ADK, and only the final event is
appended to the session.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, StrictStr, ValidationError
from pydantic.alias_generators import to_camel

from staticagents.core.replies import Reply, count_tokens
from staticagents.core.storable import MAX_DEPTH, NUL_PROBLEM, nul_in_json, too_deep_in_json
from staticagents.core.timing import Slots, TimedFrame, iter_chunks, plan_stream
from staticagents.core.values import value_class
from staticagents.dialects.llm.wire import SLOT, TextTemplate

MODEL_VERSION = "static-agents"
FINISH_REASONS = {
    "stop": "STOP",
    "length": "MAX_TOKENS",
    "tool_calls": "STOP",  # Gemini ends a function-calling turn with STOP too
    "content_filter": "SAFETY",
}
# Keys of a functionResponse's ``response`` that hold the tool's output on their own.
RESULT_KEYS = ("result", "output", "content", "text")

Model = TypeVar("Model", bound=BaseModel)


# -- requests ------------------------------------------------------------------------


class _Wire(BaseModel):
    """camelCase on the wire, snake_case accepted too, unknown keys ignored (as ADK does)."""

    model_config = ConfigDict(
        alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, extra="ignore"
    )


class FunctionCallIn(_Wire):
    id: StrictStr | None = None
    name: StrictStr | None = None
    args: dict[str, Any] | None = None


class FunctionResponseIn(_Wire):
    id: StrictStr | None = None
    name: StrictStr | None = None
    response: dict[str, Any] | None = None


class PartIn(_Wire):
    text: StrictStr | None = None
    thought: bool | None = None
    function_call: FunctionCallIn | None = None
    function_response: FunctionResponseIn | None = None


class ContentIn(_Wire):
    role: StrictStr | None = None
    parts: list[PartIn] | None = None


class RunRequest(_Wire):
    """The body of ``POST /run`` and ``POST /run_sse``."""

    app_name: StrictStr | None = None
    user_id: StrictStr
    session_id: StrictStr
    new_message: ContentIn | None = None
    streaming: bool = False
    state_delta: dict[str, Any] | None = None
    custom_metadata: dict[str, Any] | None = None
    invocation_id: StrictStr | None = None


class CreateSessionRequest(_Wire):
    """The optional body of ``POST /apps/{app}/users/{user}/sessions``."""

    session_id: StrictStr | None = None
    state: dict[str, Any] | None = None
    events: list[dict[str, Any]] | None = None


class UpdateSessionRequest(_Wire):
    """The body of ``PATCH /apps/{app}/users/{user}/sessions/{id}``."""

    state_delta: dict[str, Any]


class InvalidRequest(Exception):
    """A body ADK's server would refuse: ``detail`` is FastAPI's list of problems."""

    def __init__(self, detail: list[dict[str, Any]]) -> None:
        self.detail = detail
        super().__init__("; ".join(f"{'.'.join(map(str, d['loc']))}: {d['msg']}" for d in detail))


def invalid(loc: Sequence[str | int], message: str, kind: str = "value_error") -> InvalidRequest:
    return InvalidRequest([{"type": kind, "loc": ["body", *loc], "msg": message}])


def parse_body(body: bytes, model: type[Model]) -> Model:
    """Validate a required JSON body against ``model``."""
    if not body.strip():
        raise invalid([], "Field required", "missing")
    return validate(load_json(body), model)


def parse_optional_body(body: bytes, model: type[Model]) -> Model | None:
    """Validate an optional JSON body; an empty or ``null`` body gives None."""
    payload = load_json(body) if body.strip() else None
    return None if payload is None else validate(payload, model)


def validate(payload: Any, model: type[Model]) -> Model:
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise InvalidRequest(validation_detail(exc)) from None


def parse_state(body: bytes) -> dict[str, Any] | None:
    """The body of ADK's older create-with-id route: the initial state, or nothing."""
    state = load_json(body) if body.strip() else None
    if state is not None and not isinstance(state, dict):
        raise invalid([], "Input should be a valid dictionary", "dict_type")
    return state


def load_json(body: bytes) -> Any:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        detail = {
            "type": "json_invalid",
            "loc": ["body", exc.pos],
            "msg": f"JSON decode error: {exc}",
        }
        raise InvalidRequest([detail]) from None
    where = nul_in_json(body, payload)
    if where is not None:
        raise invalid([where], f"String {NUL_PROBLEM}", "string_nul")
    # Session state and events are stored and sent back: no deeper than anything can render.
    where = too_deep_in_json(body, payload)
    if where is not None:
        raise invalid([where], f"Value nested deeper than {MAX_DEPTH} levels", "too_deep")
    return payload


def validation_detail(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"type": item["type"], "loc": ["body", *item["loc"]], "msg": item["msg"]}
        for item in exc.errors(include_url=False)
    ]


# -- what the new message asks ---------------------------------------------------------


@value_class
class Message:
    """The new message reduced to what the matcher needs."""

    text: str | None  # the user's text, None when the message carries only tool results
    tool_result: str | None  # the (last) functionResponse's output, as text
    content: ContentIn  # the message as sent, for the session's record


@value_class
class Turn:
    query: str
    turn: int
    tool_result: str | None


def read_message(content: ContentIn | None) -> Message:
    """The text and tool result of ``newMessage``; a 422 when it carries neither."""
    if content is None:
        raise invalid(["newMessage"], "Field required", "missing")
    parts = content.parts or []
    texts = [p.text for p in parts if p.text is not None and not p.thought]
    responses = [p.function_response for p in parts if p.function_response is not None]
    if not texts and not responses:
        raise invalid(
            ["newMessage", "parts"], "newMessage must carry a text part or a functionResponse part"
        )
    tool_result = tool_result_text(responses[-1].response) if responses else None
    return Message("\n".join(texts) if texts else None, tool_result, content)


def tool_result_text(response: Mapping[str, Any] | None) -> str:
    """A tool's output as text: a lone ``result``/``output`` string as is, else the JSON."""
    if not response:
        return ""
    if len(response) == 1:
        key, value = next(iter(response.items()))
        if key in RESULT_KEYS and isinstance(value, str):
            return value
    return json.dumps(response, ensure_ascii=False)


@value_class
class UserTurns:
    """What a run needs of its session's earlier events: how many user messages carried
    text, and the last one's text (kept with the session, so no run reads its events)."""

    count: int = 0
    last_text: str = ""

    def after(self, events: Iterable[Mapping[str, Any]]) -> UserTurns:
        """These turns followed by ``events``."""
        texts = user_texts(events)
        return UserTurns(self.count + len(texts), texts[-1]) if texts else self

    def with_message(self, text: str | None) -> UserTurns:
        """These turns followed by a run's message of ``text`` (``read_message``'s, which
        reads its parts as ``user_texts`` reads a user event's)."""
        return self if text is None else UserTurns(self.count + 1, text)


def read_turn(message: Message, earlier: UserTurns) -> Turn:
    """Query and turn number: a tool-result-only message continues the last user text."""
    if message.text is not None:
        return Turn(message.text, earlier.count + 1, message.tool_result)
    return Turn(earlier.last_text, max(earlier.count, 1), message.tool_result)


def user_texts(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """The text of every user message in a session's events, oldest first."""
    texts = []
    for event in events:
        content = event.get("content") or {}
        if event.get("author") != "user" or not isinstance(content, Mapping):
            continue
        # Stored events are whatever a client created the session with: skip what is no list.
        listed = content.get("parts")
        parts = [p for p in listed if isinstance(p, Mapping)] if isinstance(listed, list) else []
        text = [p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
        if text:
            texts.append("\n".join(text))
    return texts


def inquiry_context(
    state: Mapping[str, Any], custom_metadata: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The session state plus the request's customMetadata; None when both are empty."""
    context = {**state, **(custom_metadata or {})}
    return context or None


# -- events --------------------------------------------------------------------------


@value_class
class EventIds:
    """Who wrote an event and when: chosen by the route, so rendering stays pure."""

    invocation_id: str
    event_id: str
    timestamp: float
    author: str


def actions(state_delta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "stateDelta": dict(state_delta or {}),
        "artifactDelta": {},
        "requestedAuthConfigs": {},
        "requestedToolConfirmations": {},
    }


def envelope(ids: EventIds, state_delta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {
        "invocationId": ids.invocation_id,
        "author": ids.author,
        "actions": actions(state_delta),
        "id": ids.event_id,
        "timestamp": ids.timestamp,
    }


def user_event(
    content: ContentIn, ids: EventIds, state_delta: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The new message as the session records it (author ``user``)."""
    wire = content.model_dump(by_alias=True, exclude_none=True)
    wire.setdefault("role", "user")
    return {"content": wire, **envelope(ids, state_delta)}


def reply_parts(reply: Reply) -> list[dict[str, Any]]:
    """Thought parts first, then the text, then one functionCall part per tool call."""
    parts: list[dict[str, Any]] = []
    if reply.thinking:
        parts.append({"text": reply.thinking, "thought": True})
    if reply.content:
        parts.append({"text": reply.content})
    parts += [
        {"functionCall": {"id": call.id, "args": dict(call.arguments), "name": call.name}}
        for call in reply.tool_calls
    ]
    return parts


def usage_metadata(reply: Reply) -> dict[str, int]:
    usage = {
        "candidatesTokenCount": reply.usage.output_tokens,
        "promptTokenCount": reply.usage.input_tokens,
        "totalTokenCount": reply.usage.input_tokens + reply.usage.output_tokens,
    }
    if reply.thinking:
        thoughts = count_tokens(reply.thinking)
        usage["thoughtsTokenCount"] = thoughts
        usage["totalTokenCount"] += thoughts
    return usage


def final_event(reply: Reply, ids: EventIds) -> dict[str, Any]:
    """The complete model event of a reply (or its error event)."""
    if reply.error is not None:
        metadata = {**reply.metadata, "error_status": reply.error.status}
        return error_event(reply.error.type, reply.error.message, ids, metadata)
    event: dict[str, Any] = {
        "modelVersion": MODEL_VERSION,
        "content": {"parts": reply_parts(reply), "role": "model"},
        "turnComplete": True,
        "finishReason": FINISH_REASONS.get(reply.finish_reason, "OTHER"),
        "customMetadata": dict(reply.metadata),
        "usageMetadata": usage_metadata(reply),
        **envelope(ids),
    }
    if reply.tool_calls:
        # The client runs these tools and sends their functionResponse parts back.
        event["longRunningToolIds"] = sorted(call.id for call in reply.tool_calls)
    return event


def error_event(
    code: str, message: str, ids: EventIds, metadata: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "turnComplete": True,
        "errorCode": code,
        "errorMessage": message,
    }
    if metadata:
        event["customMetadata"] = dict(metadata)
    return {**event, **envelope(ids)}


def cut_off_event(ids: EventIds, limit_seconds: float) -> dict[str, Any]:
    message = f"stream cut off: it would outlast the maximum of {limit_seconds:g} s"
    return error_event("STREAM_CUT_OFF", message, ids)


def fault_event(ids: EventIds) -> dict[str, Any]:
    """A scripted ``error_event`` fault: the run's error event, as an overloaded model's."""
    return error_event("UNAVAILABLE", "The model is overloaded: scripted stream fault", ids)


def partial_events(reply: Reply, ids: EventIds, slots: Slots | None = None) -> Iterator[TimedFrame]:
    """The streamed deltas, each at its offset in seconds from the stream's start."""
    if reply.error is not None:
        return
    # Partials differ only in their text: each kind is rendered once around the slot.
    templates = {
        "text": TextTemplate(partial_event(SLOT, ids)),
        "thinking": TextTemplate(partial_event(SLOT, ids, thought=True)),
    }
    for piece in plan_stream(reply, slots):
        yield templates[piece.kind].at(piece.at, piece.text)


def sse_events(reply: Reply, ids: EventIds, *, streaming: bool) -> Iterator[TimedFrame]:
    """What ``/run_sse`` sends, timed, rendered one by one as they are sent: the partial
    deltas when streaming, then the final event (``final_event``).

    A streamed final event is due with the last delta, or after ``first_delay_ms``
    when nothing precedes it (a reply that only calls tools still takes that long).
    """
    final = final_event(reply, ids)
    if not streaming or reply.error is not None:
        yield TimedFrame(0.0, final)
        return
    slots = Slots(reply.timing)
    yield from partial_events(reply, ids, slots)
    yield TimedFrame(slots.end, final)


def sse_body_at_once(
    reply: Reply, ids: EventIds, final: Mapping[str, Any], *, streaming: bool
) -> bytes:
    """The bytes of ``sse_frames(sse_events(...))`` for a stream due all at once, whose
    ``final`` event is already made (saved with the journal entry): no timed frames,
    each partial one concatenation around its kind's template."""
    tail = b"data: " + orjson.dumps(final) + b"\n\n"
    if not streaming or reply.error is not None:
        return tail
    parts: list[bytes] = []
    chunk = reply.timing.chunk
    for text, thought in ((reply.thinking, True), (reply.content, False)):
        texts = list(map(orjson.dumps, iter_chunks(text, chunk))) if text else []
        if texts:
            head, end = partial_template(ids, thought=thought)
            # Partials of a kind differ in their text only: one join makes them all.
            parts += (head, (end + head).join(texts), end)
    parts.append(tail)
    return b"".join(parts)


def partial_template(ids: EventIds, *, thought: bool) -> tuple[bytes, bytes]:
    """What goes before and after a partial's JSON text, ``data: `` and the blank line
    included."""
    template = TextTemplate(partial_event(SLOT, ids, thought=thought))
    return b"data: " + template.head, template.tail + b"\n\n"


def partial_event(text: str, ids: EventIds, *, thought: bool = False) -> dict[str, Any]:
    part: dict[str, Any] = {"text": text, "thought": True} if thought else {"text": text}
    return {
        "modelVersion": MODEL_VERSION,
        "content": {"parts": [part], "role": "model"},
        "partial": True,
        **envelope(ids),
    }


# -- sessions and apps ------------------------------------------------------------------


def session_body(
    *,
    session_id: str,
    app: str,
    user: str,
    state: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    last_update_time: float,
) -> dict[str, Any]:
    return {
        "id": session_id,
        "appName": app,
        "userId": user,
        "state": dict(state),
        "events": list(events),
        "lastUpdateTime": last_update_time,
    }


def app_info(name: str) -> dict[str, Any]:
    """One entry of ``GET /list-apps?detailed=true``."""
    return {
        "name": name,
        "rootAgentName": name,
        "description": f"Static Agents rules for the {name!r} agent type",
        "language": "python",
        "isComputerUse": False,
    }
