"""Google's Gemini API (``generateContent`` and its kin): the request parser and reply renderer.

Pure: no Django, no I/O. Requests are read as the API reads them: camelCase
keys, or the snake_case spelling of the same field (Google's JSON parser takes
both, and google-genai sends some nested configs in snake_case), unknown keys
ignored. Replies are written in the shapes google-genai parses: a
``GenerateContentResponse`` with one candidate, or a stream of them, the last
one carrying the ``finishReason`` and the whole ``usageMetadata``.

Thought parts go out only when the request's ``generationConfig.thinkingConfig``
asks for them with ``includeThoughts``, as the API does; the thinking is
counted in ``thoughtsTokenCount`` either way. Tool calls are ``functionCall``
parts, sent whole (Gemini never streams a call's arguments in pieces). Errors
have Google's shape, ``{"error": {"code", "message", "status"}}``, where the
status is the canonical word for the HTTP code (429: ``RESOURCE_EXHAUSTED``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from typing import Any
from urllib.parse import parse_qsl

from staticagents.core.replies import Reply, ReplyError, ToolCall, count_tokens
from staticagents.core.timing import Piece, Slots, TimedFrame, plan_stream
from staticagents.core.values import value_class
from staticagents.dialects.llm.wire import (
    DEFAULT_MODEL,
    SLOT,
    Conversation,
    Envelope,
    InvalidRequest,
    TextTemplate,
    inquiry_context,
    joined,
    objects,
    optional,
    required,
)

ROLES = ("user", "model", "function")  # "function": the older role of a functionResponse turn
FINISH_REASONS = {
    "stop": "STOP",
    "length": "MAX_TOKENS",
    "tool_calls": "STOP",  # Gemini ends a function-calling turn with STOP too
    "content_filter": "SAFETY",
}
# google.rpc.Code: the word Google's APIs put beside each HTTP status.
STATUS_WORDS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",  # Google's answer to a payload over its limit
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
    529: "UNAVAILABLE",  # an overloaded provider, in the word Google uses for it
}
CANONICAL_CODES = frozenset(
    {
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    }
)
# The methods served on every model: this dialect's, and the embeddings dialect's
# (``dialects/embeddings``); a method nobody serves gets Google's 404.
SUPPORTED_METHODS = [
    "generateContent",
    "streamGenerateContent",
    "countTokens",
    "embedContent",
    "batchEmbedContents",
]
# Keys of a functionResponse's ``response`` that hold the tool's output on their own.
RESULT_KEYS = ("result", "output", "content", "text")
TOKEN_LIMITS = {"inputTokenLimit": 1_048_576, "outputTokenLimit": 65_536}


# -- requests ------------------------------------------------------------------------


@value_class
class Generation:
    """A ``generateContent`` request: the inquiry's part, and what shapes the reply."""

    conversation: Conversation
    include_thoughts: bool


@value_class
class _Turn:
    role: str
    text: str  # the text parts, joined (thought parts left out)
    tool_results: tuple[str, ...]  # the functionResponse parts' outputs, as text


def parse_generate_request(payload: Mapping[str, Any], model: str) -> Generation:
    """Read a ``generateContent`` body for ``model``, or raise InvalidRequest naming the field."""
    turns = _read_contents(payload)
    system = system_text(payload)
    questions = [turn for turn in turns if turn.role == "user" and turn.text]
    last = turns[-1]
    _field(payload, "toolConfig", dict)
    objects(_field(payload, "safetySettings", list) or [], "safetySettings")
    conversation = Conversation(
        model=model,
        query=questions[-1].text if questions else "",
        system=system,
        turn=len(questions),
        tool_result="\n".join(last.tool_results) if last.tool_results else None,
        context=inquiry_context(
            system=system, model=model, tools=tool_names(payload), metadata=None
        ),
    )
    return Generation(conversation, include_thoughts(payload))


# Every ``path`` below is the prefix of the fields it names: "" or "contents[2].parts[0]."


def _read_contents(payload: Mapping[str, Any], path: str = "") -> list[_Turn]:
    contents = objects(required(payload, "contents", list, path), f"{path}contents")
    if not contents:
        raise InvalidRequest(f"{path}contents", "must contain at least one content")
    return [_read_content(content, f"{path}contents[{i}].") for i, content in enumerate(contents)]


