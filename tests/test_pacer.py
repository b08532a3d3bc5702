"""The pacer wakes paced streams at their frames' times, one timer per millisecond."""

from __future__ import annotations

import asyncio

import uvloop

from staticagents.transport.pacer import SLOT_SECONDS, Pacer

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


async def test_nobody_wakes_before_their_time_nor_long_after() -> None:
    pacer = Pacer(asyncio.get_running_loop())
    lateness = await wake_times(pacer, [0.0005, 0.003, 0.0031, 0.012, 0.02])
    assert all(late > -EPSILON for late in lateness), lateness
    assert all(late < 0.05 for late in lateness), lateness  # generous: a shared CI machine
    assert pacer.slots == {}  # every slot was woken and dropped


async def test_waiters_due_in_the_same_millisecond_share_one_timer() -> None:
    loop = asyncio.get_running_loop()
    pacer = Pacer(loop)
    slot_start = (int(loop.time() / SLOT_SECONDS) + 5) * SLOT_SECONDS
    futures = [pacer.until(slot_start + SLOT_SECONDS * k / 10) for k in range(1, 10)]
    assert len(pacer.slots) == 1 and len(next(iter(pacer.slots.values()))) == 9
    await asyncio.gather(*futures)
    assert loop.time() >= slot_start + SLOT_SECONDS * 0.9


async def test_a_cancelled_waiter_is_dropped_and_the_others_still_wake() -> None:
    pacer = Pacer(asyncio.get_running_loop())
    when = pacer.loop.time() + 0.002
    gone, kept = pacer.until(when), pacer.until(when)
    gone.cancel()
    await kept
    assert gone.cancelled() and kept.result() is None


def test_the_pacer_works_on_uvloop_as_served() -> None:
    async def main() -> list[float]:
        return await wake_times(Pacer(asyncio.get_running_loop()), [0.001, 0.004, 0.004])

    lateness = uvloop.run(main())
    assert all(-EPSILON < late < 0.05 for late in lateness), lateness
