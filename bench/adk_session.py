"""An ADK run on a long session: milliseconds a run, by the number of events the session
already holds, under ``manage.py serve`` (journal on), this tree and ``--tree`` in turn.

    python -m bench.adk_session [--events 10,5000,20000] [--runs 20] [--tree ../before]

The session is made with its events in one create call, then runs one after the
other on it (a run appends two events: the user's message and the model's).
A run is answered on the event loop, so whatever it costs, every other request
of the service waits for it too.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx

from bench.replies import fixtures
from bench.servers import ROOT, serve

APP, USER, SESSION = "router", "bench", "long"


def user_message(text: str) -> dict[str, object]:
    return {"role": "user", "parts": [{"text": text}]}


def run_ms(tree: Path, events: int, runs: int) -> float:
    """The median milliseconds of ``runs`` runs on a session of ``events`` events."""
    with tempfile.TemporaryDirectory(prefix="sa-bench-") as scratch:
        directory = Path(scratch)
        fixture, _ = fixtures(directory)
        database = f"sqlite:///{directory / 'db.sqlite3'}"
        with (
            serve("static-agents", database_url=database, fixture=fixture, tree=tree) as server,
            httpx.Client(base_url=server.url, timeout=120) as client,
        ):
            made = [
                {"author": "user", "content": user_message(f"message {n}"), "id": f"e{n}"}
                for n in range(events)
            ]
            sessions = f"/apps/{APP}/users/{USER}/sessions"
            client.post(sessions, json={"sessionId": SESSION, "events": made}).raise_for_status()
            body = {
                "appName": APP,
                "userId": USER,
                "sessionId": SESSION,
                "newMessage": user_message("hello"),
            }
            client.post("/run", json=body).raise_for_status()  # warm up
            times = []
            for _ in range(runs):
                started = time.perf_counter()
                client.post("/run", json=body).raise_for_status()
                times.append((time.perf_counter() - started) * 1000)
            return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", default="10,5000,20000", help="session sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--tree", type=Path, help="another checkout, run beside this one")
    args = parser.parse_args()
    trees = [("this tree", ROOT)] + ([("--tree", args.tree.resolve())] if args.tree else [])
    columns = " | ".join(f"{name}: ms a run" for name, _ in trees)
    print(f"| events in the session | {columns} |")
    print("|---|" + "---|" * len(trees))
    for events in (int(n) for n in args.events.split(",")):
        figures = [f"{run_ms(tree, events, args.runs):.1f}" for _, tree in trees]
        print(f"| {events:,} | " + " | ".join(figures) + " |")


if __name__ == "__main__":
    main()
