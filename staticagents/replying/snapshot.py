"""The ruleset snapshot: the compiled, immutable rules that every reply is answered from.

The snapshot is built from the stored rules once per version of them and kept
in this process. The version is the stamp in ``RulesetState``, which every
write to the rules changes, so each worker notices an edit made through any
other on its next request: a request reads the stamp (one indexed read) and
rebuilds only when it changed. A rebuild reads and compiles only the rules
whose document changed (``Rule.digest``, ``RuleCompiler``). The sessions' scripts have a stamp of
their own beside it: a new script reloads the scripts and rebuilds no rule.

``active_ruleset()`` is for code in a thread (it reads the stamp on the thread's
Django connection); ``await current_ruleset()`` for the event loop, where many
requests want the stamp at once, so the reads are shared:

* on a SQLite file, the loop reads it on a connection of its own, once per turn
  of the loop (a read takes microseconds and never waits, in WAL mode);
* otherwise (or while the file is busy), one thread reads it once per round
  for every request waiting.

Either way the read starts after the request arrived, so an edit committed
before a request arrived is seen by it.

One build runs at a time in a process. On the event loop, a request that finds
the stamp changed starts it in a thread of its own and waits for it: wholly when
it reads at most ``SMALL_BUILD_RULES`` rules anew (an edit: read your writes),
else at most ``WAIT_FOR_BUILD_SECONDS`` from its start; until a long build
(thousands of rules) is installed, requests answer from the previous snapshot,
whole. A build knows its size once it has read which rules changed (one indexed
read); a request waits for that much at least, however slow the build's thread is
to start on a busy machine. ``active_ruleset`` waits for the build (code in a
thread wants the rules as they are: the control API after a write, the admin).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections

from staticagents.conf import settings
from staticagents.core.matching import RuleCompiler, Ruleset, compile_ruleset, compile_scripts
from staticagents.core.routing import compile_routing
from staticagents.models import RulesetState
from staticagents.replying.background import background_work
from staticagents.replying.database import RoundThread, connect_sqlite, sqlite_file
from staticagents.selectors import (
    StoredRuleset,
    exported_defaults,
    one_snapshot,
    stored_defaults_and_fallback_rows,
    stored_rules,
    stored_scripts,
    stored_upstreams,
    written_ruleset,
)

# Raw SQL: it runs on every request, and the ORM would cost it ten times over.
# One string for both stamps, "<rules>:<scripts>", so a request compares one value.
STAMP_SQL = f"SELECT stamp || ':' || scripts_stamp FROM {RulesetState._meta.db_table} WHERE id = 1"

log = logging.getLogger(__name__)
T = TypeVar("T")

WAIT_FOR_BUILD_SECONDS = 0.1
SMALL_BUILD_RULES = 200

_snapshot: Ruleset | None = None
# What the snapshots of this process compiled; ``compiler.compiled`` counts the rules.
compiler = RuleCompiler()
# The documents of the rules of the last two snapshots, by digest: not read again.
_documents: tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]] = ({}, {})


def ruleset_stamp() -> str:
    """The stamp of the rules as the database holds them now (one indexed read)."""
    with connection.cursor() as cursor:
        cursor.execute(STAMP_SQL)
        row = cursor.fetchone()
    return str(row[0]) if row else ""


def active_ruleset() -> Ruleset:
    """The snapshot of the rules as they are now; rebuilt only when their stamp changed
    (here, or by the build under way: then waited for, and the stamp read again)."""
    while True:
        current = _snapshot
        if current is not None and current.stamp == ruleset_stamp():
            return current
        build, mine = _claim()
        if mine:
            return _run(build)
        concurrent.futures.wait([build.done])


async def current_ruleset(loop: asyncio.AbstractEventLoop | None = None) -> Ruleset:
    """The snapshot for the event loop: the stamp read is shared with other requests', and
    a build is waited for briefly (see the module doc). ``loop``: the running loop, when the
    caller has it at hand (finding it is a system call on Python 3.11, ``LoopLocal``)."""
    stamp = _stamps.read_on_loop(loop)
    if stamp is None:
        stamp = await _stamps.thread.submit(None)
    current = _snapshot
    if current is not None and current.stamp == stamp:
        return current
    build, mine = _claim()
    if mine:
        threading.Thread(
            target=_run_apart, args=(build,), name="static-agents-snapshot", daemon=True
        ).start()
    if current is None:  # nothing to answer from meanwhile
        return await _shared(build.done)
    if build.done.done():
        return build.done.result()
    left = build.started + WAIT_FOR_BUILD_SECONDS - time.monotonic()
    if left > 0:
        try:
            return await asyncio.wait_for(_shared(build.done), left)
        except TimeoutError:
            pass
    fresh = build.fresh
    if fresh is None:  # its thread has not read which rules changed yet (a busy machine)
        fresh = await _shared(build.sized)
    if fresh is not None and fresh <= SMALL_BUILD_RULES:
        return await _shared(build.done)
    return current


def _shared(future: concurrent.futures.Future[T]) -> asyncio.Future[T]:
    """``future``, of the build that every waiting request shares, awaited on the loop: a
    request cancelled meanwhile (its client left) does not cancel it for the others."""
    return asyncio.shield(asyncio.wrap_future(future))


def snapshot_stamp() -> str | None:
    """The stamp of this process's snapshot (None: none built yet)."""
    current = _snapshot
    return current.stamp if current is not None else None


