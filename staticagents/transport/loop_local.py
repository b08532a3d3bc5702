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
    lookup costs a reference object each time.
    """

    def __init__(self, make: Callable[[asyncio.AbstractEventLoop], T]) -> None:
        self.make = make
        self.by_loop: WeakKeyDictionary[asyncio.AbstractEventLoop, T] = WeakKeyDictionary()
        self.last: tuple[asyncio.AbstractEventLoop, T] | None = None

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        last = self.last
        if last is not None and last[0] is loop:
            return last[1]
        found = self.by_loop.get(loop)
        if found is None:
            found = self.by_loop[loop] = self.make(loop)
        self.last = (loop, found)
        return found
