"""A stopping service finishes its streams at once instead of pacing them out.

uvicorn stops on SIGTERM or SIGINT by closing its listeners and then waiting for
every open response to end: a stream paced over two minutes would hold the
process that long. So each worker also tells its loop's pacer to stop as soon
as the signal arrives; every stream then sends the rest of its script at once,
with its dialect's end marker, and its journal entry is complete. What still
runs after ``serve``'s grace period is cancelled by uvicorn.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

from staticagents.replying.journal import journal
from staticagents.serving.pacer import pacer

EXIT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
DRAIN_SECONDS = 2.0  # the longest the server waits for the streams to send their rest
DRAIN_POLL_SECONDS = 0.01


def stop_streams_on_exit_signals(loop: asyncio.AbstractEventLoop) -> None:
    """Chain a handler before the server's own for SIGINT and SIGTERM.

    Called from the application factory, which uvicorn calls after installing its
    handlers (and which restores them on its way out, ours with them).
    """
    for number in EXIT_SIGNALS:
        previous = signal.getsignal(number)
        if callable(previous):
            signal.signal(number, _chained(loop, previous))


def _chained(loop: asyncio.AbstractEventLoop, previous: Any) -> Any:
    def on_signal(number: int, frame: FrameType | None) -> None:
        paced = pacer(loop)
        if paced.stopping:  # a second signal: the server's own handler at once
            previous(number, frame)
            return
        # A signal handler runs between two bytecodes of the loop's thread: hand over.
        loop.call_soon_threadsafe(_stop_pacing, loop, lambda: previous(number, frame))

    return on_signal


def _stop_pacing(loop: asyncio.AbstractEventLoop, stop_server: Callable[[], None]) -> None:
    """Streams send the rest of their script at once; the server is told to stop once they
    have ended and the journal rows held back for the write lock are written (or after
    ``DRAIN_SECONDS``): uvicorn closes an open WebSocket at once when it stops (code 1012),
    so it must not be told before the WebSocket replies are whole."""
    paced = pacer(loop)
    paced.stop()
    deadline = loop.time() + DRAIN_SECONDS

    def once_drained() -> None:
        if (paced.running or journal.held_back()) and loop.time() < deadline:
            loop.call_later(DRAIN_POLL_SECONDS, once_drained)
        else:
            stop_server()

    once_drained()
