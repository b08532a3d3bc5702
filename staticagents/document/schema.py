"""The fixture document's structure (DESIGN section 2), validated in one place.

Every way in (YAML import, the admin's model ``clean()``, the control API) goes
through these models, so a rule is judged the same wherever it comes from.
Errors carry the path in the document (``rules[3].match.query``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal, TypeVar, get_args
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from staticagents.core.backtracking import backtracking_problem
from staticagents.core.embeddings import FLOAT32_MAX, MAX_DIMENSIONS, TEXT_WINDOW
from staticagents.core.inquiry import is_credential_name
from staticagents.core.regexes import MAX_EXPANDED, expanded_size
from staticagents.core.storable import HugeNumber, storable_problems
from staticagents.document.terms import (
    ACTION_PARAMETERS,
    Dialect,
    DocumentInvalid,
    FieldError,
    Mode,
    recorded_time,
    shown,
)

SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")
# Counts stored in an integer column (PositiveIntegerField: 32 bits on PostgreSQL).
COLUMN_INT_MAX = INT32_MAX = 2**31 - 1
# Integers sent as they are (usage, seeds, priorities): what a signed 64-bit field holds.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# A Retry-After beyond a day is a typo, not a test.
RETRY_AFTER_MAX = 86_400.0


def check_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex: {exc}") from None
    except (RecursionError, OverflowError):
        raise ValueError("invalid regex: nested too deeply") from None
    if (size := expanded_size(pattern)) > MAX_EXPANDED:
        problem: str | None = (
            f"regex is too large: its counted repeats expand to {size} items "
            f"(at most {MAX_EXPANDED})"
        )
    else:
        try:
            problem = backtracking_problem(pattern)
        except RecursionError:
            problem = "regex is nested too deeply to check for catastrophic backtracking"
    if problem is not None:
        raise PydanticCustomError("slow_regex", problem)
    return pattern


def check_slug(name: str) -> str:
    if not SLUG.match(name):
        raise ValueError("must be a slug: letters, digits, '-' and '_' only")
    return name


Regex = Annotated[str, AfterValidator(check_regex)]


def check_float32(value: float) -> float:
    if abs(value) > FLOAT32_MAX:
        raise ValueError("must fit a 32-bit float (at most 3.4e38 either way)")
    return value


# One component of a pinned embedding: a finite number a float32 can hold.
EmbeddingValue = Annotated[float, Field(allow_inf_nan=False), AfterValidator(check_float32)]
Slug = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(check_slug)]


class Strict(BaseModel):
    # Built at their first validation, not at import: the service's start-up from its
    # database template validates nothing (bench/README.md, the testing kit, step 21).
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    def document(self) -> dict[str, Any]:
        """The document form: only the keys that were given, in declaration order."""
        return self.model_dump(exclude_unset=True, exclude_none=True, by_alias=True)


class StreamSpec(Strict):
    first_delay_ms: int = Field(default=0, ge=0, le=600_000)
    word_delay_ms: int = Field(default=0, ge=0, le=600_000)
    chunk: Any = "word"

    @field_validator("chunk")
    @classmethod
    def _chunk(cls, value: Any) -> Any:
        if value in ("word", "char"):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= COLUMN_INT_MAX:
            return value
        raise ValueError(
            f"must be 'word', 'char' or a number of characters from 1 to {COLUMN_INT_MAX}"
        )


class ErrorSpec(Strict):
    status: int = Field(default=500, ge=400, le=599)
    type: str = "api_error"
    message: str = "Scripted error"


class ToolCallSpec(Strict):
    name: str = Field(min_length=1, max_length=200)
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = Field(default=None, min_length=1, max_length=200)


FaultKind = Literal["disconnect", "malformed", "error_event", "stall"]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)


class FaultSpec(Strict):
    """A stream that fails after ``after_chunks`` of its events (``serving/stream.py``)."""

    after_chunks: int = Field(ge=0, le=100_000)
    kind: FaultKind


class ChaosSpec(Strict):
    """Faults drawn at random but reproducibly: the same seed, session and request
    number always draw the same (``core.replies.chaos_fault``)."""

    probability: float = Field(ge=0, le=1)
    kinds: list[FaultKind] = Field(default_factory=lambda: list(FAULT_KINDS), min_length=1)
    seed: int = Field(default=0, ge=INT64_MIN, le=INT64_MAX)
    after_chunks: int = Field(default=1, ge=0, le=100_000)

    @field_validator("probability", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value


class UsageSpec(Strict):
    # Gemini's usage fields are 32-bit, and every dialect adds the counts up into a total.
    input_tokens: int = Field(default=0, ge=0, le=INT32_MAX)
    output_tokens: int = Field(default=0, ge=0, le=INT32_MAX)


class SuggestionSpec(Strict):
    """Galaxy's ``ActionSuggestion``."""

    action_type: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    confidence: Literal["low", "medium", "high"]
    priority: int = Field(default=1, ge=INT64_MIN, le=INT64_MAX)

    @model_validator(mode="after")
    def _parameters(self) -> SuggestionSpec:
        if self.action_type not in ACTION_PARAMETERS:
            known = ", ".join(ACTION_PARAMETERS)
            raise ValueError(f"unknown action_type {self.action_type!r} (one of {known})")
        required = ACTION_PARAMETERS[self.action_type]
        if required and not self.parameters.get(required):
            raise ValueError(f"{self.action_type} needs parameters.{required}")
        return self


