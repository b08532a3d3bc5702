"""The reply path: match an inquiry, advance its session's counters, journal it.

Every edge calls ``aanswer_inquiry`` (reply routes and the WebSocket consumer,
on the event loop) or ``answer_inquiry`` (DRF views, ADK runs and Galaxy chat
turns, in a thread) and renders the Reply in its own dialect. The rules come
from the snapshot (``replying.snapshot``); the entry is written by the journal
writer (``replying.journal``).
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import F, QuerySet

from staticagents.conf import settings
from staticagents.core.inquiry import Inquiry, mask_headers
from staticagents.core.matching import (
    NO_TIMED_SEARCH,
    CompiledRule,
    Ruleset,
    explain_inquiry,
    match_inquiry,
)
from staticagents.core.regexes import Deadline
from staticagents.core.replies import FIRST_STEP, Reply, Step, build_reply
from staticagents.core.routing import RECORD_ON_MISS, Target
from staticagents.core.values import value_class
from staticagents.models import SessionCounter
from staticagents.replying.database import ConnectionThreads, connect_sqlite, sqlite_file
from staticagents.replying.journal import Job, journal
from staticagents.replying.snapshot import active_ruleset, current_ruleset

if TYPE_CHECKING:
    from staticagents.replying.proxied import Proxied

SEQUENCE_KEY = "seq"
CHAOS_KEY = "chaos"
# Where the event loop advances the sessions' counters (rules with session state).
counter_threads = ConnectionThreads(4, name="static-agents-counters")


@value_class
class Answer:
    reply: Reply
    entry_id: int | None


def answer_inquiry(inquiry: Inquiry, *, route: str, body: bytes | str = b"") -> Answer:
    """Decide the reply to ``inquiry`` and record it in the journal (synchronous callers)."""
    started = time.perf_counter()
    ruleset = active_ruleset()
    target = proxy_target(ruleset, inquiry)
    if target is not None and target.mode != RECORD_ON_MISS:
        return _proxy(inquiry, target, route=route, body=body, started=started)
    deadline = ruleset.deadline(inquiry)
    rule = match_inquiry(ruleset, inquiry, deadline)
    if target is not None and rule is None:
        return _proxy(inquiry, target, route=route, body=body, started=started)
    step = next_step(rule, inquiry) if rule is not None and rule.stateful else FIRST_STEP
    reply = build_reply(ruleset, inquiry, rule, step)
    if not settings.STATIC_AGENTS_JOURNAL:
        return Answer(reply, None)
    entry = journal_entry(
        inquiry, reply, ruleset, route=route, body=body, started=started, deadline=deadline
    )
    return Answer(reply, journal.record_now(entry))


async def aanswer_inquiry(
    inquiry: Inquiry,
    *,
    route: str,
    body: bytes | str = b"",
    ruleset: Ruleset | None = None,
    then: Callable[[Reply], Job | None] | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Answer:
    """The same as ``answer_inquiry``, for the event loop.

    The stamp read and the journal insert are shared with other requests'
    (``current_ruleset``, ``journal.record``); only rules with session state take
    a database transaction of their own. ``ruleset`` is the snapshot when the
    caller has just read it for this request. ``then(reply)`` may give a job to
    commit with the journal entry (``journal.record(entry, job=...)``). ``loop``: the running
    loop, when the caller has it at hand (``serving.loop_local``).
    """
    started = time.perf_counter()
    if ruleset is None:
        ruleset = await current_ruleset(loop)
    target = proxy_target(ruleset, inquiry)
    if target is not None and target.mode != RECORD_ON_MISS:
        return await _aproxy(inquiry, target, route=route, body=body, started=started, then=then)
    deadline = ruleset.deadline(inquiry)
    rule = await amatch(ruleset, inquiry, deadline)
    if target is not None and rule is None:
        return await _aproxy(inquiry, target, route=route, body=body, started=started, then=then)
    step = FIRST_STEP
    if rule is not None and rule.stateful:
        advanced = loop_counters.advance(rule, inquiry) if _plain_sequence(rule) else None
        if advanced is not None:
            step = Step(index=advanced - 1)
        else:
            step = await counter_threads.run(next_step, rule, inquiry)
    reply = build_reply(ruleset, inquiry, rule, step)
    job = then(reply) if then is not None else None
    if not settings.STATIC_AGENTS_JOURNAL:
        if job is not None:
            await journal.run(job)
        return Answer(reply, None)
    entry = journal_entry(
        inquiry, reply, ruleset, route=route, body=body, started=started, deadline=deadline
    )
    return Answer(reply, await journal.record(entry, job=job, loop=loop))


async def amatch(ruleset: Ruleset, inquiry: Inquiry, deadline: Deadline) -> CompiledRule | None:
    """``match_inquiry`` on the event loop (a timed search in a thread)."""
    if deadline is not NO_TIMED_SEARCH:  # a timed search must not hold the event loop
        return await asyncio.to_thread(match_inquiry, ruleset, inquiry, deadline)
    return match_inquiry(ruleset, inquiry, deadline)


# -- proxied agent types ----------------------------------------------------------------


def proxy_target(ruleset: Ruleset, inquiry: Inquiry) -> Target | None:
    """The upstream that answers ``inquiry`` instead of (or, for record_on_miss, after) the
    rules; None when its agent type is static. Embeddings are always the service's own."""
    if inquiry.dialect == "embeddings":
        return None
    return ruleset.routing.target(inquiry.agent_type)


