"""Galaxy's agent and chat API: request parsing and reply rendering.

Galaxy's wire format (``lib/galaxy/schema/agents.py`` and the chat API):
an ``AgentResponse`` is ``{content, confidence, agent_type, suggestions,
metadata, reasoning}``; ``/api/chat`` answers a ``ChatResponse`` that reports
failures in ``error_code``/``error_message`` with HTTP 200; every other route
fails with an HTTP status and Galaxy's error body ``{"err_msg", "err_code"}``.
The streaming route sends ``progress`` events, one ``result`` carrying the
ChatResponse, then ``done``.

Pure: no Django, no I/O. Transports parse with these functions, call the
answering service, and write what the renderers return.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from staticagents.core.inquiry import Inquiry, session_key
from staticagents.core.numbers import is_ascii_number
from staticagents.core.replies import Reply, ReplyError
from staticagents.core.routing import STATIC, STATIC_ROUTING, Routing, Target
from staticagents.core.storable import NUL_PROBLEM, nul_in_json
from staticagents.core.timing import Slots, TimedFrame, plan_stream
from staticagents.dialects.llm.wire import SLOT, TextTemplate

M = TypeVar("M", bound=BaseModel)

AUTO = "auto"
DEFAULT_AGENT = "router"
PAGE_AGENT = "page_assistant"

# Galaxy's error codes (lib/galaxy/exceptions/error_codes.json) for what we reject.
MISSING_PARAMETER = 400003
AUTHENTICATION_FAILED = 401001
INVALID_PARAMETER = 400008
OBJECT_NOT_FOUND = 404001

SPECIALTIES = {
    "router": ["Routing questions", "Choosing an agent"],
    "error_analysis": ["Failed jobs", "Tool errors", "Debugging"],
    "custom_tool": ["Writing tools", "Tool wrappers"],
    "tool_recommendation": ["Finding tools", "Tool parameters"],
    "gtn_training": ["Tutorials", "Training material"],
    "page_assistant": ["Editing pages", "Summarising histories"],
}


class GalaxyRequestInvalid(Exception):
    """A request Galaxy would refuse: rendered as ``{"err_msg", "err_code"}`` with ``status``."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        err_code: int = INVALID_PARAMETER,
        validation_errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_code = err_code
        self.validation_errors = validation_errors

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"err_msg": self.message, "err_code": self.err_code}
        if self.validation_errors is not None:
            body["validation_errors"] = self.validation_errors
        return body


# -- request bodies (Galaxy's models: unknown fields are ignored, as pydantic does there) --


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class AgentQueryBody(_Body):
    query: str
    agent_type: str | None = AUTO
    context: dict[str, Any] | None = None


class ErrorAnalysisBody(_Body):
    query: str
    job_id: StrictInt | str | None = None
    error_details: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    save_exchange: bool | None = None


class CustomToolBody(_Body):
    query: str
    context: dict[str, Any] | None = None
    save_exchange: bool | None = None


class ChatBody(_Body):
    query: str | None = None
    context: str | dict[str, Any] | None = None
    exchange_id: StrictInt | str | None = None
    page_id: StrictInt | str | None = None
    entity_context: dict[str, Any] | None = None
    regenerate: bool | None = None


class BatchDeleteBody(_Body):
    ids: list[StrictInt | str] = Field(min_length=1)


# The agent routes under /api/ai/agents/, by the last part of their path.
AGENT_QUERY, ERROR_ANALYSIS, CUSTOM_TOOL = "query", "error-analysis", "custom-tool"


@dataclass(frozen=True)
class AgentRequest:
    """A parsed request to one of the agent routes (``route``: ``AGENT_QUERY``, …)."""

    route: str
    query: str
    agent_type: str
    context: dict[str, Any]
    save_exchange: bool = False


@dataclass(frozen=True)
class ChatRequest:
    """A parsed ``POST /api/chat`` (or ``/api/chat/stream``); ``query`` None means none given."""

    query: str | None
    agent_type: str
    context: dict[str, Any] = field(default_factory=dict)
    exchange_id: int | None = None
    routed: bool = False  # "auto" was asked for and the agent type was chosen here


