"""An ADK run's session writes (``OpenRun``, ``AppendEvents``) on each backend the
journal writer serves: a SQLite file (the event loop's round) and PostgreSQL (the database
thread). They are SQL written out, so each backend checks its columns, JSON and times."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from staticagents.dialects.adk import sessions
from staticagents.dialects.adk.wire import UserTurns
from staticagents.models import AdkEvent, AdkSession
from staticagents.replying.journal import JournalWriter
from tests.replying.test_journal_writer import postgres_alias as postgres_alias  # fixtures
from tests.replying.test_journal_writer import sqlite_writer as sqlite_writer
from tests.replying.test_journal_writer import writer as writer
from tests.replying.test_journal_writer import writer_on_postgres

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def postgres_writer(postgres_alias: str) -> Iterator[JournalWriter]:
    yield from writer_on_postgres(postgres_alias, AdkSession, AdkEvent)


def user_event(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"author": "user", "content": {"role": "user", "parts": list(parts)}, "id": "u"}


def open_run(
    writer: JournalWriter, session_id: str, first: dict[str, Any], text: str | None, **delta: Any
) -> sessions.OpenedSession:
    job = sessions.OpenRun(
        app="router",
        user="u1",
        session_id=session_id,
        state_delta=delta or None,
        first=first,
        text=text,
    )
    opened: sessions.OpenedSession = asyncio.run(writer.run(job))
    return opened


def test_a_run_makes_its_session_then_continues_it(writer: JournalWriter) -> None:
    rows = AdkSession.objects.using(writer.using)
    first = user_event({"text": "hi"})
    opened = open_run(writer, "s1", first, "hi", plan="gold")
    assert (opened.state, opened.earlier) == ({"plan": "gold"}, UserTurns())
    made = rows.get(pk=opened.pk)
    assert (made.app, made.user, made.session_id) == ("router", "u1", "s1")
    assert made.state == opened.state
    assert (made.user_turns, made.last_user_text) == (1, "hi")
    assert made.created_at == made.updated_at

    final = {"author": "router", "content": {"role": "model", "parts": [{"text": "hello"}]}}
    asyncio.run(writer.run(sessions.AppendEvents(opened.pk, [final])))
    assert rows.get(pk=opened.pk).updated_at >= made.updated_at

    # A tool result alone: the turns stay, the delta joins the state.
    answer = {"functionResponse": {"name": "f", "response": {"result": "rain"}}}
    again = open_run(writer, "s1", user_event(answer), None, city="Oslo")
    assert again.pk == opened.pk
    assert (again.state, again.earlier) == ({"plan": "gold", "city": "Oslo"}, UserTurns(1, "hi"))
    continued = rows.get(pk=opened.pk)
    assert continued.state == again.state
    assert (continued.user_turns, continued.last_user_text) == (1, "hi")

    third = open_run(writer, "s1", user_event({"text": "more"}), "more")
    assert third.earlier == UserTurns(1, "hi")
    assert rows.get(pk=opened.pk).user_turns == 2
    events = AdkEvent.objects.using(writer.using).filter(session_id=opened.pk).order_by("pk")
    payloads = list(events.values_list("payload", flat=True))
    assert payloads == [first, final, user_event(answer), user_event({"text": "more"})]


def test_events_a_user_appends_count_as_turns(writer: JournalWriter) -> None:
    opened = open_run(writer, "s2", user_event({"text": "one"}), "one")
    later = [user_event({"text": "two"}), user_event({"text": "three"})]
    asyncio.run(writer.run(sessions.AppendEvents(opened.pk, later)))
    session = AdkSession.objects.using(writer.using).get(pk=opened.pk)
    assert (session.user_turns, session.last_user_text) == (3, "three")
    assert AdkEvent.objects.using(writer.using).filter(session_id=opened.pk).count() == 3


def test_new_sessions_take_new_ids(writer: JournalWriter) -> None:
    ids = [open_run(writer, f"n{n}", user_event({"text": "x"}), "x").pk for n in range(3)]
    assert ids == sorted(set(ids))
    stored = AdkSession.objects.using(writer.using).order_by("pk").values_list("pk", flat=True)
    assert list(stored) == ids


def run_together(writer: JournalWriter, jobs: list[Any]) -> list[Any]:
    """Run ``jobs`` in one round (queued in one step of the loop); each one's result or error."""

    async def run() -> list[Any]:
        return await asyncio.gather(*(writer.run(job) for job in jobs), return_exceptions=True)

    return asyncio.run(run())


