"""The journal writer on each of its backends: a SQLite file (the event loop's group
commit, and a thread's own connection) and PostgreSQL (the database thread).

The PostgreSQL tests run on a database of their own, created on the server named
by STATIC_AGENTS_TEST_POSTGRES_URL; without it they are skipped, and under CI
they fail.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, models, transaction
from django.test.utils import isolate_apps

from staticagents.models import JournalEntry
from staticagents.replying import journal as journal_module
from staticagents.replying import live
from staticagents.replying.journal import JournalWriter
from staticagents.settings import database_config

POSTGRES = os.environ.get("STATIC_AGENTS_TEST_POSTGRES_URL", "")

# The writer commits on connections of its own: the test database must not be
# held in a transaction of the test's (and a fixture asked for by name would be).
pytestmark = pytest.mark.django_db(transaction=True)


def entry(query: str, **fields: Any) -> dict[str, Any]:
    """A journal row as the reply path builds it (absent fields take their defaults)."""
    row = dict(dialect="openai", route="/v1/chat/completions", session="writer")
    return {**row, "agent_type": "router", "query": query, "outcome": "answered", **fields}


def stored(writer: JournalWriter) -> list[tuple[int, str, str]]:
    rows = JournalEntry.objects.using(writer.using).order_by("id")
    return list(rows.values_list("id", "query", "outcome"))


def record_together(writer: JournalWriter, entries: list[dict[str, Any]]) -> list[Any]:
    """Record every entry at once, from one event loop; each one's id or error, in order."""

    async def run() -> list[Any]:
        return await asyncio.gather(*(writer.record(e) for e in entries), return_exceptions=True)

    return asyncio.run(run())


def record_one_by_one(writer: JournalWriter, entries: list[dict[str, Any]]) -> list[int]:
    async def run() -> list[int]:
        return [await writer.record(e) for e in entries]

    return asyncio.run(run())


# -- the backends ------------------------------------------------------------------------


@pytest.fixture
def sqlite_writer() -> Iterator[JournalWriter]:
    """A writer on the test database, a SQLite file: the event loop's group commit."""
    writer = JournalWriter()
    yield writer
    writer.close()


def postgres_url() -> str:
    if not POSTGRES:
        if os.environ.get("CI"):
            pytest.fail("CI must provide STATIC_AGENTS_TEST_POSTGRES_URL")
        pytest.skip("STATIC_AGENTS_TEST_POSTGRES_URL is not set: no PostgreSQL to write to")
    return POSTGRES


@pytest.fixture
def postgres_alias(django_db_blocker: Any) -> Iterator[str]:
    """A fresh PostgreSQL database, dropped afterwards; its name is its alias."""
    import psycopg

    server = postgres_url()
    name = f"sa_journal_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    config = database_config(server.rsplit("/", 1)[0] + "/" + name)
    default = dict(connections.settings[DEFAULT_DB_ALIAS])
    connections.settings[name] = connections.configure_settings(
        {DEFAULT_DB_ALIAS: default, name: config}
    )[name]
    try:
        with django_db_blocker.unblock():
            yield name
            connections[name].close()
            connections[name].close_pool()  # type: ignore[attr-defined]
    finally:
        del connections.settings[name]
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def writer_on_postgres(alias: str, *tables: type[models.Model]) -> Iterator[JournalWriter]:
    """A writer on the PostgreSQL database ``alias`` (the database thread), once the tables
    of the models ``tables`` are made there."""
    with connections[alias].schema_editor() as editor:
        for model in tables:
            editor.create_model(model)
    writer = JournalWriter(using=alias)
    yield writer
    writer.close()


@pytest.fixture
def postgres_writer(postgres_alias: str) -> Iterator[JournalWriter]:
    """A writer on its own PostgreSQL database: the database thread."""
    yield from writer_on_postgres(postgres_alias, JournalEntry)


