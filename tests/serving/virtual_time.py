"""An event loop on a virtual clock, for tests of timing that hold on a busy machine.

The clock stands still while code runs and jumps to the next timer when the
loop would otherwise sleep, so timers fire in order at exactly their times
however loaded the machine is. A test makes one turn of the loop take long with
``take``, where real code would block the loop.
"""

from __future__ import annotations

import asyncio
import functools
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

P = ParamSpec("P")

START = 1000.0  # seconds; any value far from zero, like a real clock's


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose ``time()`` moves only when it would sleep, or by ``take``."""

    def __init__(self) -> None:
        self.now = START
        super().__init__(SkippingSelector(self))

    def time(self) -> float:
        return self.now


class SkippingSelector(selectors.DefaultSelector):
    """Polls instead of sleeping, and moves the loop's clock on by the sleep it skipped."""

    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self.loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout <= 0:  # nothing scheduled waits on real I/O only
            return super().select(timeout)
        events = super().select(0)
        if not events:
            self.loop.now += timeout
        return events


def take(seconds: float) -> None:
    """The running code takes ``seconds``, as code blocking the loop that long would."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualClockLoop), "take() runs in a test marked in_virtual_time"
    loop.now += seconds


def in_virtual_time(
    test: Callable[P, Coroutine[Any, Any, None]],
) -> Callable[P, None]:
    """Run an async test on a fresh ``VirtualClockLoop`` instead of pytest's loop."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
            runner.run(test(*args, **kwargs))

    return run
