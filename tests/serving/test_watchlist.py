"""The watchlist starts a watcher only for answers that run long, and then stops its timer.

Both run in virtual time (``virtual_time.py``): the loop's clock moves as the test scripts
it, however busy the machine."""

from __future__ import annotations

import asyncio

from staticagents.serving.watchlist import Watchlist
from tests.serving.virtual_time import in_virtual_time


@in_virtual_time
async def test_only_an_answer_that_runs_long_gets_its_watcher_started() -> None:
    answers = Watchlist(asyncio.get_running_loop(), after=0.02)
    started: list[str] = []
    quick, slow = object(), object()
    answers.add(quick, lambda: started.append("quick"))
    answers.add(slow, lambda: started.append("slow"))
    await asyncio.sleep(0.005)
    answers.discard(quick)  # answered within the moment: never watched
    await asyncio.sleep(0.05)
    assert started == ["slow"]
    assert not answers.answering and answers.timer is None  # nothing left: the timer stopped


@in_virtual_time
async def test_an_answer_is_watched_once_it_has_run_the_delay_and_not_before() -> None:
    loop = asyncio.get_running_loop()
    answers = Watchlist(loop, after=0.02)
    answers.add(object(), lambda: None)  # keeps the timer running
    await asyncio.sleep(0.015)
    watched = loop.create_future()
    began = loop.time()
    answers.add(object(), lambda: watched.set_result(loop.time()))
    at = await asyncio.wait_for(watched, timeout=1)
    assert at - began >= 0.02  # the check that came 5 ms after it began left it alone
