"""How the reply path reaches the database besides Django's per-thread connections.

Under load, many requests wait at once for the same small piece of database
work (the ruleset stamp, a journal row). Two ways serve them together:

* ``RoundThread``: one thread per use and process that takes everything queued
  when it wakes and serves it with one call (a round). Each waiting coroutine
  gets its own result on its own event loop; a round that fails fails the
  requests in it, never the thread.
* ``connect_sqlite``: an event loop's own connection to a SQLite file, used on
  the loop itself (a read or a commit there takes microseconds). It exists only
  for a database file (``sqlite_file``): an in-memory database cannot be shared
  with a second connection.

And ``ConnectionThreads`` runs one call at a time per thread on a small pool of
threads that keep their Django connections from one call to the next (Channels'
``database_sync_to_async`` closes and opens one around every call).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, ParamSpec, TypeVar

from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

log = logging.getLogger(__name__)


def _null(value: None) -> None:
    return None


# sqlite3 binds a None only after looking for an adapter, and with none registered it
# asks the protocol and the value for ``__adapt__`` and ``__conform__``, each lookup
# making and dropping an AttributeError: 300 ns a NULL, two in every journal row. With
# this adapter (None stays None, bound as NULL) it is one dictionary lookup.
sqlite3.register_adapter(type(None), _null)

P = TypeVar("P")
R = TypeVar("R")
A = ParamSpec("A")


class _Waiter(Generic[P, R]):
    """One coroutine waiting on the thread: its loop, its future and its outcome."""

    __slots__ = ("error", "future", "loop", "payload", "result")

    def __init__(self, loop: asyncio.AbstractEventLoop, payload: P) -> None:
        self.loop = loop
        self.future: asyncio.Future[R] = loop.create_future()
        self.payload = payload
        self.result: R | None = None
        self.error: BaseException | None = None


_STOP = object()  # queued by ``stop``: the thread closes its connection and ends


class RoundThread(Generic[P, R]):
    """Serves ``serve(payloads) -> results`` (one result per payload, in order) in rounds,
    on a thread of its own with its own connection to the database ``using``.

    A round that loses its connection (a database restart) is served once more
    on a new one; any other failure is every waiting request's error.
    """

    def __init__(
        self, serve: Callable[[list[P]], list[R]], *, name: str, using: str = DEFAULT_DB_ALIAS
    ) -> None:
        self.serve = serve
        self.name = name
        self.using = using
        self._queue: queue.SimpleQueue[_Waiter[P, R] | object] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, payload: P) -> asyncio.Future[R]:
        """Queue ``payload`` for the next round; the future holds its result."""
        self._ensure_running()
        waiter: _Waiter[P, R] = _Waiter(asyncio.get_running_loop(), payload)
        self._queue.put(waiter)
        return waiter.future

    def stop(self) -> None:
        """End the thread once the rounds queued before this call are served."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                self._queue.put(_STOP)
                self._thread.join()
            self._thread = None

    def _ensure_running(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # new, or after a fork
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            waiters, stopping = self._collect()
            if waiters:
                self._serve_round(waiters)
                self._wake(waiters)
            if stopping:
                connections[self.using].close()
                return

    def _collect(self) -> tuple[list[_Waiter[P, R]], bool]:
        """Everything queued now (waiting for the first item); and whether to stop after it."""
        waiters: list[_Waiter[P, R]] = []
        item = self._queue.get()
        while True:
            if item is _STOP:
                return waiters, True
            waiters.append(item)  # type: ignore[arg-type]
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return waiters, False

    def _serve_round(self, waiters: list[_Waiter[P, R]]) -> None:
        payloads = [waiter.payload for waiter in waiters]
        try:
            try:
                results = self.serve(payloads)
            except (OperationalError, InterfaceError):
                log.warning("%s: database connection lost; reconnecting", self.name, exc_info=True)
                connections[self.using].close()
                results = self.serve(payloads)
        except Exception as exc:  # a failed round fails its requests, not the thread
            log.exception("%s: database round failed", self.name)
            for waiter in waiters:
                waiter.error = exc
            return
        for waiter, result in zip(waiters, results, strict=True):
            waiter.result = result

    @staticmethod
    def _wake(waiters: list[_Waiter[P, R]]) -> None:
        """One thread-safe call per event loop and round, however many requests wait."""
        by_loop: dict[asyncio.AbstractEventLoop, list[_Waiter[P, R]]] = {}
        for waiter in waiters:
            by_loop.setdefault(waiter.loop, []).append(waiter)
        for loop, group in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting
                loop.call_soon_threadsafe(_settle, group)


def _settle(waiters: list[_Waiter[P, R]]) -> None:
    """Runs on the waiters' event loop: hand each its outcome."""
    for waiter in waiters:
        if waiter.future.done():  # the request was cancelled meanwhile
            continue
        if waiter.error is not None:
            waiter.future.set_exception(waiter.error)
        else:
            waiter.future.set_result(waiter.result)  # type: ignore[arg-type]


def sqlite_file(db: BaseDatabaseWrapper) -> str | None:
    """The file of a SQLite database; None for another engine or an in-memory database."""
    if db.vendor != "sqlite":
        return None
    name = str(db.settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or "mode=memory" in name:
        return None
    return name


def connect_sqlite(db: BaseDatabaseWrapper, *, configure: bool = True) -> sqlite3.Connection:
    """A connection of its own to ``db``'s file, in autocommit mode, that never waits
    for a lock (``timeout=0``: a busy file raises at once); ``configure`` runs the
    database's ``init_command`` (its pragmas)."""
    connection = sqlite3.connect(
        str(db.settings_dict["NAME"]),
        timeout=0,
        isolation_level=None,
        check_same_thread=False,
        uri=True,
    )
    init_command = db.settings_dict.get("OPTIONS", {}).get("init_command")
    if configure and init_command:
        connection.executescript(init_command)
    return connection


class ConnectionThreads:
    """``await threads.run(func, *args)``: ``func(*args)`` on one of ``size`` threads,
    each keeping its database connections for its next call (``tidy_connections``)."""

    def __init__(self, size: int, *, name: str) -> None:
        self.executor = ThreadPoolExecutor(size, thread_name_prefix=name)

    async def run(self, func: Callable[A, R], *args: A.args, **kwargs: A.kwargs) -> R:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: _tidied(func, *args, **kwargs))


def _tidied(func: Callable[A, R], *args: A.args, **kwargs: A.kwargs) -> R:
    try:
        return func(*args, **kwargs)
    finally:
        tidy_connections()


def tidy_connections() -> None:
    """Keep this thread's database connections for its next call, unless one broke or
    came from a pool (closing it then returns it to the pool, cheaply)."""
    for connection in connections.all(initialized_only=True):
        if "pool" in connection.settings_dict.get("OPTIONS", {}):
            connection.close()
        elif connection.errors_occurred:
            if connection.is_usable():
                connection.errors_occurred = False
            else:
                connection.close()
