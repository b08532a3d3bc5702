"""One object per event loop, made on first use and dropped with its loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar
from weakref import WeakKeyDictionary

T = TypeVar("T")


class LoopLocal(Generic[T]):
    """The running loop's ``T``, made by ``make(loop)`` the first time it is asked for.

    A server runs one loop, so the loop asked for last is remembered beside the
    weak mapping: the reply path asks several times per request, and a weak
    lookup costs a reference object each time. A caller that has the running
    loop at hand passes it: finding it costs a system call (``getpid``, to
    notice a fork) on Python 3.11.
    """

    def __init__(self, make: Callable[[asyncio.AbstractEventLoop], T]) -> None:
        self.make = make
        self.by_loop: WeakKeyDictionary[asyncio.AbstractEventLoop, T] = WeakKeyDictionary()
        self.last: tuple[asyncio.AbstractEventLoop, T] | None = None

    def get(self, loop: asyncio.AbstractEventLoop | None = None) -> T:
        """The ``T`` of ``loop``, which must be the running loop (found when not given)."""
        if loop is None:
            loop = asyncio.get_running_loop()
        last = self.last
        if last is not None and last[0] is loop:
            return last[1]
        found = self.by_loop.get(loop)
        if found is None:
            found = self.by_loop[loop] = self.make(loop)
        self.last = (loop, found)
        return found
