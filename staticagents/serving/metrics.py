"""Prometheus metrics (``GET /metrics``): requests, reply latency, open streams, journal size.

Counted by ``serving.telemetry`` for every request (``RequestTally``), and by the
paced sender for streams. With several workers (``serve --workers N``), ``serve``
gives them one fresh directory in ``PROMETHEUS_MULTIPROC_DIR`` before they start,
and prometheus-client's multiprocess mode sums what every worker wrote there, so
a scrape that lands on any worker reports the whole service. The journal's size
is read from the database at each scrape.

The route itself: ``control.metrics``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

registry = CollectorRegistry()  # this process's own (one worker)

REQUESTS = Counter(
    "static_agents_requests",
    "Requests served, by dialect, journal outcome (none: not journaled) and HTTP status.",
    ["dialect", "outcome", "status"],
    registry=registry,
)
REPLY_BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REPLY_SECONDS = Histogram(
    "static_agents_reply_seconds",
    "Seconds from a request's arrival to the start of its response, by dialect.",
    ["dialect"],
    buckets=REPLY_BOUNDS,
    registry=registry,
)
STREAMS_OPEN = Gauge(
    "static_agents_streams_open",
    "Streams being sent (SSE and WebSocket).",
    multiprocess_mode="livesum",
    registry=registry,
)

LIVE_DROPPED = Counter(
    "static_agents_live_dropped",
    "Live journal events let go: not published (queue full, channel layer down) or not "
    "delivered (a subscriber read too slowly).",
    ["where"],
    registry=registry,
)


class RequestTally:
    """``REQUESTS`` and ``REPLY_SECONDS``, counted for each request in plain numbers and
    handed to prometheus-client at the loop's next turn, in one go.

    prometheus-client takes a lock at each count (and with several workers writes a
    shared file), and its histogram takes one observation at a time. Here a request
    adds to a count of its labels and to its latency bucket's count; the next turn adds
    each count to prometheus-client's values at once, the histogram's through its buckets
    and sum (``_buckets``, ``_sum``: not public, so tests/serving/test_request_tally.py
    reads them back as a scrape does). Handing a turn's counts on together cost a reply
    1.5 µs less of its 77 under wrk, and the histogram's observations took more than the
    rest of the count (bench/README.md, "fifth session", "sixth session"). They are
    handed on before the loop reads more requests, so a scrape that follows a reply, on
    any worker, counts it. Each thread (each loop) has a tally of its own:
    ``request_tally()``.
    """

    __slots__ = ("due_on", "latency", "requests")

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, int], int] = {}
        # By dialect: the seconds' sum, then the count in each bucket (the last: +Inf).
        self.latency: dict[str, list[float]] = {}
        self.due_on: asyncio.AbstractEventLoop | None = None  # the loop to hand them on

    def count(self, dialect: str, outcome: str, status: int, seconds: float) -> None:
        """One request (on the running loop): its labels, and its seconds to a response."""
        requests, key = self.requests, (dialect, outcome, status)
        requests[key] = requests.get(key, 0) + 1
        tallied = self.latency.get(dialect)
        if tallied is None:
            tallied = self.latency[dialect] = [0.0] * (len(REPLY_BOUNDS) + 2)
        tallied[0] += seconds
        tallied[1 + bisect_left(REPLY_BOUNDS, seconds)] += 1  # the first bound it is within
        due_on = self.due_on
        if due_on is None or due_on.is_closed():  # closed: its hand-on never ran
            self.due_on = loop = asyncio.get_running_loop()
            loop.call_soon(self.hand_on)

    def hand_on(self) -> None:
        requests, latency = self.requests, self.latency
        self.requests, self.latency, self.due_on = {}, {}, None
        for (dialect, outcome, status), count in requests.items():
            REQUESTS.labels(dialect, outcome or "none", str(status)).inc(count)
        for dialect, (seconds, *counts) in latency.items():
            child: Any = REPLY_SECONDS.labels(dialect)
            child._sum.inc(seconds)
            for bucket, observed in zip(child._buckets, counts, strict=True):
                if observed:
                    bucket.inc(observed)


_tallies = threading.local()


def request_tally() -> RequestTally:
    """This thread's tally. Held in a plain object: each attribute read of a
    ``threading.local`` looks up the thread's own dictionary first."""
    try:
        tally: RequestTally = _tallies.tally
    except AttributeError:
        tally = _tallies.tally = RequestTally()
    return tally


class JournalSize(Collector):
    """The journal's entries, counted when scraped."""

    def collect(self) -> Iterator[Metric]:
        from staticagents.models import JournalEntry

        entries = JournalEntry.objects.count()
        yield GaugeMetricFamily(
            "static_agents_journal_entries", "Entries in the request journal.", value=entries
        )


registry.register(JournalSize())


def scraped_registry() -> CollectorRegistry:
    """What a scrape reports: every worker's metrics in multiprocess mode, else this one's."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return registry
    every_worker = CollectorRegistry()
    MultiProcessCollector(every_worker)  # type: ignore[no-untyped-call]
    every_worker.register(JournalSize())
    return every_worker
