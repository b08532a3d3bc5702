"""Prometheus metrics (``GET /metrics``): requests, reply latency, open streams, journal size.

Counted by ``serving.telemetry`` for every request, and by the paced sender for
streams. With several workers (``serve --workers N``), ``serve`` gives them one
fresh directory in ``PROMETHEUS_MULTIPROC_DIR`` before they start, and
prometheus-client's multiprocess mode sums what every worker wrote there, so a
scrape that lands on any worker reports the whole service. The journal's size
is read from the database at each scrape.

The route itself: ``control.metrics``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

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
REPLY_SECONDS = Histogram(
    "static_agents_reply_seconds",
    "Seconds from a request's arrival to the start of its response, by dialect.",
    ["dialect"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
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
