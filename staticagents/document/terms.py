"""The fixture document's plain terms: the values its fields take, its size limit, its errors.

No pydantic here. The modules the service loads to start (the models, the services,
the control API) take these from this module and import the schema's models
(``document.schema``) only when they validate something: a service started from its
database template validates nothing before its first reply, and importing pydantic
with the schema cost that start a sixth of its CPU time (bench/README.md, the
testing kit, step 23).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

Dialect = Literal[
    "galaxy", "openai", "anthropic", "adk", "websocket", "gemini", "embeddings", "responses"
]
DIALECTS: tuple[str, ...] = get_args(Dialect)
CONFIDENCES = ("low", "medium", "high")
FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter")
ACTION_PARAMETERS = {
    "tool_run": "tool_id",
    "save_tool": "tool_yaml",
    "view_external": "url",
    "workflow_import": "trs_id",
    "documentation": None,
    "contact_support": None,
    "refine_query": None,
}
Mode = Literal["static", "proxy", "record", "record_on_miss"]
MODES: tuple[str, ...] = get_args(Mode)
UPSTREAM_DIALECTS = ("openai", "anthropic")
# A 10,000-rule fixture is about 3 MB; larger files are refused before parsing.
MAX_FIXTURE_BYTES = 20 * 1024 * 1024
# A response's keys in the schema's order (``schema.ResponseSpec``; tests/test_schema.py).
RESPONSE_KEYS = (
    "content",
    "confidence",
    "agent_type",
    "suggestions",
    "metadata",
    "reasoning",
    "thinking",
    "tool_calls",
    "finish_reason",
    "error",
    "retry_after",
    "fail_first",
    "template",
    "stream",
    "fault",
    "chaos",
    "usage",
    "embedding",
    "embedding_like",
)


@dataclass(frozen=True)
class FieldError:
    """One problem in a document: where it is and what is wrong."""

    path: str
    message: str
    code: str = "invalid"
    line: int | None = None

    def format(self, source: str | None = None) -> str:
        where = source or ""
        if self.line is not None:
            where = f"{where}:{self.line}" if where else f"line {self.line}"
        prefix = f"{where}: " if where else ""
        return f"{prefix}{self.path}: {self.message}" if self.path else f"{prefix}{self.message}"


class DocumentInvalid(Exception):
    """A document failed validation; ``errors`` names every problem found."""

    def __init__(self, errors: list[FieldError], source: str | None = None) -> None:
        self.errors = errors
        self.source = source
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        return [error.format(self.source) for error in self.errors]


def recorded_time(value: Any) -> str:
    """When a rule was recorded, as stored and exported: ISO 8601 in UTC, to the second."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(
                f"must be an ISO 8601 time such as 2026-01-31T09:30:00Z (got {shown(value)})"
            ) from None
    if not isinstance(value, datetime):
        raise ValueError(f"must be an ISO 8601 time (got {type(value).__name__})")
    if value.tzinfo is None:
        raise ValueError("must give its time zone (e.g. a final Z for UTC)")
    at = value.astimezone(UTC).replace(microsecond=0, tzinfo=None)
    return f"{at.isoformat()}Z"


def shown(value: Any) -> str:
    """``value`` as an error message quotes it: its repr, cut at 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
