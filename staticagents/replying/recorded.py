"""What the journal recorded for the request being served: its access-log line and metrics.

The ASGI wrapper (``serving.telemetry``) opens a ``RequestRecord`` for each
request; the journal writer fills it in as it records the request's entry (and
marks its outcome), wherever that happens: on the event loop or in a thread
that carries the request's context. A request nobody journals (a refusal, the
admin) keeps an empty record.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any


class RequestRecord:
    """The dialect, rule and outcome of the request's (last) journal entry."""

    __slots__ = ("dialect", "outcome", "rule")

    def __init__(self) -> None:
        self.dialect = ""
        self.rule = ""
        self.outcome = ""


current_request: ContextVar[RequestRecord | None] = ContextVar(
    "static_agents_request", default=None
)


def note_entry(entry: Mapping[str, Any]) -> None:
    """The request being served was journaled as ``entry``."""
    record = current_request.get()
    if record is not None:
        record.dialect = entry.get("dialect") or ""
        record.rule = entry.get("rule") or ""
        record.outcome = entry.get("outcome") or ""


def note_outcome(outcome: str) -> None:
    """The entry of the request being served was marked ``outcome`` (its stream ended early)."""
    record = current_request.get()
    if record is not None:
        record.outcome = outcome
