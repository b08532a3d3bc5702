"""Our own share of a reply: the ASGI app driven in process, with no HTTP server.

    python -m bench.inprocess [--requests 20000] [--concurrency 32] [--rounds 5]
                              [--route chat|responses|...|adk-run|galaxy-chat-stream]
                              [--profile FILE]

The replies benchmark measures the service under uvicorn, where the server's own
work (parsing HTTP, the socket writes) is in every figure. This one drives
``staticagents.asgi.application`` directly, from ``--concurrency`` coroutines on
uvloop, with the replies benchmark's 100 rules and request body, and prints the
CPU time of the event loop's thread per request, journal on and journal off in
alternating rounds of the same process (each keeps its best round), and how many
journal rows each group commit held. It is the figure to profile against
(``py-spy record -- python -m bench.inprocess``) and to compare before and after
a change: thread CPU time moves far less with a noisy neighbour than wall time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

Message = dict[str, Any]
_NUMBERS = itertools.count(1)  # "{n}" in a body: unique across the rounds of a process


# The replies benchmark's question, to each route it measures.
ROUTES = {
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "gemini": "/v1beta/models/static:generateContent",
    "embeddings": "/v1/embeddings",
    "adk-run": "/run",
    "adk-run-sse": "/run_sse",
    "galaxy-chat": "/api/chat?agent_type=router",
    "galaxy-chat-stream": "/api/chat/stream?agent_type=router",
}
# ADK runs: a new session each request (as bench.surfaces sends them), "{n}" numbered.
ADK_RUN = (
    b'{"appName": "router", "userId": "bench", "sessionId": "s-{n}", '
    b'"newMessage": {"role": "user", "parts": [{"text": "QUESTION"}]}STREAMING}'
)


def request_scope(body: bytes, route: str = ROUTES["chat"]) -> dict[str, Any]:
    path, _, query = route.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


class Rounds:
    """Counts the journal's group commits and the rows they held."""

    def __init__(self) -> None:
        self.commits = 0
        self.rows = 0

    def install(self) -> None:
        from staticagents.replying.journal import _LoopBackend

        count, commit = self, _LoopBackend._round

        def counted(journal: _LoopBackend) -> None:
            pending = len(journal.inserts)
            commit(journal)
            if not journal.inserts:  # committed (a busy file leaves them pending)
                count.commits += 1
                count.rows += pending

        _LoopBackend._round = counted  # type: ignore[method-assign]


