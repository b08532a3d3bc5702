"""The live journal: entries, session resets and ruleset changes on the Channels layer.

Every journal entry, once committed, is published to groups a subscriber can
join: every entry, one session, one agent type, or the fallback's
answers. With one worker the in-memory layer carries them; with
``REDIS_URL``, channels-redis carries them between workers.

The reply path never waits for the layer: ``publish`` appends to a bounded
queue (beyond ``QUEUE_LIMIT`` an entry is dropped and counted) and a task sends
what gathered over ``FLUSH_SECONDS``, one message per group. A layer that fails
drops what it was sent (counted in ``Feed.dropped`` and ``/metrics``), every local subscriber is
told ``unavailable``, and the feed joins its groups again every
``RETRY_SECONDS`` until the layer answers (``available``).

Each process (each loop) keeps one channel on the layer (``Feed``): it joins the
groups its local subscribers need and always the control group, where session
resets (open streams of the session end at once: ``Feed.hurry``), ruleset
versions and later outcomes of entries (``update``: a stream cancelled or cut
off) are announced.

Every group's name starts with the deployment's prefix (``prefix``):
``STATIC_AGENTS_LIVE_PREFIX``, or by default a short hash of the default
database's identity, so services (or test servers) sharing one Redis database
but not their database never hear each other.

A subscriber holds at most ``Subscription.limit`` events: when it reads too
slowly the oldest go, and it is told how many (a ``dropped`` event).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import hashlib
import logging
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import DEFAULT_DB_ALIAS, connections

from staticagents.conf import settings
from staticagents.models import JournalEntry
from staticagents.replying.bounds import bounded
from staticagents.serving.loop_local import LoopLocal
from staticagents.serving.metrics import LIVE_DROPPED

log = logging.getLogger(__name__)

Entry = Mapping[str, Any]

FLUSH_SECONDS = 0.02
QUEUE_LIMIT = 10_000  # entries waiting to be published, at most
RETRY_SECONDS = 1.0
REJOIN_SECONDS = 3600.0  # groups expire on the layer after a day: joined again hourly
SUBSCRIBER_LIMIT = 1000  # events a subscriber holds before the oldest go
RULESET_EVENTS = {"ruleset", "available", "unavailable"}  # what a ruleset-only subscriber gets


def prefix() -> str:
    """The deployment's prefix of every group name (see the module doc)."""
    # The handler's settings, not ``connections[...]``: on the event loop each task has a
    # context of its own, and each would make (and drop) a connection object to read them.
    db = connections.settings[DEFAULT_DB_ALIAS]
    identity = (db.get("ENGINE"), str(db.get("NAME")), db.get("HOST"), db.get("PORT"))
    return _prefix(settings.STATIC_AGENTS_LIVE_PREFIX, repr(identity))


@functools.lru_cache(maxsize=8)
def _prefix(given: str, identity: str) -> str:
    return given or "sa-" + hashlib.sha256(identity.encode()).hexdigest()[:12]


def group_name(kind: str) -> str:
    """``all``, ``fallbacks`` or ``control``, with the deployment's prefix."""
    return f"{prefix()}.{kind}"


@functools.lru_cache(maxsize=4096)
def _hashed(start: str, kind: str, key: str) -> str:
    # Group names allow only [a-zA-Z0-9-_.] and fewer than 100 characters (the prefix
    # takes at most 40, E014).
    return f"{start}.{kind}.{hashlib.sha256(key.encode()).hexdigest()[:40]}"


def session_group(session: str) -> str:
    return _hashed(prefix(), "session", session)


def agent_type_group(agent_type: str) -> str:
    return _hashed(prefix(), "agent", agent_type)


