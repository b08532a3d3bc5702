"""Google ADK sessions in the database: create, read, list, delete, append events; runs.

Sessions are shared by every worker process, so they live in the database, not
in memory. Events are rows of their own: appending one is an insert, so two
requests on one session never overwrite each other's events. ``start_run``
records a run's user message in its session and answers it, on the event loop:
a run's reads and writes are journal jobs (``journal.run``), committed with the
journal's rounds; the session CRUD routes use the ORM, in a thread.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from django.db import IntegrityError, transaction

from staticagents.conf import settings
from staticagents.core.inquiry import Inquiry, session_key
from staticagents.core.replies import Reply
from staticagents.core.values import value_class
from staticagents.dialects.adk import wire as adk
from staticagents.models import AdkEvent, AdkSession
from staticagents.replying.answer import Answer, aanswer_inquiry
from staticagents.replying.journal import (
    Job,
    Statements,
    each_chunk,
    in_sql,
    journal,
    values_sql,
)

Event = Mapping[str, Any]


class SessionExists(Exception):
    """``POST .../sessions`` named an id that is taken."""


@dataclass(frozen=True)
class StoredSession:
    pk: int
    session_id: str
    app: str
    user: str
    state: dict[str, Any]
    last_update_time: float
    events: list[dict[str, Any]] = field(default_factory=list)


def _stored(row: AdkSession, *, with_events: bool) -> StoredSession:
    events = list(row.events.values_list("payload", flat=True)) if with_events else []
    return StoredSession(
        pk=row.pk,
        session_id=row.session_id,
        app=row.app,
        user=row.user,
        state=dict(row.state),
        last_update_time=row.updated_at.timestamp(),
        events=events,
    )


def create_session(
    *,
    app: str,
    user: str,
    session_id: str | None = None,
    state: Mapping[str, Any] | None = None,
    events: Iterable[Mapping[str, Any]] = (),
) -> StoredSession:
    """A new session; a random id (a UUID, as ADK uses) when none is given."""
    events = [dict(e) for e in events]
    turns = adk.UserTurns().after(events)
    try:
        with transaction.atomic():
            row = AdkSession.objects.create(
                app=app,
                user=user,
                session_id=session_id or str(uuid.uuid4()),
                state=dict(state or {}),
                user_turns=turns.count,
                last_user_text=turns.last_text,
            )
            AdkEvent.objects.bulk_create([AdkEvent(session=row, payload=e) for e in events])
            journal.run_now(lambda sql: prune_sessions(sql, row.pk))
    except IntegrityError:
        raise SessionExists(session_id) from None
    return _stored(row, with_events=True)


def get_session(*, app: str, user: str, session_id: str) -> StoredSession | None:
    row = AdkSession.objects.filter(app=app, user=user, session_id=session_id).first()
    return _stored(row, with_events=True) if row else None


def list_sessions(*, app: str, user: str) -> list[StoredSession]:
    """The user's sessions of ``app``, without their events (as ADK lists them)."""
    rows = AdkSession.objects.filter(app=app, user=user)
    return [_stored(row, with_events=False) for row in rows]


def delete_session(*, app: str, user: str, session_id: str) -> None:
    AdkSession.objects.filter(app=app, user=user, session_id=session_id).delete()


def update_state(
    *,
    app: str,
    user: str,
    session_id: str,
    state_delta: Mapping[str, Any],
    event: Mapping[str, Any],
) -> StoredSession | None:
    """Apply ``state_delta`` and record ``event`` for it; None when there is no such session."""
    with transaction.atomic():
        row = (
            AdkSession.objects.select_for_update()
            .filter(app=app, user=user, session_id=session_id)
            .first()
        )
        if row is None:
            return None
        row.state = {**row.state, **state_delta}
        turns = adk.UserTurns(row.user_turns, row.last_user_text).after([event])
        row.user_turns, row.last_user_text = turns.count, turns.last_text
        row.save(update_fields=["state", "user_turns", "last_user_text", "updated_at"])
        AdkEvent.objects.create(session=row, payload=dict(event))
        return _stored(row, with_events=True)


SESSIONS = AdkSession._meta.db_table
EVENTS = AdkEvent._meta.db_table
PRUNE_EVERY = 1024  # new sessions between two prunes: each deletes about as many
# The runs of a round write their sessions and events together, in statements written
# out: one insert for all their rows costs far less than one a row (bench/README.md).
FIND_SESSIONS = (
    f"SELECT id, session_id, state, user_turns, last_user_text FROM {SESSIONS} "
    'WHERE app = %s AND "user" = %s AND session_id IN '
)
NEW_SESSIONS = (
    f'INSERT INTO {SESSIONS} (app, "user", session_id, state, user_turns, last_user_text, '
    "created_at, updated_at) VALUES "
)
SESSION_ROW = "(%s, %s, %s, %s, %s, %s, %s, %s)"
NEW_EVENTS = f"INSERT INTO {EVENTS} (session_id, payload) VALUES "
EVENT_ROW = "(%s, %s)"
NEW_TURN = (
    f"UPDATE {SESSIONS} SET user_turns = %s, last_user_text = %s, updated_at = %s WHERE id = %s"
)
NEW_TURN_AND_STATE = (
    f"UPDATE {SESSIONS} SET state = %s, user_turns = %s, last_user_text = %s, updated_at = %s "
    "WHERE id = %s"
)
MORE_TURNS = (
    f"UPDATE {SESSIONS} SET user_turns = user_turns + %s, last_user_text = %s, updated_at = %s "
    "WHERE id = %s"
)
TOUCH = f"UPDATE {SESSIONS} SET updated_at = %s WHERE id IN "
Key = tuple[str, str, str]  # app, user, session id


