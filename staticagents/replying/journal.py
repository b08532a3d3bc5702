"""The journal writer: every write to the request journal goes through ``journal``.

``journal`` is a ``JournalWriter`` with these operations:

* ``await journal.record(entry)`` (the reply routes and the WebSocket consumer,
  on the event loop): insert the row, return its id once it is committed;
  ``record(entry, job=job)`` runs a job (below) in the same round, so a request
  whose reply also writes elsewhere (an ADK run's final event) commits once;
* ``journal.record_now(entry)`` (code in a thread: DRF views, ADK runs, Galaxy
  chat turns): the same, on the thread's own Django connection, inside its
  transaction if it has one;
* each entry, once committed, goes to the live journal (``replying.live``);
* ``await journal.mark(entry_id, outcome)``: record that a stream ended early
  (``cancelled``: the client left; ``cut_off``: it ran too long); the outcome,
  once written, goes to the live journal too (an ``update``);
* ``await journal.run(job)`` (``journal.run_now(job)`` in a thread): run a
  dialect's own statements (a Galaxy exchange saved, an ADK session opened) in
  the next round's transaction, each job in a savepoint of its own, so that one
  that fails fails only its request (``Statements``); the jobs of a ``JobKind``
  (ADK runs opening their sessions) run together, many rows a statement;
* ``journal.run_on_loop(job)``: run a job at once, on the event loop's own
  connection to a SQLite file, in a transaction of its own (the testing kit's
  control calls, ``control.lean``); ``NotOnLoop`` when there is none or the
  file is busy: the caller takes a thread (``run_now``) instead.

On the event loop, many requests wait at once for their rows to be committed,
so rows are written in rounds, one multi-row insert per round (a group commit),
in one of two ways hidden behind ``record`` and ``mark``:

* **On a SQLite file**, on the event loop itself, on the loop's own connection
  (``_LoopBackend``): the rows of every request answered in one turn of the loop
  are inserted and committed together at the start of the next. The write lock
  is only ever *tried*: while another connection holds it, the round is tried
  again a millisecond later, so the loop never blocks on it. A lock held longer
  than a moment (a big import's) does not hold the replies either: their rows
  wait in memory, in order, and are written once the lock is free, first of all
  (a backlog of at most ``STATIC_AGENTS_JOURNAL_BACKLOG`` rows; ``record`` then
  gives None, as the row has no id yet, and a later mark of it is lost). Beyond
  the backlog, requests wait for their rows as before, up to the database's
  ``timeout``.
* **Otherwise** (PostgreSQL, an in-memory SQLite), on one database thread of
  the writer (``database.RoundThread``), which serves everyone waiting with one
  transaction per round.

A round is one transaction: when any of its rows fails, none is written and
every request in it gets the error; the next round starts afresh.

The writer keeps the journal within bounds, read when it writes or prunes:

* an entry stores at most ``STATIC_AGENTS_JOURNAL_BODY_BYTES`` of its body and
  as many of its query; ``body_bytes`` keeps the body's whole length (more than
  it stores: truncated) and ``size`` what the two take (``bounds.bounded``);
* the journal keeps about ``STATIC_AGENTS_JOURNAL_MAX`` entries and
  ``STATIC_AGENTS_JOURNAL_MAX_BYTES`` of bodies and queries: every
  ``prune_interval(cap)`` entries or 1% of the byte budget this process writes,
  the transaction that writes them also deletes the oldest entries beyond
  either bound (one indexed DELETE by id; the sizes are read from their index,
  never from the rows);
* on a SQLite file, the pages a prune frees go back to the file system
  afterwards, a few at a time on the loop (``PRAGMA incremental_vacuum``;
  migration 0009 sets ``auto_vacuum=INCREMENTAL``).

Each value becomes a parameter the way its model field says
(``Field.get_db_prep_save``), so a column of any type is stored as Django would
store it; text, numbers and booleans go as they are, and SQLite's JSON and
datetime columns take a faster route to the same text.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import logging
import sqlite3
import threading
import types
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

import orjson
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, models, transaction
from django.db import utils as db_errors
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

from staticagents.conf import settings
from staticagents.models import JournalEntry
from staticagents.replying import live
from staticagents.replying.bounds import cut
from staticagents.replying.database import RoundThread, connect_sqlite, sqlite_file
from staticagents.replying.recorded import note_entry, note_outcome

log = logging.getLogger(__name__)

Entry = Mapping[str, Any]  # field name → value; an absent field takes its default


def prune_interval(cap: int) -> int:
    """How many entries a process writes between prunes: 1% of the cap, at most 300.

    The journal may exceed the cap by that much per process, never more. A prune
    deletes in the round that writes, holding that round's replies: at 1,000 rows a
    prune, a journal at its cap had a reply's p99 at 7.4 ms, at 300 at 5.4 ms, for the
    same CPU (bench/README.md, "seventh session").
    """
    return max(1, min(300, cap // 100))


class NotOnLoop(Exception):
    """``run_on_loop`` cannot run its job on the event loop: a thread must."""


@dataclass(frozen=True, slots=True)
class _Mark:
    entry_id: int
    outcome: str


@functools.lru_cache(maxsize=1024)
def _with_placeholder(sql: str, placeholder: str) -> str:
    """A job's SQL with ``placeholder`` for ``%s``: jobs run the same few statements again
    and again, and each is rewritten once."""
    return sql.replace("%s", placeholder)


class Statements:
    """What a job (``JournalWriter.run``) may do with the round's connection, in its
    transaction: SQL written with ``%s`` placeholders on either kind of connection."""

    def __init__(
        self, db: BaseDatabaseWrapper, cursor: Any, placeholder: str, tables: _Tables
    ) -> None:
        self.db = db
        self.cursor = cursor
        self.placeholder = placeholder
        self.tables = tables
        self._now: dict[tuple[type[models.Model], str], Any] = {}
        self._returning = "" if db.vendor == "sqlite" else " RETURNING id"

    def _sql(self, sql: str) -> str:
        return sql if self.placeholder == "%s" else _with_placeholder(sql, self.placeholder)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows ``sql`` selects."""
        self.cursor.execute(self._sql(sql), params)
        return list(self.cursor.fetchall())

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Execute ``sql``; the number of rows it changed."""
        self.cursor.execute(self._sql(sql), params)
        return int(self.cursor.rowcount)

    def insert(self, model: type[models.Model], rows: list[Entry]) -> list[int]:
        """Insert ``rows`` of ``model`` (by field name, absent fields take their defaults)
        as the journal inserts its entries; their ids, in order."""
        ids: list[int] = []
        for sql, values, count, _ in self.tables(model, self.db, self.placeholder).inserts(
            self.db, rows, returning=bool(self._returning)
        ):
            self.cursor.execute(sql, values)
            ids += self._inserted_ids(count)
        return ids

    def new_ids(self, sql: str, params: Sequence[Any], rows: int) -> list[int]:
        """Execute ``sql``, an ``INSERT`` of ``rows`` rows whose primary key is ``id``; their
        ids, in order."""
        self.cursor.execute(self._sql(sql) + self._returning, params)
        return self._inserted_ids(rows)

    def _inserted_ids(self, rows: int) -> list[int]:
        """The ids of the ``rows`` rows the last ``INSERT`` made, in order."""
        if self._returning:
            return [int(row[0]) for row in self.cursor.fetchall()]
        # Consecutive under the write lock, as the journal's own (``_write``).
        last = int(self.cursor.lastrowid)
        return list(range(last - rows + 1, last + 1))

    def append(self, model: type[models.Model], rows: list[Entry]) -> None:
        """``insert``, for rows whose ids nobody needs."""
        for sql, values, _, _ in self.tables(model, self.db, self.placeholder).inserts(
            self.db, rows, returning=False
        ):
            self.cursor.execute(sql, values)

    def param(self, model: type[models.Model], name: str, value: Any) -> Any:
        """``value`` for the column of ``model``'s field ``name``, as an insert would pass it."""
        column = self.tables(model, self.db, self.placeholder).adapted.get(name)
        if column is None:
            return value
        if value is _NOW:
            value = _insert_time(column.field)
        return column.adapt(self.db, value)

    def now(self, model: type[models.Model], name: str) -> Any:
        """The time now, for ``model``'s date-time field ``name``: one time for all the
        statements of these ``Statements`` (a round's transaction), as an insert takes
        one for all its rows."""
        key = (model, name)
        now = self._now.get(key)
        if now is None:
            now = self._now[key] = self.param(model, name, _NOW)
        return now

    @staticmethod
    def json(value: Any) -> Any:
        """A JSON column's value as read: text on SQLite, decoded already elsewhere."""
        return orjson.loads(value) if isinstance(value, str | bytes) else value

    def values(self, rows: models.QuerySet[Any] | Prepared) -> list[dict[str, Any]]:
        """What ``rows.values(...)`` gives, read on this connection: Django writes the
        query and converts the columns (dates, JSON), this cursor runs it."""
        prepared = rows if isinstance(rows, Prepared) else self.prepare(rows)
        self.cursor.execute(prepared.sql, prepared.params)
        read = prepared.compiler.results_iter([self.cursor.fetchall()])
        return [dict(zip(prepared.names, row, strict=True)) for row in read]

    def prepare(self, rows: models.QuerySet[Any]) -> Prepared:
        """``rows.values(...)`` compiled for this kind of connection (``values`` runs it)."""
        compiler = rows.query.get_compiler(connection=self.db)
        sql, params = compiler.as_sql()
        if self.placeholder != "%s":  # as Django's SQLite cursor rewrites it
            sql = sql.replace("%s", self.placeholder).replace("%%", "%")
        names = (*rows.query.extra_select, *rows.query.values_select)
        return Prepared(sql, tuple(params), names, compiler)


