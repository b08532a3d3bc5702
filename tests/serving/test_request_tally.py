"""Request metrics counted in plain numbers and handed to prometheus-client once a turn."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from staticagents.serving.metrics import REPLY_SECONDS, REQUESTS, RequestTally


def sample(metric: Any, name: str, labels: dict[str, str]) -> float | None:
    """The value of one of ``metric``'s samples, as a scrape reads it (None: no such series)."""
    for family in metric.collect():
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return float(found.value)
    return None


def requests_counted(dialect: str, outcome: str, status: str) -> float | None:
    labels = {"dialect": dialect, "outcome": outcome, "status": status}
    return sample(REQUESTS, "static_agents_requests_total", labels)


def seconds_counted(dialect: str, suffix: str, **labels: str) -> float | None:
    name = f"static_agents_reply_seconds_{suffix}"
    return sample(REPLY_SECONDS, name, {"dialect": dialect, **labels})


def test_a_turns_requests_reach_the_metrics_at_the_loops_next_turn() -> None:
    dialect = f"tally-{uuid.uuid4().hex[:8]}"  # series of this test's own
    tally = RequestTally()

    async def serve() -> tuple[float | None, float | None]:
        for _ in range(3):
            tally.count(dialect, "answered", 200, 0.002)
        tally.count(dialect, "", 404, 0.2)
        before = requests_counted(dialect, "answered", "200")
        await asyncio.sleep(0)  # the loop's next turn
        return before, requests_counted(dialect, "answered", "200")

    before, after = asyncio.run(serve())

    assert before is None and after == 3
    assert requests_counted(dialect, "none", "404") == 1
    assert seconds_counted(dialect, "count") == 4
    assert seconds_counted(dialect, "sum") == 3 * 0.002 + 0.2
    assert seconds_counted(dialect, "bucket", le="0.0025") == 3
    assert seconds_counted(dialect, "bucket", le="0.25") == 4


def test_requests_of_a_loop_that_closed_first_are_counted_with_the_next_ones() -> None:
    dialect = f"tally-{uuid.uuid4().hex[:8]}"
    tally = RequestTally()

    def one_request_then_stop() -> None:
        tally.count(dialect, "answered", 200, 0.001)
        loop.stop()  # and closed before its next turn

    loop = asyncio.new_event_loop()
    loop.call_soon(one_request_then_stop)
    loop.run_forever()
    loop.close()
    assert requests_counted(dialect, "answered", "200") is None

    async def next_request() -> None:
        tally.count(dialect, "answered", 200, 0.001)
        await asyncio.sleep(0)

    asyncio.run(next_request())
    assert requests_counted(dialect, "answered", "200") == 2
    assert seconds_counted(dialect, "count") == 2
