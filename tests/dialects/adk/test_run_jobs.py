"""An ADK run's session writes (``open_run_job``, ``append_events_job``) on each backend the
journal writer serves: a SQLite file (the event loop's round) and PostgreSQL (the database
thread). They are SQL written out, so each backend checks its columns, JSON and times."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections

from staticagents.dialects.adk import sessions
from staticagents.dialects.adk.wire import UserTurns
from staticagents.models import AdkEvent, AdkSession
from staticagents.replying.journal import JournalWriter
from tests.replying.test_journal_writer import postgres_alias as postgres_alias  # fixtures
from tests.replying.test_journal_writer import sqlite_writer as sqlite_writer

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def postgres_writer(postgres_alias: str) -> Iterator[JournalWriter]:
    with connections[postgres_alias].schema_editor() as editor:
        editor.create_model(AdkSession)
        editor.create_model(AdkEvent)
    writer = JournalWriter(using=postgres_alias)
    yield writer
    writer.close()


@pytest.fixture(params=["sqlite", "postgres"])
def writer(request: pytest.FixtureRequest) -> JournalWriter:
    found: JournalWriter = request.getfixturevalue(f"{request.param}_writer")
    return found


def user_event(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"author": "user", "content": {"role": "user", "parts": list(parts)}, "id": "u"}


def open_run(
    writer: JournalWriter, session_id: str, first: dict[str, Any], text: str | None, **delta: Any
) -> sessions.OpenedSession:
    job = sessions.open_run_job(
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
    asyncio.run(writer.run(sessions.append_events_job(opened.pk, [final])))
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
    asyncio.run(writer.run(sessions.append_events_job(opened.pk, later)))
    session = AdkSession.objects.using(writer.using).get(pk=opened.pk)
    assert (session.user_turns, session.last_user_text) == (3, "three")
    assert AdkEvent.objects.using(writer.using).filter(session_id=opened.pk).count() == 3


def test_new_sessions_take_new_ids(writer: JournalWriter) -> None:
    ids = [open_run(writer, f"n{n}", user_event({"text": "x"}), "x").pk for n in range(3)]
    assert ids == sorted(set(ids))
    stored = AdkSession.objects.using(writer.using).order_by("pk").values_list("pk", flat=True)
    assert list(stored) == ids