async def drive(
    app: Callable[..., Awaitable[None]],
    body: bytes,
    requests: int,
    concurrency: int,
    path: str = ROUTES["chat"],
) -> float:
    """Thread CPU seconds for ``requests`` replies from ``concurrency`` coroutines."""
    loop = asyncio.get_running_loop()

    numbered = b"{n}" in body

    async def one() -> None:
        # Like a server's: the body at once; then, once the response is complete,
        # the disconnect (which a watcher started by a slow answer waits for).
        this = body.replace(b"{n}", b"%d" % next(_NUMBERS)) if numbered else body
        sent: list[Message] = []
        delivered = False
        complete: asyncio.Future[None] | None = None

        async def receive() -> Message:
            nonlocal delivered, complete
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": this, "more_body": False}
            if not (sent and sent[-1]["type"] == "http.response.body"):
                complete = loop.create_future()
                await complete
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            sent.append(message)
            ends = message["type"] == "http.response.body" and not message.get("more_body")
            if ends and complete is not None and not complete.done():
                complete.set_result(None)

        await app(request_scope(this, path), receive, send)
        if sent[0]["status"] != 200:
            raise RuntimeError(f"the reply failed: {sent}")

    async def client(count: int) -> None:
        for _ in range(count):
            await one()

    started = time.thread_time()
    await asyncio.gather(*(client(requests // concurrency) for _ in range(concurrency)))
    return time.thread_time() - started


def route_body(route: str, scratch: Path) -> bytes:
    from bench.replies import embeddings_body, gemini_body, request_bodies, responses_body

    if route == "responses":
        return responses_body(scratch, store=True).read_bytes()
    if route == "gemini":
        return gemini_body(scratch).read_bytes()
    if route == "embeddings":
        return embeddings_body(scratch).read_bytes()
    if route.startswith("galaxy-"):
        from bench.surfaces import QUESTION

        return orjson.dumps({"query": QUESTION})
    if route.startswith("adk-"):
        from bench.surfaces import QUESTION

        streaming = b', "streaming": true' if route == "adk-run-sse" else b""
        return ADK_RUN.replace(b"QUESTION", QUESTION.encode()).replace(b"STREAMING", streaming)
    return request_bodies(scratch)[0].read_bytes()


def run(
    requests: int,
    concurrency: int,
    rounds: int,
    journal: str = "both",
    route: str = "chat",
    profile: str | None = None,
) -> list[dict[str, Any]]:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)

    import uvloop
    from django.test import override_settings

    from bench.replies import fixtures
    from staticagents.management.commands._fixture_io import read_fixture
    from staticagents.services import import_fixture

    scratch = Path(os.environ["DATABASE_URL"].removeprefix("sqlite:///")).parent
    ours, _ = fixtures(scratch)
    import_fixture(document=read_fixture(str(ours)))
    body, path = route_body(route, scratch), ROUTES[route]

    from staticagents.asgi import application

    commits = Rounds()
    commits.install()
    best = {"on": float("inf"), "off": float("inf")}
    handled = requests // concurrency * concurrency
    rows_per_commit = 0.0

    profiler = cProfile.Profile() if profile else None

    async def main() -> None:
        nonlocal rows_per_commit
        await drive(application, body, concurrency * 50, concurrency, path)  # warm up
        for _ in range(rounds):
            if journal != "off":
                commits.commits = commits.rows = 0
                if profiler is not None:
                    profiler.enable()
                spent = await drive(application, body, requests, concurrency, path)
                if profiler is not None:
                    profiler.disable()
                best["on"] = min(best["on"], spent)
                rows_per_commit = commits.rows / max(1, commits.commits)
            if journal != "on":
                with override_settings(STATIC_AGENTS_JOURNAL=False):
                    spent = await drive(application, body, requests, concurrency, path)
                best["off"] = min(best["off"], spent)

    uvloop.run(main())
    if profiler is not None and profile:
        profiler.dump_stats(profile)
    on, off = (best[k] / handled * 1e6 for k in ("on", "off"))
    if journal != "both":
        figure = on if journal == "on" else off
        return [{"journal": journal, "µs/request": round(figure, 1)}]
    return [
        {"journal": "on", "µs/request": round(on, 1), "rows/commit": round(rows_per_commit)},
        {"journal": "off", "µs/request": round(off, 1), "rows/commit": "-"},
        {"journal": "on ÷ off", "µs/request": round(on / off, 2), "rows/commit": "-"},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000, help="per round")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--journal",
        choices=("both", "on", "off"),
        default="both",
        help="measure only one side (for counting instructions, see bench/README.md)",
    )
    parser.add_argument("--route", choices=list(ROUTES), default="chat")
    parser.add_argument(
        "--profile", metavar="FILE", help="cProfile the journal-on rounds' loop into FILE"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sa-bench-") as scratch:
        os.environ["DATABASE_URL"] = f"sqlite:///{Path(scratch) / 'db.sqlite3'}"
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
        os.environ.setdefault("DEBUG", "false")
        os.environ["STATIC_AGENTS_FIXTURE"] = ""
        rows = run(
            args.requests, args.concurrency, args.rounds, args.journal, args.route, args.profile
        )
    for row in rows:
        print(" | ".join(f"{key}: {value}" for key, value in row.items()))


if __name__ == "__main__":
    main()
