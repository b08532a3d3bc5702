"""One-line summaries of a rule for the rule list: what it matches, what kind of reply it sends."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

SEPARATOR = " · "


def match_summary(match: Mapping[str, Any]) -> str:
    """``agent_type=router · contains "#error" · tool_result=true``; "everything" when empty."""
    return SEPARATOR.join(_predicate(key, value) for key, value in match.items()) or "everything"


def _predicate(key: str, value: Any) -> str:
    if key == "contains":
        literals = [value] if isinstance(value, str) else value
        return "contains " + ", ".join(_quoted(literal) for literal in literals)
    if key == "context":
        return SEPARATOR.join(f"context.{name} /{pattern}/" for name, pattern in value.items())
    if key in ("query", "model", "system") or (key == "tool_result" and isinstance(value, str)):
        return f"{key} /{value}/"
    return f"{key}={json.dumps(value)}" if isinstance(value, bool) else f"{key}={value}"


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def response_summary(responses: Sequence[Mapping[str, Any]]) -> SafeString:
    """text, tool call ``lookup``, error 429, thinking + text, sequence of 3, template, ..."""
    if len(responses) > 1:
        return format_html("sequence of {}", len(responses))
    response = responses[0] if responses else {}
    error = response.get("error")
    if error is not None:
        kind = format_html("error {}", error.get("status", 500))
    else:
        kind = format_html_join(" + ", "{}", ((part,) for part in _reply_parts(response)))
    fail_first = response.get("fail_first")
    if fail_first:
        return format_html("{} (fails first {})", kind, fail_first)
    return kind


def _reply_parts(response: Mapping[str, Any]) -> list[SafeString | str]:
    parts: list[SafeString | str] = []
    if response.get("thinking"):
        parts.append("thinking")
    if response.get("template"):
        parts.append("template")
    elif response.get("content"):
        parts.append("text")
    calls = response.get("tool_calls") or []
    if calls:
        names = format_html_join(", ", "<code>{}</code>", ((call["name"],) for call in calls))
        parts.append(format_html("tool call{} {}", "s" if len(calls) > 1 else "", names))
    if response.get("embedding") is not None or response.get("embedding_like"):
        parts.append("embedding")
    return parts or ["the fallback's text"]
