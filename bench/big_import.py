"""Replies during a big replace: a live server (one worker, journal off) answers a stream of
replies while ``PUT /control/fixture`` replaces its rules with 45,000 others.

    python -m bench.big_import [--rules 45000] [--tree ../before]

Reports the replies' latency before the replace, during it (until the control
call returned), and right after it (the first reply asks for a rule of the new
set: it must answer from it).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

TOKEN = "big-import"


def fixture(rules: int, content: str) -> dict[str, Any]:
    """``rules`` rules of the matching bench's kinds (literal, anchored and folded regexes),
    then one answering "ping" and one answering "fresh" with ``content``."""
    documents: list[dict[str, Any]] = []
    for i in range(rules):
        if i % 3 == 0:
            match: dict[str, Any] = {"contains": f"problem-{i:05d}"}
        elif i % 3 == 1:
            match = {"query": f"(?i)^topic {i:05d}\\b"}
        else:
            match = {"query": f"error {i:05d}"}
        documents.append({"name": f"rule-{i}", "match": match, "response": {"content": "x"}})
    documents.append(
        {"name": "ping", "match": {"query": "^ping$"}, "response": {"content": "pong"}}
    )
    documents.append(
        {"name": "fresh", "match": {"contains": "fresh"}, "response": {"content": content}}
    )
    return {"rules": documents}


def ask(client: httpx.Client, query: str) -> tuple[float, str]:
    """Seconds the reply took, and its text."""
    body = {"model": "m", "messages": [{"role": "user", "content": query}]}
    started = time.perf_counter()
    response = client.post("/v1/chat/completions", json=body)
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.text[:300]
    return elapsed, str(response.json()["choices"][0]["message"]["content"])


def replies_around_a_replace(url: str, rules: int) -> dict[str, Any]:
    """Latencies (seconds) of replies before, during and right after a replace by ``rules``
    rules, the replace's own time, and what the first reply after it answered."""
    client = httpx.Client(base_url=url, timeout=600)
    for _ in range(5):
        ask(client, "ping")
    usual = sorted(ask(client, "ping")[0] for _ in range(40))
    body = json.dumps(fixture(rules, "new"))
    replaced = threading.Event()
    took: list[float] = []

    def replace() -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        started = time.perf_counter()
        with httpx.Client(base_url=url, headers=headers, timeout=600) as control:
            response = control.put("/control/fixture", content=body)
        took.append(time.perf_counter() - started)
        assert response.status_code == 200, response.text[:300]
        replaced.set()

    writer = threading.Thread(target=replace)
    writer.start()
    during = []
    while not replaced.is_set():
        during.append(ask(client, "ping")[0])
    first, text = ask(client, "fresh")  # read your writes: the new rules answer
    after = [first, *(ask(client, "ping")[0] for _ in range(20))]
    writer.join()
    client.close()
    return {
        "usual": usual,
        "during": during,
        "after": after,
        "replace s": took[0],
        "fresh": text,
    }


def serve_and_measure(rules: int, tree: Path | None = None) -> dict[str, Any]:
    """A fresh server (one worker, journal off) holding two rules, then the replace."""
    from bench.servers import ROOT, serve

    with tempfile.TemporaryDirectory(prefix="sa-big-") as scratch:
        start = Path(scratch) / "rules.json"
        start.write_text(json.dumps(fixture(0, "old")))
        # The journal off: its writes wait for the import's write lock (a separate matter);
        # this measures the snapshot a reply answers from.
        environment = {"STATIC_AGENTS_CONTROL_TOKEN": TOKEN, "STATIC_AGENTS_JOURNAL": "off"}
        with serve(
            "big import",
            database_url=f"sqlite:///{Path(scratch) / 'db.sqlite3'}",
            fixture=start,
            env=environment,
            tree=tree or ROOT,
        ) as server:
            return replies_around_a_replace(server.url, rules)


def summary(result: dict[str, Any]) -> dict[str, Any]:
    usual, during, after = result["usual"], result["during"], result["after"]
    return {
        "replace s": round(result["replace s"], 2),
        "usual p50 ms": round(usual[len(usual) // 2] * 1000, 1),
        "usual max ms": round(usual[-1] * 1000, 1),
        "replies during": len(during),
        "during max ms": round(max(during) * 1000, 1),
        "first after ms": round(after[0] * 1000, 1),
        "after max ms": round(max(after) * 1000, 1),
        "first after answered": result["fresh"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rules", type=int, default=45_000)
    parser.add_argument("--tree", type=Path, help="another checkout to serve instead")
    args = parser.parse_args()
    print(summary(serve_and_measure(args.rules, args.tree)))


if __name__ == "__main__":
    main()
