"""One timer per millisecond for every paced stream of a loop, not one per frame.

A thousand streams of a word every 10 ms ask their loop for 100,000 wake-ups a
second. ``asyncio.sleep`` makes each of them a coroutine, a timer handle in the
loop's heap and (on Python 3.11) a ``getpid`` system call to find the loop. The
pacer keeps one list of waiting futures per millisecond instead: the first
stream due in a millisecond starts its timer, the others join its list, and the
timer wakes them all. uvloop's timers count whole milliseconds anyway, so a
frame is never sent earlier than its time, nor later by more than it already was.
"""

from __future__ import annotations

import asyncio
import math

from staticagents.transport.loop_local import LoopLocal

SLOT_SECONDS = 0.001


class Pacer:
    """Wakes the streams of one loop at their frames' times (see the module doc)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.slots: dict[int, list[asyncio.Future[None]]] = {}

    def until(self, when: float) -> asyncio.Future[None]:
        """A future resolved at ``when`` (the loop's clock), or within the millisecond after.

        Cancelling it (as cancelling the task that awaits it does) just drops it.
        """
        slot = math.ceil(when / SLOT_SECONDS)
        waiters = self.slots.get(slot)
        if waiters is None:
            waiters = self.slots[slot] = []
            self.loop.call_at(slot * SLOT_SECONDS, self._wake, slot)
        waiter = self.loop.create_future()
        waiters.append(waiter)
        return waiter

    def _wake(self, slot: int) -> None:
        for waiter in self.slots.pop(slot):
            if not waiter.done():
                waiter.set_result(None)


_pacers = LoopLocal(Pacer)


def pacer(loop: asyncio.AbstractEventLoop | None = None) -> Pacer:
    """The running loop's pacer (``loop``, when the caller has it at hand)."""
    return _pacers.get(loop)
