"""Stream timing: how far real chunk arrival drifts from the script, many streams at once.

Starts ``manage.py serve`` on a scratch database with one rule (WORDS words, a
word every DELAY ms), opens STREAMS concurrent streams on the OpenAI (or
Anthropic) route, and for every content chunk measures

    drift = arrival time - (stream start + scripted offset)

where the stream start is the arrival of the stream's first event (sent at
offset 0, before any content) and the scripted offset is
``first_delay + i * word_delay``. Reports p50/p90/p99/max of the drift, and the
time to the first event (which includes matching and the journal write).

The client reads each stream through a bare protocol on one event loop (uvloop
when installed) so that its own overhead stays small; it shares the machine's
cores with the server, as a test suite would, so what it measures is the drift
a client sees, end to end.

With ``--beside-json N``, wrk keeps the same server busy with JSON replies over
N connections, from 2 s before the streams open until they end: streams beside
a load test, where the server must neither hold them back for the load's sake
nor let the load make them stutter.

    python -m bench.stream_drift [--streams 100] [--words 50] [--delay-ms 10]
                                 [--first-ms 0] [--dialect openai|anthropic]
                                 [--beside-json CONNECTIONS]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import tempfile
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from bench.servers import Load, Server, parse_wrk, serve, wrk_command

T = TypeVar("T")
QUERY = "#drift"
JSON_QUERY = "#json"  # the question of the JSON replies beside the streams
# Bytes that occur once per content chunk, and once in the stream's first event.
CONTENT_MARKERS = {"openai": b'"delta":{"content":', "anthropic": b'"type":"text_delta"'}
FIRST_MARKERS = {"openai": b'"role":"assistant"', "anthropic": b'"type":"message_start"'}


@dataclass
class Stream:
    sent: float = 0.0
    first: float | None = None
    chunks: list[float] = field(default_factory=list)
    complete: bool = False


def fixture(directory: Path, words: int, delay_ms: int, first_ms: int) -> Path:
    content = " ".join(f"word{i}" for i in range(1, words + 1))
    rule = {
        "name": "drift",
        "match": {"contains": QUERY},
        "response": {
            "content": content,
            "stream": {"first_delay_ms": first_ms, "word_delay_ms": delay_ms},
        },
    }
    beside = {"name": "json", "match": {"contains": JSON_QUERY}, "response": {"content": "ok"}}
    path = directory / "drift.yml"
    path.write_text(yaml.safe_dump({"rules": [rule, beside]}))
    return path


@contextmanager
def json_load(server: Server, directory: Path, connections: int) -> Iterator[list[Load]]:
    """wrk driving JSON replies on ``server`` from 2 s before the block until its end;
    what it measured is added to the list yielded, after the block."""
    body = directory / "json.json"
    question = {"role": "user", "content": JSON_QUERY}
    body.write_text(json.dumps({"model": "bench", "messages": [question]}))
    url = server.url + "/v1/chat/completions"
    command, env = wrk_command(url, body, seconds=3600, connections=connections)
    load = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    measured: list[Load] = []
    try:
        time.sleep(2)
        yield measured
    finally:
        load.send_signal(signal.SIGINT)  # wrk stops and reports
        output, _ = load.communicate(timeout=30)
    measured.append(parse_wrk(output))


def request(dialect: str, port: int, session: int) -> bytes:
    if dialect == "openai":
        path, body = (
            "/v1/chat/completions",
            {"model": "bench", "stream": True, "messages": [{"role": "user", "content": QUERY}]},
        )
    else:
        path, body = (
            "/v1/messages",
            {
                "model": "bench",
                "max_tokens": 100,
                "stream": True,
                "messages": [{"role": "user", "content": QUERY}],
            },
        )
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        f"X-Static-Session: drift-{session}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + payload


class StreamReader(asyncio.Protocol):
    """Timestamps one stream's chunks as its bytes arrive: a bare protocol, with no
    reader task to wake per read, so the client's own lateness stays small."""

    def __init__(self, dialect: str, stream: Stream, done: asyncio.Future[None]) -> None:
        self.content, self.first = CONTENT_MARKERS[dialect], FIRST_MARKERS[dialect]
        self.stream, self.done = stream, done
        self.tail = b""

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        stream, window = self.stream, self.tail + data  # a marker may straddle two reads
        if stream.first is None and self.first in window:
            stream.first = now
        stream.chunks += [now] * window.count(self.content)
        self.tail = window[-(len(self.content) - 1) :]
        if b"[DONE]" in data or b"message_stop" in data:
            stream.complete = True

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def run_stream(dialect: str, port: int, session: int, stream: Stream) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    transport, _ = await loop.create_connection(
        lambda: StreamReader(dialect, stream, done), "127.0.0.1", port
    )
    stream.sent = time.perf_counter()
    transport.write(request(dialect, port, session))
    await done  # the server closes the connection after the stream (Connection: close)
    transport.close()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def drifts(streams: list[Stream], words: int, delay_ms: int, first_ms: int) -> list[float]:
    result = []
    for stream in streams:
        assert stream.first is not None
        for index, arrival in enumerate(stream.chunks[:words]):
            scripted = (first_ms + index * delay_ms) / 1000
            result.append((arrival - stream.first - scripted) * 1000)
    return result