def open_job(session_id: str, text: str, **delta: Any) -> sessions.OpenRun:
    return sessions.OpenRun(
        app="router",
        user="u1",
        session_id=session_id,
        state_delta=delta or None,
        first=user_event({"text": text}),
        text=text,
    )


def test_the_runs_of_a_round_open_their_sessions_together(writer: JournalWriter) -> None:
    old = open_run(writer, "old", user_event({"text": "before"}), "before", plan="gold")
    jobs = [
        open_job("a", "first of a"),
        open_job("old", "again", city="Oslo"),
        open_job("b", "only b"),
        open_job("a", "second of a"),  # one session twice in a round: in turn
    ]
    a1, continued, b, a2 = run_together(writer, jobs)
    assert (a1.earlier, a2.earlier) == (UserTurns(), UserTurns(1, "first of a"))
    assert a1.pk == a2.pk != b.pk
    assert continued.pk == old.pk
    assert (continued.state, continued.earlier) == (
        {"plan": "gold", "city": "Oslo"},
        UserTurns(1, "before"),
    )
    rows = AdkSession.objects.using(writer.using)
    assert rows.get(session_id="a").user_turns == 2
    assert (rows.get(session_id="old").user_turns, rows.get(session_id="b").user_turns) == (2, 1)
    events = AdkEvent.objects.using(writer.using).order_by("pk")
    texts = [e["content"]["parts"][0]["text"] for e in events.values_list("payload", flat=True)]
    assert sorted(texts) == sorted(["before", "first of a", "again", "only b", "second of a"])

    finals = [
        sessions.AppendEvents(s.pk, [{"author": "router", "id": f"f{s.pk}"}]) for s in (b, old)
    ]
    by_user = sessions.AppendEvents(b.pk, [user_event({"text": "from the user"})])
    assert run_together(writer, [*finals, by_user]) == [None, None, None]
    assert rows.get(session_id="b").user_turns == 2
    assert rows.get(session_id="b").last_user_text == "from the user"
    assert events.filter(session_id=b.pk).count() == 3


def test_new_sessions_of_a_round_take_one_insert(sqlite_writer: JournalWriter) -> None:
    async def run() -> list[str]:
        await sqlite_writer.run(open_job("opens the loop's connection", "x"))
        [backend] = [b for b in sqlite_writer._loops.values() if b is not None]
        statements: list[str] = []
        backend.connection.set_trace_callback(statements.append)
        await asyncio.gather(*(sqlite_writer.run(open_job(f"s{n}", "x")) for n in range(5)))
        backend.connection.set_trace_callback(None)
        return statements

    inserts = [s for s in asyncio.run(run()) if s.startswith("INSERT")]
    assert [s.split(" (")[0] for s in inserts] == [
        "INSERT INTO staticagents_adksession",
        "INSERT INTO staticagents_adkevent",
    ]
    assert AdkSession.objects.count() == 6


def test_a_run_that_fails_in_a_round_fails_alone(writer: JournalWriter) -> None:
    jobs = [open_job("fine", "x"), open_job("broken", "x", tags={"a set"}), open_job("also", "x")]
    fine, broken, also = run_together(writer, jobs)
    assert isinstance(broken, TypeError)
    assert isinstance(fine, sessions.OpenedSession) and isinstance(also, sessions.OpenedSession)
    stored = AdkSession.objects.using(writer.using).values_list("session_id", flat=True)
    assert sorted(stored) == ["also", "fine"]