def _read_content(content: Mapping[str, Any], path: str) -> _Turn:
    role = optional(content, "role", str, path) or "user"
    if role not in ROLES:
        raise InvalidRequest(f"{path}role", f"must be one of {', '.join(ROLES)}, not {role!r}")
    parts = objects(required(content, "parts", list, path), f"{path}parts")
    if not parts:
        raise InvalidRequest(f"{path}parts", "must not be empty")
    texts, results = [], []
    for index, part in enumerate(parts):
        where = f"{path}parts[{index}]."
        text = optional(part, "text", str, where)
        if text is not None and not _field(part, "thought", bool, where):
            texts.append(text)
        _function_call(part, where)
        response = _function_response(part, where)
        if response is not None:
            results.append(tool_result_text(response))
    return _Turn(role, joined(texts), tuple(results))


def _function_call(part: Mapping[str, Any], path: str) -> None:
    call = _field(part, "functionCall", dict, path)
    if call is not None:
        where = f"{path}functionCall."
        required(call, "name", str, where)
        optional(call, "args", dict, where)
        optional(call, "id", str, where)


def _function_response(part: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    """A functionResponse part's ``response`` (empty when it has none), or None for other parts."""
    response = _field(part, "functionResponse", dict, path)
    if response is None:
        return None
    where = f"{path}functionResponse."
    required(response, "name", str, where)
    optional(response, "id", str, where)
    output: Mapping[str, Any] = optional(response, "response", dict, where) or {}
    return output


def tool_result_text(response: Mapping[str, Any]) -> str:
    """A tool's output as text: a lone ``result``/``output`` string as is, else the JSON."""
    if not response:
        return ""
    if len(response) == 1:
        key, value = next(iter(response.items()))
        if key in RESULT_KEYS and isinstance(value, str):
            return value
    return json.dumps(response, ensure_ascii=False)


def system_text(payload: Mapping[str, Any], path: str = "") -> str:
    """The text of the request's ``systemInstruction`` (a content whose role does not matter)."""
    instruction = _field(payload, "systemInstruction", dict, path)
    if instruction is None:
        return ""
    where = f"{path}systemInstruction."
    parts = objects(optional(instruction, "parts", list, where) or [], f"{where}parts")
    texts = [optional(part, "text", str, f"{where}parts[{i}].") for i, part in enumerate(parts)]
    return joined([text or "" for text in texts])


def tool_names(payload: Mapping[str, Any]) -> list[str]:
    """The names of the functions the request declares (other tools carry none)."""
    names = []
    for index, tool in enumerate(objects(_field(payload, "tools", list) or [], "tools")):
        where = f"tools[{index}]."
        declared = objects(
            _field(tool, "functionDeclarations", list, where) or [],
            f"{where}functionDeclarations",
        )
        for number, declaration in enumerate(declared):
            names.append(
                required(declaration, "name", str, f"{where}functionDeclarations[{number}].")
            )
    return names


def include_thoughts(payload: Mapping[str, Any]) -> bool:
    """Whether ``generationConfig.thinkingConfig.includeThoughts`` asks for thought parts."""
    config = _field(payload, "generationConfig", dict) or {}
    thinking = _field(config, "thinkingConfig", dict, "generationConfig.") or {}
    where = "generationConfig.thinkingConfig."
    return bool(_field(thinking, "includeThoughts", bool, where))


def prompt_tokens(payload: Mapping[str, Any]) -> int:
    """``countTokens``: the word estimate of every text in the prompt, system instruction included.

    The body is the contents themselves, or a ``generateContentRequest`` holding them.
    """
    wrapped = _field(payload, "generateContentRequest", dict)
    request, path = (payload, "") if wrapped is None else (wrapped, "generateContentRequest.")
    turns = _read_contents(request, path)
    texts = [system_text(request, path), *(turn.text for turn in turns)]
    texts += [result for turn in turns for result in turn.tool_results]
    return sum(count_tokens(text) for text in texts)


def _field(payload: Mapping[str, Any], name: str, kind: type, path: str = "") -> Any:
    """``payload[name]`` (camelCase) or its snake_case spelling, of ``kind``; None when absent."""
    if name in payload:
        return optional(payload, name, kind, path)
    snake = _snake(name)
    return optional(payload, snake, kind, path) if snake in payload else None


_UPPER = re.compile(r"(?<!^)(?=[A-Z])")


@cache  # the names are this module's literals: a few dozen at most
def _snake(name: str) -> str:
    return _UPPER.sub("_", name).lower()


def is_google_client(headers: Mapping[str, str], query_string: bytes | str = b"") -> bool:
    """Whether a request comes from a Google client: its key header, its library header, ?key=."""
    if "x-goog-api-key" in headers or "x-goog-api-client" in headers:
        return True
    raw = query_string.decode("latin-1") if isinstance(query_string, bytes) else query_string
    return any(name == "key" for name, _ in parse_qsl(raw))


# -- replies --------------------------------------------------------------------------


def response_body(reply: Reply, envelope: Envelope, *, include_thoughts: bool) -> dict[str, Any]:
    """A whole ``GenerateContentResponse``: what ``generateContent`` answers."""
    finish = FINISH_REASONS.get(reply.finish_reason, "OTHER")
    return _response(
        envelope, _candidate(reply_parts(reply, include_thoughts), finish), usage(reply)
    )


def reply_parts(reply: Reply, include_thoughts: bool) -> list[dict[str, Any]]:
    """Thought parts (when asked for), then the text, then one functionCall part per call."""
    parts: list[dict[str, Any]] = []
    if reply.thinking and include_thoughts:
        parts.append({"text": reply.thinking, "thought": True})
    if reply.content:
        parts.append({"text": reply.content})
    parts += [function_call_part(call) for call in reply.tool_calls]
    return parts


def function_call_part(call: ToolCall) -> dict[str, Any]:
    return {"functionCall": {"id": call.id, "name": call.name, "args": dict(call.arguments)}}


def usage(reply: Reply, *, prompt_only: bool = False) -> dict[str, Any]:
    """``usageMetadata``: thoughts counted apart from the candidates, and in the total.

    ``prompt_only``: what a stream's chunks carry before the last one.
    """
    prompt = reply.usage.input_tokens
    details = [{"modality": "TEXT", "tokenCount": prompt}]
    if prompt_only:
        return {
            "promptTokenCount": prompt,
            "totalTokenCount": prompt,
            "promptTokensDetails": details,
        }
    output = reply.usage.output_tokens
    thoughts = count_tokens(reply.thinking) if reply.thinking else 0
    metadata: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output + thoughts,
        "promptTokensDetails": details,
    }
    if thoughts:
        metadata["thoughtsTokenCount"] = thoughts
    return metadata


