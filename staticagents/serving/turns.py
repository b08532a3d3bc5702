"""Fair turns: a burst of new requests must not stall the streams already running.

An event loop runs every task that is ready before it looks at its timers
again. When a thousand requests arrive at once, their first steps (parse,
match, journal) all become ready in the same turn, and a stream whose next
word is due waits for all of them: a burst of 1,000 starts stalls every running
stream by some 100 ms. A ``Turnstile`` lets a fixed number of requests begin
per turn of the loop and queues the rest for the turns after, so timers fire
between the batches; the work done is the same, only spread out.
"""

from __future__ import annotations

import asyncio
from collections import deque

from staticagents.serving.loop_local import LoopLocal

# Few enough that one turn's new work stays within a few milliseconds; enough that
# steady load does not notice (32 connections answered as fast at 16, 32 or no limit).
STARTS_PER_TURN = 16


class Turnstile:
    """Admits at most ``per_turn`` requests per turn of one event loop, in arrival order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, per_turn: int = STARTS_PER_TURN) -> None:
        self.loop = loop
        self.per_turn = per_turn
        self.admitted = 0
        self.waiting: deque[asyncio.Future[None]] = deque()
        self.turn_scheduled = False

    def ticket(self) -> asyncio.Future[None] | None:
        """None if this turn has room; else a future that a later turn resolves, in arrival
        order. Most requests find room, and then await nothing at all.
        """
        self._schedule_turn()
        if self.admitted < self.per_turn and not self.waiting:
            self.admitted += 1
            return None
        ticket = self.loop.create_future()
        self.waiting.append(ticket)
        return ticket

    def _schedule_turn(self) -> None:
        # A callback queued now runs after every task ready in this turn: the next turn.
        if not self.turn_scheduled:
            self.turn_scheduled = True
            self.loop.call_soon(self._turn)

    def _turn(self) -> None:
        self.turn_scheduled = False
        self.admitted = 0
        while self.waiting and self.admitted < self.per_turn:
            ticket = self.waiting.popleft()
            if not ticket.done():  # a request cancelled while it waited gives up its place
                ticket.set_result(None)
                self.admitted += 1
        if self.waiting:
            self._schedule_turn()


_turnstiles = LoopLocal(Turnstile)


def turnstile(loop: asyncio.AbstractEventLoop | None = None) -> Turnstile:
    """The running loop's turnstile (``loop``, when the caller has it at hand)."""
    return _turnstiles.get(loop)