def load_json(body: bytes) -> Any:
    """The body as JSON; an empty body is an empty object (every field then reads as missing)."""
    if not body.strip():
        return {}
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise GalaxyRequestInvalid(f"Request body is not valid JSON: {exc}") from None
    where = nul_in_json(body, payload)
    if where is not None:
        raise GalaxyRequestInvalid(f"Invalid value for field '{where}': it {NUL_PROBLEM}")
    return payload


def parse_body(model: type[M], body: bytes) -> M:
    payload = load_json(body)
    if not isinstance(payload, dict):
        raise GalaxyRequestInvalid("Request body must be a JSON object")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        raise invalid_from(exc) from None


def invalid_from(exc: ValidationError) -> GalaxyRequestInvalid:
    """Galaxy's 400 for a validation failure, naming the first field that is wrong."""
    errors = [
        {"loc": list(error["loc"]), "msg": error["msg"], "type": error["type"]}
        for error in exc.errors(include_url=False, include_input=False, include_context=False)
    ]
    first = errors[0]
    where = field_path(first["loc"])
    if first["type"] == "missing":
        return GalaxyRequestInvalid(
            f"Missing required field '{where}' in the request body",
            err_code=MISSING_PARAMETER,
            validation_errors=errors,
        )
    return GalaxyRequestInvalid(
        f"Invalid value for field '{where}': {first['msg']}", validation_errors=errors
    )


MAX_EXCHANGE_ID = 2**63 - 1  # the largest key of a bigint column


def field_path(loc: Sequence[int | str]) -> str:
    """``("ids", 0, "int")`` → ``ids[0]``: the field and its indexes, without union member tags."""
    if not loc:
        return "body"
    return str(loc[0]) + "".join(f"[{part}]" for part in loc[1:] if isinstance(part, int))


def parse_exchange_id(value: Any, where: str = "exchange_id") -> int:
    """An exchange id: an integer, or a string of digits (ids travel as either).

    Ids are the database's 64-bit keys: a larger number names no exchange.
    """
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and is_ascii_number(value.strip()) and len(value.strip()) <= 19:
        number = int(value)  # no longer than a 64-bit id: int() of 5,000 digits raises
    if number is not None and 0 < number <= MAX_EXCHANGE_ID:
        return number
    shown = "a number beyond 64 bits" if number is not None and number.bit_length() > 64 else None
    shown = shown or (repr(value) if len(str(value)) <= 40 else f"{repr(value)[:37]}...")
    raise GalaxyRequestInvalid(f"Invalid value for '{where}': {shown} is not an exchange id")


def parse_chat_request(body: bytes, params: Mapping[str, str]) -> ChatRequest:
    """``POST /api/chat?agent_type=…``: the query from the body, else the ``query`` parameter."""
    payload = parse_body(ChatBody, body)
    query = payload.query if payload.query else params.get("query") or None
    context = chat_context(payload, params)
    exchange_id = None
    if payload.exchange_id not in (None, ""):
        exchange_id = parse_exchange_id(payload.exchange_id)
    requested = params.get("agent_type") or AUTO
    agent_type = resolve_agent_type(requested, context)
    return ChatRequest(query, agent_type, context, exchange_id, routed=requested == AUTO)


def chat_context(payload: ChatBody, params: Mapping[str, str]) -> dict[str, Any]:
    """Galaxy turns a string context ("tool_error") into ``{"context_type": …}``."""
    context: dict[str, Any] = {}
    if isinstance(payload.context, str) and payload.context:
        context["context_type"] = payload.context
    elif isinstance(payload.context, dict):
        context.update(payload.context)
    if payload.entity_context:
        context["entity_context"] = payload.entity_context
    if payload.page_id not in (None, ""):
        context["page_id"] = payload.page_id
    if params.get("job_id"):
        context["job_id"] = params["job_id"]
    return context