@pytest.fixture(params=["sqlite", "postgres"])
def writer(request: pytest.FixtureRequest) -> JournalWriter:
    """Each backend in turn (``postgres_writer`` as the test's module defines it)."""
    found: JournalWriter = request.getfixturevalue(f"{request.param}_writer")
    return found


# -- rows, ids and marks --------------------------------------------------------------


def test_rows_recorded_together_are_committed_with_their_ids_in_order(
    writer: JournalWriter,
) -> None:
    ids = record_together(writer, [entry(f"q{n}") for n in range(30)])
    assert ids == sorted(ids) and len(set(ids)) == 30
    assert stored(writer) == [(pk, f"q{n}", "answered") for n, pk in enumerate(ids)]


def test_an_id_names_its_own_row_across_rounds(writer: JournalWriter) -> None:
    first = record_one_by_one(writer, [entry("a"), entry("b")])
    second = record_together(writer, [entry("c"), entry("d")])
    rows = {pk: query for pk, query, _ in stored(writer)}
    assert [rows[pk] for pk in [*first, *second]] == ["a", "b", "c", "d"]


def test_absent_fields_take_their_defaults(writer: JournalWriter) -> None:
    before = datetime.datetime.now(datetime.UTC)
    [pk] = record_one_by_one(writer, [entry("defaults")])
    row = JournalEntry.objects.using(writer.using).get(pk=pk)
    assert (row.model, row.body, row.headers, row.rule, row.status) == ("", "", {}, None, 200)
    assert (row.diagnosis, row.counted, row.duration_ms) == (None, True, 0)
    assert before <= row.created_at <= datetime.datetime.now(datetime.UTC)


def test_json_columns_round_trip(writer: JournalWriter) -> None:
    headers = {"authorization": "Bearer ***", "x-list": [1, 2.5, None, "ü"]}
    diagnosis = [{"rule": "r", "matched": False, "predicate": "query", "reason": "no"}]
    [pk] = record_one_by_one(writer, [entry("json", headers=headers, diagnosis=diagnosis)])
    row = JournalEntry.objects.using(writer.using).get(pk=pk)
    assert (row.headers, row.diagnosis) == (headers, diagnosis)


def test_a_mark_sets_the_outcome_of_its_entry_only(writer: JournalWriter) -> None:
    async def run() -> None:
        ids = [await writer.record(entry(f"q{n}")) for n in range(3)]
        await writer.mark(ids[1], "cancelled")
        await writer.mark(None, "cut_off")  # no entry (the journal is off): nothing to do

    asyncio.run(run())
    assert [outcome for _, _, outcome in stored(writer)] == ["answered", "cancelled", "answered"]


def test_record_now_writes_on_the_callers_connection_and_in_its_transaction(
    writer: JournalWriter,
) -> None:
    kept = writer.record_now(entry("kept"))
    with pytest.raises(RuntimeError), transaction.atomic(using=writer.using):
        writer.record_now(entry("rolled back"))
        raise RuntimeError("the caller's transaction fails")
    assert stored(writer) == [(kept, "kept", "answered")]


# -- the cap ----------------------------------------------------------------------------


def test_the_cap_keeps_the_newest_entries_as_rows_are_committed(
    writer: JournalWriter, settings: Any
) -> None:
    settings.STATIC_AGENTS_JOURNAL_MAX = 10  # prunes every entry (1% of the cap, at least 1)
    record_one_by_one(writer, [entry(f"q{n}") for n in range(25)])
    assert [query for _, query, _ in stored(writer)] == [f"q{n}" for n in range(15, 25)]


def test_the_cap_holds_for_a_round_of_many_rows(writer: JournalWriter, settings: Any) -> None:
    settings.STATIC_AGENTS_JOURNAL_MAX = 10
    record_together(writer, [entry(f"q{n}") for n in range(25)])
    assert [query for _, query, _ in stored(writer)] == [f"q{n}" for n in range(15, 25)]


