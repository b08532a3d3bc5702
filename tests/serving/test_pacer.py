"""The pacer wakes paced streams at their frames' times, one timer per millisecond, and holds
new streams back while the loop has no room for them.

Most run in virtual time (``virtual_time.py``): a long turn of the loop is one that ``take``s
long, so what the pacer measures is what the test scripts, however busy the machine. Those on
uvloop and on both loops run on real loops, and assert only what a busy machine cannot undo:
order, and lateness that it only adds to."""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import suppress

import pytest
import uvloop

from staticagents.serving.pacer import (
    ALWAYS_RUNNING,
    BEHIND_SECONDS,
    HOLD_LIMIT_SECONDS,
    SEND_CEILING_SECONDS,
    SLOT_SECONDS,
    STREAM_SHARE,
    Pacer,
)
from tests.serving.virtual_time import in_virtual_time, take

# Loop times are floats: "on time" may differ from the scripted time in its last bits.
EPSILON = 1e-9


async def wake_times(pacer: Pacer, offsets: list[float]) -> list[float]:
    """Wait for each offset (seconds from now) at once; how late each woke, in seconds."""
    loop = pacer.loop
    start = loop.time()

    async def wait(offset: float) -> float:
        await pacer.until(start + offset)
        return loop.time() - (start + offset)

    return list(await asyncio.gather(*(wait(offset) for offset in offsets)))


def virtual_pacer(hold_limit: float = HOLD_LIMIT_SECONDS) -> Pacer:
    """A pacer of the running virtual-time loop, timing sends on the same clock."""
    loop = asyncio.get_running_loop()
    return Pacer(loop, hold_limit, clock=loop.time)


@in_virtual_time
async def test_nobody_wakes_before_their_time_nor_after_its_millisecond() -> None:
    pacer = virtual_pacer()
    lateness = await wake_times(pacer, [0.0005, 0.003, 0.0031, 0.012, 0.02])
    assert all(-EPSILON < late < SLOT_SECONDS for late in lateness), lateness
    assert pacer.slots == {}  # every slot was woken and dropped


@in_virtual_time
async def test_waiters_due_in_the_same_millisecond_share_one_timer() -> None:
    pacer = virtual_pacer()
    loop = pacer.loop
    slot_start = (int(loop.time() / SLOT_SECONDS) + 5) * SLOT_SECONDS
    futures = [pacer.until(slot_start + SLOT_SECONDS * k / 10) for k in range(1, 10)]
    assert len(pacer.slots) == 1 and len(next(iter(pacer.slots.values()))) == 9
    await asyncio.gather(*futures)
    assert loop.time() >= slot_start + SLOT_SECONDS * 0.9


@in_virtual_time
async def test_a_cancelled_waiter_is_dropped_and_the_others_still_wake() -> None:
    pacer = virtual_pacer()
    when = pacer.loop.time() + 0.002
    gone, kept = pacer.until(when), pacer.until(when)
    gone.cancel()
    await kept
    assert gone.cancelled() and kept.result() is None


def test_the_pacer_works_on_uvloop_as_served() -> None:
    async def main() -> tuple[list[float], list[bool]]:
        pacer = Pacer(asyncio.get_running_loop())
        loop, start = pacer.loop, pacer.loop.time()
        lateness: list[float] = []
        woken_first: list[bool] = []  # by the time uvloop's own timer, due a ms later, runs
        for offset in (0.001, 0.004, 0.004):
            when = start + offset
            waiter = pacer.until(when)
            waiter.add_done_callback(lambda _, when=when: lateness.append(loop.time() - when))
            after = (math.ceil(when / SLOT_SECONDS) + 1) * SLOT_SECONDS
            loop.call_at(after, lambda waiter=waiter: woken_first.append(waiter.done()))
        while len(woken_first) < 3:
            await asyncio.sleep(SLOT_SECONDS)
        return lateness, woken_first

    # Timers' order, not their times: a busy machine may make a whole turn late.
    lateness, woken_first = uvloop.run(main())
    assert len(lateness) == 3 and all(late > -EPSILON for late in lateness), lateness
    assert woken_first == [True, True, True]


