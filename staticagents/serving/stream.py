"""The one paced sender: every stream, SSE or WebSocket, goes out through ``send_paced``.

A stream is a sequence of ``TimedFrame`` (``core/timing.py``), each due some
seconds after the stream starts. The sender waits for each on the loop's pacer
(``serving/pacer.py``): the stream starts once the pacer lets it begin, offsets
are absolute from that start (so drift never accumulates), and frames already
due when the loop gets to them (a busy server) go out together in one write,
so a late stream catches up at once. A stream that would outlast
``STATIC_AGENTS_MAX_STREAM_SECONDS`` is cut off here, at that limit, and its
journal entry marked ``cut_off``: the caller is told, and sends its dialect's
own word on why the stream ended. A client that leaves stops a stream by
cancelling the task that sends it (the reply route's watcher, the WebSocket
consumer's ``disconnect``); the entry is then marked ``cancelled`` through
``mark_ended``, the one place a reply's journal entry is marked as ended early.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from staticagents.conf import settings
from staticagents.core.timing import TimedFrame
from staticagents.core.values import value_class
from staticagents.replying.journal import journal
from staticagents.serving.pacer import Pacer, pacer

Batch = TypeVar("Batch")  # what one write sends: bytes for SSE, messages for a WebSocket


@value_class
class CutOff:
    """A stream stopped at the maximum duration, ``limit`` seconds after it started."""

    limit: float


async def send_paced(
    frames: Iterable[TimedFrame],
    render: Callable[[list[TimedFrame]], Batch],
    write: Callable[[Batch], Awaitable[None]],
    *,
    finish: Callable[[Batch], Awaitable[None]] | None = None,
    entry_id: int | None = None,
    timer: Pacer | None = None,
) -> CutOff | None:
    """Send each frame at its offset from the stream's start; a ``CutOff`` if cut off, else None.

    ``render`` turns the frames due together into one ``write``. With
    ``finish``, a stream that runs its course ends with one call to it, given
    its last frames (perhaps none), in place of their write. ``entry_id`` is
    the journal entry to mark when the stream is cut off; ``timer`` the running
    loop's pacer, when the caller has it at hand.
    """
    timer = timer or pacer()
    clock = timer.loop.time
    async with timer.place():  # under overload, a stream waits here to begin
        start = clock()
        limit = settings.STATIC_AGENTS_MAX_STREAM_SECONDS
        due: list[TimedFrame] = []
        for frame in frames:
            at = frame.at
            if at > limit:
                if due:
                    await write(render(due))
                await timer.until(start + limit)
                await mark_ended(entry_id, "cut_off")
                return CutOff(limit)
            if start + at > clock():
                if due:
                    batch = render(due)
                    sending = timer.clock()
                    await write(batch)
                    timer.sent(sending)  # a send that waited for its client is not counted
                    due = []
                if start + at > clock():
                    await timer.until(start + at)
            due.append(frame)
        if finish is not None:
            await finish(render(due))
        elif due:
            await write(render(due))
        return None


async def mark_ended(entry_id: int | None, outcome: str) -> None:
    """Mark a reply's journal entry as ended early: ``cancelled`` (the client left) or
    ``cut_off`` (the maximum duration)."""
    if entry_id is not None:
        await journal.mark(entry_id, outcome)
