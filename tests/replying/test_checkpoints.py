"""The loop's journal writer leaves SQLite's checkpoints to a thread (``journal._Checkpointer``)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

import pytest
from django.db import connection

from staticagents.models import JournalEntry
from staticagents.replying.journal import JournalWriter, _Checkpointer

ENTRY = {"dialect": "openai", "route": "/t", "session": "s", "agent_type": "a"}


def checkpointed(name: str) -> None:
    """Everything so far copied into the database file (the tables, the rows before)."""
    with sqlite3.connect(name) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def in_the_file(name: str) -> int:
    """The journal's rows in the database file itself, not counting the log's."""
    with sqlite3.connect(f"file:{name}?immutable=1", uri=True) as db:
        return int(db.execute(f"SELECT COUNT(*) FROM {JournalEntry._meta.db_table}").fetchone()[0])


async def write(writer: JournalWriter, rows: int) -> None:
    """``rows`` journal rows, in rounds of at most 20."""
    while rows > 0:
        batch, rows = min(rows, 20), rows - 20
        await asyncio.gather(
            *(writer.record({**ENTRY, "outcome": "answered"}) for _ in range(batch))
        )


@pytest.mark.django_db(transaction=True)
def test_the_loops_commits_never_checkpoint_and_the_thread_does() -> None:
    name = connection.settings_dict["NAME"]
    checkpointed(name)
    writer = JournalWriter()

    async def main() -> None:
        await write(writer, 40)
        setting = writer._on_loop().connection.execute("PRAGMA wal_autocheckpoint")  # type: ignore[union-attr]
        assert setting.fetchone() == (0,)
        assert in_the_file(name) == 0  # 40 rows: in the log only
        await write(writer, _Checkpointer.CHECKPOINT_ROWS)
        deadline = time.monotonic() + 10
        while in_the_file(name) < _Checkpointer.CHECKPOINT_ROWS and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert in_the_file(name) >= _Checkpointer.CHECKPOINT_ROWS

    try:
        asyncio.run(main())
    finally:
        writer.close()


@pytest.mark.django_db(transaction=True)
def test_a_log_grown_long_is_checkpointed_by_the_loop_itself(monkeypatch: Any) -> None:
    """Under a steady load the thread never copies the whole log: once it is long, the
    loop does, without asking the thread, and its next write starts the log afresh."""
    name = connection.settings_dict["NAME"]
    monkeypatch.setattr(_Checkpointer, "CHECKPOINT_ROWS", 20)
    checkpointed(name)
    writer = JournalWriter()

    async def main() -> None:
        await write(writer, 1)
        checkpointer = writer._on_loop().checkpointer  # type: ignore[union-attr]
        checkpointer.frames = _Checkpointer.REWIND_FRAMES  # as the thread found it
        await write(writer, 20)
        assert checkpointer.thread is None  # never asked
        assert checkpointer.frames == 0
        assert in_the_file(name) == 21

    try:
        asyncio.run(main())
    finally:
        writer.close()