def parse_agent_request(route: str, body: bytes) -> AgentRequest:
    """``POST /api/ai/agents/{route}``: the query, the agent type it goes to, its context."""
    if route == AGENT_QUERY:
        query = parse_body(AgentQueryBody, body)
        context = query.context or {}
        agent_type = resolve_agent_type(query.agent_type, context)
        return AgentRequest(route, query.query, agent_type, context)
    if route == ERROR_ANALYSIS:
        analysis = parse_body(ErrorAnalysisBody, body)
        context = error_analysis_context(analysis)
        save = bool(analysis.save_exchange)
        return AgentRequest(route, analysis.query, "error_analysis", context, save)
    tool = parse_body(CustomToolBody, body)
    save = bool(tool.save_exchange)
    return AgentRequest(route, tool.query, "custom_tool", tool.context or {}, save)


def saves_exchange(request: AgentRequest, reply: Reply) -> bool:
    """Whether the turn is kept as a chat exchange (``save_exchange``, and no scripted error)."""
    return request.save_exchange and reply.error is None


def render_agent_reply(
    request: AgentRequest, reply: Reply, processing_time: float, exchange_id: int | None = None
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """An agent route's answer: ``(status, body, headers)``.

    A scripted error fails with its own status and Galaxy's error body; the query
    route answers ``{"response", "processing_time"}``, the others the AgentResponse,
    with the id of the exchange it was saved in, if it was.
    """
    if reply.error is not None:
        headers = {"Retry-After": f"{reply.retry_after:g}"} if reply.retry_after else {}
        return reply.error.status, scripted_error_body(reply.error), headers
    if request.route == AGENT_QUERY:
        return 200, render_query_response(reply, processing_time), {}
    extra = {"exchange_id": exchange_id} if exchange_id is not None else None
    return 200, render_agent_response(reply, extra), {}


def error_analysis_context(payload: ErrorAnalysisBody) -> dict[str, Any]:
    context = {**(payload.context or {}), **(payload.error_details or {})}
    if payload.job_id is not None:
        context["job_id"] = payload.job_id
    return context


def resolve_agent_type(requested: str | None, context: Mapping[str, Any] | None) -> str:
    """``auto`` routes to the router, or to the page assistant for a question about a page."""
    if requested and requested != AUTO:
        return requested
    return PAGE_AGENT if (context or {}).get("page_id") else DEFAULT_AGENT


def galaxy_inquiry(
    *,
    query: str,
    agent_type: str,
    context: Mapping[str, Any] | None,
    headers: Mapping[str, str],
    conversation_id: int | None = None,
    turn: int = 1,
) -> Inquiry:
    return Inquiry(
        query=query,
        agent_type=agent_type,
        context=dict(context) if context is not None else None,
        dialect="galaxy",
        turn=turn,
        session=session_key(headers, str(conversation_id) if conversation_id else None),
        headers=dict(headers),
    )


def conversation_history(turns: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """Earlier turns as Galaxy hands them to an agent: ``[{role, content}, …]``."""
    return [{"role": role, "content": content} for role, content in turns]


# -- renderers --------------------------------------------------------------------


def render_suggestion(suggestion: Mapping[str, Any]) -> dict[str, Any]:
    """An ``ActionSuggestion`` with Galaxy's defaults filled in."""
    return {
        "action_type": suggestion["action_type"],
        "description": suggestion.get("description", ""),
        "parameters": dict(suggestion.get("parameters") or {}),
        "confidence": suggestion.get("confidence", "medium"),
        "priority": suggestion.get("priority", 1),
    }


def render_agent_response(
    reply: Reply, extra_metadata: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Galaxy's ``AgentResponse``; ``static_backend: true`` stays the last metadata key."""
    metadata = {k: v for k, v in reply.metadata.items() if k != "static_backend"}
    metadata.update(extra_metadata or {})
    metadata["static_backend"] = reply.outcome != "proxied"
    return {
        "content": reply.content,
        "confidence": reply.confidence,
        "agent_type": reply.agent_type,
        "suggestions": [render_suggestion(s) for s in reply.suggestions],
        "metadata": metadata,
        "reasoning": reply.reasoning,
    }


def render_query_response(reply: Reply, processing_time: float) -> dict[str, Any]:
    """``POST /api/ai/agents/query``: ``{"response": AgentResponse, "processing_time"}``."""
    return {"response": render_agent_response(reply), "processing_time": processing_time}


def render_chat_response(
    reply: Reply, *, exchange_id: int | None, processing_time: float
) -> dict[str, Any]:
    """Galaxy's ``ChatResponse``: a scripted error is reported in the body, never the status."""
    if reply.error is not None:
        return chat_failure(
            reply.error.status,
            reply.error.message,
            response=reply.content,
            exchange_id=exchange_id,
            processing_time=processing_time,
        )
    return {
        "response": reply.content,
        "error_code": 0,
        "error_message": "",
        "agent_response": render_agent_response(reply),
        "exchange_id": exchange_id,
        "processing_time": processing_time,
    }


def chat_failure(
    code: int,
    message: str,
    *,
    response: str = "",
    exchange_id: int | None = None,
    processing_time: float | None = None,
) -> dict[str, Any]:
    return {
        "response": response,
        "error_code": code,
        "error_message": message,
        "agent_response": None,
        "exchange_id": exchange_id,
        "processing_time": processing_time,
    }


def missing_query_response() -> dict[str, Any]:
    return chat_failure(400, "No query provided")


def scripted_error_body(error: ReplyError) -> dict[str, Any]:
    """A rule's ``error`` on a route that fails by status: Galaxy's error body."""
    return {"err_msg": error.message, "err_code": error.status * 1000, "error_type": error.type}


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"err_msg": message, "err_code": status * 1000}


def render_agent_list(
    agent_types: Sequence[str], routing: Routing = STATIC_ROUTING
) -> dict[str, Any]:
    """``GET /api/ai/agents``: one entry per agent type a rule or a mode names, sorted;
    ``backend`` says whether rules (``static``) or an upstream answer it."""
    agents = [_agent(agent_type, routing.target(agent_type)) for agent_type in sorted(agent_types)]
    return {"agents": agents, "total_count": len(agents)}


def _agent(agent_type: str, target: Target | None) -> dict[str, Any]:
    title = agent_type.replace("_", " ").title()
    if target is None:
        description = f"Static agent: answers {agent_type} questions from curated rules"
    else:
        description = f"Answers {agent_type} questions from upstream {target.upstream.name}"
    return {
        "agent_type": agent_type,
        "name": title,
        "description": description,
        "enabled": True,
        "model": "static" if target is None else (target.upstream.model or target.upstream.name),
        "specialties": list(SPECIALTIES.get(agent_type, [])),
        "backend": STATIC if target is None else target.mode,
        "upstream": None if target is None else target.upstream.name,
    }


def render_configuration(routing: Routing = STATIC_ROUTING) -> dict[str, Any]:
    """``llm_registry_type``: "static" while rules answer every agent type, else "mixed"."""
    return {"llm_api_configured": True, "llm_registry_type": "mixed" if routing.mixed else "static"}


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One saved chat message, as the chat routes read it back."""

    role: str  # user | assistant
    content: str
    agent_response: Mapping[str, Any] | None
    timestamp: str | None  # ISO 8601


def render_exchange_messages(
    messages: Sequence[StoredMessage], feedback: int | None
) -> list[dict[str, Any]]:
    """``GET /api/chat/exchange/{id}/messages``: user and assistant entries in order.

    Galaxy keeps an exchange's feedback on its first turn, so only the first
    assistant entry carries it.
    """
    entries: list[dict[str, Any]] = []
    first_answer = True
    for message in messages:
        entry: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.role == "assistant":
            entry["agent_type"] = (message.agent_response or {}).get("agent_type", "unknown")
            entry["agent_response"] = message.agent_response
        entry["timestamp"] = message.timestamp
        if message.role == "assistant":
            entry["feedback"] = feedback if first_answer else None
            first_answer = False
        entries.append(entry)
    return entries


def render_history_item(
    exchange_id: int, agent_type: str, messages: Sequence[StoredMessage], feedback: int | None
) -> dict[str, Any]:
    """One ``GET /api/chat/history`` entry: the exchange's first turn and its size."""
    question = next((m for m in messages if m.role == "user"), None)
    answer = next((m for m in messages if m.role == "assistant"), None)
    first = question or answer
    return {
        "id": exchange_id,
        "query": question.content if question else "",
        "response": answer.content if answer else "",
        "agent_type": agent_type,
        "agent_response": answer.agent_response if answer else None,
        "timestamp": first.timestamp if first else None,
        "feedback": feedback,
        "message_count": sum(1 for m in messages if m.role == "user"),
    }


# -- the streaming route ------------------------------------------------------------


def progress(step: str, label: str, status: str, agent_type: str) -> dict[str, Any]:
    """Galaxy's ``AgentProgressEvent``."""
    return {"step": step, "label": label, "status": status, "agent_type": agent_type}


def stream_events(reply: Reply, *, agent_type: str, routed: bool) -> Iterator[TimedFrame]:
    """Progress, then the reply's text as ``delta`` events on its schedule, then completion,
    rendered one by one as they are sent.

    Galaxy's client acts on ``progress`` and ``result`` and skips other events,
    so the deltas add live text without disturbing it. The ``result`` and
    ``done`` events follow once the exchange is saved (``result_events``).
    """
    if routed:
        label = f"Routed to the {agent_type} agent"
        yield TimedFrame(0.0, progress("routing", label, "completed", agent_type), "progress")
    yield TimedFrame(0.0, progress("responding", "Responding", "running", agent_type), "progress")
    slots = Slots(reply.timing)
    # Deltas differ only in their text: each kind is rendered once around the slot.
    templates: dict[str, TextTemplate] = {}
    for piece in plan_stream(reply, slots):
        template = templates.get(piece.kind)
        if template is None:
            delta = {"step": "responding", "kind": piece.kind, "content": SLOT}
            template = templates[piece.kind] = TextTemplate(
                {**delta, "agent_type": agent_type}, "delta"
            )
        yield template.at(piece.at, piece.text)
    status = "failed" if reply.error is not None else "completed"
    yield TimedFrame(
        slots.end, progress("responding", "Responding", status, agent_type), "progress"
    )


def result_events(chat_response: Mapping[str, Any]) -> list[TimedFrame]:
    """The ``result`` carrying the ChatResponse, then ``done``: how every stream ends."""
    return [TimedFrame(0.0, chat_response, "result"), TimedFrame(0.0, {}, "done")]


def fault_result() -> dict[str, Any]:
    """A scripted ``error_event`` fault: the stream's ``result``, a 503 ChatResponse."""
    return chat_failure(503, "The agent is overloaded: scripted stream fault")


def missing_query_events(agent_type: str) -> list[TimedFrame]:
    failed = progress("responding", "No query provided", "failed", agent_type)
    return [TimedFrame(0.0, failed, "progress"), *result_events(missing_query_response())]


def missing_exchange_events(message: str, exchange_id: int, agent_type: str) -> list[TimedFrame]:
    """A follow-up to an exchange that does not exist: failed progress, a 404 result."""
    failed = progress("responding", message, "failed", agent_type)
    failure = chat_failure(404, message, exchange_id=exchange_id)
    return [TimedFrame(0.0, failed, "progress"), *result_events(failure)]


def cut_off_events(limit_seconds: float) -> list[TimedFrame]:
    """A stream cut off at the maximum duration: Galaxy's client still gets its one result."""
    return result_events(chat_failure(504, f"Stream cut off after {limit_seconds:g} s"))