def take_script(
    before: str, after: str, session: str, script: tuple[int, dict[str, Any]] | None
) -> None:
    """A session's script changed (``script``: its row id and document; None: it ended)
    by a transaction of this process that moved the stamp from ``before`` to ``after``,
    now committed: the snapshot built at ``before`` takes it as it is, reading nothing.
    Any other snapshot is left to be rebuilt (its stamp tells it at the next reply)."""
    global _snapshot
    with _building_lock:
        current = _snapshot
        if _building is not None or current is None or current.stamp != before:
            return
        scripts = dict(current.scripts)
        if script is None:
            scripts.pop(session, None)
        else:
            window = settings.STATIC_AGENTS_MATCH_WINDOW
            scripts.update(compile_scripts({session: script}, window=window, previous=scripts))
        _snapshot = replace(current, stamp=after, scripts=scripts)


class _Build:
    """The build of a snapshot under way in this process; ``done`` holds the snapshot."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.fresh: int | None = None  # how many rules it reads anew, once it knows
        # ``fresh`` once known; None if the build ended without knowing (it failed).
        self.sized: concurrent.futures.Future[int | None] = concurrent.futures.Future()
        self.done: concurrent.futures.Future[Ruleset] = concurrent.futures.Future()

    def sizing(self, fresh: int) -> None:
        self.fresh = fresh
        if not self.sized.done():
            self.sized.set_result(fresh)


_building: _Build | None = None
_building_lock = threading.Lock()


def _claim() -> tuple[_Build, bool]:
    """The build under way, or a new one that the caller runs (then True)."""
    global _building
    with _building_lock:
        if _building is not None:
            return _building, False
        _building = _Build()
        return _building, True


def _run(build: _Build) -> Ruleset:
    """Build the snapshot of the stored rules and install it, ending ``build``."""
    global _snapshot, _building
    try:
        with background_work():
            ready = build_ruleset(_snapshot, sizing=build.sizing)
        _snapshot = ready
        build.done.set_result(ready)
        return ready
    except BaseException as exc:
        build.done.set_exception(exc)
        raise
    finally:
        if not build.sized.done():
            build.sized.set_result(build.fresh)
        with _building_lock:
            _building = None


def _run_apart(build: _Build) -> None:
    """``_run`` on a thread of its own (its requests have its error)."""
    try:
        _run(build)
    except Exception:
        log.exception("building the snapshot of the rules failed")
    finally:
        connection.close()


def build_ruleset(
    previous: Ruleset | None = None, *, sizing: Callable[[int], None] | None = None
) -> Ruleset:
    """Compile the stored rules and scripts, with the stamp they were read at; when only
    the scripts changed since ``previous``, its rules are kept as they are, and when only
    the rules did, its scripts. ``sizing`` is told how many rules are read anew (and
    compiled), before they are."""
    global _documents
    window = settings.STATIC_AGENTS_MATCH_WINDOW
    # One consistent read (never half an old fixture), taking no write lock.
    with one_snapshot():
        stamp = ruleset_stamp()
        if previous is not None and _scripts_part(previous.stamp) == _scripts_part(stamp):
            scripts = previous.scripts
        else:
            kept = previous.scripts if previous is not None else None
            scripts = compile_scripts(stored_scripts(), window=window, previous=kept)
        if previous is not None and _rules_part(previous.stamp) == _rules_part(stamp):
            if sizing is not None:
                sizing(0)
            return replace(previous, stamp=stamp, scripts=scripts)
        known = {**_documents[1], **_documents[0]}
        stored = _written(_rules_part(stamp))
        if stored is None:
            rules = stored_rules(known, sizing)
            defaults_row, fallback = stored_defaults_and_fallback_rows()
            upstreams, modes = stored_upstreams()
            stored = StoredRuleset(rules, defaults_row, fallback, upstreams, modes)
        elif sizing is not None:  # none is read, as many compiled
            sizing(sum(1 for digest, _ in stored.rules if not digest or digest not in known))
    stale = _documents[1]
    _documents = ({digest: rule for digest, rule in stored.rules if digest}, _documents[0])
    while stale:  # freed one by one, as the compiler frees its stale rules
        stale.popitem()
    defaults = exported_defaults(stored.defaults)
    defaults["stream"] = {**server_stream_defaults(), **defaults.get("stream", {})}
    ruleset = compile_ruleset(
        stamp=stamp,
        rules=[rule for _, rule in stored.rules],
        defaults=defaults,
        fallback=stored.fallback,
        window=window,
        scripts=scripts,
        compiler=compiler,
        budget=settings.STATIC_AGENTS_MATCH_BUDGET_MS / 1000,
    )
    return replace(ruleset, routing=compile_routing(stored.upstreams, stored.modes))


def _written(stamp: str) -> StoredRuleset | None:
    """The ruleset this process's last replace wrote, while ``stamp`` is the one it set.
    Only on SQLite: PostgreSQL's jsonb gives objects back with their keys in an order of its
    own, and every worker must answer from the same documents."""
    return written_ruleset.at(stamp) if connection.vendor == "sqlite" else None


def _scripts_part(stamp: str) -> str:
    return stamp.partition(":")[2]


def _rules_part(stamp: str) -> str:
    return stamp.partition(":")[0]


def server_stream_defaults() -> dict[str, int]:
    """Stream timing from the server's settings: the base under defaults.stream and rules."""
    return {
        "first_delay_ms": settings.STATIC_AGENTS_FIRST_DELAY_MS,
        "word_delay_ms": settings.STATIC_AGENTS_WORD_DELAY_MS,
    }