@dataclass(frozen=True)
class Filters:
    """What a subscriber wants; empty: every entry."""

    session: str | None = None
    agent_type: str | None = None
    outcome: str | None = None
    fallbacks: bool = False
    ruleset: bool = False  # ruleset versions (and the layer's state) only, no entry

    def group(self) -> str:
        """The one group that carries every entry these filters may keep."""
        if self.ruleset:
            return group_name("control")
        if self.session is not None:
            return session_group(self.session)
        if self.agent_type is not None:
            return agent_type_group(self.agent_type)
        return group_name("fallbacks" if self.fallbacks else "all")

    def keep(self, entry: Mapping[str, Any]) -> bool:
        return (
            (self.session is None or entry.get("session") == self.session)
            and (self.agent_type is None or entry.get("agent_type") == self.agent_type)
            and (self.outcome is None or entry.get("outcome") == self.outcome)
            and (not self.fallbacks or is_fallback(entry))
        )


def is_fallback(entry: Mapping[str, Any]) -> bool:
    return entry.get("outcome") == "answered" and entry.get("rule") is None


def entry_event(entry_id: int, entry: Entry, created_at: str, limit: int) -> dict[str, Any]:
    """The entry as the control API lists it (body and query cut to ``limit`` bytes, as the
    journal keeps them)."""
    kept = bounded(entry, limit)
    event = {name: kept.get(name) for name in JournalEntry.API_FIELDS}
    event.update(id=entry_id, created_at=created_at, body_bytes=kept["body_bytes"])
    event["body_truncated"] = kept["body_bytes"] > limit
    event["method"] = event["method"] or ""
    return event


@dataclass(eq=False)
class Subscription:
    """One subscriber's events, newest last, at most ``limit`` (the oldest go, counted)."""

    filters: Filters
    limit: int = SUBSCRIBER_LIMIT
    events: deque[dict[str, Any]] = field(default_factory=deque)
    dropped: int = 0
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, event: dict[str, Any]) -> None:
        if self.filters.ruleset and event["type"] not in RULESET_EVENTS:
            return
        if len(self.events) >= self.limit:
            self.events.popleft()
            self.dropped += 1
            LIVE_DROPPED.labels("subscriber").inc()
        self.events.append(event)
        self.ready.set()

    async def next_events(self) -> list[dict[str, Any]]:
        """What arrived since the last call (waiting for something), a ``dropped`` first."""
        await self.ready.wait()
        self.ready.clear()
        taken = list(self.events)
        self.events.clear()
        if self.dropped:
            taken.insert(0, {"type": "dropped", "count": self.dropped})
            self.dropped = 0
        return taken


class OpenStream:
    """An open stream that a session reset may hurry (``Feed.streaming``)."""

    __slots__ = ("hurried", "waiting")

    def __init__(self) -> None:
        self.hurried = False
        self.waiting: asyncio.Future[None] | None = None

    def hurry(self) -> None:
        self.hurried = True
        if self.waiting is not None and not self.waiting.done():
            self.waiting.set_result(None)