@value_class
class OpenedSession:
    """A run's session as the run found it: its row, its state (the delta applied), and
    its user turns before the run."""

    pk: int
    state: dict[str, Any]
    earlier: adk.UserTurns


@value_class
class OpenRun:
    """The job (``journal.run``) that opens a run's session, created if it does not exist
    yet, with the delta applied, and appends the run's ``first`` event (the user's
    message, whose ``text`` is ``read_message``'s) to it.

    Creating it on first use is ``adk api_server --auto_create_session``: a test
    can run an agent without a separate create call. The job runs in the
    journal's round, so the run's reads and writes are one transaction. It reads
    the session's row, never its events: a session may hold any number of them.
    """

    app: str
    user: str
    session_id: str
    state_delta: Mapping[str, Any] | None
    first: Event
    text: str | None

    def __call__(self, sql: Statements) -> OpenedSession:
        [opened] = self.together(sql, [self])
        return opened

    @classmethod
    def together(cls, sql: Statements, jobs: list[OpenRun]) -> list[OpenedSession]:
        """The runs of a round: one read of their sessions, one insert of the new ones,
        one of their messages."""
        if len({(job.app, job.user, job.session_id) for job in jobs}) < len(jobs):
            # Two runs of one session: the later must find what the earlier wrote.
            return [cls.together(sql, [job])[0] for job in jobs]
        found = find_sessions(sql, jobs)
        now = sql.now(AdkSession, "updated_at")
        opened: list[OpenedSession | None] = []
        made: list[tuple[int, dict[str, Any]]] = []  # a new session's run, and its state
        rows: list[Any] = []
        for job in jobs:
            row = found.get((job.app, job.user, job.session_id))
            if row is not None:
                opened.append(continue_session(sql, job, row, now))
                continue
            state = dict(job.state_delta or {})
            turns = adk.UserTurns().with_message(job.text)
            made.append((len(opened), state))
            opened.append(None)
            state_param = sql.param(AdkSession, "state", state)
            rows += [job.app, job.user, job.session_id, state_param]
            rows += [turns.count, turns.last_text, now, now]
        pks: list[int] = []
        for chunk, count in each_chunk(rows, 8):
            pks += sql.new_ids(values_sql(NEW_SESSIONS, SESSION_ROW, count), chunk, count)
        for (at, state), pk in zip(made, pks, strict=True):
            opened[at] = OpenedSession(pk, state, adk.UserTurns())
        done = cast(list[OpenedSession], opened)
        events: list[Any] = []
        for job, session in zip(jobs, done, strict=True):
            events += [session.pk, sql.param(AdkEvent, "payload", job.first)]
        insert_events(sql, events)
        for pk in pks:
            prune_sessions(sql, pk)
        return done


def find_sessions(sql: Statements, jobs: list[OpenRun]) -> dict[Key, tuple[Any, ...]]:
    """The rows of the runs' sessions that exist: id, state, user turns, last user text."""
    wanted: dict[tuple[str, str], list[str]] = {}
    for job in jobs:
        wanted.setdefault((job.app, job.user), []).append(job.session_id)
    found: dict[Key, tuple[Any, ...]] = {}
    for (app, user), session_ids in wanted.items():
        for chunk, count in each_chunk(session_ids, 1):
            sql_text = in_sql(FIND_SESSIONS, count)
            for pk, session_id, *row in sql.rows(sql_text, [app, user, *chunk]):
                found[(app, user, session_id)] = (pk, *row)
    return found


def continue_session(
    sql: Statements, job: OpenRun, row: tuple[Any, ...], now: Any
) -> OpenedSession:
    """Count the run's message in its session's row, and apply its delta."""
    pk, state = int(row[0]), dict(sql.json(row[1]))
    earlier = adk.UserTurns(int(row[2]), row[3])
    turns = earlier.with_message(job.text)
    if job.state_delta:
        state = {**state, **job.state_delta}
        state_param = sql.param(AdkSession, "state", state)
        sql.run(NEW_TURN_AND_STATE, [state_param, turns.count, turns.last_text, now, pk])
    else:
        sql.run(NEW_TURN, [turns.count, turns.last_text, now, pk])
    return OpenedSession(pk, state, earlier)