# -- holding new streams back -------------------------------------------------------------


async def make_late(pacer: Pacer, seconds: float) -> None:
    """One long turn of the loop: a wake-up due in a millisecond comes ``seconds`` late."""
    woke = pacer.until(pacer.loop.time() + SLOT_SECONDS)
    take(seconds)  # blocks the loop, as a turn with too much work would
    await woke


def fill(pacer: Pacer) -> None:
    """Begin the streams that always run, so that the next ones depend on the loop's room."""
    assert [pacer.begin() for _ in range(ALWAYS_RUNNING)] == [None] * ALWAYS_RUNNING


@in_virtual_time
async def test_streams_begin_at_once_while_the_loop_keeps_time() -> None:
    pacer = virtual_pacer()
    await pacer.until(pacer.loop.time() + 0.002)
    assert pacer.late <= BEHIND_SECONDS
    places = [pacer.begin() for _ in range(ALWAYS_RUNNING + 10)]
    assert places == [None] * (ALWAYS_RUNNING + 10)
    assert pacer.running == ALWAYS_RUNNING + 10
    for place in places:
        pacer.end(place)
    assert pacer.running == 0


@in_virtual_time
async def test_a_late_loop_holds_new_streams_then_lets_them_begin_in_arrival_order() -> None:
    pacer = virtual_pacer()
    fill(pacer)
    await make_late(pacer, 0.02)
    assert pacer.late > BEHIND_SECONDS
    held = [pacer.begin() for _ in range(5)]
    assert None not in held and pacer.running == ALWAYS_RUNNING
    begun: list[int] = []
    for index, place in enumerate(held):
        assert place is not None
        place.add_done_callback(lambda _, index=index: begun.append(index))
    # The wake-ups that follow find the loop on time again.
    await asyncio.wait_for(asyncio.gather(*held), 5)  # type: ignore[arg-type]
    assert begun == [0, 1, 2, 3, 4]
    assert pacer.running == ALWAYS_RUNNING + 5
    assert pacer.late <= BEHIND_SECONDS


async def keep_busy(pacer: Pacer, sending: bool) -> None:
    """Turns that wake on time but keep the loop busy almost to the next wake-up: with
    ``sending``, busy with the streams' writes (reported as ``send_paced`` reports them),
    else with other work. Until the pacer has seen a few of them, the last one on time."""
    loop = pacer.loop
    deadline = loop.time() + 5
    turns = 0
    while turns < 20 or (sending and pacer.share <= STREAM_SHARE) or pacer.late > BEHIND_SECONDS:
        assert loop.time() < deadline, (pacer.share, pacer.late)
        woke = pacer.until(loop.time() + SLOT_SECONDS)
        for _ in range(3):  # three sends, or the same time of other work
            started = pacer.clock()
            take(0.0005)
            if sending:
                pacer.sent(started)
        await woke
        turns += 1


@in_virtual_time
async def test_streams_that_take_much_of_the_loop_hold_new_ones_back_until_there_is_room() -> None:
    pacer = virtual_pacer()
    fill(pacer)
    await keep_busy(pacer, sending=True)
    place = pacer.begin()
    assert place is not None and pacer.running == ALWAYS_RUNNING
    await asyncio.wait_for(place, 5)  # no more writes: their share falls, and it begins
    assert pacer.share <= STREAM_SHARE and pacer.running == ALWAYS_RUNNING + 1


@in_virtual_time
async def test_a_loop_busy_with_other_work_lets_streams_begin() -> None:
    pacer = virtual_pacer()
    fill(pacer)
    await keep_busy(pacer, sending=False)  # JSON replies under a load test, say
    assert pacer.share == 0.0
    assert pacer.begin() is None