@dataclass(frozen=True)
class Prepared:
    """A queryset's ``values()`` compiled: its SQL, parameters and column names, and
    Django's compiler, which converts the columns read."""

    sql: str
    params: tuple[Any, ...]
    names: tuple[str, ...]
    compiler: Any

    def with_params(self, params: Sequence[Any]) -> Prepared:
        return replace(self, params=tuple(params))


Job = Callable[[Statements], Any]


# -- SQL written out, for jobs that write many rows a statement ---------------------------

ROWS_A_STATEMENT = 100  # well under every backend's limit of parameters


@functools.cache
def values_sql(head: str, row: str, count: int) -> str:
    """``head`` (an ``INSERT ... VALUES``) and ``count`` times ``row``."""
    return head + ", ".join([row] * count)


@functools.cache
def in_sql(head: str, count: int) -> str:
    """``head`` (ending in ``IN``) and a list of ``count`` placeholders."""
    return head + "(" + ", ".join(["%s"] * count) + ")"


def each_chunk(values: list[Any], width: int) -> Iterator[tuple[list[Any], int]]:
    """``values``, ``width`` to a row, at most ``ROWS_A_STATEMENT`` rows at a time; and
    how many rows each chunk holds."""
    step = ROWS_A_STATEMENT * width
    for start in range(0, len(values), step):
        chunk = values[start : start + step]
        yield chunk, len(chunk) // width


class JobKind(Protocol):
    """A job whose like in a round run together: ``together(statements, jobs)`` does what
    each of ``jobs`` (all of its class) would do alone, and gives their results in order.
    When any job of the round fails, each runs alone again (``_run_jobs``)."""

    def __call__(self, statements: Statements) -> Any: ...

    @classmethod
    def together(cls, statements: Statements, jobs: list[Any]) -> list[Any]: ...


