"""One timer per millisecond for every paced stream of a loop, not one per frame;
and new streams held back while the loop has no room for more.

A thousand streams of a word every 10 ms ask their loop for 100,000 wake-ups a
second. ``asyncio.sleep`` makes each of them a coroutine, a timer handle in the
loop's heap and (on Python 3.11) a ``getpid`` system call to find the loop. The
pacer keeps one list of waiting futures per millisecond instead: the first
stream due in a millisecond starts its timer, the others join its list, and the
timer wakes them all. uvloop's timers count whole milliseconds anyway, so a
frame is never sent earlier than its time, nor later by more than it already was.

A loop has room for only so many streams: every frame is a socket write. Near
that number, one long turn of the loop leaves many frames due at once, sending
them makes the next turn long too, and every running stream stutters. So the
pacer watches the loop at its wake-ups: how late the first wake-up of a turn
is, and what share of the loop's time the streams' writes take (the streams
report each send's duration with ``sent``). While the loop is late, or that
share is high, a stream about to begin waits (``begin``); wake-ups that find
room again let a few begin at a time, in arrival order. Under overload a
stream's script therefore starts late, as a busy model's first token would,
and then keeps its time.

Other work does not hold streams back by keeping the loop busy: the requests
a turn starts are bounded (``turns.Turnstile``), so their work cannot feed on
itself the way frames do. A few streams always run, and none waits longer than
``HOLD_LIMIT_SECONDS``.

A service told to stop (``stop``, on SIGTERM or SIGINT) paces nothing more:
every waiting stream is woken, and from then on each sends what remains of its
script at once, so its client still gets the whole reply and its end marker.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from time import perf_counter

from staticagents.serving.loop_local import LoopLocal
from staticagents.serving.metrics import STREAMS_OPEN

SLOT_SECONDS = 0.001
# A turn that begins its wake-ups later than this has more work than the loop can do on time.
BEHIND_SECONDS = 0.002
# The share of the loop's time that the streams' writes may take before no more begin.
STREAM_SHARE = 0.4
# Over about this long that share is averaged.
SHARE_WINDOW_SECONDS = 0.02
# Streams let begin per wake-up that finds room: spreads their frames over the slots.
BEGINS_PER_WAKE = 2
# This many streams may always run, however late the loop.
ALWAYS_RUNNING = 8
# No stream waits longer than this to begin, room or not.
HOLD_LIMIT_SECONDS = 10.0
# A send that took longer than this waited (for a slow client to read, say): not the loop's work.
SEND_CEILING_SECONDS = 0.001


class Pacer:
    """Wakes the streams of one loop at their frames' times (see the module doc).

    ``clock`` times the streams' sends and the span their share is measured over:
    ``perf_counter`` unless a test gives another (uvloop's clock stands still for a turn).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        hold_limit: float = HOLD_LIMIT_SECONDS,
        clock: Callable[[], float] = perf_counter,
    ) -> None:
        self.loop = loop
        self.hold_limit = hold_limit
        self.clock = clock
        self.slots: dict[int, list[asyncio.Future[None]]] = {}
        # Held streams, in arrival order, each with the loop's time it begins at the latest.
        self.held: deque[tuple[asyncio.Future[None], float]] = deque()
        self.running = 0  # streams between ``begin`` and ``end``
        self.late = 0.0  # how late the loop's last turn began its wake-ups, in seconds
        self.spent = 0.0  # seconds the streams' sends have taken, in all (see ``sent``)
        self.share = 0.0  # their share of the loop's time, smoothed over SHARE_WINDOW_SECONDS
        self.measured = (clock(), 0.0)  # the clock, and ``spent`` then
        self.in_turn = False  # a wake-up has run in this turn of the loop
        self.stopping = False  # the service is stopping: no more waiting (see ``stop``)

    def until(self, when: float) -> asyncio.Future[None]:
        """A future resolved at ``when`` (the loop's clock), or within the millisecond after.

        Cancelling it (as cancelling the task that awaits it does) just drops it.
        Once the service is stopping, it is resolved at once.
        """
        waiter = self.loop.create_future()
        if self.stopping:
            waiter.set_result(None)
            return waiter
        self._slot(math.ceil(when / SLOT_SECONDS)).append(waiter)
        return waiter

    def place(self) -> Place:
        """``async with pacer.place():`` around a stream: it begins when there is room."""
        return Place(self)

    def begin(self) -> asyncio.Future[None] | None:
        """None when a new stream may begin now; else a future resolved when it may.

        Either way, the stream counts as running once it begins: the caller
        passes what this returned to ``end`` when the stream is over, or given
        up (cancelling the future gives up the place).
        """
        if self.stopping or (not self.held and self.has_room()):
            self.running += 1
            return None
        waiter = self.loop.create_future()
        self.held.append((waiter, self.loop.time() + self.hold_limit))
        self._tick()
        return waiter

    def end(self, place: asyncio.Future[None] | None) -> None:
        """The stream that ``begin`` answered with ``place`` is over: it ran, or gave up."""
        if place is None or (place.done() and not place.cancelled()):
            self.running -= 1

    def stop(self) -> None:
        """The service is stopping: wake every waiting stream now, and wait no more."""
        self.stopping = True
        slots, self.slots = self.slots, {}
        for waiters in slots.values():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)
        while self.held:
            waiter = self.held.popleft()[0]
            if not waiter.done():
                waiter.set_result(None)
                self.running += 1

    def sent(self, started: float) -> None:
        """A stream's send that began at ``started`` (a reading of ``clock``) is done.

        Only a send that did not wait counts: one held up by flow control (a
        client slow to read) took the loop no time meanwhile.
        """
        took = self.clock() - started
        if took < SEND_CEILING_SECONDS:
            self.spent += took

    def has_room(self) -> bool:
        """Whether one more stream may begin, as the last wake-ups found the loop. Measures
        left from long ago correct themselves within a millisecond, at the wake-up that a
        held stream asks for."""
        return self.running < ALWAYS_RUNNING or (
            self.late <= BEHIND_SECONDS and self.share <= STREAM_SHARE
        )

    def _slot(self, slot: int) -> list[asyncio.Future[None]]:
        waiters = self.slots.get(slot)
        if waiters is None:
            waiters = self.slots[slot] = []
            self.loop.call_at(slot * SLOT_SECONDS, self._wake, slot)
        return waiters

    def _tick(self) -> None:
        """Make sure a wake-up comes within the next millisecond (to let held streams begin)."""
        self._slot(math.floor(self.loop.time() / SLOT_SECONDS) + 1)

    def _wake(self, slot: int) -> None:
        waiters = self.slots.pop(slot, None)
        if waiters is None:
            return  # woken already by ``stop``
        if not self.in_turn:
            # The first wake-up of a turn is its latest: the slots that came due
            # while the loop was busy follow it, in their order, in the same turn.
            self.in_turn = True
            self.loop.call_soon(self._turn_over)  # runs after this turn's timers
            self.late = self.loop.time() - slot * SLOT_SECONDS
            self._measure_share()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        if self.held:
            self._let_begin()

    def _turn_over(self) -> None:
        self.in_turn = False

    def _measure_share(self) -> None:
        now, spent = self.clock(), self.spent
        since, spent_then = self.measured
        span = now - since
        if span >= SLOT_SECONDS:
            share = (spent - spent_then) / span
            self.share += (share - self.share) * min(1.0, span / SHARE_WINDOW_SECONDS)
            self.measured = (now, spent)

    def _let_begin(self) -> None:
        held, begun, now = self.held, 0, self.loop.time()
        while held and (
            (begun < BEGINS_PER_WAKE and self.has_room()) or held[0][1] <= now  # held too long
        ):
            waiter = held.popleft()[0]
            if not waiter.done():  # a client that left while held gives up its place
                waiter.set_result(None)
                self.running += 1
                begun += 1
        if held:
            self._tick()


class Place:
    """A stream's place among the running streams of a pacer (see ``Pacer.place``); it
    counts as open (``static_agents_streams_open``) from its arrival to its end."""

    __slots__ = ("pacer", "waiter")

    def __init__(self, pacer: Pacer) -> None:
        self.pacer = pacer
        self.waiter: asyncio.Future[None] | None = None

    async def __aenter__(self) -> None:
        STREAMS_OPEN.inc()
        self.waiter = waiter = self.pacer.begin()
        if waiter is not None:
            try:
                await waiter
            except BaseException:  # cancelled while held, or just after being let begin
                self.pacer.end(waiter)
                STREAMS_OPEN.dec()
                raise

    async def __aexit__(self, *exc: object) -> None:
        self.pacer.end(self.waiter)
        STREAMS_OPEN.dec()


_pacers = LoopLocal(Pacer)


def pacer(loop: asyncio.AbstractEventLoop | None = None) -> Pacer:
    """The running loop's pacer (``loop``, when the caller has it at hand)."""
    return _pacers.get(loop)