class Feed:
    """The live journal of one event loop (see the module doc)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: list[tuple[int, Entry]] = []
        self.updates: list[dict[str, Any]] = []  # later outcomes, {"id", "outcome"}
        self.flushing = False
        self.dropped = 0  # entries never published: the queue was full, or the layer failed
        self.available = True
        self.subscribers: dict[str, set[Subscription]] = defaultdict(set)
        self.joined: set[str] = set()
        self.channel: str | None = None
        self.receiver: asyncio.Task[None] | None = None
        self.opening = asyncio.Lock()
        self.streams: dict[int, list[OpenStream]] = {}
        # An in-memory layer reaches only this loop's subscribers: with none, nobody listens.
        layer = get_channel_layer()
        self.local_only = layer is None or isinstance(layer, InMemoryChannelLayer)

    # -- publishing -----------------------------------------------------------------

    def publish(self, entry_id: int, entry: Entry) -> None:
        """Publish a committed entry, soon (never waits)."""
        if self.local_only and not self.subscribers:
            return
        if len(self.pending) >= QUEUE_LIMIT:
            self.dropped += 1
            LIVE_DROPPED.labels("publish").inc()
            return
        self.pending.append((entry_id, entry))
        self._flush_soon()

    def publish_update(self, entry_id: int, outcome: str) -> None:
        """Publish a committed later outcome of an entry, soon (never waits)."""
        if self.local_only and not self.subscribers:
            return
        if len(self.updates) >= QUEUE_LIMIT:
            self.dropped += 1
            LIVE_DROPPED.labels("publish").inc()
            return
        self.updates.append({"id": entry_id, "outcome": outcome})
        self._flush_soon()

    def _flush_soon(self) -> None:
        if not self.flushing:
            self.flushing = True
            self.loop.call_later(FLUSH_SECONDS, self._start_flush)

    def _start_flush(self) -> None:
        self.loop.create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while self.pending or self.updates:
                batch, self.pending = self.pending, []
                updates, self.updates = self.updates, []
                if batch:
                    await self._send_batch(batch)
                if updates:  # after the entries they update
                    message = {"type": "live.updates", "updates": updates}
                    await self.send_to_groups({group_name("control"): message})
        finally:
            self.flushing = False

    async def _send_batch(self, batch: list[tuple[int, Entry]]) -> None:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        # The entries of a batch were committed within ``FLUSH_SECONDS``: one time for all.
        created_at = datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")
        limit = settings.STATIC_AGENTS_JOURNAL_BODY_BYTES
        for entry_id, entry in batch:
            event = entry_event(entry_id, entry, created_at, limit)
            groups[group_name("all")].append(event)
            groups[session_group(event["session"] or "")].append(event)
            groups[agent_type_group(event["agent_type"] or "")].append(event)
            if is_fallback(event):
                groups[group_name("fallbacks")].append(event)
        await self.send_to_groups(
            {g: {"type": "live.entries", "entries": e} for g, e in groups.items()}
        )

    async def send_to_groups(self, messages: Mapping[str, dict[str, Any]]) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        for group, message in messages.items():
            try:
                await layer.group_send(group, {**message, "group": group})
            except Exception as exc:
                lost = len(message.get("entries", message.get("updates", ()))) or 1
                self.dropped += lost
                LIVE_DROPPED.labels("publish").inc(lost)
                self._lost(exc)

    # -- subscribing ----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def subscribed(self, filters: Filters) -> Any:
        """``async with feed.subscribed(filters) as subscription:`` receives its events."""
        subscription = Subscription(filters)
        group = filters.group()
        self.subscribers[group].add(subscription)
        self.start()
        try:
            await self._join(group)
        except Exception as exc:
            self._lost(exc)
        try:
            yield subscription
        finally:
            self.subscribers[group].discard(subscription)
            if not self.subscribers[group]:
                del self.subscribers[group]

    def start(self) -> None:
        """Receive from the layer (once): resets and ruleset versions, and what subscribers join."""
        if self.receiver is None and get_channel_layer() is not None:
            self.receiver = self.loop.create_task(self._receive())

    async def _join(self, group: str) -> None:
        """Join ``group`` on the layer (once), so that a new subscriber misses nothing after."""
        if group in self.joined:
            return
        layer = get_channel_layer()
        assert layer is not None
        async with self.opening:  # one channel, though the receiver and a subscriber ask at once
            if self.channel is None:
                self.channel = await layer.new_channel(prefix() + ".live.")
        await layer.group_add(group, self.channel)
        self.joined.add(group)

    async def _receive(self) -> None:
        layer = get_channel_layer()
        assert layer is not None
        rejoin_at = 0.0
        while True:
            try:
                if self.channel is None or not self.available or self.loop.time() >= rejoin_at:
                    self.joined.clear()
                    for group in (group_name("control"), *self.subscribers):
                        await self._join(group)
                    rejoin_at = self.loop.time() + REJOIN_SECONDS
                    self._set_available(True)
                assert self.channel is not None
                wait = REJOIN_SECONDS if self.available else RETRY_SECONDS
                try:
                    # Not ``wait_for``: on Python 3.11 it can swallow this task's cancellation
                    # when a message arrives at that moment, and the task then never ends.
                    async with asyncio.timeout(wait):
                        message = await layer.receive(self.channel)
                except TimeoutError:
                    continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._lost(exc)
                if isinstance(layer, InMemoryChannelLayer):
                    self.channel = None
                await asyncio.sleep(RETRY_SECONDS)
                continue
            self._dispatch(message)

    def announce(self, message: dict[str, Any]) -> None:
        """Tell every loop's feed ``message`` (a control message), this one's included."""
        if self.local_only and not self.subscribers:
            # The in-memory layer would bring it back to this feed alone, where only open
            # streams hear it: nothing it must keep in order with entries on their way.
            self._dispatch(message)
        else:
            self.loop.create_task(self.send_to_groups({group_name("control"): message}))

    def _dispatch(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "live.entries":
            for subscription in self.subscribers.get(message.get("group", ""), ()):
                for entry in message["entries"]:
                    if subscription.filters.keep(entry):
                        subscription.offer({"type": "entry", "entry": entry})
        elif kind == "live.reset":
            for entry_id in message.get("entries", ()):
                for stream in self.streams.get(entry_id, ()):
                    stream.hurry()
            self._tell_all({"type": "session_reset", "session": message.get("session")})
        elif kind == "live.ruleset":
            self._tell_all({"type": "ruleset", "version": message.get("version")})
        elif kind == "live.updates":
            for update in message.get("updates", ()):
                self._tell_all({"type": "update", **update})

    def _tell_all(self, event: dict[str, Any]) -> None:
        for subscriptions in self.subscribers.values():
            for subscription in subscriptions:
                subscription.offer(event)

    def _lost(self, exc: Exception) -> None:
        if self.available:
            log.warning("the channel layer failed (%s): the live journal is unavailable", exc)
        self._set_available(False)

    def _set_available(self, available: bool) -> None:
        if available != self.available:
            self.available = available
            self._tell_all({"type": "available" if available else "unavailable"})

    # -- streams a session reset ends ---------------------------------------------------

    @contextlib.contextmanager
    def streaming(self, entry_id: int | None) -> Iterator[OpenStream]:
        """The stream of the entry ``entry_id``, open while the block runs: a reset of its
        session hurries it (its ``waiting`` future is resolved and it waits no more)."""
        stream = OpenStream()
        if entry_id is None:
            yield stream
            return
        self.start()
        self.streams.setdefault(entry_id, []).append(stream)
        try:
            yield stream
        finally:
            open_ones = self.streams[entry_id]
            open_ones.remove(stream)
            if not open_ones:
                del self.streams[entry_id]


feeds: LoopLocal[Feed] = LoopLocal(Feed)


def feed(loop: asyncio.AbstractEventLoop | None = None) -> Feed:
    """The running loop's feed."""
    return feeds.get(loop)