def summary(
    streams: list[Stream], args: argparse.Namespace, elapsed: float, beside: Load | None = None
) -> dict[str, Any]:
    """The figures of one run: completion, chunk rate, drift and time to first event, and the
    JSON replies a second that wrk had answered beside the streams (``--beside-json``)."""
    complete = sum(1 for s in streams if s.complete and len(s.chunks) == args.words)
    values = drifts(streams, args.words, args.delay_ms, args.first_ms)
    ttfb = [((s.first or s.sent) - s.sent) * 1000 for s in streams]
    return {
        "streams": args.streams,
        "complete": complete,
        "chunks/s": round(len(values) / elapsed),
        "drift p50 ms": round(percentile(values, 0.5), 2),
        "drift p99 ms": round(percentile(values, 0.99), 2),
        "drift max ms": round(max(values), 2),
        "first event p50 ms": round(percentile(ttfb, 0.5), 1),
        "first event p99 ms": round(percentile(ttfb, 0.99), 1),
        "seconds": round(elapsed, 2),
        "JSON replies/s beside": round(beside.requests_per_second) if beside else "-",
    }


def report(figures: dict[str, Any], args: argparse.Namespace) -> None:
    script_ms = args.first_ms + (args.words - 1) * args.delay_ms
    beside = f", beside a JSON load ({args.beside_json} connections)" if args.beside_json else ""
    print(
        f"{args.streams} concurrent {args.dialect} streams, {args.words} words every "
        f"{args.delay_ms} ms (script {script_ms} ms){beside}"
    )
    for name, value in figures.items():
        if value != "-":  # a figure this run has not measured
            print(f"  {name:<22} {value}")


async def measure(args: argparse.Namespace, port: int) -> tuple[list[Stream], float]:
    streams = [Stream() for _ in range(args.streams)]
    await run_stream(args.dialect, port, -1, Stream())  # warm up: snapshot, connections
    started = time.perf_counter()
    await asyncio.gather(*(run_stream(args.dialect, port, i, s) for i, s in enumerate(streams)))
    return streams, time.perf_counter() - started


def run_client(work: Coroutine[Any, Any, T]) -> T:
    """Run the client on uvloop when it is there (uvicorn's own loop), to keep its overhead low."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(work)
    return uvloop.run(work)


def measure_served(args: argparse.Namespace) -> dict[str, Any]:
    """Start a server for the shape in ``args``, measure once, and return the summary."""
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        rules = fixture(directory, args.words, args.delay_ms, args.first_ms)
        database = f"sqlite:///{directory / 'drift.sqlite3'}"
        with serve("static-agents", database_url=database, fixture=rules) as server:
            if not args.beside_json:
                streams, elapsed = run_client(measure(args, server.port))
                return summary(streams, args, elapsed)
            with json_load(server, directory, args.beside_json) as beside:
                streams, elapsed = run_client(measure(args, server.port))
            return summary(streams, args, elapsed, beside[0])


def run(
    streams: int = 1000, words: int = 50, delay_ms: int = 10, beside_json: int = 0
) -> dict[str, Any]:
    """Measure once with the given shape and return the summary (for bench.run)."""
    return measure_served(
        argparse.Namespace(
            streams=streams,
            words=words,
            delay_ms=delay_ms,
            first_ms=0,
            dialect="openai",
            beside_json=beside_json,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--words", type=int, default=50)
    parser.add_argument("--delay-ms", type=int, default=10)
    parser.add_argument("--first-ms", type=int, default=0)
    parser.add_argument("--dialect", choices=sorted(CONTENT_MARKERS), default="openai")
    parser.add_argument(
        "--beside-json",
        type=int,
        default=0,
        metavar="CONNECTIONS",
        help="keep the server busy with JSON replies over this many wrk connections meanwhile",
    )
    args = parser.parse_args()
    report(measure_served(args), args)


if __name__ == "__main__":
    main()
