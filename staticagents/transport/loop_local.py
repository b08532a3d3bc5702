"""One object per event loop, made on first use and dropped with its loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar
from weakref import WeakKeyDictionary

T = TypeVar("T")


class LoopLocal(Generic[T]):
    """The running loop's ``T``, made by ``make(loop)`` the first time it is asked for."""

    def __init__(self, make: Callable[[asyncio.AbstractEventLoop], T]) -> None:
        self.make = make
        self.by_loop: WeakKeyDictionary[asyncio.AbstractEventLoop, T] = WeakKeyDictionary()

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        found = self.by_loop.get(loop)
        if found is None:
            found = self.by_loop[loop] = self.make(loop)
        return found
