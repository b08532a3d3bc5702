"""Reads: the active ruleset snapshot, the stored document, the agent types, the journal."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection, transaction
from django.db.models import Count, QuerySet, Value
from django.db.models.functions import StrIndex

from staticagents.conf import settings
from staticagents.core.matching import Ruleset, compile_ruleset
from staticagents.models import (
    ControlToken,
    Defaults,
    Fallback,
    JournalEntry,
    Rule,
)
from staticagents.replying.journal import STAMP_SQL, reply_store

_snapshot: Ruleset | None = None
_snapshot_lock = threading.Lock()


def ruleset_stamp() -> str:
    """The stamp of the rules as the database holds them now (one indexed read).

    Raw SQL: it runs on every request, and the ORM would cost it ten times over.
    """
    with connection.cursor() as cursor:
        cursor.execute(STAMP_SQL)
        row = cursor.fetchone()
    return str(row[0]) if row else ""


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


async def current_ruleset(loop: asyncio.AbstractEventLoop | None = None) -> Ruleset:
    """``active_ruleset`` for the event loop: the stamp read is batched with other requests'.

    ``loop`` is the running loop, when the caller has it at hand.
    """
    stamp = reply_store.stamp(loop)
    if not isinstance(stamp, str):
        stamp = await stamp
    current = _snapshot
    if current is not None and current.stamp == stamp:
        return current
    return await sync_to_async(active_ruleset, thread_sensitive=False)()


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
        window=settings.STATIC_AGENTS_MATCH_WINDOW,
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


def journal_entries(
    *,
    session: str | None = None,
    dialect: str | None = None,
    agent_type: str | None = None,
    rule: str | None = None,
    outcome: str | None = None,
    fallback: bool | None = None,
    contains: str | None = None,
) -> QuerySet[JournalEntry]:
    """Journal entries, newest first; every given filter must hold.

    ``contains`` is a case-sensitive substring of the request body (StrIndex,
    not LIKE, which SQLite compares case-insensitively).
    """
    exact = {
        "session": session,
        "dialect": dialect,
        "agent_type": agent_type,
        "rule": rule,
        "outcome": outcome,
    }
    entries = JournalEntry.objects.filter(**{k: v for k, v in exact.items() if v is not None})
    if fallback is not None:
        entries = entries.filter(rule__isnull=fallback)
    if contains:
        entries = entries.alias(at=StrIndex("body", Value(contains))).filter(at__gt=0)
    return entries.order_by("-id")


def journal_counters(*, session: str | None = None) -> dict[str, Any]:
    """What the service saw, summed from the journal in one aggregate query.

    Entries whose counts were reset (``counted`` cleared) are left out; entries
    pruned by the journal cap or cleared are no longer counted.
    """
    entries = JournalEntry.objects.filter(counted=True)
    if session is not None:
        entries = entries.filter(session=session)
    rows = entries.values("rule", "outcome").annotate(n=Count("id")).order_by()
    outcomes: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    for row in rows:
        outcomes[row["outcome"]] += row["n"]
        rules[row["rule"] or ""] += row["n"]
    fallbacks = rules.pop("", 0)
    return {
        "session": session,
        "requests": sum(outcomes.values()),
        "rules": dict(sorted(rules.items())),
        "fallbacks": fallbacks,
        "errors": outcomes["error"],
        "failed_first": outcomes["failed_first"],
        "cancelled": outcomes["cancelled"],
        "cut_off": outcomes["cut_off"],
        "outcomes": dict(sorted(outcomes.items())),
    }


def stored_control_token_digest() -> str | None:
    """The digest of the token ``serve`` created, if it created one."""
    return ControlToken.objects.order_by("id").values_list("digest", flat=True).first()