def test_the_cap_holds_for_rows_written_from_a_thread(writer: JournalWriter, settings: Any) -> None:
    settings.STATIC_AGENTS_JOURNAL_MAX = 10
    for n in range(25):
        writer.record_now(entry(f"q{n}"))
    assert [query for _, query, _ in stored(writer)] == [f"q{n}" for n in range(15, 25)]


def test_a_large_cap_prunes_every_hundredth_of_it(writer: JournalWriter, settings: Any) -> None:
    settings.STATIC_AGENTS_JOURNAL_MAX = 500  # a prune every 5 entries
    record_one_by_one(writer, [entry(f"q{n}") for n in range(4)])
    writer.record_now(entry("q4"))
    assert len(stored(writer)) == 5  # under the cap: nothing pruned


# -- a crash between rows ------------------------------------------------------------------


def test_a_round_with_a_failing_row_writes_nothing_and_fails_every_request_in_it(
    writer: JournalWriter,
) -> None:
    # 250 rows: two statements (200 + 50); the second fails after the first went in.
    entries = [entry(f"q{n}") for n in range(250)]
    entries[230] = {**entry("broken"), "query": None}  # NOT NULL
    outcomes = record_together(writer, entries)
    assert all(isinstance(outcome, IntegrityError) for outcome in outcomes)
    assert stored(writer) == []
    [pk] = record_one_by_one(writer, [entry("afterwards")])
    assert stored(writer) == [(pk, "afterwards", "answered")]


def test_a_failing_row_from_a_thread_raises_and_writes_nothing(writer: JournalWriter) -> None:
    with pytest.raises(IntegrityError):
        writer.record_now({**entry("broken"), "query": None})
    pk = writer.record_now(entry("afterwards"))
    assert stored(writer) == [(pk, "afterwards", "answered")]


# -- jobs: a dialect's own statements in the round's transaction -----------------------


def insert_job(query: str, *, then_fail: bool = False) -> journal_module.Job:
    """A job that inserts a row (by the writer's statements) and returns its id, or then fails."""

    def job(sql: journal_module.Statements) -> int:
        [pk] = sql.insert(JournalEntry, [entry(query)])
        if then_fail:
            raise LookupError(f"{query} failed after its insert")
        count = sql.rows("SELECT COUNT(*) FROM staticagents_journalentry WHERE id = %s", [pk])
        assert count == [(1,)]
        return pk

    return job


def test_jobs_run_together_with_rows_and_one_that_fails_undoes_only_its_own_work(
    writer: JournalWriter,
) -> None:
    async def run() -> list[Any]:
        return await asyncio.gather(
            writer.run(insert_job("first")),
            writer.record(entry("a row")),
            writer.run(insert_job("broken", then_fail=True)),
            writer.run(insert_job("last")),
            return_exceptions=True,
        )

    first, row, failed, last = asyncio.run(run())
    assert isinstance(failed, LookupError)
    expected = [
        (first, "first", "answered"),
        (row, "a row", "answered"),
        (last, "last", "answered"),
    ]
    assert stored(writer) == sorted(expected)


def test_a_job_given_with_an_entry_is_committed_in_the_entrys_transaction(
    writer: JournalWriter,
) -> None:
    async def run() -> list[Any]:
        return await asyncio.gather(
            writer.record(entry("with a job"), job=insert_job("its job")),
            writer.record({**entry("broken"), "query": None}, job=insert_job("broken's job")),
            return_exceptions=True,
        )

    # Both in one round: the failing row fails the round, and with it both jobs' work.
    outcomes = asyncio.run(run())
    assert all(isinstance(outcome, IntegrityError) for outcome in outcomes)
    assert stored(writer) == []

    async def alone() -> int | None:
        return await writer.record(entry("with a job"), job=insert_job("its job"))

    pk = asyncio.run(alone())
    assert [query for _, query, _ in stored(writer)] == ["its job", "with a job"]
    assert stored(writer)[-1][0] == pk


