"""The upstreams' two wire formats, as the proxy needs them. Pure: no Django, no I/O.

* ``translated_request``: an inquiry of any dialect as the upstream's request (the
  query as the user message, the system prompt if any), not streamed;
* ``read_response``: an upstream's JSON reply as a ``Relayed``;
* ``StreamReader``: the same from a stream, fed the bytes as they are relayed;
* ``error_of``: an upstream's error body as (type, message).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from staticagents.core.inquiry import Inquiry

ANTHROPIC_VERSION = "2023-06-01"
TRANSLATED_MAX_TOKENS = 4096  # Anthropic requires one; the upstream's own limit still applies
# The upstream's finish reason in the words of a Reply (``core.replies``).
ANTHROPIC_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
OPENAI_FINISH = {"function_call": "tool_calls"}
REPLY_FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")


@dataclass(frozen=True)
class Relayed:
    """What an upstream answered, whatever its dialect (the fields of a recorded reply).

    ``finish_reason`` is the upstream's own word; ``chunks`` the streamed text with
    its offset in seconds from the request, when it was streamed.
    """

    content: str = ""
    tool_calls: tuple[dict[str, Any], ...] = ()  # {"id", "name", "arguments": dict}
    thinking: str | None = None
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    chunks: tuple[tuple[float, str], ...] | None = None

    def reply_finish_reason(self, dialect: str) -> str:
        """The finish reason in a Reply's words (stop, length, tool_calls, content_filter)."""
        reason = self.finish_reason or ("tool_calls" if self.tool_calls else "stop")
        words = ANTHROPIC_FINISH if dialect == "anthropic" else OPENAI_FINISH
        reason = words.get(reason, reason)
        return reason if reason in REPLY_FINISH_REASONS else "stop"


def upstream_path(dialect: str) -> str:
    """Where a request goes under the base URL (as each SDK appends it to its base_url)."""
    return "/chat/completions" if dialect == "openai" else "/v1/messages"


def translated_request(dialect: str, inquiry: Inquiry, model: str) -> dict[str, Any]:
    """The upstream's request for an inquiry that arrived in another dialect."""
    user = {"role": "user", "content": inquiry.query}
    if dialect == "openai":
        system = [{"role": "system", "content": inquiry.system}] if inquiry.system else []
        return {"model": model, "messages": [*system, user], "stream": False}
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": TRANSLATED_MAX_TOKENS,
        "messages": [user],
    }
    if inquiry.system:
        body["system"] = inquiry.system
    return body


def read_response(dialect: str, payload: Any) -> Relayed:
    """An upstream's (successful) JSON reply; what it lacks stays empty."""
    if not isinstance(payload, Mapping):
        return Relayed()
    if dialect == "openai":
        return _read_openai(payload)
    return _read_anthropic(payload)


def _read_openai(payload: Mapping[str, Any]) -> Relayed:
    choices = payload.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], Mapping) else {}
    message = choice.get("message") or {}
    calls = tuple(
        _call(call.get("id"), (call.get("function") or {}).get("name"), _arguments(call))
        for call in message.get("tool_calls") or []
        if isinstance(call, Mapping)
    )
    return Relayed(
        content=message.get("content") or "",
        tool_calls=calls,
        thinking=message.get("reasoning_content") or None,
        finish_reason=choice.get("finish_reason"),
        usage=_openai_usage(payload.get("usage")),
    )


def _read_anthropic(payload: Mapping[str, Any]) -> Relayed:
    blocks = [b for b in payload.get("content") or [] if isinstance(b, Mapping)]
    text = "".join(b.get("text") or "" for b in blocks if b.get("type") == "text")
    thinking = "".join(b.get("thinking") or "" for b in blocks if b.get("type") == "thinking")
    calls = tuple(
        _call(b.get("id"), b.get("name"), b.get("input") or {})
        for b in blocks
        if b.get("type") == "tool_use"
    )
    return Relayed(
        content=text,
        tool_calls=calls,
        thinking=thinking or None,
        finish_reason=payload.get("stop_reason"),
        usage=_anthropic_usage(payload.get("usage")),
    )


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    return {
        "id": str(call_id or ""),
        "name": str(name or ""),
        "arguments": arguments if isinstance(arguments, dict) else {},
    }


def _arguments(call: Mapping[str, Any]) -> dict[str, Any]:
    text = (call.get("function") or {}).get("arguments") or "{}"
    return _parsed_arguments(text)