class ResponseSpec(Strict):
    content: str | None = None
    confidence: Literal["low", "medium", "high"] | None = None
    agent_type: str | None = None
    suggestions: list[SuggestionSpec] | None = None
    metadata: dict[str, Any] | None = None
    reasoning: str | None = None
    thinking: str | None = None
    tool_calls: list[ToolCallSpec] | None = None
    finish_reason: Literal["stop", "length", "tool_calls", "content_filter"] | None = None
    error: ErrorSpec | None = None
    retry_after: float | None = Field(default=None, ge=0, le=RETRY_AFTER_MAX, allow_inf_nan=False)
    fail_first: int | None = Field(default=None, ge=0, le=COLUMN_INT_MAX)
    template: bool | None = None
    stream: StreamSpec | None = None
    fault: FaultSpec | None = None
    chaos: ChaosSpec | None = None
    usage: UsageSpec | None = None
    embedding: list[EmbeddingValue] | None = Field(
        default=None, min_length=1, max_length=MAX_DIMENSIONS
    )
    embedding_like: str | None = Field(default=None, min_length=1, max_length=TEXT_WINDOW)

    @field_validator("retry_after", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    @field_validator("embedding")
    @classmethod
    def _direction(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and not any(value):
            raise ValueError("must not be all zeros: a vector needs a direction")
        return value

    @model_validator(mode="after")
    def _one_vector(self) -> ResponseSpec:
        if self.embedding is not None and self.embedding_like is not None:
            raise ValueError("a response gives at most one of 'embedding' and 'embedding_like'")
        if self.fault is not None and self.chaos is not None:
            raise ValueError("a response gives at most one of 'fault' and 'chaos'")
        return self


class MatchSpec(Strict):
    agent_type: str | None = Field(default=None, min_length=1)
    query: Regex | None = None
    contains: Any = None
    context: dict[str, Regex] | None = None
    model: Regex | None = None
    system: Regex | None = None
    dialect: Dialect | None = None
    turn: int | None = Field(default=None, ge=1, le=COLUMN_INT_MAX)
    tool_result: Any = None

    @field_validator("contains")
    @classmethod
    def _contains(cls, value: Any) -> Any:
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
            return value
        raise ValueError("must be a non-empty string or a list of non-empty strings")

    @field_validator("tool_result")
    @classmethod
    def _tool_result(cls, value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            return check_regex(value)
        raise ValueError("must be true, false or a regex on the tool result's text")


class RecordedSpec(Strict):
    """Where a recorded rule came from (``staticagents.recording``), and whether a curator
    has reviewed it since."""

    upstream: str = Field(min_length=1, max_length=200)
    at: Any
    reviewed: bool = False

    @field_validator("at")
    @classmethod
    def _at(cls, value: Any) -> str:
        return recorded_time(value)


class RuleSpec(Strict):
    name: Slug | None = None
    enabled: bool | None = None
    match: MatchSpec | None = None
    response: ResponseSpec | None = None
    responses: list[ResponseSpec] | None = Field(default=None, min_length=1)
    on_exhausted: Literal["repeat_last", "error"] | None = None
    recorded: RecordedSpec | None = None

    @model_validator(mode="after")
    def _one_response(self) -> RuleSpec:
        if (self.response is None) == (self.responses is None):
            raise ValueError("a rule needs exactly one of 'response' or 'responses'")
        if self.on_exhausted is not None and self.responses is None:
            raise ValueError("'on_exhausted' applies only to a 'responses' sequence")
        return self


class DefaultsSpec(Strict):
    confidence: Literal["low", "medium", "high"] | None = None
    stream: StreamSpec | None = None
    chaos: ChaosSpec | None = None  # for every rule's response without error, fault or chaos


# -- real models beside static ones ---------------------------------------------------

# An environment variable's name as shells write them; a key (mixed case, dashes) is none.
ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
UPSTREAM_TIMEOUT_MAX = 600.0


def check_base_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not hold credentials: name the key's variable in api_key_env")
    return url


def check_env_name(name: str) -> str:
    if not ENV_NAME.match(name):
        raise ValueError(
            "must name the environment variable that holds the key (upper case, digits and "
            "'_', e.g. OPENAI_API_KEY), never the key itself"
        )
    return name


def check_extra_headers(headers: dict[str, str]) -> dict[str, str]:
    for name in headers:
        if not name or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
            raise ValueError(f"{name!r} is not a header name")
        if is_credential_name(name):
            raise ValueError(
                f"header {name!r} would carry a credential: the key comes from api_key_env only"
            )
    return headers


class UpstreamSpec(Strict):
    """A real model endpoint that proxied agent types are sent to (its key stays in the
    environment: ``api_key_env`` names the variable)."""

    name: Slug
    dialect: Literal["openai", "anthropic"]
    base_url: Annotated[str, Field(min_length=1, max_length=2000), AfterValidator(check_base_url)]
    api_key_env: Annotated[str, Field(max_length=200), AfterValidator(check_env_name)]
    model: str | None = Field(default=None, min_length=1, max_length=200)
    timeout: float = Field(default=60.0, gt=0, le=UPSTREAM_TIMEOUT_MAX, allow_inf_nan=False)
    headers: Annotated[dict[str, str], AfterValidator(check_extra_headers)] | None = None
    record_model: bool | None = None
    record_timing: bool | None = None

    @field_validator("timeout", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value


class AgentModeSpec(Strict):
    mode: Mode
    upstream: Slug | None = None


class ModesSpec(Strict):
    """Which agent types answer from rules and which from an upstream. ``upstream`` is the
    default's (absent: the only upstream defined)."""

    default: Mode | None = None
    upstream: Slug | None = None
    agent_types: dict[Annotated[str, Field(min_length=1, max_length=200)], AgentModeSpec] | None = (
        None
    )


def mode_problems(upstreams: list[dict[str, Any]], modes: dict[str, Any]) -> list[FieldError]:
    """The modes' references that name no upstream, or need one and cannot tell which."""
    names = [upstream["name"] for upstream in upstreams]
    problems = [
        FieldError(f"upstreams[{i}].name", f"duplicate upstream name {name!r}", "duplicate")
        for i, name in enumerate(names)
        if name in names[:i]
    ]
    known = ", ".join(repr(n) for n in names) or "none is defined"

    def check(mode_path: str, upstream_path: str, mode: str | None, upstream: str | None) -> None:
        if upstream is not None and upstream not in names:
            message = f"unknown upstream {upstream!r} ({known})"
            problems.append(FieldError(upstream_path, message))
        elif mode not in (None, "static") and upstream is None and len(names) != 1:
            message = f"mode {mode!r} needs an upstream: name one ({known})"
            problems.append(FieldError(mode_path, message, "required"))

    default_upstream = modes.get("upstream")
    check("modes.default", "modes.upstream", modes.get("default"), default_upstream)
    for agent_type, spec in (modes.get("agent_types") or {}).items():
        path = f"modes.agent_types.{agent_type}"
        given = spec.get("upstream")
        upstream_path = f"{path}.upstream" if given else "modes.upstream"
        check(f"{path}.mode", upstream_path, spec["mode"], given or default_upstream)
    return problems


def validate_upstreams(data: Any, prefix: str = "") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``{upstreams, modes}`` (the control API's body) validated; raises DocumentInvalid."""
    if not isinstance(data, Mapping):
        raise DocumentInvalid([FieldError(prefix, "must be a mapping", "type")])
    spec = _validated(UpstreamsSpec, data, prefix)
    upstreams = [upstream.document() for upstream in spec.upstreams or []]
    modes = spec.modes.document() if spec.modes else {}
    problems = mode_problems(upstreams, modes)
    if problems:
        raise DocumentInvalid(problems)
    return upstreams, modes


class UpstreamsSpec(Strict):
    upstreams: list[UpstreamSpec] | None = None
    modes: ModesSpec | None = None


class DocumentSpec(Strict):
    version: Literal[1] | None = None
    defaults: DefaultsSpec | None = None
    rules: list[RuleSpec] | None = None
    fallback: ResponseSpec | None = None
    upstreams: list[UpstreamSpec] | None = None
    modes: ModesSpec | None = None

    @model_validator(mode="after")
    def _chaos_in_rules_only(self) -> DocumentSpec:
        if self.fallback is not None and self.fallback.chaos is not None:
            raise ValueError(
                "'chaos' belongs in a rule's response: the fallback counts no requests"
            )
        return self


# -- entry points -------------------------------------------------------------


def validate_document(data: Any) -> dict[str, Any]:
    """Validate a parsed fixture; return its normalized form or raise DocumentInvalid.

    The normalized form always has ``version``, ``defaults``, ``rules`` (every
    rule named) and ``fallback`` (None when absent); ``upstreams`` and ``modes`` when given.
    """
    if not isinstance(data, Mapping):
        kind = type(data).__name__ if data is not None else "an empty document"
        kind = "int" if isinstance(data, HugeNumber) else kind
        raise DocumentInvalid([FieldError("", f"a fixture must be a mapping, not {kind}", "type")])
    spec = _validated(DocumentSpec, data, extra=list(_duplicate_names(data.get("rules"))))
    specs = spec.rules or []
    rules = []
    for index, rule in enumerate(specs):
        rules.append(rule.document())
        # Freed one by one: the whole tree at once holds the GIL (0.2 s at 45,000 rules).
        specs[index] = None  # type: ignore[call-overload]
    name_rules(rules)
    document: dict[str, Any] = {
        "version": 1,
        "defaults": spec.defaults.document() if spec.defaults else {},
        "rules": rules,
        "fallback": spec.fallback.document() if spec.fallback else None,
    }
    if spec.upstreams is not None or spec.modes is not None:
        document["upstreams"] = [upstream.document() for upstream in spec.upstreams or []]
        document["modes"] = spec.modes.document() if spec.modes else {}
        problems = mode_problems(document["upstreams"], document["modes"])
        if problems:
            raise DocumentInvalid(problems)
    return document


def validate_part(model: type[Strict], data: Any, prefix: str = "") -> dict[str, Any]:
    """Validate one part of a document (a match, a response, a rule) on its own."""
    return _validated(model, data, prefix).document()


SpecModel = TypeVar("SpecModel", bound=Strict)


def _validated(
    model: type[SpecModel], data: Any, prefix: str = "", extra: list[FieldError] | None = None
) -> SpecModel:
    """``data`` as ``model``, or every problem at once: values JSON and the database could not
    hold back as they are (``core.storable``), the schema's own, and ``extra``.

    A schema error under a value already refused would only repeat it, so it is left out.
    """
    errors = [FieldError(*problem) for problem in storable_problems(data, prefix)]
    errors.extend(extra or [])
    try:
        spec = model.model_validate(data)
    except ValidationError as exc:
        refused = tuple(error.path for error in errors)
        found = pydantic_errors(exc, prefix, model)
        errors.extend(e for e in found if not _under(e.path, refused))
    if errors:
        raise DocumentInvalid(errors)
    return spec


def _under(path: str, parents: tuple[str, ...]) -> bool:
    return any(path == p or path.startswith((f"{p}.", f"{p}[")) for p in parents)


def name_rules(rules: list[dict[str, Any]], taken: Iterable[str] = ()) -> None:
    """Give every unnamed rule a stable generated name, unique in the document and ``taken``."""
    used = {rule["name"] for rule in rules if "name" in rule} | set(taken)
    for position, rule in enumerate(rules, start=1):
        if "name" in rule:
            continue
        agent_type = (rule.get("match") or {}).get("agent_type")
        base = re.sub(r"[^-a-zA-Z0-9_]", "-", agent_type) if agent_type else "rule"
        candidate, n = f"{base}-{position}", 1
        while candidate in used:
            n += 1
            candidate = f"{base}-{position}-{n}"
        used.add(candidate)
        rule["name"] = candidate
        # Keep "name" first, as an exported rule has it.
        for key in [k for k in rule if k != "name"]:
            rule[key] = rule.pop(key)


def _duplicate_names(rules: Any) -> Iterable[FieldError]:
    """Names given twice among the raw ``rules`` (found alongside every other problem)."""
    first_seen: dict[str, int] = {}
    for index, rule in enumerate(rules if isinstance(rules, list) else []):
        name = rule.get("name") if isinstance(rule, dict) else None
        if not isinstance(name, str):
            continue
        if name in first_seen:
            yield FieldError(
                f"rules[{index}].name",
                f"duplicate name {name!r} (also rules[{first_seen[name]}])",
                "duplicate",
            )
        else:
            first_seen[name] = index


def pydantic_errors(
    exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> list[FieldError]:
    """Pydantic's errors as ``FieldError``; an unknown key of ``model`` gets a "did you mean"."""
    errors = []
    for item in exc.errors(include_url=False):
        path = format_path(item["loc"], prefix)
        message = _message(item)
        if item["type"] == "extra_forbidden" and model is not None:
            message += _did_you_mean(model, item["loc"])
        errors.append(FieldError(path, message, _code(item["type"])))
    return errors


def _did_you_mean(model: type[BaseModel], loc: tuple[str | int, ...]) -> str:
    """`` (did you mean 'query'?)`` for a key close to one its mapping knows, else nothing."""
    known = _keys_at(model, loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _keys_at(model: type[BaseModel] | None, loc: tuple[str | int, ...]) -> list[str]:
    """The keys the mapping at ``loc`` (inside ``model``) takes; none when it is free-form."""
    for part in loc:
        if model is None:
            return []
        if isinstance(part, str):
            field = model.model_fields.get(part)
            model = _model_in(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, through ``X | None`` and ``list[X]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def format_path(loc: Iterable[str | int], prefix: str = "") -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


def _message(item: Any) -> str:
    kind = item["type"]
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "literal_error" and item["loc"] and item["loc"][-1] == "version":
        return f"unsupported version {item['input']!r} (only 1 is supported)"
    message = str(item["msg"])
    for lead in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(lead)
    if kind.endswith("_type") or kind in ("literal_error", "model_type", "dict_type"):
        message = f"{message} (got {type(item['input']).__name__} {shown(item['input'])})"
    return message


def _code(kind: str) -> str:
    if kind == "slow_regex":
        return kind
    if kind == "extra_forbidden":
        return "unknown_key"
    if kind == "missing":
        return "required"
    if kind.endswith("_type") or kind in ("model_type", "literal_error"):
        return "type"
    return "invalid"
