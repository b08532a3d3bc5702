"""What a session's fresh start costs (``services.reset_session``), in process: the CPU
time of a kit test's two resets (its script installed, then ended) and of a reset with
no script (the same fixture again), each tree in a subprocess of its own, alternating.

    python -m bench.session_reset [--tree ../before] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CALLS = 200
SCRIPT = {"name": "replies", "responses": [{"content": "hi"}], "on_exhausted": "error"}


def measure() -> dict[str, float]:
    """CPU ms a call, best of five batches (run in the tree's own process)."""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from staticagents.replying.snapshot import active_ruleset
    from staticagents.services import reset_session

    active_ruleset()

    def script_and_end(key: str) -> None:
        reset_session(session=key, script=SCRIPT)
        reset_session(session=key)

    def no_script(key: str) -> None:
        reset_session(session=key)

    figures = {}
    for name, work in (
        ("script installed, then ended (two calls)", script_and_end),
        ("no script", no_script),
    ):
        batches = []
        for batch in range(6):  # the first warms up
            start = time.process_time()
            for n in range(CALLS):
                work(f"{name[:2]}-{batch}-{n}")
            batches.append((time.process_time() - start) / CALLS * 1000)
        figures[name] = min(batches[1:])
    return figures


def run_tree(tree: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="sa-reset-") as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": str(tree),  # the tree's own code, this file run by its path
            "DJANGO_SETTINGS_MODULE": "staticagents.settings",
            "DATABASE_URL": f"sqlite:///{Path(tmp) / 'db.sqlite3'}",
        }
        out = subprocess.run(
            [sys.executable, __file__, "--measure"],
            env=env,
            cwd=tmp,
            check=True,
            capture_output=True,
            text=True,
        )
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", type=Path, help="another checkout, run beside this one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure()))
        return
    trees = {"this": Path(__file__).resolve().parents[1]}
    if args.tree:
        trees["other"] = args.tree.resolve()
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            results[name].append(run_tree(tree))
    print("| tree | reset | CPU ms a call (median of rounds) |")
    print("|---|---|---|")
    for name, rounds in results.items():
        for reset in rounds[0]:
            value = statistics.median(r[reset] for r in rounds)
            print(f"| {name} | {reset} | {value:.3f} |")


if __name__ == "__main__":
    main()