def test_a_send_that_waited_for_its_client_is_not_counted_as_the_loops_work() -> None:
    now = 100.0
    pacer = Pacer(asyncio.new_event_loop(), clock=lambda: now)
    pacer.sent(now - SEND_CEILING_SECONDS / 10)  # written at once
    assert 0 < pacer.spent < SEND_CEILING_SECONDS
    written = pacer.spent
    pacer.sent(now - 0.5)  # waited for a slow reader (flow control)
    assert pacer.spent == written
    pacer.loop.close()


@in_virtual_time
async def test_a_few_streams_always_begin_however_late_the_loop() -> None:
    pacer = virtual_pacer()
    await make_late(pacer, 0.02)
    await make_late(pacer, 0.02)  # every wake-up late: the pacer never finds room
    assert [pacer.begin() for _ in range(ALWAYS_RUNNING)] == [None] * ALWAYS_RUNNING
    assert pacer.begin() is not None


@in_virtual_time
async def test_no_stream_is_held_longer_than_the_limit_however_busy_the_loop() -> None:
    pacer = virtual_pacer(hold_limit=0.05)
    loop = pacer.loop
    fill(pacer)
    await make_late(pacer, 0.02)
    asked = loop.time()
    place = pacer.begin()
    assert place is not None
    while not place.done():  # every turn of the loop late: never room
        await make_late(pacer, 0.005)
        assert loop.time() - asked < 5
    assert pacer.late > BEHIND_SECONDS  # it began without room, at the limit
    assert loop.time() - asked > 0.05 - EPSILON
    assert pacer.running == ALWAYS_RUNNING + 1


@in_virtual_time
async def test_a_stream_that_gives_up_while_held_gives_up_its_place() -> None:
    pacer = virtual_pacer()
    fill(pacer)
    streamed: list[str] = []

    async def stream(name: str) -> None:
        async with pacer.place():
            streamed.append(name)

    await make_late(pacer, 0.02)
    leaving, staying = (asyncio.create_task(stream(n)) for n in ("leaving", "staying"))
    await asyncio.sleep(0)
    assert len(pacer.held) == 2 and pacer.running == ALWAYS_RUNNING
    leaving.cancel()
    with suppress(asyncio.CancelledError):
        await leaving
    await asyncio.wait_for(staying, 5)
    assert streamed == ["staying"]
    assert pacer.running == ALWAYS_RUNNING  # "staying" ran and ended; "leaving" never began
    assert not pacer.held


@pytest.mark.parametrize("run", [uvloop.run, asyncio.run], ids=["uvloop", "asyncio"])
def test_a_late_turn_is_seen_on_both_loops(run: object) -> None:
    async def main() -> float:
        pacer = Pacer(asyncio.get_running_loop())
        # Slots come due all through one long turn: the first one's lateness counts, not
        # that of the last one, which came due just before the turn ended.
        woke = [pacer.until(pacer.loop.time() + k * SLOT_SECONDS) for k in (1, 5, 10, 19)]
        time.sleep(0.02)
        await asyncio.gather(*woke)
        return pacer.late

    assert run(main()) > BEHIND_SECONDS  # type: ignore[operator]


@in_virtual_time
async def test_a_stopping_service_wakes_every_waiting_stream_and_waits_no_more() -> None:
    pacer = virtual_pacer()
    loop = pacer.loop
    start = loop.time()
    waiting = [pacer.until(start + 60), pacer.until(start + 120)]
    running = [pacer.begin() for _ in range(ALWAYS_RUNNING)]
    await make_late(pacer, 0.02)
    held = pacer.begin()
    assert held is not None and not held.done()

    pacer.stop()

    assert all(waiter.done() for waiter in waiting) and held.done()
    assert pacer.running == ALWAYS_RUNNING + 1 and not pacer.held
    assert pacer.until(start + 300).done()  # no more waiting
    assert pacer.begin() is None  # nor holding back
    assert loop.time() - start < 0.1 and running == [None] * ALWAYS_RUNNING
