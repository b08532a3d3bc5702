"""Reads: the active ruleset snapshot, the stored document, the agent types."""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.db import transaction

from staticagents.core.matching import Ruleset, compile_ruleset
from staticagents.models import Defaults, Fallback, Rule, RulesetState

_snapshot: Ruleset | None = None
_snapshot_lock = threading.Lock()


def ruleset_stamp() -> str:
    """The stamp of the rules as the database holds them now (one indexed read)."""
    stamp = RulesetState.objects.filter(pk=1).values_list("stamp", flat=True).first()
    return stamp or ""


def active_ruleset() -> Ruleset:
    """The compiled snapshot of the rules; rebuilt only when their version changed.

    Every worker process checks the stamp on each call, so an edit made through
    any worker (or the admin) is seen by all of them on their next request.
    """
    global _snapshot
    current = _snapshot
    stamp = ruleset_stamp()
    if current is not None and current.stamp == stamp:
        return current
    with _snapshot_lock:
        if _snapshot is not None and _snapshot.stamp == ruleset_stamp():
            return _snapshot
        _snapshot = _build_snapshot()
        return _snapshot


def _build_snapshot() -> Ruleset:
    with transaction.atomic():  # one consistent read: never half an old fixture
        stamp = ruleset_stamp()
        document = stored_document()
    defaults = dict(document["defaults"])
    defaults["stream"] = {**server_stream_defaults(), **defaults.get("stream", {})}
    return compile_ruleset(
        stamp=stamp,
        rules=document["rules"],
        defaults=defaults,
        fallback=document["fallback"],
    )


def server_stream_defaults() -> dict[str, int]:
    """Stream timing from the server's settings: the base under defaults.stream and rules."""
    return {
        "first_delay_ms": settings.STATIC_AGENTS_FIRST_DELAY_MS,
        "word_delay_ms": settings.STATIC_AGENTS_WORD_DELAY_MS,
    }


def stored_document() -> dict[str, Any]:
    """The rules, defaults and fallback in fixture form (what ``export_fixture`` writes)."""
    rules = Rule.objects.prefetch_related("responses").order_by("position", "id")
    defaults = Defaults.objects.filter(pk=1).first()
    fallback = Fallback.objects.first()
    document: dict[str, Any] = {"version": 1}
    document["defaults"] = {"confidence": "medium", **(defaults.document() if defaults else {})}
    document["rules"] = [rule.document() for rule in rules]
    document["fallback"] = fallback.document() if fallback else None
    return document


def export_document() -> dict[str, Any]:
    """The stored document without empty parts, ready to write out."""
    document = stored_document()
    if document["fallback"] is None:
        del document["fallback"]
    return document


def agent_types(ruleset: Ruleset) -> list[str]:
    """Agent types named by a rule, sorted (Galaxy's registry listing)."""
    return ruleset.agent_types
