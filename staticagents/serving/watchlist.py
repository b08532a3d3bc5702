"""Which answers have run long enough to need a watcher for their client leaving.

Starting a timer per request to find out costs more than answering most of
them (a timer handle made and cancelled for each). Instead, each event loop
keeps one list of the handlers answering now, with when they began, and one
timer that runs only while the list is not empty: every ``after`` seconds it
starts the watchers of those that began at least ``after`` seconds ago. An
answer is watched from between ``after`` and twice that on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from staticagents.serving.loop_local import LoopLocal

# How long an answer may take before a watcher listens for its client leaving.
WATCH_AFTER_SECONDS = 0.01


class Watchlist:
    """The handlers answering on one loop; ``start`` is called for any that takes long."""

    def __init__(self, loop: asyncio.AbstractEventLoop, after: float = WATCH_AFTER_SECONDS) -> None:
        self.loop = loop
        self.after = after
        self.answering: dict[object, tuple[float, Callable[[], None]]] = {}
        self.timer: asyncio.TimerHandle | None = None

    def add(self, handler: object, start: Callable[[], None]) -> None:
        self.answering[handler] = (self.loop.time(), start)
        if self.timer is None:
            self.timer = self.loop.call_later(self.after, self._check)

    def discard(self, handler: object) -> None:
        self.answering.pop(handler, None)

    def _check(self) -> None:
        due = self.loop.time() - self.after
        long_running = [h for h, (began, _) in self.answering.items() if began <= due]
        for handler in long_running:
            _, start = self.answering.pop(handler)
            start()
        self.timer = self.loop.call_later(self.after, self._check) if self.answering else None


_watchlists = LoopLocal(Watchlist)


def watchlist(loop: asyncio.AbstractEventLoop | None = None) -> Watchlist:
    """The running loop's watchlist (``loop``, when the caller has it at hand)."""
    return _watchlists.get(loop)