def publish_from_thread(entry_id: int, entry: Entry) -> None:
    """``publish`` from a thread (a view's transaction has committed): on the serving loop."""
    _on_serving_loop(lambda live: live.publish(entry_id, entry))


def publish_update_from_thread(entry_id: int, outcome: str) -> None:
    """``publish_update`` from a thread (its mark has committed): on the serving loop."""
    _on_serving_loop(lambda live: live.publish_update(entry_id, outcome))


def announce_session_reset(session: str, entry_ids: list[int]) -> None:
    """Tell every worker that ``session`` started afresh: its open streams end at once."""
    _announce({"type": "live.reset", "session": session, "entries": entry_ids})


def announce_ruleset(version: int) -> None:
    """Tell every worker and subscriber the ruleset's new version."""
    _announce({"type": "live.ruleset", "version": version})


def _announce(message: dict[str, Any]) -> None:
    if _on_serving_loop(lambda live: live.announce(message)):
        return
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return  # no loop of this process listens, and no other process could
    try:  # a command's process, beside the workers: straight to the layer
        async_to_sync(layer.group_send)(group_name("control"), message)
    except Exception as exc:
        log.warning("could not announce on the channel layer: %s", exc)


def _on_serving_loop(call: Any) -> bool:
    """Run ``call(feed)`` on the loop last served, if it runs; whether it could."""
    last = feeds.last
    if last is None or last[0].is_closed() or not last[0].is_running():
        return False
    loop, live = last
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        call(live)
    else:
        loop.call_soon_threadsafe(call, live)
    return True
