"""Replies during a big replace: a live server answers a stream of replies while
``PUT /control/fixture`` replaces its rules with 45,000 others.

    python -m bench.big_import [--rules 45000] [--journal on|off] [--workers N] [--tree ../before]

Reports the replies' latency before the replace, during it (until the control
call returned), and right after it (the first reply asks for a rule of the new
set: with one worker it must answer from it), and, with the journal on, how
many entries the journal holds against how many replies were answered. With
several workers each reply comes on a new connection, so they go to every worker.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
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


def ask(client: httpx.Client, query: str, failed: list[str] | None = None) -> tuple[float, str]:
    """Seconds the reply took, and its text; a failed reply is appended to ``failed``
    (its status and body) when given, else an error."""
    body = {"model": "m", "messages": [{"role": "user", "content": query}]}
    started = time.perf_counter()
    response = client.post("/v1/chat/completions", json=body)
    elapsed = time.perf_counter() - started
    if response.status_code != 200 and failed is not None:
        failed.append(f"{response.status_code} {response.text[:200]}")
        return elapsed, ""
    assert response.status_code == 200, response.text[:300]
    return elapsed, str(response.json()["choices"][0]["message"]["content"])


def replies_around_a_replace(url: str, rules: int, *, workers: int = 1) -> dict[str, Any]:
    """Latencies (seconds) of replies before, during and right after a replace by ``rules``
    rules, the replace's own time, what the first reply after it answered and when every
    worker answered from the new rules."""
    # One connection stays with one worker: with several, a connection per reply.
    keep = httpx.Limits(max_keepalive_connections=0 if workers > 1 else None)
    client = httpx.Client(base_url=url, timeout=600, limits=keep)
    for _ in range(5):
        ask(client, "ping")
    usual = sorted(ask(client, "ping")[0] for _ in range(40))
    body = json.dumps(fixture(rules, "new"))
    replaced = threading.Event()
    took: list[float] = []
    problems: list[str] = []

    def replace() -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        started = time.perf_counter()
        try:
            with httpx.Client(base_url=url, headers=headers, timeout=600) as control:
                response = control.put("/control/fixture", content=body)
            if response.status_code == 200:
                took.append(time.perf_counter() - started)
            else:
                problems.append(f"{response.status_code} {response.text[:300]}")
        except httpx.HTTPError as exc:  # the server lost the worker, say
            problems.append(repr(exc))
        finally:
            replaced.set()

    writer = threading.Thread(target=replace)
    writer.start()
    during, failed = [], []
    while not replaced.is_set():
        during.append(ask(client, "ping", failed)[0])
    if problems:
        raise RuntimeError(f"the replace failed: {problems[0]}")
    returned = time.perf_counter()
    first, text = ask(client, "fresh")  # read your writes: the new rules answer
    after, in_a_row = [first], int(text == "new")
    # Another worker answers from the old rules until its own build is installed: asked
    # until ten replies in a row (on new connections, so from every worker) are new.
    while in_a_row < 10 and time.perf_counter() - returned < 120:
        elapsed, answer = ask(client, "fresh")
        after.append(elapsed)
        in_a_row = in_a_row + 1 if answer == "new" else 0
    everywhere = time.perf_counter() - returned
    after += [ask(client, "ping")[0] for _ in range(20)]
    writer.join()
    client.close()
    return {
        "usual": usual,
        "during": during,
        "after": after,
        "replace s": took[0],
        "fresh": text,
        "new everywhere s": everywhere,
        "replies": 5 + len(usual) + len(during) + len(after),
        "failed": failed,
    }


def journaled(database: Path, expected: int, wait: float = 10) -> int:
    """The entries in the journal, once they reach ``expected`` (or after ``wait`` seconds:
    entries held back while the import had the write lock are written once it is free)."""
    deadline = time.monotonic() + wait
    while True:
        with sqlite3.connect(database) as db:
            [(count,)] = db.execute("SELECT COUNT(*) FROM staticagents_journalentry").fetchall()
        if count >= expected or time.monotonic() > deadline:
            return int(count)
        time.sleep(0.1)


def serve_and_measure(
    rules: int, tree: Path | None = None, *, journal: bool = False, workers: int = 1
) -> dict[str, Any]:
    """A fresh server holding two rules, then the replace."""
    from bench.servers import ROOT, serve

    with tempfile.TemporaryDirectory(prefix="sa-big-") as scratch:
        start = Path(scratch) / "rules.json"
        start.write_text(json.dumps(fixture(0, "old")))
        database = Path(scratch) / "db.sqlite3"
        environment = {
            "STATIC_AGENTS_CONTROL_TOKEN": TOKEN,
            "STATIC_AGENTS_JOURNAL": "on" if journal else "off",
        }
        with serve(
            "big import",
            database_url=f"sqlite:///{database}",
            fixture=start,
            workers=workers,
            env=environment,
            tree=tree or ROOT,
        ) as server:
            result = replies_around_a_replace(server.url, rules, workers=workers)
            if journal:
                result["journaled"] = journaled(database, result["replies"])
        return result


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(result: dict[str, Any]) -> dict[str, Any]:
    usual, during, after = result["usual"], result["during"], result["after"]
    figures = {
        "replace s": round(result["replace s"], 2),
        "usual p50 ms": round(usual[len(usual) // 2] * 1000, 1),
        "usual max ms": round(usual[-1] * 1000, 1),
        "replies during": len(during),
        "during p99 ms": round(percentile(during, 0.99) * 1000, 1),
        "during max ms": round(max(during) * 1000, 1),
        "first after ms": round(after[0] * 1000, 1),
        "after max ms": round(max(after) * 1000, 1),
        "first after answered": result["fresh"],
        "new everywhere after s": round(result["new everywhere s"], 2),
        "failed during": len(result["failed"]),
    }
    if "journaled" in result:
        figures["replies answered"] = result["replies"] - len(result["failed"])
        figures["journaled"] = result["journaled"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rules", type=int, default=45_000)
    parser.add_argument("--journal", choices=("on", "off"), default="off")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--tree", type=Path, help="another checkout to serve instead")
    args = parser.parse_args()
    result = serve_and_measure(
        args.rules, args.tree, journal=args.journal == "on", workers=args.workers
    )
    print(summary(result))


if __name__ == "__main__":
    main()
