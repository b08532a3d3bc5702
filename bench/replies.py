"""Replies: non-streaming chat completions per second, side by side in one run.

Our service (matching and journal on) against the same bytes from a raw ASGI
app under the same server, against aimock serving an equivalent fixture (when
Node is present), and against our own service with the journal off; plus
Galaxy's /api/ai/agents/query, OpenAI's /v1/embeddings, OpenAI's /v1/responses
(each response stored, and with ``store: false``), Gemini's :generateContent and our
service with two workers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.servers import CACHE, Load, Server, serve, wrk

RULES = 100  # the answering rule is the last of them
QUESTION = "hello bench, how are you?"
ANSWER = "Hello from the bench. This reply is the same every time."
AIMOCK_VERSION = "1.43.0"


def fixtures(directory: Path) -> tuple[Path, Path]:
    """Equivalent fixtures for us and for aimock: RULES rules, the last one answers."""
    topics = [f"bench-topic-{i:03d}" for i in range(RULES - 1)]
    ours = {
        "rules": [
            *(
                {"name": t, "match": {"contains": t}, "response": {"content": f"About {t}."}}
                for t in topics
            ),
            {
                "name": "hello",
                "match": {"contains": "hello bench"},
                "response": {"content": ANSWER},
            },
        ]
    }
    theirs = {
        "fixtures": [
            *(
                {"match": {"userMessage": t}, "response": {"content": f"About {t}."}}
                for t in topics
            ),
            {"match": {"userMessage": "hello bench"}, "response": {"content": ANSWER}},
        ]
    }
    (directory / "ours.yml").write_text(yaml.safe_dump(ours, sort_keys=False))
    (directory / "aimock.json").write_text(json.dumps(theirs))
    return directory / "ours.yml", directory / "aimock.json"


def request_bodies(directory: Path) -> tuple[Path, Path]:
    openai = {"model": "static", "messages": [{"role": "user", "content": QUESTION}]}
    galaxy = {"query": QUESTION, "agent_type": "router"}
    (directory / "openai.json").write_text(json.dumps(openai))
    (directory / "galaxy.json").write_text(json.dumps(galaxy))
    return directory / "openai.json", directory / "galaxy.json"


def responses_body(directory: Path, *, store: bool) -> Path:
    """The same question to ``POST /v1/responses``; ``store``: kept in the database."""
    body = {"model": "static", "input": QUESTION, "store": store}
    path = directory / f"responses-store-{str(store).lower()}.json"
    path.write_text(json.dumps(body))
    return path


def embeddings_body(directory: Path) -> Path:
    """One text, as the openai SDK sends it by default (base64, the model's 1536 dimensions)."""
    body = {"model": "text-embedding-3-small", "input": QUESTION, "encoding_format": "base64"}
    (directory / "embeddings.json").write_text(json.dumps(body))
    return directory / "embeddings.json"


def gemini_body(directory: Path) -> Path:
    """The same question as google-genai sends it to ``:generateContent``."""
    body = {"contents": [{"role": "user", "parts": [{"text": QUESTION}]}]}
    (directory / "gemini.json").write_text(json.dumps(body))
    return directory / "gemini.json"


def aimock(fixture: Path) -> Server | str:
    """aimock under Node, installed with npm into bench/.cache; or why it cannot run."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "Node.js/npm not found: aimock skipped"
    package = CACHE / "aimock"
    cli = package / "node_modules" / "@copilotkit" / "aimock" / "dist" / "cli.js"
    if not cli.exists():
        package.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [
                "npm",
                "install",
                "--silent",
                "--prefix",
                str(package),
                f"@copilotkit/aimock@{AIMOCK_VERSION}",
            ],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            return f"npm install of aimock failed: {result.stderr.strip()[:200]}"
    return Server(
        "aimock",
        ["node", str(cli), "-p", "{port}", "-f", str(fixture), "--log-level", "silent"],
        ready_path="/health",
    )


def measure(server: Server, path: str, body: Path, seconds: int, connections: int) -> Load:
    with server:
        check = httpx.post(
            server.url + path,
            content=body.read_bytes(),
            headers={"content-type": "application/json"},
        )
        check.raise_for_status()
        wrk(server.url + path, body, seconds=1, connections=connections)  # warm up
        assert server.process is not None
        return wrk(
            server.url + path,
            body,
            seconds=seconds,
            connections=connections,
            server_pid=server.process.pid,
        )


def run(
    seconds: int = 10, connections: int = 32, rounds: int = 2, baseline: Path | None = None
) -> list[dict[str, Any]]:
    """The table. The head-to-head servers (ours, the raw app, aimock, ours without the
    journal, and the ``baseline`` checkout when given) and our other model routes take
    turns for ``rounds`` rounds and each keeps its best run, so a slow minute of a shared
    machine lands on one run rather than on one row.
    """
    with tempfile.TemporaryDirectory(prefix="sa-bench-") as tmp:
        directory = Path(tmp)
        ours_fixture, aimock_fixture = fixtures(directory)
        openai_body, galaxy_body = request_bodies(directory)
        db = f"sqlite:///{directory / 'db.sqlite3'}"
        ours = serve("static-agents", database_url=db, fixture=ours_fixture)
        with ours:  # the exact bytes we answer, for the raw ASGI app
            reply = httpx.post(
                ours.url + "/v1/chat/completions", content=openai_body.read_bytes()
            ).content
        (directory / "reply.json").write_bytes(reply)
        peer = aimock(aimock_fixture)
        chat = ("/v1/chat/completions", openai_body)
        head_to_head: dict[str, tuple[Server | str, str, Path]] = {
            "static-agents (journal on)": (ours, *chat),
            "raw ASGI app, same bytes": (raw_asgi(directory / "reply.json"), *chat),
            "aimock": (peer, *chat),
            "static-agents (journal off)": (
                serve(
                    "static-agents",
                    database_url=db,
                    fixture=ours_fixture,
                    env={"STATIC_AGENTS_JOURNAL": "off"},
                ),
                *chat,
            ),
        }
        if baseline is not None:
            # A database of its own: an earlier tree's migrations may differ from ours.
            baseline_db = f"sqlite:///{directory / 'baseline.sqlite3'}"
            head_to_head[f"baseline {baseline.name} (journal on)"] = (
                serve("baseline", database_url=baseline_db, fixture=ours_fixture, tree=baseline),
                *chat,
            )
        # Our other model routes, on the same server as the first row: their ratio to it
        # is the cost of the route itself.
        head_to_head.update(
            {
                "static-agents, OpenAI /v1/embeddings (1536 dimensions, base64)": (
                    ours,
                    "/v1/embeddings",
                    embeddings_body(directory),
                ),
                **{
                    f"static-agents, /v1/responses (store: {str(store).lower()})": (
                        ours,
                        "/v1/responses",
                        responses_body(directory, store=store),
                    )
                    for store in (True, False)
                },
                "static-agents, Gemini /v1beta/models/{model}:generateContent": (
                    ours,
                    "/v1beta/models/static:generateContent",
                    gemini_body(directory),
                ),
            }
        )
        results: dict[str, Load | str] = {}
        for _ in range(rounds):
            for name, (server, path, body) in head_to_head.items():
                if isinstance(server, str):
                    results[name] = server  # why it could not run
                    continue
                load = measure(server, path, body, seconds, connections)
                best = results.get(name)
                if not isinstance(best, Load) or faster(load, best):
                    results[name] = load
        results["static-agents, Galaxy /api/ai/agents/query"] = measure(
            serve("static-agents", database_url=db, fixture=ours_fixture),
            "/api/ai/agents/query",
            galaxy_body,
            seconds,
            connections,
        )
        results["static-agents, 2 workers"] = measure(
            serve("static-agents", database_url=db, fixture=ours_fixture, workers=2),
            "/v1/chat/completions",
            openai_body,
            seconds,
            connections,
        )
    return table(results)


def faster(load: Load, than: Load) -> bool:
    return load.requests_per_second > than.requests_per_second


def raw_asgi(body: Path) -> Server:
    """The baseline: ``bench/raw_asgi.py`` under the same uvicorn, sending ``body``."""
    return Server(
        "raw-asgi",
        [
            sys.executable,
            "-m",
            "uvicorn",
            "bench.raw_asgi:app",
            "--port",
            "{port}",
            "--log-level",
            "warning",
            "--no-access-log",
            "--lifespan",
            "off",
        ],
        env={"BENCH_RAW_BODY_FILE": str(body)},
    )


def table(results: dict[str, Load | str]) -> list[dict[str, Any]]:
    ours = results["static-agents (journal on)"]
    assert isinstance(ours, Load)
    rows = []
    for name, load in results.items():
        if isinstance(load, str):
            rows.append(
                {
                    "server": name,
                    "req/s": "-",
                    "p50 ms": "-",
                    "p99 ms": "-",
                    "errors": "-",
                    "server CPU µs/req": "-",
                    "ours ÷ this": load,
                }
            )
            continue
        rows.append(
            {
                "server": name,
                "req/s": round(load.requests_per_second),
                "p50 ms": round(load.p50_ms, 2),
                "p99 ms": round(load.p99_ms, 2),
                "errors": load.errors,
                "server CPU µs/req": "-" if load.cpu_us is None else round(load.cpu_us, 1),
                "ours ÷ this": round(ours.requests_per_second / load.requests_per_second, 2),
            }
        )
    return rows