_Tables = Callable[[type[models.Model], BaseDatabaseWrapper, str], "_Table"]


@dataclass(frozen=True, slots=True)
class _Job:
    job: Job


@dataclass(frozen=True, slots=True)
class _WithJob:
    """An entry and a job for one round of the database thread (``record(entry, job=)``)."""

    entry: Entry
    job: Job


class JournalWriter:
    """Writes the rows of ``model`` (the journal) to the database ``using`` (see the module doc)."""

    def __init__(
        self, model: type[models.Model] = JournalEntry, using: str = DEFAULT_DB_ALIAS
    ) -> None:
        self.model = model
        self.using = using
        self._cap = _Cap()
        self._tables: dict[tuple[str, str], _Table] = {}
        self._others: dict[tuple[type[models.Model], str, str], _Table] = {}
        self._thread: RoundThread[Entry | _Mark | _Job | _WithJob, Any] = RoundThread(
            self._serve_round, name="static-agents-journal", using=using
        )
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopBackend | None] = (
            weakref.WeakKeyDictionary()
        )
        # The loop asked for last, beside the weak mapping: a server runs one loop.
        self._last: tuple[asyncio.AbstractEventLoop, _LoopBackend | None] | None = None

    async def record(
        self,
        entry: Entry,
        *,
        job: Job | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> int | None:
        """Insert ``entry``; its id, once it is committed (None: held back, see the module
        doc). A ``job`` runs in the same round (in its savepoint): when it fails, the
        entry is committed all the same and its error raised after. ``loop``: the running
        loop, when the caller has it at hand (``serving.loop_local``)."""
        note_entry(entry)
        if loop is None:
            loop = asyncio.get_running_loop()
        backend = self._on_loop(loop)
        failed: _Failed | None = None
        if backend is not None:
            if job is None:
                pk = await backend.insert(entry)
            else:
                # Queued in the same step, so the same round takes both (unless the
                # rows are being held back: then the job goes first, on its own).
                done = backend.run(job)
                pk = await backend.insert(entry)
                try:
                    await done
                except Exception as exc:
                    failed = _Failed(exc)
        elif job is None:
            pk = cast(int, await self._thread.submit(entry))
        else:
            pk, outcome = cast(tuple[int, Any], await self._thread.submit(_WithJob(entry, job)))
            failed = outcome if isinstance(outcome, _Failed) else None
        if pk is not None:  # committed: the live journal may tell it (held back: once written)
            live.feed(loop).publish(pk, entry)
        if failed is not None:
            raise failed.error
        return pk

    def held_back(self) -> int:
        """How many rows and marks of answered requests wait for the write lock, on every
        loop (a stopping service waits for them)."""
        return sum(len(b.held) + len(b.held_marks) for b in self._loops.values() if b)

    def record_now(self, entry: Entry) -> int:
        """Insert ``entry`` on this thread's connection (in its transaction, if any); its id."""
        note_entry(entry)
        db = connections[self.using]
        with transaction.atomic(using=self.using):
            [pk] = _write(db, self._table(db, "%s"), self._cap, [entry], [])
            transaction.on_commit(
                functools.partial(live.publish_from_thread, pk, entry), using=self.using
            )
        return pk

    async def mark(self, entry_id: int | None, outcome: str) -> None:
        """Set the outcome of the entry ``entry_id`` (nothing when it is None)."""
        if entry_id is None:
            return
        note_outcome(outcome)
        backend = self._on_loop()
        if backend is not None:
            await backend.mark(entry_id, outcome)  # published by the round that writes it
        else:
            await self._thread.submit(_Mark(entry_id, outcome))
            live.feed().publish_update(entry_id, outcome)

    def run_now(self, job: Job, *, write: bool = True) -> Any:
        """Run ``job`` on this thread's connection (in its transaction, if any; a job that
        only reads, ``write=False``, takes none); its result."""
        db = connections[self.using]
        if not write:
            with db.cursor() as cursor:
                return job(Statements(db, cursor, "%s", self._any_table))
        with transaction.atomic(using=self.using), db.cursor() as cursor:
            return job(Statements(db, cursor, "%s", self._any_table))

    def run_on_loop(self, job: Job, *, write: bool = True) -> Any:
        """Run ``job`` at once on the event loop's own connection to the SQLite file, in a
        transaction of its own (``write``: holding the write lock; else one consistent
        read); its result. Raises ``NotOnLoop`` when the loop has no such connection
        (another database) or the file is busy: the loop never waits for the lock, the
        caller takes a thread instead."""
        backend = self._on_loop()
        if backend is None:
            raise NotOnLoop("no SQLite file of the loop's own")
        connection = backend.connection
        try:
            connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.OperationalError as exc:
            raise NotOnLoop(str(exc)) from exc
        try:
            result = job(Statements(backend.db, connection.cursor(), "?", self._any_table))
            connection.execute("COMMIT")
        except BaseException as exc:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):  # busy after all: a thread waits
                raise NotOnLoop(str(exc)) from exc
            if isinstance(exc, sqlite3.Error):
                raise _as_django_error(exc) from exc
            raise
        return result

    async def run(self, job: Job, *, loop: asyncio.AbstractEventLoop | None = None) -> Any:
        """Run ``job`` in the next round's transaction (in a savepoint); its result, once
        the round is committed. A job that raises fails its own request only. ``loop``: the
        running loop, when the caller has it at hand (``serving.loop_local``)."""
        backend = self._on_loop(loop)
        if backend is not None:
            return await backend.run(job)
        result = await self._thread.submit(_Job(job))
        if isinstance(result, _Failed):
            raise result.error
        return result

    def close(self) -> None:
        """Stop the database thread and close the loops' connections (a new use reopens them)."""
        self._thread.stop()
        for backend in list(self._loops.values()):
            if backend is not None:
                backend.connection.close()
        self._loops.clear()
        self._last = None

    def _on_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> _LoopBackend | None:
        """The running loop's backend when the database is a SQLite file, else None."""
        if loop is None:
            loop = asyncio.get_running_loop()
        last = self._last
        if last is not None and last[0] is loop:
            return last[1]
        if loop in self._loops:
            backend = self._loops[loop]
        else:
            db = connections[self.using]
            try:
                backend = _LoopBackend(self, loop, db) if sqlite_file(db) else None
            except sqlite3.OperationalError:
                # The file was busy as the connection set its pragmas (it never waits for a
                # lock): the thread writes this request's row, and the next request tries again.
                return None
            self._loops[loop] = backend
        self._last = (loop, backend)
        return backend

    def _table(self, db: BaseDatabaseWrapper, placeholder: str) -> _Table:
        """The statements for ``db``'s kind of database (made once per kind and placeholder)."""
        key = (db.vendor, placeholder)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = _Table(self.model, db, placeholder)
        return table

    def _any_table(
        self, model: type[models.Model], db: BaseDatabaseWrapper, placeholder: str
    ) -> _Table:
        """The statements for another model's rows (a job's inserts) on ``db``'s kind of
        database."""
        key = (model, db.vendor, placeholder)
        table = self._others.get(key)
        if table is None:
            table = self._others[key] = _Table(model, db, placeholder)
        return table

    def _serve_round(self, items: list[Entry | _Mark | _Job | _WithJob]) -> list[Any]:
        """One round of the database thread: every job, row and mark in one transaction."""
        db = connections[self.using]
        entries = [
            item.entry if isinstance(item, _WithJob) else item
            for item in items
            if not isinstance(item, _Mark | _Job)
        ]
        marks = [item for item in items if isinstance(item, _Mark)]
        jobs = [item.job for item in items if isinstance(item, _Job | _WithJob)]
        with transaction.atomic(using=self.using):
            with db.cursor() as cursor:
                done = iter(_run_jobs(Statements(db, cursor, "%s", self._any_table), jobs))
            ids = iter(_write(db, self._table(db, "%s"), self._cap, entries, marks))
        results: list[Any] = []
        for item in items:
            if isinstance(item, _Job):
                results.append(next(done))  # a _Failed one is raised by ``run``
            elif isinstance(item, _WithJob):
                results.append((next(ids), next(done)))  # in the order both lists were made
            else:
                results.append(None if isinstance(item, _Mark) else next(ids))
        return results


