"""The reply path's two queries, batched: the ruleset stamp and the journal insert.

Under load, many requests wait at once for the same two things: the current
ruleset stamp (so an edit is seen by the next request) and the commit of their
journal entry (so an acknowledged request is never lost). Both are served in
rounds, with one multi-row insert per round instead of one per request (a group
commit), in one of two ways:

* **On SQLite** (a database file), on the event loop itself (``LoopJournal``):
  a stamp read is a few microseconds and never waits in WAL mode, and the
  journal rows of every request answered in one turn of the loop are inserted
  and committed together at the start of the next. The write lock is only ever
  *tried*: when another process or thread holds it, the round is retried a
  millisecond later, so the loop never blocks on it.
* **Otherwise** (PostgreSQL), on one database thread per process
  (``DatabaseThread``), which serves everyone waiting with one stamp read and
  one insert per round.

A request's stamp read always starts after the request arrived, so an edit
committed before it arrived is seen; its reply is sent only after its journal
entry is committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import queue
import sqlite3
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    connection,
    connections,
    models,
    transaction,
)
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field
from django.utils import timezone

from staticagents.models import JournalEntry, RulesetState

log = logging.getLogger(__name__)

STAMP_SQL = f"SELECT stamp FROM {RulesetState._meta.db_table} WHERE id = 1"


@dataclass
class PruneHooks:
    """How the journal is kept near its cap (set by ``answering``): after each
    insert, ``due(count)`` says whether to prune now, ``keep()`` how many of the
    newest entries to keep, and ``prune(newest_id)`` does it with the ORM (the
    database thread's way; the loop journal deletes in its own transaction)."""

    due: Callable[[int], bool] = lambda written: False
    keep: Callable[[], int] = lambda: 0
    prune: Callable[[int], None] = lambda newest_id: None


prune_hooks = PruneHooks()


class _Waiter:
    """One request waiting on the thread: its event loop, its future and its outcome."""

    __slots__ = ("error", "future", "loop", "payload", "result", "settled")

    def __init__(self, payload: Any) -> None:
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future[Any] = self.loop.create_future()
        self.payload = payload
        self.result: Any = None
        self.error: BaseException | None = None
        self.settled = False

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.settled = result, error, True


def _wake(waiters: list[_Waiter]) -> None:
    """Runs on the waiters' event loop: hand each its outcome."""
    for waiter in waiters:
        if waiter.future.done():  # the request was cancelled meanwhile
            continue
        if waiter.error is not None:
            waiter.future.set_exception(waiter.error)
        else:
            waiter.future.set_result(waiter.result)


@dataclass
class _Round:
    """What the thread collected from the queue for one round."""

    stamps: list[_Waiter] = field(default_factory=list)
    entries: list[_Waiter] = field(default_factory=list)

    def waiters(self) -> list[_Waiter]:
        return [*self.stamps, *self.entries]


class DatabaseThread:
    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[str, _Waiter]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    async def stamp(self) -> str:
        """The ruleset stamp, read after this call began."""
        return str(await self._submit("stamp", None))

    async def record(self, entry: dict[str, Any]) -> int:
        """Insert the journal row ``entry``; returns its id once it is committed."""
        return int(await self._submit("entry", entry))

    def _submit(self, kind: str, payload: Any) -> asyncio.Future[Any]:
        self._ensure_running()
        waiter = _Waiter(payload)
        self._queue.put((kind, waiter))
        return waiter.future

    def _ensure_running(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="static-agents-db", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            work = self._collect()
            try:
                self._serve_retrying(work)
            except Exception as exc:  # a failed round fails its requests, not the thread
                log.exception("database round failed")
                for waiter in work.waiters():
                    if not waiter.settled:
                        waiter.settle(error=exc)
            self._wake(work.waiters())

    @staticmethod
    def _wake(waiters: list[_Waiter]) -> None:
        """One thread-safe call per event loop and round, however many requests wait."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Waiter]] = {}
        for waiter in waiters:
            by_loop.setdefault(waiter.loop, []).append(waiter)
        for loop, group in by_loop.items():
            # A closed loop has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_wake, group)

    def _serve_retrying(self, work: _Round) -> None:
        """Serve a round; if the connection was lost (a database restart), reconnect once."""
        try:
            self._serve(work)
        except (OperationalError, InterfaceError):
            log.warning("database connection lost; reconnecting", exc_info=True)
            connection.close()
            self._serve(work)

    def _collect(self) -> _Round:
        work = _Round()
        item = self._queue.get()
        while True:
            kind, waiter = item
            (work.stamps if kind == "stamp" else work.entries).append(waiter)
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return work

    def _serve(self, work: _Round) -> None:
        # Skips what an interrupted earlier attempt at this round already settled.
        pending = [waiter for waiter in work.entries if not waiter.settled]
        if pending:
            with transaction.atomic():
                ids = insert_entries([waiter.payload for waiter in pending])
            for waiter, pk in zip(pending, ids, strict=True):
                waiter.settle(pk)
            if prune_hooks.due(len(ids)):
                prune_hooks.prune(ids[-1])
        waiting = [waiter for waiter in work.stamps if not waiter.settled]
        if waiting:
            with connection.cursor() as cursor:
                cursor.execute(STAMP_SQL)
                row = cursor.fetchone()
            stamp = str(row[0]) if row else ""
            for waiter in waiting:
                waiter.settle(stamp)


def insert_entries(entries: list[dict[str, Any]]) -> list[int]:
    """Insert journal rows (field name → value; absent fields take their defaults)
    on Django's connection of this thread; their ids, in order.

    What ``bulk_create`` does, without its per-value layers: on the reply path
    those were most of the time of the thread running it.
    """
    db = connections[DEFAULT_DB_ALIAS]  # the real wrapper, not the per-attribute proxy
    ids: list[int] = []
    with db.cursor() as cursor:
        for sql, values, _ in insert_statements(db, entries, "%s"):
            cursor.execute(sql, values)
            ids.extend(int(r[0]) for r in cursor.fetchall())
    return ids


def insert_statements(
    db: BaseDatabaseWrapper,
    entries: list[dict[str, Any]],
    placeholder: str,
    batch: int = 200,  # rows per statement: well under every backend's parameter limit
    returning: bool = True,
) -> Iterator[tuple[str, list[Any], int]]:
    """Multi-row ``INSERT`` statements for ``entries`` (``RETURNING id`` unless told not to),
    each with its values and its number of rows.

    An absent field takes its default; an ``auto_now_add`` one (``created_at``)
    the time of the insert, read once for the statement.
    """
    columns = _journal_columns(db.vendor)
    plain_names, plain_defaults = columns.plain_names, columns.plain_defaults
    for start in range(0, len(entries), batch):
        chunk = entries[start : start + batch]
        now, inserted_at = timezone.now(), None
        values: list[Any] = []
        extend, append = values.extend, values.append
        for entry in chunk:
            # The columns that go as they are, in one pass in C; then the adapted ones.
            extend(map(entry.get, plain_names, plain_defaults))
            for name, adapt, default in columns.adapted:
                value = entry.get(name, default)
                if value is _NOW:
                    if inserted_at is None:
                        inserted_at = adapt(db, now)
                    value = inserted_at
                else:
                    value = adapt(db, value)
                append(value)
        yield _insert_sql(db, placeholder, len(chunk), returning), values, len(chunk)


Adapter = Callable[[BaseDatabaseWrapper, Any], Any]
_NOW = object()  # the default of an ``auto_now_add`` column: the time of the insert


@dataclass(frozen=True)
class _Columns:
    """The journal's columns in the order its insert names them: first those whose
    values go as they are (with their defaults), then those with an adapter."""

    plain_names: tuple[str, ...]
    plain_defaults: tuple[Any, ...]
    adapted: tuple[tuple[str, Adapter, Any], ...]
    db_columns: tuple[str, ...]  # the same order, as database column names


@functools.cache
def _journal_columns(vendor: str) -> _Columns:
    """How each journal column's value is found: its field name, its default, and
    how it becomes a parameter.

    A default is taken once: a mutable one (``dict``) is only ever serialised.
    """
    plain: list[tuple[Field[Any, Any], Any]] = []
    adapted: list[tuple[Field[Any, Any], Adapter, Any]] = []
    for column in _journal_fields():
        default = _NOW if getattr(column, "auto_now_add", False) else column.get_default()
        adapt = _adapter(column, vendor)
        if adapt is None:
            plain.append((column, default))
        else:
            adapted.append((column, adapt, default))
    return _Columns(
        plain_names=tuple(f.attname for f, _ in plain),
        plain_defaults=tuple(default for _, default in plain),
        adapted=tuple((f.attname, adapt, default) for f, adapt, default in adapted),
        db_columns=tuple(f.column for f in [*(f for f, _ in plain), *(f for f, _, _ in adapted)]),
    )


def _journal_fields() -> list[Field[Any, Any]]:
    return [f for f in JournalEntry._meta.concrete_fields if not f.primary_key]


# The statement for each (vendor, placeholder, row count, returning); a batch has at most 200 rows.
_insert_sqls: dict[tuple[str, str, int, bool], str] = {}


def _insert_sql(db: BaseDatabaseWrapper, placeholder: str, rows: int, returning: bool) -> str:
    key = (db.vendor, placeholder, rows, returning)
    sql = _insert_sqls.get(key)
    if sql is None:
        table = db.ops.quote_name(JournalEntry._meta.db_table)
        columns = _journal_columns(db.vendor).db_columns
        names = ", ".join(db.ops.quote_name(column) for column in columns)
        row = "(" + ", ".join([placeholder] * len(columns)) + ")"
        values = ", ".join([row] * rows)
        sql = f"INSERT INTO {table} ({names}) VALUES {values}"
        sql = _insert_sqls[key] = sql + " RETURNING id" if returning else sql
    return sql


def _prune_sql(db: BaseDatabaseWrapper) -> str:
    """Delete the journal entries up to an id (``prune_journal``'s query, for a cursor)."""
    table = db.ops.quote_name(JournalEntry._meta.db_table)
    return f"DELETE FROM {table} WHERE {db.ops.quote_name(JournalEntry._meta.pk.column)} <= ?"


def _adapter(field: Field[Any, Any], vendor: str) -> Adapter | None:
    if isinstance(field, models.JSONField):
        if vendor == "sqlite" and field.encoder is None:
            return _sqlite_json
        encoder = field.encoder
        return lambda db, value: None if value is None else db.ops.adapt_json_value(value, encoder)
    if isinstance(field, models.DateTimeField):
        if vendor == "sqlite":
            return _sqlite_datetime
        return lambda db, value: db.ops.adapt_datetimefield_value(value)
    return None  # text, numbers and booleans go as they are


def _sqlite_json(db: BaseDatabaseWrapper, value: Any) -> Any:
    """JSON text as SQLite's JSONField stores it (``json.loads`` reads it back), by orjson."""
    if value is None:
        return None
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # a type only Django's encoder knows
        return db.ops.adapt_json_value(value, None)


def _sqlite_datetime(db: BaseDatabaseWrapper, value: Any) -> Any:
    """A UTC datetime as Django's SQLite backend stores it: naive, ``YYYY-MM-DD HH:MM:SS[.f]``."""
    if isinstance(value, datetime.datetime) and value.tzinfo is datetime.UTC:
        return str(value.replace(tzinfo=None))
    return db.ops.adapt_datetimefield_value(value)


class LoopJournal:
    """The stamp read and the journal's group commit on one event loop (SQLite only).

    It has its own connection to the database file, in autocommit mode, so its
    transactions are exactly the rounds below. Requests add their rows with
    ``record``; the first row of a turn of the loop schedules the round
    (``call_soon``), so everything answered in that turn is committed at once.
    """

    RETRY_SECONDS = 0.001

    def __init__(self, loop: asyncio.AbstractEventLoop, db: BaseDatabaseWrapper) -> None:
        self.loop = loop
        self.db = db
        options = db.settings_dict.get("OPTIONS", {})
        self.lock_timeout = float(options.get("timeout", 5))
        self.connection = sqlite3.connect(
            db.settings_dict["NAME"], timeout=0, isolation_level=None, check_same_thread=False
        )
        if options.get("init_command"):
            self.connection.executescript(options["init_command"])
        self.pending: list[tuple[dict[str, Any], asyncio.Future[int]]] = []
        self.scheduled = False
        self.locked_since: float | None = None
        self.turn_stamp: str | None = None

    def stamp(self) -> str:
        """The stamp, read once per turn of the loop.

        The read schedules its own expiry (``call_soon``). Callbacks run in the
        order they were scheduled, so every request that reuses the value was
        scheduled to run, and so had arrived, before the value was read.
        """
        if self.turn_stamp is None:
            row = self.connection.execute(STAMP_SQL).fetchone()
            self.turn_stamp = str(row[0]) if row else ""
            self.loop.call_soon(self._expire_stamp)
        return self.turn_stamp

    def _expire_stamp(self) -> None:
        self.turn_stamp = None

    def record(self, entry: dict[str, Any]) -> asyncio.Future[int]:
        future: asyncio.Future[int] = self.loop.create_future()
        self.pending.append((entry, future))
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self._round)
        return future

    def _round(self) -> None:
        try:
            self.connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if self._retry_later(exc):
                return
            self._fail(self._take(), exc)
            return
        self.locked_since = None
        batch = self._take()
        try:
            ids: list[int] = []
            entries = [entry for entry, _ in batch]
            for sql, values, rows in insert_statements(self.db, entries, "?", returning=False):
                # Under the write lock, one statement's rows take consecutive ids
                # (AUTOINCREMENT: each is the largest id so far plus one), so the
                # last id names them all, which is cheaper than RETURNING them.
                last = self.connection.execute(sql, values).lastrowid
                assert last is not None
                ids.extend(range(last - rows + 1, last + 1))
            if prune_hooks.due(len(ids)):
                # Kept near its cap in the same transaction: no thread, no second
                # connection, no second writer for this loop to wait behind.
                cutoff = ids[-1] - prune_hooks.keep()
                if cutoff > 0:
                    self.connection.execute(_prune_sql(self.db), (cutoff,))
            self.connection.execute("COMMIT")
        except Exception as exc:
            if self.connection.in_transaction:
                self.connection.execute("ROLLBACK")
            log.exception("journal round failed")
            self._fail(batch, exc)
            return
        for (_, future), pk in zip(batch, ids, strict=True):
            if not future.done():  # else the request was cancelled meanwhile
                future.set_result(pk)

    def _retry_later(self, exc: sqlite3.OperationalError) -> bool:
        """Whether the round waits for a write lock held elsewhere (up to the database timeout)."""
        if "locked" not in str(exc) and "busy" not in str(exc):
            return False
        now = self.loop.time()
        if self.locked_since is None:
            self.locked_since = now
        if now - self.locked_since >= self.lock_timeout:
            self.locked_since = None
            return False
        self.loop.call_later(self.RETRY_SECONDS, self._round)
        return True

    def _take(self) -> list[tuple[dict[str, Any], asyncio.Future[int]]]:
        batch, self.pending, self.scheduled = self.pending, [], False
        return batch

    @staticmethod
    def _fail(batch: list[tuple[dict[str, Any], asyncio.Future[int]]], exc: Exception) -> None:
        for _, future in batch:
            if not future.done():
                future.set_exception(OperationalError(str(exc)))


def _in_memory(name: str) -> bool:
    """Whether a SQLite database name is an in-memory database (no file to share)."""
    return name == ":memory:" or "mode=memory" in name


class ReplyStore:
    """Where the reply routes read the stamp and journal their requests (see the module doc)."""

    def __init__(self, thread: DatabaseThread) -> None:
        self.thread = thread
        self._journals: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopJournal] = (
            weakref.WeakKeyDictionary()
        )
        self._last: LoopJournal | None = None  # the journal used last (a server has one loop)

    def on_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> LoopJournal | None:
        """The running loop's journal when the database is a SQLite file, else None.

        ``loop`` is the running loop, when the caller has it at hand (finding it
        costs a system call on Python 3.11).
        """
        if loop is None:
            loop = asyncio.get_running_loop()
        last = self._last
        if last is not None and last.loop is loop:
            return last
        journal = self._journals.get(loop)
        if journal is not None:
            self._last = journal
            return journal
        db = connections[DEFAULT_DB_ALIAS]
        name = str(db.settings_dict.get("NAME") or "")
        if db.vendor != "sqlite" or not name or _in_memory(name):
            return None
        journal = self._journals[loop] = self._last = LoopJournal(loop, db)
        return journal

    def stamp(self, loop: asyncio.AbstractEventLoop | None = None) -> str | Awaitable[str]:
        """The ruleset stamp, read after this call began: the value itself when this
        loop reads it inline (nothing to await on the hot path), else an awaitable.
        """
        journal = self.on_loop(loop)
        if journal is not None:
            with contextlib.suppress(sqlite3.OperationalError):  # a busy file: ask the thread
                return journal.stamp()
        return self.thread.stamp()

    def record(
        self, entry: dict[str, Any], loop: asyncio.AbstractEventLoop | None = None
    ) -> Awaitable[int]:
        """Insert the journal row ``entry``; awaited, its id once it is committed."""
        journal = self.on_loop(loop)
        if journal is not None:
            return journal.record(entry)
        return self.thread.record(entry)


database_thread = DatabaseThread()
reply_store = ReplyStore(database_thread)