def insert_events(sql: Statements, values: list[Any]) -> None:
    """Insert events: ``values`` holds each one's session id and payload, in turn."""
    for chunk, count in each_chunk(values, 2):
        sql.run(values_sql(NEW_EVENTS, EVENT_ROW, count), chunk)


def prune_sessions(sql: Statements, newest_pk: int) -> None:
    """Keep about ``STATIC_AGENTS_JOURNAL_MAX`` sessions, as the journal keeps its entries:
    the oldest go with their events, a batch at a time (``PRUNE_EVERY`` new sessions)."""
    cap = settings.STATIC_AGENTS_JOURNAL_MAX
    if newest_pk % min(cap, PRUNE_EVERY) or newest_pk <= cap:
        return
    cutoff = newest_pk - cap
    sql.run(f"DELETE FROM {EVENTS} WHERE session_id <= %s", [cutoff])
    sql.run(f"DELETE FROM {SESSIONS} WHERE id <= %s", [cutoff])


@value_class
class AppendEvents:
    """The job (``journal.run``) that appends the model's ``events`` to a session."""

    session_pk: int
    events: Sequence[Event]

    def __call__(self, sql: Statements) -> None:
        self.together(sql, [self])

    @classmethod
    def together(cls, sql: Statements, jobs: list[AppendEvents]) -> list[None]:
        """The runs of a round: one insert of their events, one update of their times."""
        now = sql.now(AdkSession, "updated_at")
        values: list[Any] = []
        touched: list[int] = []
        for job in jobs:
            for event in job.events:
                values += [job.session_pk, sql.param(AdkEvent, "payload", event)]
            # The model's events are the agent's, unless its agent type is named "user".
            by_user = any(e.get("author") == "user" for e in job.events)
            added = adk.UserTurns().after(job.events) if by_user else adk.UserTurns()
            if added.count:
                sql.run(MORE_TURNS, [added.count, added.last_text, now, job.session_pk])
            else:
                touched.append(job.session_pk)
        insert_events(sql, values)
        for chunk, count in each_chunk(touched, 1):
            sql.run(in_sql(TOUCH, count), [now, *chunk])
        return [None] * len(jobs)


# -- runs -------------------------------------------------------------------------------


def random_uuids(count: int) -> list[str]:
    """``count`` random (version 4) UUIDs, as ``str(uuid.uuid4())`` gives them."""
    randomness = os.urandom(16 * count).hex()
    uuids = []
    for start in range(0, 32 * count, 32):
        h = randomness[start : start + 32]
        variant = "89ab"[int(h[16], 16) & 3]
        uuids.append(f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{variant}{h[17:20]}-{h[20:]}")
    return uuids


@value_class
class Run:
    """A run, decided: the answer, the ids of its model event, the session it belongs to,
    and its final event when that was saved with the journal entry (``save_final``)."""

    answer: Answer
    ids: adk.EventIds
    session_pk: int
    streaming: bool
    final: dict[str, Any] | None = None


def _never(reply: Reply) -> bool:
    return False


async def start_run(
    request: adk.RunRequest,
    *,
    app: str,
    headers: dict[str, str],
    route: str,
    body: bytes,
    save_final: Callable[[Reply], bool] = _never,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Run:
    """Record the user's message in the session, then answer it, on the event loop.

    When ``save_final(reply)``, the run's final event joins the session in the
    journal entry's own round (one commit for both), and ``Run.final`` holds it.
    ``loop``: the running loop, when the caller has it at hand (``serving.loop_local``).
    """
    message = adk.read_message(request.new_message)  # reject before anything is written
    # A run's three ids (its invocation's and its two events') from one read of
    # os.urandom: uuid.uuid4() reads it, and formats its result, once each.
    invocation, user_event_id, model_event_id = random_uuids(3)
    invocation_id = request.invocation_id or f"e-{invocation}"
    user_ids = adk.EventIds(invocation_id, user_event_id, time.time(), "user")
    opened: OpenedSession = await journal.run(
        OpenRun(
            app=app,
            user=request.user_id,
            session_id=request.session_id,
            state_delta=request.state_delta,
            first=adk.user_event(message.content, user_ids, request.state_delta),
            text=message.text,
        ),
        loop=loop,
    )
    turn = adk.read_turn(message, opened.earlier)
    inquiry = Inquiry(
        query=turn.query,
        agent_type=app,
        context=adk.inquiry_context(opened.state, request.custom_metadata),
        dialect="adk",
        turn=turn.turn,
        tool_result=turn.tool_result,
        session=session_key(headers, request.session_id),
        headers=headers,
    )
    ids = adk.EventIds(invocation_id, model_event_id, time.time(), app)
    final: dict[str, Any] | None = None

    def then(reply: Reply) -> Job | None:
        nonlocal final
        if not save_final(reply):
            return None
        final = adk.final_event(reply, ids)
        return AppendEvents(opened.pk, [final])

    answer = await aanswer_inquiry(inquiry, route=route, body=body, then=then, loop=loop)
    return Run(answer, ids, opened.pk, request.streaming, final)