def _candidate(parts: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    candidate: dict[str, Any] = {}
    if parts or finish != "SAFETY":  # a blocked answer comes without content
        candidate["content"] = {"parts": parts or [{"text": ""}], "role": "model"}
    if finish is not None:
        candidate["finishReason"] = finish
    candidate["index"] = 0
    return candidate


def _response(
    envelope: Envelope, candidate: dict[str, Any], usage_metadata: dict[str, Any]
) -> dict[str, Any]:
    return {
        "candidates": [candidate],
        "usageMetadata": usage_metadata,
        "modelVersion": envelope.model,
        "responseId": envelope.id,
    }


def stream_chunks(
    reply: Reply, envelope: Envelope, *, include_thoughts: bool
) -> Iterator[TimedFrame]:
    """The chunks of ``streamGenerateContent``, each at its scripted time, rendered one by
    one as they are sent.

    Thought chunks (when asked for), text chunks, then one chunk with every
    function call; the last chunk carries the finish reason and the whole usage.
    Thinking that is not shown still takes its time before the text.
    """
    partial = usage(reply, prompt_only=True)
    templates = {
        kind: TextTemplate(
            _response(envelope, _candidate([_piece_part(kind, SLOT)], None), partial)
        )
        for kind in ("thinking", "text")
    }
    slots = Slots(reply.timing)
    held: Piece | None = None  # the last piece shown so far: the finish may carry it
    for piece in plan_stream(reply, slots):
        if include_thoughts or piece.kind != "thinking":
            if held is not None:
                yield templates[held.kind].at(held.at, held.text)
            held = piece
    if reply.tool_calls:  # due in the slot after the last piece
        if held is not None:
            yield templates[held.kind].at(held.at, held.text)
        at, last = slots.take(), [function_call_part(call) for call in reply.tool_calls]
    elif held is not None:
        at, last = held.at, [_piece_part(held.kind, held.text)]
    else:  # nothing to show: the finish alone, when the answer is over
        at, last = slots.end, []
    finish = FINISH_REASONS.get(reply.finish_reason, "OTHER")
    yield TimedFrame(at, _response(envelope, _candidate(last, finish), usage(reply)))


def _piece_part(kind: str, text: str) -> dict[str, Any]:
    return {"text": text, "thought": True} if kind == "thinking" else {"text": text}


def sse_chunks(frames: Sequence[TimedFrame]) -> bytes:
    """``?alt=sse``: a ``data:`` line per chunk."""
    return b"".join([b"data: " + frame.json() + b"\r\n\r\n" for frame in frames])


class ArrayChunks:
    """Without ``alt=sse``: one JSON array whose elements arrive as they are due.

    Called with each batch of due frames; it remembers whether the array is open.
    """

    def __init__(self) -> None:
        self.opened = False

    def __call__(self, frames: Sequence[TimedFrame]) -> bytes:
        parts = []
        for frame in frames:
            parts.append(b",\r\n" if self.opened else b"[")
            parts.append(frame.json())
            self.opened = True
        return b"".join(parts)

    def ending_with(self, error: bytes) -> bytes:
        """The rest of an array cut short: ``error`` as its last element, then its end."""
        return (b",\r\n" if self.opened else b"[") + error + ARRAY_END


ARRAY_END = b"]"


# -- errors and listings ----------------------------------------------------------------


def status_word(code: int) -> str:
    """The canonical status Google's APIs name beside an HTTP status."""
    word = STATUS_WORDS.get(code)
    if word is not None:
        return word
    return "INTERNAL" if code >= 500 else "FAILED_PRECONDITION"


def error_body(
    code: int,
    message: str,
    status: str | None = None,
    details: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    error: dict[str, Any] = {
        "code": code,
        "message": message,
        "status": status or status_word(code),
    }
    if details:
        error["details"] = [dict(detail) for detail in details]
    return {"error": error}


def scripted_error_body(error: ReplyError, retry_after: float | None) -> dict[str, Any]:
    """A rule's error: its type when it is a canonical status word, else the status's own word.

    A ``retry_after`` goes into a ``RetryInfo`` detail, where Google puts it.
    """
    status = error.type if error.type in CANONICAL_CODES else status_word(error.status)
    details = []
    if retry_after is not None:
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_after:g}s"}
        )
    return error_body(error.status, error.message, status, details)