def _proxy(
    inquiry: Inquiry, target: Target, *, route: str, body: bytes | str, started: float
) -> Answer:
    # Imported here: a service whose agent types are all static never loads the upstreams'
    # client (bench/README.md, the testing kit, step 23).
    from staticagents.proxying.record import record
    from staticagents.replying.proxied import proxied_reply

    proxied = proxied_reply(inquiry, target)
    if proxied.relayed is not None and target.records:
        record(target.upstream, inquiry, proxied.relayed)
    if not settings.STATIC_AGENTS_JOURNAL:
        return Answer(proxied.reply, None)
    entry = proxy_entry(inquiry, proxied, target, route=route, body=body, started=started)
    return Answer(proxied.reply, journal.record_now(entry))


async def _aproxy(
    inquiry: Inquiry,
    target: Target,
    *,
    route: str,
    body: bytes | str,
    started: float,
    then: Callable[[Reply], Job | None] | None = None,
) -> Answer:
    from staticagents.proxying.record import arecord  # as in _proxy
    from staticagents.replying.proxied import aproxied_reply

    proxied = await aproxied_reply(inquiry, target)
    # Recorded before the reply is sent: a replay right after it finds the rule.
    if proxied.relayed is not None and target.records:
        await arecord(target.upstream, inquiry, proxied.relayed)
    job = then(proxied.reply) if then is not None else None
    if not settings.STATIC_AGENTS_JOURNAL:
        if job is not None:
            await journal.run(job)
        return Answer(proxied.reply, None)
    entry = proxy_entry(inquiry, proxied, target, route=route, body=body, started=started)
    return Answer(proxied.reply, await journal.record(entry, job=job))


def proxy_entry(
    inquiry: Inquiry,
    proxied: Proxied,
    target: Target,
    *,
    route: str,
    body: bytes | str,
    started: float,
) -> dict[str, Any]:
    """The journal row of an inquiry an upstream answered (or failed)."""
    return upstream_entry(
        inquiry,
        upstream=target.upstream.name,
        outcome=proxied.reply.outcome,
        status=proxied.reply.error.status if proxied.reply.error else 200,
        latency=proxied.latency,
        route=route,
        body=body,
        started=started,
    )


def upstream_entry(
    inquiry: Inquiry,
    *,
    upstream: str,
    outcome: str,
    status: int,
    latency: float,
    route: str,
    body: bytes | str,
    started: float,
) -> dict[str, Any]:
    """The journal row of a proxied request; credentials are masked."""
    return dict(
        dialect=inquiry.dialect,
        route=route[:300],
        session=inquiry.session,
        agent_type=inquiry.agent_type[:200],
        model=inquiry.model[:200],
        query=inquiry.query,
        body=body,
        headers=mask_headers(inquiry.headers),
        rule=None,
        outcome=outcome,
        status=status,
        duration_ms=(time.perf_counter() - started) * 1000,
        upstream=upstream,
        upstream_ms=latency * 1000,
    )


def next_step(rule: CompiledRule, inquiry: Inquiry) -> Step:
    """Advance the session's counters for ``rule``, atomically, and say which reply is due.

    The sequence row is locked for the whole transaction (SELECT ... FOR UPDATE
    on PostgreSQL, an IMMEDIATE transaction on SQLite), so concurrent requests
    in any number of processes each get their own position. A fail-first
    attempt does not advance the sequence: the failures come first, then the
    reply that position scripts.

    A plain sequence (no response fails first or draws chaos: a ``replies()``
    script, say) advances in one statement, where the database can say what it
    wrote (an upsert ``RETURNING`` the count).
    """
    if _plain_sequence(rule) and connection.features.can_return_columns_from_insert:
        return Step(index=_advance(inquiry.session, rule.name) - 1)
    with transaction.atomic():
        index = _locked_count(inquiry.session, rule.name, SEQUENCE_KEY) if rule.sequenced else 0
        if _fails_first(rule, index, inquiry):
            return Step(index=index, failing=True)
        if rule.sequenced:
            _counter(inquiry.session, rule.name, SEQUENCE_KEY).update(count=F("count") + 1)
        return Step(index=index, request=_chaos_request(rule, index, inquiry))


def _plain_sequence(rule: CompiledRule) -> bool:
    return rule.sequenced and not any(r.get("fail_first") or r.get("chaos") for r in rule.responses)


def _advance(session: str, rule: str) -> int:
    """Count one more request of ``session`` to ``rule``'s sequence; the count, from 1."""
    with connection.cursor() as cursor:
        cursor.execute(_advance_sql("%s"), [session, rule, SEQUENCE_KEY])
        return int(cursor.fetchone()[0])


