"""Galaxy chat turns saved in the journal's rounds (``exchanges.SaveTurn``), the turns of a
round together, on each backend the journal writer serves: a SQLite file (the event loop's
round) and PostgreSQL (the database thread)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest

from staticagents.dialects.galaxy.exchanges import SaveTurn
from staticagents.models import ChatExchange, ChatMessage
from staticagents.replying.journal import JournalWriter
from tests.replying.test_journal_writer import postgres_alias as postgres_alias  # fixtures
from tests.replying.test_journal_writer import sqlite_writer as sqlite_writer
from tests.replying.test_journal_writer import writer as writer
from tests.replying.test_journal_writer import writer_on_postgres

pytestmark = pytest.mark.django_db(transaction=True)
WRITES = re.compile(r'(SELECT id FROM|UPDATE|INSERT INTO) "?(\w+)"?')  # a statement, traced


@pytest.fixture
def postgres_writer(postgres_alias: str) -> Iterator[JournalWriter]:
    yield from writer_on_postgres(postgres_alias, ChatExchange, ChatMessage)


def turn(query: str, exchange_id: int | None = None, kept: list[int] | None = None) -> SaveTurn:
    return SaveTurn(
        agent_type="router",
        session="s1",
        query=query,
        response=f"answer to {query}",
        agent_response={"content": f"answer to {query}", "agent_type": "router"},
        exchange_id=exchange_id,
        keep=kept.append if kept is not None else None,
    )


def saved_together(writer: JournalWriter, jobs: list[SaveTurn]) -> list[Any]:
    """``jobs`` run in one round (queued in one step of the loop); each one's result."""

    async def run() -> list[Any]:
        return await asyncio.gather(*(writer.run(job) for job in jobs), return_exceptions=True)

    return asyncio.run(run())


def test_the_turns_of_a_round_are_saved_each_to_its_exchange(writer: JournalWriter) -> None:
    exchanges = ChatExchange.objects.using(writer.using)
    earlier = asyncio.run(writer.run(turn("first")))
    gone = asyncio.run(writer.run(turn("to be deleted")))
    exchanges.filter(pk=gone).delete()
    touched_before = exchanges.get(pk=earlier).updated_at
    kept: list[int] = []

    ids = saved_together(
        writer,
        [
            turn("new one", kept=kept),
            turn("second", earlier, kept=kept),
            turn("third", earlier),
            turn("to a deleted exchange", gone, kept=kept),
            turn("another new one"),
        ],
    )

    new, continued, again, replaced, other = ids
    assert continued == again == earlier
    assert len({new, earlier, replaced, other}) == 4 and gone not in ids
    assert kept == [new, earlier, replaced]
    assert exchanges.get(pk=earlier).updated_at > touched_before
    messages = ChatMessage.objects.using(writer.using).order_by("id")
    in_earlier = messages.filter(exchange_id=earlier).values_list("role", "content")
    assert list(in_earlier) == [
        ("user", "first"),
        ("assistant", "answer to first"),
        ("user", "second"),
        ("assistant", "answer to second"),
        ("user", "third"),
        ("assistant", "answer to third"),
    ]
    assert list(messages.filter(exchange_id=replaced).values_list("content", flat=True)) == [
        "to a deleted exchange",
        "answer to to a deleted exchange",
    ]
    answer = messages.get(exchange_id=new, role="assistant")
    assert answer.agent_response == {"content": "answer to new one", "agent_type": "router"}
    assert exchanges.get(pk=other).session == "s1"


def test_a_rounds_turns_take_a_statement_of_each_kind(sqlite_writer: JournalWriter) -> None:
    async def run() -> list[str]:
        first = await sqlite_writer.run(turn("opens the loop's connection"))
        [backend] = [b for b in sqlite_writer._loops.values() if b is not None]
        statements: list[str] = []
        backend.connection.set_trace_callback(statements.append)
        jobs = [turn(f"q{n}", first if n % 2 else None) for n in range(6)]
        await asyncio.gather(*(sqlite_writer.run(job) for job in jobs))
        backend.connection.set_trace_callback(None)
        return statements

    written = [WRITES.match(s) for s in asyncio.run(run())]
    assert ChatExchange.objects.count() == 1 + 3
    assert ChatMessage.objects.count() == 2 * 7
    table, messages = ChatExchange._meta.db_table, ChatMessage._meta.db_table
    assert [w.groups() for w in written if w] == [
        ("SELECT id FROM", table),
        ("UPDATE", table),
        ("INSERT INTO", table),
        ("INSERT INTO", messages),
    ]
