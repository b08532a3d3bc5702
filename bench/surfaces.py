"""Every reply surface against the OpenAI route, on one server in one run.

One server (``manage.py serve``, journal on, the replies benchmark's 100 rules)
answers wrk (2 threads, 32 connections) on ``POST /v1/chat/completions`` and on
each other reply surface in turn: Galaxy's agent query, error analysis, chat
and chat stream; ADK's ``/run`` and ``/run_sse`` (a new session each request,
as a test creates its own); and the WebSocket chat, driven by a client of 32
connections that each ask a question and read its reply to the ``done`` event
before asking the next. The OpenAI route is measured before the first surface
and after each one, so every surface's run sits between two of its runs: a
surface's ratio is its rate divided by their mean (the machine's speed drifts
less between neighbouring runs than over the whole table).

    python -m bench.surfaces [--seconds 10] [--connections 32] [--only galaxy-query,...]
                             [--tree ../earlier-checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.replies import QUESTION, fixtures
from bench.servers import ROOT, Load, Server, serve, wrk

UNIQUE_SCRIPT = ROOT / "bench" / "post_unique.lua"


@dataclass(frozen=True)
class Surface:
    name: str
    path: str
    body: dict[str, Any]
    unique: bool = False  # "{n}" in the body becomes a number unique to each request


ADK_MESSAGE = {"role": "user", "parts": [{"text": QUESTION}]}
SURFACES = [
    Surface("galaxy-query", "/api/ai/agents/query", {"query": QUESTION, "agent_type": "router"}),
    Surface("galaxy-error-analysis", "/api/ai/agents/error-analysis", {"query": QUESTION}),
    Surface("galaxy-chat", "/api/chat?agent_type=router", {"query": QUESTION}),
    Surface("galaxy-chat-stream", "/api/chat/stream?agent_type=router", {"query": QUESTION}),
    Surface(
        "adk-run",
        "/run",
        {"appName": "router", "userId": "bench", "sessionId": "s-{n}", "newMessage": ADK_MESSAGE},
        unique=True,
    ),
    Surface(
        "adk-run-sse",
        "/run_sse",
        {
            "appName": "router",
            "userId": "bench",
            "sessionId": "s-{n}",
            "newMessage": ADK_MESSAGE,
            "streaming": True,
        },
        unique=True,
    ),
]
OPENAI = Surface(
    "openai",
    "/v1/chat/completions",
    {"model": "static", "messages": [{"role": "user", "content": QUESTION}]},
)
WEBSOCKET = "websocket"


def drive(
    server: Server, surface: Surface, directory: Path, seconds: int, connections: int
) -> Load:
    body = directory / f"{surface.name}.json"
    body.write_text(json.dumps(surface.body))
    check = json.loads(json.dumps(surface.body).replace("{n}", "check"))
    httpx.post(server.url + surface.path, json=check, timeout=10).raise_for_status()
    script = UNIQUE_SCRIPT if surface.unique else None
    wrk(server.url + surface.path, body, seconds=1, connections=connections, script=script)
    assert server.process is not None
    return wrk(
        server.url + surface.path,
        body,
        seconds=seconds,
        connections=connections,
        script=script,
        server_pid=server.process.pid,
    )


# -- the WebSocket client ------------------------------------------------------------------


async def websocket_load(url: str, seconds: float, connections: int) -> Load:
    """Each connection asks, reads to ``done``, asks again; inquiries answered a second."""
    from websockets.asyncio.client import connect

    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds
    question = json.dumps({"query": QUESTION, "agent_type": "router"})

    async def client() -> None:
        nonlocal errors
        async with connect(url, max_size=None, compression=None) as socket:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                await socket.send(question)
                while True:
                    event = json.loads(await socket.recv())
                    if event["type"] == "error":
                        errors += 1
                    if event["type"] in ("done", "error"):
                        break
                latencies.append(time.perf_counter() - started)

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(connections)))
    took = time.perf_counter() - began
    latencies.sort()

    def percentile(share: float) -> float:
        return latencies[min(len(latencies) - 1, int(share * len(latencies)))] * 1000

    return Load(len(latencies) / took, percentile(0.5), percentile(0.99), errors)


def websocket_drive(server: Server, seconds: int, connections: int) -> Load:
    url = server.url.replace("http://", "ws://") + "/ws/chat/"
    runner = _loop_runner()
    runner(websocket_load(url, 1, connections))  # warm up
    return runner(websocket_load(url, seconds, connections))


def _loop_runner() -> Callable[[Any], Load]:
    try:
        import uvloop

        return lambda coroutine: uvloop.run(coroutine)  # type: ignore[no-any-return]
    except ImportError:
        return asyncio.run


# -- the table -----------------------------------------------------------------------------


def run(
    seconds: int = 10,
    connections: int = 32,
    only: list[str] | None = None,
    tree: Path = ROOT,
) -> list[dict[str, Any]]:
    """The table: each surface's run sits between two runs of the OpenAI route, and its
    ratio is to their mean, so a machine whose speed drifts (a shared one) skews it little."""
    names = only or [*(s.name for s in SURFACES), WEBSOCKET]
    with tempfile.TemporaryDirectory(prefix="sa-bench-") as tmp:
        directory = Path(tmp)
        fixture, _ = fixtures(directory)
        database = f"sqlite:///{directory / 'db.sqlite3'}"
        server = serve("static-agents", database_url=database, fixture=fixture, tree=tree)
        results: dict[str, tuple[Load, Load]] = {}  # the surface's, and the OpenAI route's
        with server:
            before = drive(server, OPENAI, directory, seconds, connections)
            openai_runs = [before]
            for name in names:
                if name == WEBSOCKET:
                    load = websocket_drive(server, seconds, connections)
                else:
                    surface = next(s for s in SURFACES if s.name == name)
                    load = drive(server, surface, directory, seconds, connections)
                after = drive(server, OPENAI, directory, seconds, connections)
                openai_runs.append(after)
                results[name] = load, mean_load(before, after)
                before = after
    rows = [row(f"{OPENAI.path} (mean of its runs)", mean_load(*openai_runs), None)]
    rows += [
        row(f"{name} {path_of(name)}", load, paired) for name, (load, paired) in results.items()
    ]
    return rows


def mean_load(*loads: Load) -> Load:
    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    cpu = [load.cpu_us for load in loads if load.cpu_us is not None]
    return Load(
        mean([load.requests_per_second for load in loads]),
        mean([load.p50_ms for load in loads]),
        mean([load.p99_ms for load in loads]),
        sum(load.errors for load in loads),
        mean(cpu) if cpu else None,
    )


def path_of(name: str) -> str:
    if name == WEBSOCKET:
        return "/ws/chat/ (inquiries)"
    return next(s.path for s in SURFACES if s.name == name).split("?")[0]


def row(name: str, load: Load, paired: Load | None) -> dict[str, Any]:
    """A surface's figures; ``paired``: the OpenAI route's mean on either side of its run."""
    return {
        "surface": name,
        "req/s": round(load.requests_per_second),
        "p50 ms": round(load.p50_ms, 2),
        "p99 ms": round(load.p99_ms, 2),
        "errors": load.errors,
        "OpenAI beside it, req/s": "-" if paired is None else round(paired.requests_per_second),
        "÷ OpenAI": 1.0
        if paired is None
        else round(load.requests_per_second / paired.requests_per_second, 2),
        # The server's CPU time a request: steadier than the rate on a shared machine.
        "server CPU µs/req": "-" if load.cpu_us is None else round(load.cpu_us),
        "CPU ÷ OpenAI's": "-"
        if paired is None or load.cpu_us is None or paired.cpu_us is None
        else round(load.cpu_us / paired.cpu_us, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--only", default="")
    parser.add_argument(
        "--tree", type=Path, default=ROOT, help="serve another checkout (an earlier version)"
    )
    args = parser.parse_args()
    only = [name.strip() for name in args.only.split(",") if name.strip()] or None
    rows = run(args.seconds, args.connections, only, args.tree.resolve())
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for entry in rows:
        print("| " + " | ".join(str(entry[c]) for c in columns) + " |")


if __name__ == "__main__":
    main()