def _advance_sql(placeholder: str) -> str:
    """One statement that counts a request to a sequence and returns the count."""
    table = f'"{SessionCounter._meta.db_table}"'
    return (
        f'INSERT INTO {table} ("session", "rule", "key", "count") '
        f"VALUES ({placeholder}, {placeholder}, {placeholder}, 1) "
        'ON CONFLICT ("session", "rule", "key") '
        f'DO UPDATE SET "count" = {table}."count" + 1 RETURNING "count"'
    )


class LoopCounters:
    """A plain sequence advanced on the event loop itself, on the loop's own connection to
    the SQLite file (one upsert: microseconds there, where a thread hop waits for a core).

    ``advance`` gives None when it cannot (another database, a SQLite without
    ``RETURNING``, or the file busy: the loop never waits for its lock); the
    caller then takes ``counter_threads``.
    """

    def __init__(self) -> None:
        self.connections: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, sqlite3.Connection | None
        ] = weakref.WeakKeyDictionary()

    def advance(self, rule: CompiledRule, inquiry: Inquiry) -> int | None:
        db = self._connection()
        if db is None:
            return None
        try:
            # fetchall: the statement must run to its end to commit (autocommit mode).
            rows = db.execute(_advance_sql("?"), (inquiry.session, rule.name, SEQUENCE_KEY))
            return int(rows.fetchall()[0][0])
        except sqlite3.OperationalError:
            return None

    def _connection(self) -> sqlite3.Connection | None:
        loop = asyncio.get_running_loop()
        if loop not in self.connections:
            db = connections[DEFAULT_DB_ALIAS]
            usable = sqlite_file(db) is not None and sqlite3.sqlite_version_info >= (3, 35)
            try:
                self.connections[loop] = connect_sqlite(db) if usable else None
            except sqlite3.OperationalError:  # busy as it set its pragmas: next time
                return None
        return self.connections[loop]


loop_counters = LoopCounters()


def _chaos_request(rule: CompiledRule, index: int, inquiry: Inquiry) -> int:
    """This request's number among the session's requests to ``rule`` (from 1), when the
    response due scripts ``chaos``; else 0."""
    position = min(index, len(rule.responses) - 1)
    if not rule.responses[position].get("chaos"):
        return 0
    return _increment(inquiry.session, rule.name, CHAOS_KEY)


def _fails_first(rule: CompiledRule, index: int, inquiry: Inquiry) -> bool:
    """Whether this attempt is one of the first N for this query at this step."""
    if index >= len(rule.responses) and rule.on_exhausted == "error":
        return False  # the script is over: it fails as exhausted, not as flaky
    position = min(index, len(rule.responses) - 1)
    limit = int(rule.responses[position].get("fail_first") or 0)
    if not limit:
        return False
    # Keyed by the query, so a question with something new in it fails afresh.
    key = f"fail:{position}:{_digest(inquiry.query)}"
    return _increment(inquiry.session, rule.name, key) <= limit


def _counter(session: str, rule: str, key: str) -> QuerySet[SessionCounter]:
    return SessionCounter.objects.filter(session=session, rule=rule, key=key)


def _ensure_counter(session: str, rule: str, key: str) -> None:
    SessionCounter.objects.bulk_create(
        [SessionCounter(session=session, rule=rule, key=key, count=0)], ignore_conflicts=True
    )


def _locked_count(session: str, rule: str, key: str) -> int:
    _ensure_counter(session, rule, key)
    locked = _counter(session, rule, key).select_for_update()
    count: int = locked.values_list("count", flat=True).get()
    return count


def _increment(session: str, rule: str, key: str) -> int:
    counter = _counter(session, rule, key)
    if not counter.update(count=F("count") + 1):
        _ensure_counter(session, rule, key)
        counter.update(count=F("count") + 1)
    count: int = counter.values_list("count", flat=True).get()
    return count


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def journal_entry(
    inquiry: Inquiry,
    reply: Reply,
    ruleset: Ruleset,
    *,
    route: str,
    body: bytes | str,
    started: float,
    deadline: Deadline | None = None,
) -> dict[str, Any]:
    """The journal row of one answered inquiry, by field name; credentials are masked.

    A plain mapping rather than a model instance: building one is a third of
    the cost, and the reply path pays it on every request. ``deadline`` is the
    one matching used: rules that ran out of it are named in the diagnosis.
    """
    diagnosis = None
    # "Why did nothing match", or which rules ran out of time, is one journal read away.
    if reply.rule is None or (deadline is not None and deadline.overruns):
        verdicts = explain_inquiry(ruleset, inquiry, deadline)
        diagnosis = [v.as_dict() for v in verdicts]
    return dict(
        dialect=inquiry.dialect,
        route=route[:300],
        session=inquiry.session,
        agent_type=inquiry.agent_type[:200],
        model=inquiry.model[:200],
        query=inquiry.query,
        body=body,  # bytes are decoded by the journal writer, as far as it keeps them
        headers=mask_headers(inquiry.headers),
        rule=reply.rule,
        outcome=reply.outcome,
        status=reply.error.status if reply.error else 200,
        duration_ms=(time.perf_counter() - started) * 1000,
        diagnosis=diagnosis,
    )
