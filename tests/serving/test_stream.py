"""The paced sender sends each frame at its offset from the stream's start, coalesces frames
that are due together, cuts a stream off at the maximum duration and stops when its client
leaves; driven on a clock that moves only when the sender waits, so nothing sleeps."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async

from staticagents.core.replies import Timing
from staticagents.core.timing import TimedFrame
from staticagents.models import JournalEntry
from staticagents.serving.stream import BATCH_FRAMES, CutOff, paced, send_paced

START = 1000.0  # the fake loop's clock when a test begins


class FakePacer:
    """The pacer's interface (``place``, ``until``, ``sent``, ``loop.time``) on a fake clock:
    waiting until a time moves the clock there at once; ``hold`` makes the next wait last
    until the test ends it."""

    def __init__(self, begins_after: float = 0.0) -> None:
        self.now = START
        self.loop = self  # the sender reads the loop's clock: ``timer.loop.time()``
        self.begins_after = begins_after  # how long the stream is held before it may begin
        self.waited: list[float] = []  # the times the sender waited until
        self.sent_count = 0
        self.places = 0  # streams between place and its end
        self.hold = False
        self.holding: asyncio.Future[None] | None = None

    def time(self) -> float:
        return self.now

    def clock(self) -> float:  # what sends are timed with
        return self.now

    @contextlib.asynccontextmanager
    async def place(self) -> AsyncIterator[None]:
        self.now += self.begins_after
        self.places += 1
        try:
            yield
        finally:
            self.places -= 1

    def until(self, when: float) -> asyncio.Future[None]:
        waiter = asyncio.get_running_loop().create_future()
        self.waited.append(when)
        if self.hold:
            self.holding = waiter
        else:
            self.now = max(self.now, when)
            waiter.set_result(None)
        return waiter

    def sent(self, started: float) -> None:
        self.sent_count += 1


class Client:
    """Receives the writes: each batch with the fake clock's time since START when it left.

    A write takes ``write_takes`` seconds of the clock (a slow send: the loop is busy)."""

    def __init__(self, pacer: FakePacer, write_takes: float = 0.0) -> None:
        self.pacer = pacer
        self.write_takes = write_takes
        self.writes: list[tuple[float, list[str]]] = []
        self.finished: list[tuple[float, list[str]]] = []

    async def write(self, batch: list[str]) -> None:
        self.writes.append((round(self.pacer.now - START, 6), batch))
        self.pacer.now += self.write_takes

    async def finish(self, batch: list[str]) -> None:
        self.finished.append((round(self.pacer.now - START, 6), batch))


def names(frames: list[TimedFrame]) -> list[str]:
    return [frame.data for frame in frames]


def script(*offsets: float) -> list[TimedFrame]:
    return [TimedFrame(at, f"f{at:g}") for at in offsets]


async def test_each_frame_leaves_at_its_offset_from_the_stream_start() -> None:
    pacer = FakePacer(begins_after=5.0)  # held 5 s before it may begin: its start is then
    client = Client(pacer)
    stopped = await send_paced(
        script(0.0, 0.01, 0.03), names, client.write, finish=client.finish, timer=pacer
    )
    assert stopped is None
    assert client.writes == [(5.0, ["f0"]), (5.01, ["f0.01"])]
    assert client.finished == [(5.03, ["f0.03"])]  # the last frames end the stream in one write
    assert pacer.waited == pytest.approx([START + 5.01, START + 5.03])
    assert pacer.places == 0


async def test_frames_due_together_go_out_in_one_write_and_later_ones_keep_their_time() -> None:
    pacer = FakePacer()
    client = Client(pacer, write_takes=0.05)  # each send keeps the loop 50 ms
    frames = script(0.0, 0.01, 0.02, 0.03, 0.1, 0.1)
    assert await send_paced(frames, names, client.write, timer=pacer) is None
    assert client.writes == [
        (0.0, ["f0"]),
        (0.05, ["f0.01", "f0.02", "f0.03"]),  # late: all three were due when the loop got there
        (0.1, ["f0.1", "f0.1"]),  # absolute offsets: 0.1 s after the start, not after the delay
    ]
    assert pacer.sent_count == 2  # every write mid-stream is reported to the pacer


async def test_a_stream_due_all_at_once_is_one_write_and_waits_for_no_place() -> None:
    pacer = FakePacer(begins_after=5.0)  # a paced stream would be held 5 s
    client = Client(pacer)
    frames = script(0.0, 0.0, 0.0)
    assert not paced(Timing()) and paced(Timing(word_delay_ms=10))
    assert paced(Timing(first_delay_ms=1))
    stopped = await send_paced(
        frames, names, client.write, finish=client.finish, timer=pacer, paced=False
    )
    assert stopped is None
    assert client.writes == [] and client.finished == [(0.0, ["f0", "f0", "f0"])]
    assert pacer.waited == []


async def test_an_unpaced_stream_is_taken_lazily_and_written_a_bounded_batch_at_a_time() -> None:
    pacer = FakePacer()
    client = Client(pacer)
    taken: list[int] = []
    written_after: list[int] = []

    def frames() -> Iterator[TimedFrame]:
        for n in range(2 * BATCH_FRAMES + 10):
            taken.append(n)
            yield TimedFrame(0.0, f"f{n}")

    async def write(batch: list[str]) -> None:
        written_after.append(len(taken))
        await client.write(batch)

    stopped = await send_paced(
        frames(), names, write, finish=client.finish, timer=pacer, paced=False
    )
    assert stopped is None
    assert [len(batch) for _, batch in client.writes] == [BATCH_FRAMES, BATCH_FRAMES]
    assert written_after == [BATCH_FRAMES, 2 * BATCH_FRAMES]  # nothing rendered ahead
    assert [len(batch) for _, batch in client.finished] == [10]
    assert pacer.waited == []


async def test_a_stream_with_nothing_left_to_send_still_finishes() -> None:
    pacer = FakePacer()
    client = Client(pacer)
    assert await send_paced([], names, client.write, finish=client.finish, timer=pacer) is None
    assert client.writes == [] and client.finished == [(0.0, [])]


async def test_a_stream_past_the_maximum_is_cut_off_at_the_limit_once(
    transactional_db: None, settings: Any
) -> None:
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.25
    entry = await database_sync_to_async(JournalEntry.objects.create)(
        dialect="openai",
        route="/v1/chat/completions",
        session="s",
        agent_type="router",
        outcome="answered",
    )
    read: list[float] = []

    def frames() -> Iterator[TimedFrame]:
        for frame in script(0.0, 0.1, 0.2, 0.3, 0.4):
            read.append(frame.at)
            yield frame

    pacer = FakePacer()
    client = Client(pacer)
    stopped = await send_paced(
        frames(), names, client.write, finish=client.finish, entry_id=entry.pk, timer=pacer
    )
    assert stopped == CutOff(0.25)
    assert client.writes == [(0.0, ["f0"]), (0.1, ["f0.1"]), (0.2, ["f0.2"])]
    assert client.finished == []  # the response stays open for the dialect's own cut-off frame
    assert pacer.waited[-1] == pytest.approx(START + 0.25)  # it ends at the limit, not before
    assert read == [0.0, 0.1, 0.2, 0.3]  # nothing past the first frame beyond the limit
    await database_sync_to_async(entry.refresh_from_db)()
    assert entry.outcome == "cut_off"


async def test_a_client_that_leaves_stops_the_stream_and_gives_up_its_place() -> None:
    pacer = FakePacer()
    client = Client(pacer)
    sending = asyncio.create_task(
        send_paced(script(0.0, 0.5, 1.0), names, client.write, finish=client.finish, timer=pacer)
    )
    pacer.hold = True  # the stream waits for its second frame when its client leaves
    while pacer.holding is None:
        await asyncio.sleep(0)
    sending.cancel()  # as the reply route's watcher and the WebSocket consumer do
    with pytest.raises(asyncio.CancelledError):
        await sending
    assert client.writes == [(0.0, ["f0"])]
    assert client.finished == []
    assert pacer.places == 0
