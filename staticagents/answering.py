"""The reply path: match an inquiry, advance its session's counters, journal it.

Every transport (DRF views, Channels consumers) calls ``answer_inquiry`` and then
renders the Reply in its own dialect.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from django.db import transaction
from django.db.models import F

from staticagents.core.inquiry import Inquiry, mask_headers
from staticagents.core.matching import CompiledRule, explain_inquiry, match_inquiry
from staticagents.core.replies import Reply, Step, build_reply
from staticagents.models import JournalEntry, SessionCounter
from staticagents.selectors import active_ruleset

SEQUENCE_KEY = "seq"


@dataclass(frozen=True)
class Answer:
    reply: Reply
    entry_id: int | None


def answer_inquiry(inquiry: Inquiry, *, route: str, body: bytes | str = b"") -> Answer:
    """Decide the reply to ``inquiry`` and record it in the journal."""
    started = time.perf_counter()
    ruleset = active_ruleset()
    rule = match_inquiry(ruleset, inquiry)
    step = next_step(rule, inquiry) if rule is not None and rule.stateful else Step()
    reply = build_reply(ruleset, inquiry, rule, step)
    diagnosis = None
    if rule is None:
        diagnosis = [asdict(v) for v in explain_inquiry(ruleset, inquiry)]
    entry = record_inquiry(
        inquiry, reply, route=route, body=body, diagnosis=diagnosis,
        duration_ms=(time.perf_counter() - started) * 1000,
    )
    return Answer(reply, entry.pk)


def next_step(rule: CompiledRule, inquiry: Inquiry) -> Step:
    """Advance the session's counters for ``rule``, atomically, and say which reply is due.

    A fail-first attempt does not advance a sequence: the failures come first,
    then the reply that position scripts.
    """
    with transaction.atomic():
        index = _peek(inquiry.session, rule.name, SEQUENCE_KEY) if len(rule.responses) > 1 else 0
        current = rule.responses[min(index, len(rule.responses) - 1)]
        fail_first = int(current.get("fail_first") or 0)
        if fail_first and index < len(rule.responses):
            attempt = _increment(inquiry.session, rule.name, f"fail:{index}:{_digest(inquiry.query)}")
            if attempt <= fail_first:
                return Step(index=index, failing=True)
        if len(rule.responses) > 1:
            index = _increment(inquiry.session, rule.name, SEQUENCE_KEY) - 1
        return Step(index=index)


def _peek(session: str, rule: str, key: str) -> int:
    SessionCounter.objects.bulk_create(
        [SessionCounter(session=session, rule=rule, key=key, count=0)], ignore_conflicts=True
    )
    return (
        SessionCounter.objects.select_for_update()
        .values_list("count", flat=True)
        .get(session=session, rule=rule, key=key)
    )


def _increment(session: str, rule: str, key: str) -> int:
    counters = SessionCounter.objects.filter(session=session, rule=rule, key=key)
    if not counters.update(count=F("count") + 1):
        SessionCounter.objects.bulk_create(
            [SessionCounter(session=session, rule=rule, key=key, count=0)], ignore_conflicts=True
        )
        counters.update(count=F("count") + 1)
    return counters.values_list("count", flat=True).get()


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def record_inquiry(
    inquiry: Inquiry,
    reply: Reply,
    *,
    route: str,
    body: bytes | str,
    diagnosis: list[dict[str, Any]] | None = None,
    duration_ms: float = 0.0,
) -> JournalEntry:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return JournalEntry.objects.create(
        dialect=inquiry.dialect,
        route=route[:300],
        session=inquiry.session,
        agent_type=inquiry.agent_type[:200],
        model=inquiry.model[:200],
        query=inquiry.query,
        body=text,
        headers=mask_headers(inquiry.headers),
        rule=reply.rule,
        outcome=reply.outcome,
        status=reply.error.status if reply.error else 200,
        duration_ms=duration_ms,
        diagnosis=diagnosis,
    )


def mark_cancelled(entry_id: int | None, outcome: str = "cancelled") -> None:
    """Record that a stream ended early: the client left ("cancelled") or it ran too long."""
    if entry_id is not None:
        JournalEntry.objects.filter(pk=entry_id).update(outcome=outcome)


def body_text(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False)