def _parsed_arguments(text: str) -> dict[str, Any]:
    try:
        arguments = json.loads(text or "{}")
    except ValueError:
        return {}
    return arguments if isinstance(arguments, dict) else {}


def _openai_usage(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, Mapping):
        return None
    return {
        "input_tokens": int(usage.get("prompt_tokens") or 0),
        "output_tokens": int(usage.get("completion_tokens") or 0),
    }


def _anthropic_usage(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, Mapping):
        return None
    return {
        "input_tokens": int(usage.get("input_tokens") or 0),
        "output_tokens": int(usage.get("output_tokens") or 0),
    }


def error_of(payload: Any) -> tuple[str, str]:
    """(type, message) of an upstream's error body, in either dialect's shape."""
    error = payload.get("error") if isinstance(payload, Mapping) else None
    if isinstance(error, Mapping):
        kind = error.get("type") or error.get("code") or "api_error"
        return str(kind), str(error.get("message") or "")
    return "api_error", ""


# -- streams ----------------------------------------------------------------------------


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass
class StreamReader:
    """Reads a relayed stream of server-sent events into a ``Relayed``, bytes as they come."""

    dialect: str
    buffer: bytes = b""
    content: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    calls: dict[int, _Call] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    chunks: list[tuple[float, str]] = field(default_factory=list)

    def feed(self, data: bytes, at: float) -> None:
        """Read ``data`` (any slice of the stream), relayed ``at`` seconds after the request."""
        self.buffer += data.replace(b"\r\n", b"\n")
        *events, self.buffer = self.buffer.split(b"\n\n")
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    self._event(line[5:].strip(), at)

    def _event(self, data: bytes, at: float) -> None:
        if not data or data == b"[DONE]":
            return
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if isinstance(payload, dict):
            if self.dialect == "openai":
                self._openai(payload, at)
            else:
                self._anthropic(payload, at)

    def _text(self, text: str, at: float) -> None:
        if text:
            self.content.append(text)
            self.chunks.append((at, text))

    def _openai(self, payload: dict[str, Any], at: float) -> None:
        if isinstance(payload.get("usage"), Mapping):
            self.usage = _openai_usage(payload["usage"]) or {}
        for choice in payload.get("choices") or []:
            delta = choice.get("delta") or {}
            self._text(delta.get("content") or "", at)
            if delta.get("reasoning_content"):
                self.thinking.append(delta["reasoning_content"])
            for fragment in delta.get("tool_calls") or []:
                call = self.calls.setdefault(int(fragment.get("index") or 0), _Call())
                function = fragment.get("function") or {}
                call.id = call.id or fragment.get("id") or ""
                call.name = call.name or function.get("name") or ""
                call.arguments += function.get("arguments") or ""
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def _anthropic(self, payload: dict[str, Any], at: float) -> None:
        kind = payload.get("type")
        if kind == "message_start":
            self.usage.update(_anthropic_usage((payload.get("message") or {}).get("usage")) or {})
        elif kind == "content_block_start":
            block = payload.get("content_block") or {}
            if block.get("type") == "tool_use":
                index = int(payload.get("index") or 0)
                self.calls[index] = _Call(block.get("id") or "", block.get("name") or "")
        elif kind == "content_block_delta":
            delta = payload.get("delta") or {}
            if delta.get("type") == "text_delta":
                self._text(delta.get("text") or "", at)
            elif delta.get("type") == "thinking_delta":
                self.thinking.append(delta.get("thinking") or "")
            elif delta.get("type") == "input_json_delta":
                call = self.calls.setdefault(int(payload.get("index") or 0), _Call())
                call.arguments += delta.get("partial_json") or ""
        elif kind == "message_delta":
            self.finish_reason = (payload.get("delta") or {}).get("stop_reason")
            output = (payload.get("usage") or {}).get("output_tokens")
            if output is not None:
                self.usage["output_tokens"] = int(output)

    def relayed(self) -> Relayed:
        calls = tuple(
            _call(call.id, call.name, _parsed_arguments(call.arguments))
            for _, call in sorted(self.calls.items())
        )
        usage = {"input_tokens": 0, "output_tokens": 0, **self.usage} if self.usage else None
        return Relayed(
            content="".join(self.content),
            tool_calls=calls,
            thinking="".join(self.thinking) or None,
            finish_reason=self.finish_reason,
            usage=usage,
            chunks=tuple(self.chunks),
        )