def test_a_failing_job_given_with_an_entry_undoes_its_work_and_raises_after_the_entry(
    writer: JournalWriter,
) -> None:
    async def run() -> None:
        await writer.record(entry("answered"), job=insert_job("broken", then_fail=True))

    with pytest.raises(LookupError):
        asyncio.run(run())
    assert [query for _, query, _ in stored(writer)] == ["answered"]


def test_an_entry_and_its_job_take_one_commit_on_the_loop(sqlite_writer: JournalWriter) -> None:
    async def run() -> list[str]:
        await sqlite_writer.record(entry("opens the loop's connection"))
        [backend] = [b for b in sqlite_writer._loops.values() if b is not None]
        statements: list[str] = []
        backend.connection.set_trace_callback(statements.append)
        await asyncio.gather(
            *(sqlite_writer.record(entry(f"q{n}"), job=insert_job(f"job {n}")) for n in range(3))
        )
        backend.connection.set_trace_callback(None)
        return statements

    statements = asyncio.run(run())
    assert [s for s in statements if s in ("BEGIN IMMEDIATE", "COMMIT")] == [
        "BEGIN IMMEDIATE",
        "COMMIT",
    ]
    assert len(stored(sqlite_writer)) == 7


def loop_commits(writer: JournalWriter, arrivals: int, *, rows_per_turn: int = 1) -> list[Any]:
    """Rows recorded one turn of the loop after another, as requests arrive while the
    first ones are answered: the commits, and each row's id once its commit came."""

    async def run() -> list[Any]:
        await writer.record(entry("opens the loop's connection"))
        [backend] = [b for b in writer._loops.values() if b is not None]
        statements: list[str] = []
        backend.connection.set_trace_callback(statements.append)
        recorded = []
        for turn in range(arrivals):
            recorded += [
                asyncio.ensure_future(writer.record(entry(f"turn {turn} row {n}")))
                for n in range(rows_per_turn)
            ]
            await asyncio.sleep(0)  # the next turn of the loop
        first_committed_while_rows_arrived = recorded[0].done()
        await asyncio.gather(*recorded)
        backend.connection.set_trace_callback(None)
        commits = statements.count("COMMIT")
        return [commits, first_committed_while_rows_arrived]

    return asyncio.run(run())


def test_rows_arriving_turn_after_turn_share_the_first_ones_commit(
    sqlite_writer: JournalWriter,
) -> None:
    commits, _ = loop_commits(sqlite_writer, 5, rows_per_turn=3)
    assert commits == 1
    assert len(stored(sqlite_writer)) == 1 + 15


def test_a_steady_stream_of_rows_is_committed_as_it_flows(sqlite_writer: JournalWriter) -> None:
    """The round gathers for at most ``GATHER_TURNS`` turns: rows that never stop
    coming do not hold back the first ones."""
    turns = 3 * journal_module._LoopBackend.GATHER_TURNS
    commits, first_committed_while_rows_arrived = loop_commits(sqlite_writer, turns)
    assert first_committed_while_rows_arrived
    assert commits >= 3
    assert len(stored(sqlite_writer)) == 1 + turns


def test_run_now_runs_a_job_on_the_callers_connection(writer: JournalWriter) -> None:
    pk = writer.run_now(insert_job("now"))
    assert stored(writer) == [(pk, "now", "answered")]
    with pytest.raises(LookupError):
        writer.run_now(insert_job("broken", then_fail=True))
    assert stored(writer) == [(pk, "now", "answered")]


