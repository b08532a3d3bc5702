"""What the two model dialects (OpenAI Chat Completions, Anthropic Messages) share.

Pure: no Django, no I/O. A parser turns a request body into a ``Conversation``
(everything the body says about the inquiry); the route adds what the URL
and the headers say (agent type, session, headers) to make the ``Inquiry``.
Validation errors name the field and where it is (``messages[2].role``), the way
both providers word theirs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from staticagents.core.inquiry import Inquiry
from staticagents.core.timing import TimedFrame
from staticagents.core.values import value_class

DEFAULT_AGENT_TYPE = "router"  # Galaxy's default agent, and the Inquiry's
DEFAULT_MODEL = "static-agents"  # listed by GET /v1/models next to one model per agent type


class InvalidRequest(Exception):
    """A request body the dialect cannot answer: a 400 in that dialect's error shape."""

    def __init__(self, param: str | None, message: str) -> None:
        super().__init__(f"{param}: {message}" if param else message)
        self.param = param
        self.message = str(self)


@value_class
class Conversation:
    """What an LLM-dialect request body says about the inquiry."""

    model: str
    query: str
    system: str
    turn: int
    tool_result: str | None
    context: Mapping[str, Any]
    stream: bool = False
    include_usage: bool = False  # OpenAI's stream_options.include_usage

    def inquiry(
        self, *, dialect: str, agent_type: str, session: str, headers: Mapping[str, str]
    ) -> Inquiry:
        return Inquiry(
            query=self.query,
            agent_type=agent_type,
            context=self.context,
            model=self.model,
            system=self.system,
            dialect=dialect,
            turn=self.turn,
            tool_result=self.tool_result,
            session=session,
            headers=headers,
        )


def choose_agent_type(
    *, prefix: str | None, header: str | None, model: str, known: Sequence[str]
) -> str:
    """The agent type: the /agents/{type}/ prefix, else X-Agent-Type, else the model.

    A model named after an agent type (as GET /v1/models lists them) selects that
    type; anything else gets the default, ``router``.
    """
    for explicit in (prefix, header):
        if explicit and explicit.strip():
            return explicit.strip()[:200]
    if model in known:
        return model
    return DEFAULT_AGENT_TYPE


def inquiry_context(
    *, system: str, model: str, tools: Sequence[str], metadata: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The rule-visible context: the request's metadata fields, then system, model, tools."""
    return {**(metadata or {}), "system": system, "model": model, "tools": list(tools)}


# -- field checks ------------------------------------------------------------------

_TYPE_NAMES = {str: "a string", bool: "a boolean", list: "an array", dict: "an object"}


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def required(payload: Mapping[str, Any], key: str, kind: type, path: str = "") -> Any:
    """``payload[key]``, which must be present and of ``kind``."""
    if key not in payload:
        raise InvalidRequest(f"{path}{key}", "field required")
    value = payload[key]
    if type(value) is kind:  # the common case, decided without building the field's path
        return value
    return _checked(value, kind, f"{path}{key}")


def optional(payload: Mapping[str, Any], key: str, kind: type, path: str = "") -> Any:
    """``payload[key]`` of ``kind``, or None when absent or null."""
    value = payload.get(key)
    if value is None or type(value) is kind:
        return value
    return _checked(value, kind, f"{path}{key}")


def _checked(value: Any, kind: type, where: str) -> Any:
    wrong_bool = isinstance(value, bool) and kind is not bool
    if not isinstance(value, kind) or wrong_bool:
        expected = _TYPE_NAMES.get(kind, "an integer" if kind is int else kind.__name__)
        raise InvalidRequest(where, f"must be {expected}, not {type_name(value)}")
    return value


def required_int(payload: Mapping[str, Any], key: str, minimum: int = 0) -> int:
    value: int = required(payload, key, int)
    if value < minimum:
        raise InvalidRequest(key, f"must be at least {minimum}, not {value}")
    return value


def objects(items: Sequence[Any], path: str) -> list[Mapping[str, Any]]:
    """Every item of a list, each of which must be a JSON object."""
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise InvalidRequest(f"{path}[{index}]", f"must be an object, not {type_name(item)}")
    return list(items)


def joined(texts: Sequence[str], separator: str = "\n") -> str:
    return separator.join(text for text in texts if text)


# -- rendering ---------------------------------------------------------------------


@value_class
class Envelope:
    """The identity of one response: its id, creation time and the model it names."""

    id: str
    created: int
    model: str


# NUL never reaches a template from a request (bodies holding one are refused),
# so the rendered slot cannot occur in the payload around it.
SLOT = "\x00slot\x00"
_RENDERED_SLOT = orjson.dumps(SLOT)


class TextTemplate:
    """A payload rendered once around ``SLOT``, for the many events that differ in one string.

    A streamed reply is mostly chunks that are alike but for their text; filling
    a template is a concatenation where building and rendering each chunk's
    dict would cost far more.
    """

    __slots__ = ("event", "head", "tail")

    def __init__(self, payload: Mapping[str, Any], event: str | None = None) -> None:
        self.head, self.tail = orjson.dumps(payload).split(_RENDERED_SLOT)
        self.event = event

    def at(self, at: float, text: str) -> TimedFrame:
        return TimedFrame(at, self.head + orjson.dumps(text) + self.tail, self.event)


def arguments_json(arguments: Mapping[str, Any]) -> str:
    """A tool call's arguments as JSON text; spaced, so word chunks split it into fragments."""
    return json.dumps(arguments, ensure_ascii=False)
