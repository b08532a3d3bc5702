"""Run every benchmark and print one table per area, as ratios measured side by side.

    python -m bench.run [--seconds 10] [--rounds 2]
                        [--only replies,surfaces,streams,matching,fixtures,replace,kit,startup]
                        [--baseline ../earlier-checkout]

Nothing here asserts a time: the figures are for reading, and the ratios (ours
against a raw ASGI app and against aimock, in the same run on the same
machine) are what survive a noisy machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import kit, matching, replies, stream_drift, surfaces
from bench.servers import ROOT, machine


def own_process(module: str) -> list[dict[str, Any]]:
    """The rows of a bench that sets up Django on a scratch database, run in its own process."""
    output = subprocess.run(
        [sys.executable, "-m", module, "--json"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows: list[dict[str, Any]] = json.loads(output.strip().splitlines()[-1])
    return rows


def markdown(title: str, rows: list[dict[str, Any]]) -> str:
    columns = list(rows[0])
    lines = [f"### {title}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=10, help="wrk duration per server")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--rounds", type=int, default=2, help="turns of the head-to-head reply servers"
    )
    parser.add_argument(
        "--only", default="replies,surfaces,streams,matching,fixtures,replace,kit,startup"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout (say, main's in a git worktree) whose server takes turns "
        "with ours in the replies table",
    )
    args = parser.parse_args()
    sections: dict[str, tuple[str, Callable[[], list[dict[str, Any]]]]] = {
        "replies": (
            "Replies: POST /v1/chat/completions (wrk, 2 threads, "
            f"{args.connections} connections, {args.seconds} s each, "
            f"best of {args.rounds} alternating runs)",
            lambda: replies.run(args.seconds, args.connections, args.rounds, args.baseline),
        ),
        "surfaces": (
            "Every reply surface against POST /v1/chat/completions, on one server in one run "
            f"(wrk, 2 threads, {args.connections} connections, {args.seconds} s each; the "
            "WebSocket: as many clients, each asking once its last reply is done)",
            lambda: surfaces.run(args.seconds, args.connections),
        ),
        "streams": (
            "Streams: SSE streams of 50 words, 10 ms apart: 1,000 at once; and 40 beside a "
            "JSON load (wrk, 64 connections) on the same server",
            lambda: [
                stream_drift.run(streams=1000, words=50, delay_ms=10),
                stream_drift.run(streams=40, words=50, delay_ms=10, beside_json=64),
            ],
        ),
        "matching": ("Matching: the pure matcher, the answering rule last", matching.run),
        "fixtures": ("Fixtures: 10,000 rules", lambda: own_process("bench.fixtures")),
        "replace": (
            "Replacing rules: 5,000 rules of two responses, into an empty database, over "
            "5,000 others, over themselves and with one changed; then the snapshot "
            "(best of 5 rounds)",
            lambda: own_process("bench.replace_rules"),
        ),
        "kit": (
            "The testing kit: 100 agent tests of each kind under the plugin; a test's kit "
            "calls (script or rules, one reply, the journal) against one plain reply",
            lambda: kit.suite_rows(100, ROOT, "this"),
        ),
        "startup": (
            "The testing kit's service: start to first reply, against a bare uvicorn app "
            "(best of 3, alternating)",
            lambda: kit.startup_rows(3, [("this", ROOT)]),
        ),
    }
    print(machine([ROOT] if args.baseline is None else [ROOT, args.baseline]), flush=True)
    for name in args.only.split(","):
        title, work = sections[name.strip()]
        print(markdown(title, work()), flush=True)


if __name__ == "__main__":
    main()