class _LoopStamp:
    """The stamp on one event loop, read on the loop's own connection to the SQLite file.

    A read schedules its own expiry (``call_soon``). Callbacks run in the order
    they were scheduled, so every request that reuses the value was scheduled
    to run, and so had arrived, before the value was read.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.connection = connect_sqlite(connections[DEFAULT_DB_ALIAS], configure=False)
        self.value: str | None = None

    def read(self) -> str:
        if self.value is None:
            row = self.connection.execute(STAMP_SQL).fetchone()
            self.value = str(row[0]) if row else ""
            self.loop.call_soon(self._expire)
        return self.value

    def _expire(self) -> None:
        self.value = None


def _read_stamps(waiting: list[None]) -> list[str]:
    """One round of the stamp thread: one read for everyone waiting."""
    return [ruleset_stamp()] * len(waiting)


class _Stamps:
    """Where the event loop reads the stamp (see the module doc)."""

    def __init__(self) -> None:
        self.thread: RoundThread[None, str] = RoundThread(_read_stamps, name="static-agents-stamp")
        self.loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopStamp | None] = (
            weakref.WeakKeyDictionary()
        )
        # The loop asked for last, beside the weak mapping: a server runs one loop.
        self.last: tuple[asyncio.AbstractEventLoop, _LoopStamp | None] | None = None

    def read_on_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> str | None:
        """The stamp, read on this loop's connection; None when the thread must read it
        (no SQLite file, or a busy one)."""
        reader = self._on_loop(loop)
        if reader is None:
            return None
        try:
            return reader.read()
        except sqlite3.OperationalError:
            return None

    def _on_loop(self, loop: asyncio.AbstractEventLoop | None) -> _LoopStamp | None:
        if loop is None:
            loop = asyncio.get_running_loop()
        last = self.last
        if last is not None and last[0] is loop:
            return last[1]
        if loop in self.loops:
            reader = self.loops[loop]
        else:
            file = sqlite_file(connections[DEFAULT_DB_ALIAS])
            reader = self.loops[loop] = _LoopStamp(loop) if file else None
        self.last = (loop, reader)
        return reader


_stamps = _Stamps()
