"""The one paced sender: every stream, SSE or WebSocket, goes out through ``send_paced``.

A stream is a sequence of ``TimedFrame`` (``core/timing.py``), each due some
seconds after the stream starts. The sender waits for each on the loop's pacer
(``serving/pacer.py``): the stream starts once the pacer lets it begin, offsets
are absolute from that start (so drift never accumulates), and frames already
due when the loop gets to them (a busy server) go out together, up to
``BATCH_FRAMES`` to a write, so a late stream catches up at once. A stream that would outlast
``STATIC_AGENTS_MAX_STREAM_SECONDS`` is cut off here, at that limit, and its
journal entry marked ``cut_off``: the caller is told, and sends its dialect's
own word on why the stream ended. A client that leaves stops a stream by
cancelling the task that sends it (the reply route's watcher, the WebSocket
consumer's ``disconnect``); the entry is then marked ``cancelled`` by
``replying.journal.journal.mark``, as every early end is.

A reply's scripted ``fault`` (``core.replies.Fault``) fails its stream after
``after_chunks`` frames (or at its end, when it has fewer), in place of the
frames left and the stream's ending, and marks the entry ``fault``:

* ``disconnect``: nothing more is sent; the caller drops the connection;
* ``malformed``: the next frame, cut in the middle of its JSON, is sent last;
* ``error_event``: the dialect's own error frame (``error_frame``) is sent last;
* ``stall``: nothing more is sent until the maximum duration cuts the stream
  off, as it cuts off any stream that runs too long (a ``CutOff``).

A ``Faulted`` tells the caller to end the response without its end marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from staticagents.conf import settings
from staticagents.core.replies import Fault, Timing
from staticagents.core.timing import TimedFrame
from staticagents.core.values import value_class
from staticagents.replying import live
from staticagents.replying.journal import journal
from staticagents.serving.pacer import Pacer, pacer

Batch = TypeVar("Batch")  # what one write sends: bytes for SSE, messages for a WebSocket
# Frames sent in one write at most, when more are due at once (a stream without delays).
BATCH_FRAMES = 256


@value_class
class CutOff:
    """A stream stopped at the maximum duration, ``limit`` seconds after it started."""

    limit: float


@value_class
class Faulted:
    """A stream that failed as its reply scripted: ``kind`` as in ``Fault``."""

    kind: str


async def send_paced(
    frames: Iterable[TimedFrame],
    render: Callable[[list[TimedFrame]], Batch],
    write: Callable[[Batch], Awaitable[None]],
    *,
    finish: Callable[[Batch], Awaitable[None]] | None = None,
    entry_id: int | None = None,
    timer: Pacer | None = None,
    fault: Fault | None = None,
    error_frame: Callable[[float], TimedFrame] | None = None,
    paced: bool = True,
) -> CutOff | Faulted | None:
    """Send each frame at its offset from the stream's start; a ``CutOff`` if cut off,
    a ``Faulted`` if its scripted ``fault`` failed it, else None.

    ``render`` turns the frames due together into one ``write``. With
    ``finish``, a stream that runs its course ends with one call to it, given
    its last frames (perhaps none), in place of their write. ``entry_id`` is
    the journal entry to mark when the stream is cut off or faulted; ``timer``
    the running loop's pacer, when the caller has it at hand; ``error_frame``
    the dialect's error frame for an ``error_event`` fault, due at a given offset.
    ``paced=False`` says every frame is due at once (``paced``): the stream takes no
    place among the paced streams and goes out as fast as it is rendered.

    ``frames`` is taken one frame at a time, as each comes due (the dialects'
    renderers are generators), and at most ``BATCH_FRAMES`` go out in one
    write, the loop serving its other work between two full ones: a stream of
    a million frames due at once holds neither memory nor the loop (a short
    one is still a single write).

    A reset of the entry's session (``replying.live``) hurries the stream: as
    when the service stops, what remains goes out at once, with its ending.
    """
    if not paced and fault is None:
        await _send_at_once(frames, render, write, finish)
        return None
    timer = timer or pacer()
    with live.feed().streaming(entry_id) as stream:
        return await _send_paced(
            frames, render, write, finish, entry_id, timer, fault, error_frame, paced, stream
        )


async def _send_paced(
    frames: Iterable[TimedFrame],
    render: Callable[[list[TimedFrame]], Batch],
    write: Callable[[Batch], Awaitable[None]],
    finish: Callable[[Batch], Awaitable[None]] | None,
    entry_id: int | None,
    timer: Pacer,
    fault: Fault | None,
    error_frame: Callable[[float], TimedFrame] | None,
    paced: bool,
    stream: live.OpenStream,
) -> CutOff | Faulted | None:
    clock = timer.loop.time
    # Under overload, a paced stream waits here to begin.
    async with timer.place() if paced else contextlib.nullcontext():
        start = clock()
        limit = settings.STATIC_AGENTS_MAX_STREAM_SECONDS
        due: list[TimedFrame] = []

        async def stall_until() -> CutOff:
            await timer.until(start + limit)
            return CutOff(limit)

        for index, frame in enumerate(frames):
            at = frame.at
            if at > limit:
                if due:
                    await write(render(due))
                if not stream.hurried:  # a reset ends it here, with the cut-off's error
                    stream.waiting = timer.until(start + limit)
                    await stream.waiting
                await journal.mark(entry_id, "cut_off")
                return CutOff(limit)
            if start + at > clock() and not stream.hurried:
                if due:
                    await _write_now(due, render, write, timer)
                    due = []
                if start + at > clock():
                    stream.waiting = timer.until(start + at)
                    await stream.waiting
            if fault is not None and index >= fault.after_chunks:
                return await _fail(
                    fault, frame, due, render, write, error_frame, entry_id, stall_until
                )
            due.append(frame)
            if len(due) >= BATCH_FRAMES:
                await _write_now(due, render, write, timer)
                due = []
                await asyncio.sleep(0)  # the loop's other work comes first
        if fault is not None:
            return await _fail(fault, None, due, render, write, error_frame, entry_id, stall_until)
        if finish is not None:
            await finish(render(due))
        elif due:
            await write(render(due))
        return None


async def _send_at_once(
    frames: Iterable[TimedFrame],
    render: Callable[[list[TimedFrame]], Batch],
    write: Callable[[Batch], Awaitable[None]],
    finish: Callable[[Batch], Awaitable[None]] | None,
) -> None:
    """A stream due all at once, with no fault scripted: nothing to wait for, nothing a
    reset could hurry, so its frames go out ``BATCH_FRAMES`` to a write, with no check
    per frame (a short stream is one write, or one ``finish``)."""
    frames = iter(frames)
    while True:
        due = list(itertools.islice(frames, BATCH_FRAMES))
        if len(due) < BATCH_FRAMES:
            if finish is not None:
                await finish(render(due))
            elif due:
                await write(render(due))
            return
        await write(render(due))
        await asyncio.sleep(0)  # the loop's other work comes first


def paced(timing: Timing) -> bool:
    """Whether a stream on ``timing`` has frames due after its start (``send_paced``'s
    ``paced``): told from the schedule, since the frames are rendered only as they go."""
    return timing.first_delay_ms > 0 or timing.word_delay_ms > 0


async def _write_now(
    due: list[TimedFrame],
    render: Callable[[list[TimedFrame]], Batch],
    write: Callable[[Batch], Awaitable[None]],
    timer: Pacer,
) -> None:
    batch = render(due)
    sending = timer.clock()
    await write(batch)
    timer.sent(sending)  # a send that waited for its client is not counted


async def _fail(
    fault: Fault,
    following: TimedFrame | None,
    due: list[TimedFrame],
    render: Callable[[list[TimedFrame]], Batch],
    write: Callable[[Batch], Awaitable[None]],
    error_frame: Callable[[float], TimedFrame] | None,
    entry_id: int | None,
    stall_until: Callable[[], Awaitable[CutOff]],
) -> CutOff | Faulted:
    """Fail the stream as ``fault`` says, ``due`` still to send (see the module doc);
    ``following`` is the frame the stream would have sent next, None at its end."""
    at = following.at if following is not None else (due[-1].at if due else 0.0)
    if due:
        await write(render(due))  # first, so the last frame knows how many went before it
    last = None
    if fault.kind == "malformed":
        whole = following.json() if following is not None else b'{"choices": [{"delta": {}}]}'
        event = following.event if following is not None else None
        # Cut in the middle of its JSON, never of a character: a WebSocket sends text.
        cut = whole[: max(1, len(whole) // 2)].decode("utf-8", "ignore").encode()
        last = TimedFrame(at, cut, event)
    elif fault.kind == "error_event" and error_frame is not None:
        last = error_frame(at)
    if last is not None:
        await write(render([last]))
    await journal.mark(entry_id, "fault")
    if fault.kind == "stall":
        return await stall_until()
    return Faulted(fault.kind)