def _write(
    db: BaseDatabaseWrapper, table: _Table, cap: _Cap, entries: list[Entry], marks: list[_Mark]
) -> list[int]:
    """Insert ``entries``, apply ``marks`` and prune when due, on Django's connection ``db``
    (in the caller's transaction); the new ids, in order."""
    ids: list[int] = []
    written = 0
    limit: int = settings.STATIC_AGENTS_JOURNAL_BODY_BYTES
    with db.cursor() as cursor:
        for sql, values, _, kept in table.inserts(db, entries, returning=True, limit=limit):
            cursor.execute(sql, values)
            ids.extend(int(row[0]) for row in cursor.fetchall())
            written += kept
        if marks:
            cursor.executemany(table.mark_sql, [(mark.outcome, mark.entry_id) for mark in marks])
        if ids and cap.due(len(ids), written):
            cutoff = table.cutoff(cursor, ids[-1])
            if cutoff:
                cursor.execute(table.prune_sql, [cutoff])
    return ids


@dataclass(frozen=True, slots=True)
class _Failed:
    error: Exception


def _run_jobs(statements: Statements, jobs: list[Job]) -> list[Any]:
    """Each job's result, or a ``_Failed`` with its error.

    The jobs run together in one savepoint; when one fails, that savepoint is
    rolled back and each job runs again in a savepoint of its own, so a failing
    job undoes only its own work (a job acts only through ``statements``, so it
    may run twice). Two statements a round rather than two a job.
    """
    if not jobs:
        return []
    cursor = statements.cursor
    cursor.execute("SAVEPOINT static_agents_jobs")
    try:
        results = _run_together(statements, jobs)
    except Exception:
        cursor.execute("ROLLBACK TO SAVEPOINT static_agents_jobs")
        cursor.execute("RELEASE SAVEPOINT static_agents_jobs")
        return [_run_job(statements, job) for job in jobs]
    cursor.execute("RELEASE SAVEPOINT static_agents_jobs")
    return results


def _run_together(statements: Statements, jobs: list[Job]) -> list[Any]:
    """Each job's result, in order. The jobs of a class with a ``together`` method (a
    ``JobKind``) run as one call, where the first of them stands: many rows a statement."""
    kinds: dict[type, list[int]] = {}
    for index, job in enumerate(jobs):
        if hasattr(type(job), "together"):
            kinds.setdefault(type(job), []).append(index)
    if not kinds:
        return [job(statements) for job in jobs]
    results: list[Any] = [None] * len(jobs)
    for index, job in enumerate(jobs):
        kind = kinds.get(type(job))
        if kind is None:
            results[index] = job(statements)
        elif kind[0] == index:
            outcomes = cast(JobKind, job).together(statements, [jobs[i] for i in kind])
            for at, outcome in zip(kind, outcomes, strict=True):
                results[at] = outcome
    return results


def _run_job(statements: Statements, job: Job) -> Any:
    """Run ``job`` in a savepoint: its result, or a ``_Failed`` with its error (rolled back)."""
    statements.cursor.execute("SAVEPOINT static_agents_job")
    try:
        result = job(statements)
    except Exception as exc:
        statements.cursor.execute("ROLLBACK TO SAVEPOINT static_agents_job")
        statements.cursor.execute("RELEASE SAVEPOINT static_agents_job")
        return _Failed(_as_django_error(exc))
    statements.cursor.execute("RELEASE SAVEPOINT static_agents_job")
    return result


