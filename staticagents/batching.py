"""One database thread per process that batches the reply path's two queries.

Under load, many requests wait at once for the same two things: the current
ruleset stamp (so an edit is seen by the next request) and the commit of their
journal entry (so an acknowledged request is never lost). This thread serves
everyone who is waiting with one stamp read and one multi-row insert per
round, instead of one of each per request (a group commit).

A request's stamp read always starts after the request arrived, so an edit
committed before it arrived is seen; its reply is sent only after its journal
entry is committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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

from staticagents.models import JournalEntry, RulesetState

log = logging.getLogger(__name__)

STAMP_SQL = f"SELECT stamp FROM {RulesetState._meta.db_table} WHERE id = 1"


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
        self.after_insert: list[Any] = []  # callbacks(newest_id, count) run in the thread

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
            for callback in self.after_insert:
                callback(ids[-1], len(ids))
        waiting = [waiter for waiter in work.stamps if not waiter.settled]
        if waiting:
            with connection.cursor() as cursor:
                cursor.execute(STAMP_SQL)
                row = cursor.fetchone()
            stamp = str(row[0]) if row else ""
            for waiter in waiting:
                waiter.settle(stamp)


def insert_entries(entries: list[dict[str, Any]], batch: int = 200) -> list[int]:
    """Insert journal rows (field name → value; absent fields take their defaults)
    with multi-row INSERT ... RETURNING; their ids, in order.

    What ``bulk_create`` does, without its per-value layers: on the reply path
    those were most of this thread's time (and of the GIL it shares).
    """
    db = connections[DEFAULT_DB_ALIAS]  # the real wrapper, not the per-attribute proxy
    fields, adapters = _journal_columns(db.vendor)
    table = db.ops.quote_name(JournalEntry._meta.db_table)
    columns = ", ".join(db.ops.quote_name(f.column) for f in fields)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    ids: list[int] = []
    with db.cursor() as cursor:
        for start in range(0, len(entries), batch):
            chunk = entries[start : start + batch]
            values = [
                adapt(db, entry[field.attname] if field.attname in entry else field.get_default())
                for entry in chunk
                for field, adapt in zip(fields, adapters, strict=True)
            ]
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES {', '.join([row] * len(chunk))} "
                "RETURNING id",
                values,
            )
            ids.extend(int(r[0]) for r in cursor.fetchall())
    return ids


Adapter = Callable[[BaseDatabaseWrapper, Any], Any]


@functools.cache
def _journal_columns(vendor: str) -> tuple[list[Field[Any, Any]], list[Adapter]]:
    """The journal's columns and, for each, how a Python value becomes a query parameter."""
    fields = [f for f in JournalEntry._meta.concrete_fields if not f.primary_key]
    return fields, [_adapter(field) for field in fields]


def _adapter(field: Field[Any, Any]) -> Adapter:
    if isinstance(field, models.JSONField):
        encoder = field.encoder
        return lambda db, value: None if value is None else db.ops.adapt_json_value(value, encoder)
    if isinstance(field, models.DateTimeField):
        return lambda db, value: db.ops.adapt_datetimefield_value(value)
    return lambda db, value: value  # text, numbers and booleans go as they are


database_thread = DatabaseThread()