def key_error_details(reason: str) -> list[dict[str, Any]]:
    """The ``ErrorInfo`` detail Google adds to a refused key (reason ``API_KEY_INVALID``)."""
    return [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "googleapis.com",
        }
    ]


def cut_off_body(limit_seconds: float) -> dict[str, Any]:
    """Sent in place of the rest of a stream that would outlast the maximum duration."""
    message = f"stream cut off: it would outlast the maximum stream duration of {limit_seconds:g} s"
    return error_body(504, message)


def fault_body() -> dict[str, Any]:
    """A scripted ``error_event`` fault: Google's error object, 503 UNAVAILABLE."""
    return error_body(503, "The model is overloaded: scripted stream fault")


def count_tokens_body(total: int) -> dict[str, Any]:
    return {
        "totalTokens": total,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}],
    }


def model_body(name: str) -> dict[str, Any]:
    """A ``Model`` resource: any model name is served, by the rules of its agent type or router."""
    return {
        "name": f"models/{name}",
        "baseModelId": name,
        "version": "static",
        "displayName": name,
        "description": f"Static Agents: answers from the rules (model {name!r})",
        **TOKEN_LIMITS,
        "supportedGenerationMethods": list(SUPPORTED_METHODS),
        "thinking": True,
    }


def models_body(agent_types: Sequence[str]) -> dict[str, Any]:
    """``GET models``: the default model, then one named after each agent type."""
    names = [DEFAULT_MODEL, *(t for t in agent_types if t != DEFAULT_MODEL)]
    return {"models": [model_body(name) for name in names]}