@dataclass(slots=True)
class _Counted:
    """What a prune counted (``_Table.cutoff``): the entries with ``first < id <= last``
    took ``total`` bytes at most, and that prune deleted those below. Since, entries are
    only added above ``last`` or deleted (an id is never given twice, AUTOINCREMENT; a
    round rolled back starts the count afresh), so ``total`` stays a bound from above."""

    first: int = -1  # nothing counted yet
    last: int = 0
    total: int = 0


class _Cap:
    """When to prune (see the module doc)."""

    def __init__(self) -> None:
        self._entries = 0  # entries written since the last prune
        self._bytes = 0  # and the bytes they take
        self._lock = threading.Lock()

    def due(self, written: int, size: int) -> bool:
        """Count ``written`` new entries taking ``size`` bytes; whether a prune is due."""
        cap: int = settings.STATIC_AGENTS_JOURNAL_MAX
        budget: int = settings.STATIC_AGENTS_JOURNAL_MAX_BYTES
        with self._lock:
            self._entries += written
            self._bytes += size
            if self._entries < prune_interval(cap) and self._bytes < max(1, budget // 100):
                return False
            self._entries = self._bytes = 0
        return True


_Inserts = list[tuple[Entry, asyncio.Future[int | None]]]
_Marks = list[tuple[_Mark, asyncio.Future[None]]]
_Jobs = list[tuple[Job, asyncio.Future[Any]]]


class _LoopBackend:
    """The journal's group commit on one event loop, on the loop's own connection to
    the SQLite file, in autocommit mode: its transactions are exactly its rounds.

    The first write schedules the round, which gathers: it waits a turn of the loop at
    a time while each turn brings more rows, marks or jobs (up to ``GATHER_TURNS``), so
    the requests that arrive while the first ones are answered share its commit. While
    another connection holds the write lock, the round is tried again every
    ``RETRY_SECONDS``; once it has waited ``HOLD_BACK_SECONDS`` (longer than
    another worker's round takes), the waiting rows and marks are held back
    (``held``): their requests go on, and the rows are written, in order, before
    any other.
    """

    # A round's BEGIN and COMMIT cost about what a dozen rows do. Under wrk's 32
    # connections, gathering made rounds of 14 rows into rounds of 31 and cut a reply's
    # server CPU by an eighth; an idle loop's lone row waits one turn (bench/README.md,
    # "fifth session").
    GATHER_TURNS = 8
    RETRY_SECONDS = 0.001
    HOLD_BACK_SECONDS = 0.02
    HELD_PER_ROUND = 1000  # held-back rows written per round: each round stays short
    RECLAIM_PAGES = 128  # a few milliseconds of page moves
    RECLAIM_PAUSE_SECONDS = 0.002
    # SQLite checkpoints the log inside a commit every 1,000 pages by default, holding the
    # loop (and every reply waiting on it) for milliseconds; at 500 each hold is shorter
    # and a reply's p99 lower, for no more CPU (bench/README.md, "third round").
    CHECKPOINT_PAGES = 500

    def __init__(
        self, writer: JournalWriter, loop: asyncio.AbstractEventLoop, db: BaseDatabaseWrapper
    ) -> None:
        self.loop = loop
        self.db = db
        self.table = writer._table(db, "?")
        self.tables = writer._any_table
        self.cap = writer._cap
        self.lock_timeout = float(db.settings_dict.get("OPTIONS", {}).get("timeout", 5))
        self.connection = connect_sqlite(db)
        self.connection.execute(f"PRAGMA wal_autocheckpoint={self.CHECKPOINT_PAGES}")
        # A statement of many rows (the jobs of a ``JobKind``) journals the pages it
        # changes for its own rollback; past 64 KiB SQLite moved that journal to a temporary
        # file, opened and removed every few rounds: in memory, it costs no system call.
        self.connection.execute("PRAGMA temp_store=MEMORY")
        self.inserts: _Inserts = []
        self.marks: _Marks = []
        self.jobs: _Jobs = []
        self.held: list[Entry] = []  # rows of answered requests, oldest first
        self.held_marks: list[_Mark] = []
        self.scheduled = False
        self.locked_since: float | None = None
        self.reclaiming = False  # free pages are being given back
        self.counted = _Counted()  # what the last prune read of the journal's bytes

    def insert(self, entry: Entry) -> asyncio.Future[int | None]:
        future: asyncio.Future[int | None] = self.loop.create_future()
        self.inserts.append((entry, future))
        self._schedule()
        return future

    def mark(self, entry_id: int, outcome: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self.loop.create_future()
        self.marks.append((_Mark(entry_id, outcome), future))
        self._schedule()
        return future

    def run(self, job: Job) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self.loop.create_future()
        self.jobs.append((job, future))
        self._schedule()
        return future

    def _schedule(self, delay: float = 0) -> None:
        if not self.scheduled:
            self.scheduled = True
            if delay:
                self.loop.call_later(delay, self._round)
            else:
                self.loop.call_soon(self._gather, 0, 0)

    def _gather(self, turns: int, seen: int) -> None:
        """The round, once a turn of the loop brought nothing new to write (or after
        ``GATHER_TURNS`` turns); each ``call_soon`` runs in the loop's next turn."""
        waiting = len(self.inserts) + len(self.marks) + len(self.jobs)
        if waiting > seen and turns < self.GATHER_TURNS:
            self.loop.call_soon(self._gather, turns + 1, waiting)
        else:
            self._round()

    def _round(self) -> None:
        self.scheduled = False
        try:
            self.connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            self._locked(exc)
            return
        self.locked_since = None
        held, held_marks, inserts, marks, jobs = self._take()
        try:
            statements = Statements(self.db, self.connection.cursor(), "?", self.tables)
            outcomes = _run_jobs(statements, [job for job, _ in jobs])
            entries = [*held, *(entry for entry, _ in inserts)]
            ids = self._write(entries, [*held_marks, *(mark for mark, _ in marks)])
            self.connection.execute("COMMIT")
        except Exception as exc:
            if self.connection.in_transaction:
                self.connection.execute("ROLLBACK")
            log.exception("journal round failed")
            self.counted = _Counted()  # its ids will be given again: count afresh
            if held or held_marks:
                log.error("journal: %d rows of answered requests lost", len(held) + len(held_marks))
            _fail(inserts, marks, exc, jobs)
            self._again()
            return
        for (_, waiting), outcome in zip(jobs, outcomes, strict=True):
            if waiting.done():
                continue
            if isinstance(outcome, _Failed):
                waiting.set_exception(outcome.error)
            else:
                waiting.set_result(outcome)
        for entry, pk in zip(held, ids, strict=False):  # their requests got no id: written now
            live.feed(self.loop).publish(pk, entry)
        for mark in [*held_marks, *(mark for mark, _ in marks)]:
            live.feed(self.loop).publish_update(mark.entry_id, mark.outcome)
        for (_, future), pk in zip(inserts, ids[len(held) :], strict=True):
            if not future.done():  # else the request was cancelled meanwhile
                future.set_result(pk)
        for _, done in marks:
            if not done.done():
                done.set_result(None)
        self._again()

    def _take(self) -> tuple[list[Entry], list[_Mark], _Inserts, _Marks, _Jobs]:
        """What the round writes: held-back rows first (``HELD_PER_ROUND`` of them), then,
        once none is left, the waiting ones; and the jobs."""
        held, self.held = self.held[: self.HELD_PER_ROUND], self.held[self.HELD_PER_ROUND :]
        held_marks, self.held_marks = self.held_marks, []
        jobs, self.jobs = self.jobs, []
        if self.held:  # the waiting rows stay behind the rest of the backlog
            return held, held_marks, [], [], jobs
        inserts, marks = self.inserts, self.marks
        self.inserts, self.marks = [], []
        return held, held_marks, inserts, marks, jobs

    def _again(self) -> None:
        """Another round at once if anything is left to write."""
        if self.held or self.held_marks or self.inserts or self.marks or self.jobs:
            self._schedule()

    def _locked(self, exc: sqlite3.OperationalError) -> None:
        """The write lock is held elsewhere (or the file fails): wait, hold rows back, or
        fail the waiting requests once the database's ``timeout`` has passed."""
        busy = "locked" in str(exc) or "busy" in str(exc)
        now = self.loop.time()
        if self.locked_since is None:
            self.locked_since = now
        if busy and now - self.locked_since >= self.HOLD_BACK_SECONDS:
            self._hold_back()
        if not busy or now - self.locked_since >= self.lock_timeout:
            self.locked_since = None
            inserts, marks, jobs = self.inserts, self.marks, self.jobs
            self.inserts, self.marks, self.jobs = [], [], []
            _fail(inserts, marks, exc, jobs)
        if self.held or self.held_marks or self.inserts or self.marks or self.jobs:
            self._schedule(self.RETRY_SECONDS)

    def _hold_back(self) -> None:
        """Let the waiting requests go on, their rows and marks kept (up to the backlog)."""
        room = settings.STATIC_AGENTS_JOURNAL_BACKLOG - len(self.held)
        taken, self.inserts = self.inserts[: max(0, room)], self.inserts[max(0, room) :]
        for entry, future in taken:
            self.held.append(entry)
            if not future.done():
                future.set_result(None)
        for mark, done in self.marks:
            self.held_marks.append(mark)
            if not done.done():
                done.set_result(None)
        self.marks = []

    def _write(self, entries: list[Entry], marks: list[_Mark]) -> list[int]:
        ids: list[int] = []
        written = 0
        limit: int = settings.STATIC_AGENTS_JOURNAL_BODY_BYTES
        for sql, values, rows, kept in self.table.inserts(
            self.db, entries, returning=False, limit=limit
        ):
            written += kept
            # Under the write lock, one statement's rows take consecutive ids
            # (AUTOINCREMENT: each is the largest id so far plus one), so the
            # last id names them all, which is cheaper than RETURNING them.
            last = self.connection.execute(sql, values).lastrowid
            assert last is not None
            ids.extend(range(last - rows + 1, last + 1))
        if marks:
            outcomes = [(mark.outcome, mark.entry_id) for mark in marks]
            self.connection.executemany(self.table.mark_sql, outcomes)
        if ids and self.cap.due(len(ids), written):
            cutoff = self.table.cutoff(self.connection.cursor(), ids[-1], self.counted)
            if cutoff:
                self.connection.execute(self.table.prune_sql, (cutoff,))
                if not self.reclaiming:
                    self.reclaiming = True
                    self.loop.call_soon(self._reclaim)
        return ids

    def _reclaim(self) -> None:
        """Give up to ``RECLAIM_PAGES`` free pages back to the file system, and come back
        for more while there are (each step a moment of the loop; see the module doc)."""
        try:
            self.connection.executescript(f"PRAGMA incremental_vacuum({self.RECLAIM_PAGES});")
            free = self.connection.execute("PRAGMA freelist_count").fetchone()[0]
        except sqlite3.OperationalError:  # the write lock is held elsewhere: later
            free = 1
        except sqlite3.ProgrammingError:  # the writer was closed
            return
        if free:
            self.loop.call_later(self.RECLAIM_PAUSE_SECONDS, self._reclaim)
        else:
            self.reclaiming = False


def _fail(inserts: _Inserts, marks: _Marks, exc: Exception, jobs: _Jobs) -> None:
    """Hand each waiting request the error, as Django's exception class of the same name."""
    futures: list[asyncio.Future[Any]] = [future for _, future in inserts]
    futures.extend(future for _, future in marks)
    futures.extend(future for _, future in jobs)
    for future in futures:
        if not future.done():
            future.set_exception(_as_django_error(exc))


def _as_django_error(exc: Exception) -> Exception:
    if not isinstance(exc, sqlite3.Error):
        return exc
    kind: type[Exception] = getattr(db_errors, type(exc).__name__, DatabaseError)
    error = kind(*exc.args)
    error.__cause__ = exc
    return error


# -- the statements and the columns' values ---------------------------------------------

Adapter = Callable[[BaseDatabaseWrapper, Any], Any]
_NOW = object()  # the default of an ``auto_now(_add)`` column: the time of the insert
_BATCH = 200  # rows per statement: well under every backend's parameter limit
_AUTO = frozenset({models.AutoField, models.BigAutoField, models.SmallAutoField})
# Fields whose values (str, int, float, bool or None) are already what the database takes.
_AS_IS = frozenset(
    {
        models.CharField,
        models.TextField,
        models.BooleanField,
        models.FloatField,
        models.IntegerField,
        models.SmallIntegerField,
        models.BigIntegerField,
        models.PositiveIntegerField,
        models.PositiveSmallIntegerField,
        models.PositiveBigIntegerField,
    }
)


@dataclass(frozen=True)
class _Adapted:
    """A column whose values need converting: its field name, how, its default, its field."""

    name: str
    adapt: Adapter
    default: Any
    field: Field[Any, Any]


@dataclass(frozen=True)
class _Columns:
    """A table's columns in the order its insert names them: first those whose values
    go as they are (with their defaults), then those with an adapter."""

    plain_names: tuple[str, ...]
    plain_defaults: tuple[Any, ...]
    adapted: tuple[_Adapted, ...]
    db_columns: tuple[str, ...]  # the same order, as database column names


class _Table:
    """The writer's statements on one kind of database, with one placeholder style."""

    def __init__(
        self, model: type[models.Model], db: BaseDatabaseWrapper, placeholder: str
    ) -> None:
        quote = db.ops.quote_name
        self.columns = _columns(model, db.vendor)
        self.adapted = {column.name: column for column in self.columns.adapted}
        self.placeholder = placeholder
        self.name = quote(model._meta.db_table)
        self.pk = quote(model._meta.pk.column)
        outcome, ph = quote("outcome"), placeholder
        self.mark_sql = f"UPDATE {self.name} SET {outcome} = {ph} WHERE {self.pk} = {ph}"
        self.prune_sql = f"DELETE FROM {self.name} WHERE {self.pk} <= {ph}"
        size = quote("size")
        self.total_sql = f"SELECT COALESCE(SUM({size}), 0) FROM {self.name} WHERE {self.pk} > {ph}"
        self.range_sql = f"{self.total_sql} AND {self.pk} <= {ph}"
        self.oldest_sql = (
            f"SELECT {self.pk}, {size} FROM {self.name} WHERE {self.pk} > {ph} ORDER BY {self.pk}"
        )
        self.names = ", ".join(quote(column) for column in self.columns.db_columns)
        self._inserts: dict[tuple[int, bool], str] = {}
        # Where a journal row's body, query, body_bytes and size go among its values
        # (``inserts(limit=...)``); None for another model's rows.
        names = self.columns.plain_names
        bounded_fields = ("body", "query", "body_bytes", "size")
        self.bounds: tuple[int, int, int, int] | None = (
            cast(tuple[int, int, int, int], tuple(names.index(name) for name in bounded_fields))
            if all(name in names for name in bounded_fields)
            else None
        )

    def inserts(
        self,
        db: BaseDatabaseWrapper,
        entries: list[Entry],
        *,
        returning: bool,
        limit: int | None = None,
    ) -> Iterator[tuple[str, list[Any], int, int]]:
        """Multi-row ``INSERT`` statements for ``entries`` (``RETURNING`` the ids when told),
        each with its values, its number of rows and the bytes their bodies and queries
        take (0 without ``limit``).

        An absent field takes its default; an ``auto_now(_add)`` one the time of the
        insert, read once for the statement. With ``limit`` (the journal's own rows), each
        row is stored as ``bounds.bounded`` makes it: its values are cut here (``bounds.cut``),
        the entry is not copied.
        """
        columns = self.columns
        plain_names, plain_defaults = columns.plain_names, columns.plain_defaults
        adapted = [(c.name, c.default, c.adapt, c.field) for c in columns.adapted]
        places, most = (self.bounds, limit) if limit is not None else (None, 0)
        for start in range(0, len(entries), _BATCH):
            chunk = entries[start : start + _BATCH]
            now: dict[type[Field[Any, Any]], Any] = {}
            values: list[Any] = []
            extend, append = values.extend, values.append
            kept = 0
            for entry in chunk:
                # The columns that go as they are, in one pass in C; then the adapted ones.
                row = len(values)
                extend(map(entry.get, plain_names, plain_defaults))
                if places is not None:
                    at_body, at_query, at_body_bytes, at_size = places
                    body, body_bytes = cut(values[row + at_body], most)
                    query, query_bytes = cut(values[row + at_query], most)
                    size = (body_bytes if body_bytes < most else most) + (
                        query_bytes if query_bytes < most else most
                    )
                    values[row + at_body], values[row + at_query] = body, query
                    values[row + at_body_bytes], values[row + at_size] = body_bytes, size
                    kept += size
                for name, default, adapt, field in adapted:
                    value = entry.get(name, default)
                    if value is _NOW:
                        # One time for the statement's rows, and for all the columns of
                        # one kind (``created_at`` and ``updated_at`` alike).
                        kind = type(field)
                        if kind not in now:
                            now[kind] = adapt(db, _insert_time(field))
                        append(now[kind])
                    else:
                        append(adapt(db, value))
            yield self._insert_sql(len(chunk), returning), values, len(chunk), kept

    def cutoff(self, cursor: Any, newest_id: int, counted: _Counted | None = None) -> int:
        """The id up to which entries go so that the newest ``STATIC_AGENTS_JOURNAL_MAX``
        stay, taking at most ``STATIC_AGENTS_JOURNAL_MAX_BYTES``; 0: none go.

        With ``counted`` (the previous prune's count, on the same file), the bytes are
        first bounded from above by reading only the entries that leave and those that
        came since: a journal at its cap would otherwise be read whole at each prune
        (milliseconds, with the loop held). Only a bound over the budget reads it whole.
        """
        cutoff = max(0, newest_id - settings.STATIC_AGENTS_JOURNAL_MAX)
        budget: int = settings.STATIC_AGENTS_JOURNAL_MAX_BYTES
        if counted is not None and counted.first >= 0 and counted.last <= newest_id:
            cursor.execute(self.range_sql, [counted.first, cutoff])
            leaving = int(cursor.fetchone()[0])
            cursor.execute(self.total_sql, [counted.last])
            bound = counted.total - leaving + int(cursor.fetchone()[0])
            if bound <= budget:
                counted.first, counted.last, counted.total = cutoff, newest_id, bound
                return cutoff
        cursor.execute(self.total_sql, [cutoff])
        total = int(cursor.fetchone()[0])
        if counted is not None:
            counted.first, counted.last, counted.total = cutoff, newest_id, total
        excess = total - budget
        if excess <= 0:
            return cutoff
        cursor.execute(self.oldest_sql, [cutoff])
        # fetchmany, not iteration: leaving Django's cursor iterator early closes the cursor.
        while excess > 0 and (rows := cursor.fetchmany(500)):
            for pk, size in rows:
                cutoff, excess = pk, excess - size
                if excess <= 0:
                    break
        return cutoff

    def _insert_sql(self, rows: int, returning: bool) -> str:
        sql = self._inserts.get((rows, returning))
        if sql is None:
            row = "(" + ", ".join([self.placeholder] * len(self.columns.db_columns)) + ")"
            sql = f"INSERT INTO {self.name} ({self.names}) VALUES {', '.join([row] * rows)}"
            if returning:
                sql += f" RETURNING {self.pk}"
            self._inserts[(rows, returning)] = sql
        return sql


@functools.cache
def _columns(model: type[models.Model], vendor: str) -> _Columns:
    """How each column's value is found: its field, its default, and how it becomes a
    parameter. A default is taken once: a mutable one (``dict``) is only ever serialised."""
    plain: list[Field[Any, Any]] = []
    adapted: list[_Adapted] = []
    for field in model._meta.concrete_fields:
        if field.primary_key:
            continue
        adapt = _adapter(field, vendor)
        if adapt is None and not _automatic(field):
            plain.append(field)
        else:
            default = _NOW if _automatic(field) else field.get_default()
            adapted.append(_Adapted(field.attname, adapt or _as_is, default, field))
    return _Columns(
        plain_names=tuple(field.attname for field in plain),
        plain_defaults=tuple(_plain_default(field, vendor) for field in plain),
        adapted=tuple(adapted),
        db_columns=tuple(field.column for field in [*plain, *(a.field for a in adapted)]),
    )


def _plain_default(field: Field[Any, Any], vendor: str) -> Any:
    default = field.get_default()
    if vendor == "sqlite" and type(default) is bool:
        # SQLite stores a bool as 1 or 0 either way, and the sqlite3 module binds an
        # int several times faster (for a bool it first looks for an adapter).
        return int(default)
    return default


def _automatic(field: Field[Any, Any]) -> bool:
    return bool(getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False))


def _adapter(field: Field[Any, Any], vendor: str) -> Adapter | None:
    """How a value of ``field`` becomes a parameter; None: as it is."""
    kind = type(field)
    if kind in _AS_IS:
        return None
    target = getattr(field, "target_field", None)
    if kind is models.ForeignKey and type(target) in _AUTO:
        return None  # the id of the row it points to: an integer, as it is
    if vendor == "sqlite" and kind is models.JSONField and field.encoder is None:  # type: ignore[attr-defined]
        return _sqlite_json
    if vendor == "sqlite" and kind is models.DateTimeField:
        return functools.partial(_sqlite_datetime, field)
    return functools.partial(_prepared, field)


def _as_is(db: BaseDatabaseWrapper, value: Any) -> Any:
    return value


def _prepared(field: Field[Any, Any], db: BaseDatabaseWrapper, value: Any) -> Any:
    """The value as Django's own insert passes it."""
    return field.get_db_prep_save(value, connection=db)


def _insert_time(field: Field[Any, Any]) -> Any:
    """What an ``auto_now(_add)`` field stores at an insert (its own ``pre_save``)."""
    return field.pre_save(types.SimpleNamespace(), add=True)  # type: ignore[arg-type]


def _sqlite_json(db: BaseDatabaseWrapper, value: Any) -> Any:
    """JSON text as SQLite's JSONField stores it (``json.loads`` reads it back), by orjson."""
    if value is None:
        return None
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # a type only Django's encoder knows
        return db.ops.adapt_json_value(value, None)


def _sqlite_datetime(field: Field[Any, Any], db: BaseDatabaseWrapper, value: Any) -> Any:
    """A UTC datetime as Django's SQLite backend stores it: naive, ``YYYY-MM-DD HH:MM:SS[.f]``."""
    if isinstance(value, datetime.datetime) and value.tzinfo is datetime.UTC:
        return str(value.replace(tzinfo=None))
    return _prepared(field, db, value)


journal = JournalWriter()