def test_a_connection_dropped_mid_round_is_replaced_and_the_round_written_once(
    postgres_writer: JournalWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    inserts = journal_module._Table.inserts
    dropped: list[bool] = []

    def drop_after_first_statement(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for number, statement in enumerate(inserts(self, *args, **kwargs)):
            if number == 1 and not dropped:  # the first statement went in: lose the connection
                dropped.append(True)
                with psycopg.connect(POSTGRES, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                        " WHERE datname = %s",
                        [postgres_writer.using],
                    )
            yield statement

    monkeypatch.setattr(journal_module._Table, "inserts", drop_after_first_statement)
    connections[postgres_writer.using].close()  # this thread's connection is not the one to drop
    ids = record_together(postgres_writer, [entry(f"q{n}") for n in range(250)])
    assert dropped
    assert all(isinstance(pk, int) for pk in ids) and ids == sorted(ids)
    assert stored(postgres_writer) == [(pk, f"q{n}", "answered") for n, pk in enumerate(ids)]
    [pk] = record_one_by_one(postgres_writer, [entry("afterwards")])
    assert stored(postgres_writer)[-1] == (pk, "afterwards", "answered")


@pytest.fixture
def blocker() -> Iterator[sqlite3.Connection]:
    """Another connection to the test database, as another process (an import) holds it."""
    other = sqlite3.connect(connections[DEFAULT_DB_ALIAS].settings_dict["NAME"], timeout=0)
    other.isolation_level = None
    yield other
    other.close()


def test_a_round_waits_for_a_write_lock_held_a_moment(
    sqlite_writer: JournalWriter, blocker: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Held no longer than the writer waits before holding rows back (here: ever).
    monkeypatch.setattr(journal_module._LoopBackend, "HOLD_BACK_SECONDS", float("inf"))

    async def run() -> int | None:
        blocker.execute("BEGIN IMMEDIATE")  # another process's write lock
        waiting = asyncio.ensure_future(sqlite_writer.record(entry("patient")))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # the round is tried again, never failed
        blocker.execute("COMMIT")
        return await waiting

    pk = asyncio.run(run())
    assert isinstance(pk, int)
    assert stored(sqlite_writer) == [(pk, "patient", "answered")]


def test_rows_held_back_for_a_long_lock_let_their_requests_go_and_are_written_in_order(
    sqlite_writer: JournalWriter, blocker: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module._LoopBackend, "HOLD_BACK_SECONDS", 0)
    monkeypatch.setattr(journal_module._LoopBackend, "HELD_PER_ROUND", 2)  # several rounds
    [first] = record_one_by_one(sqlite_writer, [entry("before")])

    async def run() -> tuple[list[int | None], int | None]:
        blocker.execute("BEGIN IMMEDIATE")  # an import's write lock
        answered = [await sqlite_writer.record(entry(f"held {n}")) for n in range(5)]
        await sqlite_writer.mark(first, "cancelled")  # a mark goes on as well
        assert sqlite_writer.held_back() == 6
        blocker.execute("COMMIT")
        # The next row is written after every held one.
        return answered, await sqlite_writer.record(entry("after"))

    answered, last = asyncio.run(run())
    assert answered == [None] * 5  # no id yet: the requests did not wait for one
    assert sqlite_writer.held_back() == 0
    rows = stored(sqlite_writer)
    assert [query for _, query, _ in rows] == ["before", *(f"held {n}" for n in range(5)), "after"]
    assert rows[0][2] == "cancelled" and rows[-1][0] == last


def test_beyond_the_backlog_requests_wait_for_their_rows(
    sqlite_writer: JournalWriter,
    blocker: sqlite3.Connection,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    monkeypatch.setattr(journal_module._LoopBackend, "HOLD_BACK_SECONDS", 0)
    settings.STATIC_AGENTS_JOURNAL_BACKLOG = 2

    async def run() -> list[int | None]:
        blocker.execute("BEGIN IMMEDIATE")
        recorded = [asyncio.ensure_future(sqlite_writer.record(entry(f"q{n}"))) for n in range(3)]
        await asyncio.sleep(0.05)
        assert [future.done() for future in recorded] == [True, True, False]
        blocker.execute("COMMIT")
        return list(await asyncio.gather(*recorded))

    first, second, third = asyncio.run(run())
    assert first is None and second is None and isinstance(third, int)
    assert stored(sqlite_writer)[-1] == (third, "q2", "answered")
    assert [query for _, query, _ in stored(sqlite_writer)] == ["q0", "q1", "q2"]


# -- every column as Django stores it ------------------------------------------------------


@pytest.fixture
def probe_model() -> Iterator[type[models.Model]]:
    """A table with columns of types the journal does not have (yet)."""
    with isolate_apps("staticagents"):

        class Probe(models.Model):
            amount = models.DecimalField(max_digits=8, decimal_places=3)
            token = models.UUIDField()
            elapsed = models.DurationField()
            day = models.DateField()
            added = models.DateField(auto_now_add=True)
            note = models.CharField(max_length=20, default="plain")

            class Meta:
                app_label = "staticagents"
                db_table = "staticagents_journal_probe"

            def __str__(self) -> str:
                return f"probe {self.pk}"

        yield Probe


@pytest.mark.parametrize("way", ["sqlite loop", "sqlite thread", "postgres"])
def test_columns_of_any_type_are_stored_as_django_stores_them(
    way: str, probe_model: type[models.Model], request: pytest.FixtureRequest
) -> None:
    using = request.getfixturevalue("postgres_alias") if way == "postgres" else DEFAULT_DB_ALIAS
    with connections[using].schema_editor() as editor:
        editor.create_model(probe_model)
    try:
        writer = JournalWriter(probe_model, using=using)
        values = {
            "amount": decimal.Decimal("12.345"),
            "token": uuid.uuid4(),
            "elapsed": datetime.timedelta(days=1, microseconds=7),
            "day": datetime.date(2024, 2, 29),
        }
        record: Callable[[dict[str, Any]], int] = writer.record_now
        if way != "sqlite thread":
            record = lambda row: record_one_by_one(writer, [row])[0]  # noqa: E731
        today = datetime.date.today()
        pk = record(values)
        writer.close()
        row = probe_model.objects.using(using).values().get(pk=pk)
        assert row == {**values, "id": pk, "added": row["added"], "note": "plain"}
        assert today <= row["added"] <= datetime.date.today()
    finally:
        with connections[using].schema_editor() as editor:
            editor.delete_model(probe_model)


async def next_update(subscription: live.Subscription) -> dict[str, Any]:
    while True:
        for event in await asyncio.wait_for(subscription.next_events(), 5):
            if event["type"] == "update":
                return event


def test_a_mark_once_written_reaches_the_live_journal_as_an_update(
    writer: JournalWriter,
) -> None:
    async def run() -> tuple[int | None, dict[str, Any]]:
        pk = await writer.record(entry("streamed"))
        async with live.feed().subscribed(live.Filters(session="elsewhere")) as subscription:
            await writer.mark(pk, "cut_off")
            return pk, await next_update(subscription)

    pk, update = asyncio.run(run())
    assert update == {"type": "update", "id": pk, "outcome": "cut_off"}


def test_a_mark_held_back_reaches_the_live_journal_once_written(
    sqlite_writer: JournalWriter, blocker: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module._LoopBackend, "HOLD_BACK_SECONDS", 0)
    [pk] = record_one_by_one(sqlite_writer, [entry("before")])

    async def run() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        async with live.feed().subscribed(live.Filters()) as subscription:
            blocker.execute("BEGIN IMMEDIATE")  # an import's write lock
            await sqlite_writer.mark(pk, "cancelled")
            assert sqlite_writer.held_back() == 1
            await asyncio.sleep(live.FLUSH_SECONDS * 5)
            while_held = list(subscription.events)
            blocker.execute("COMMIT")
            return while_held, await next_update(subscription)

    while_held, update = asyncio.run(run())
    assert [event for event in while_held if event["type"] == "update"] == []
    assert update == {"type": "update", "id": pk, "outcome": "cancelled"}
