"""What the journal costs: our service with the journal on and off, in alternating pairs.

The best-of-N table of ``bench.replies`` compares one run per server, and on a
shared machine one run moves by a fifth. Here both servers run at once (one
idles while wrk drives the other), the pairs alternate which goes first, and the
medians of the pairs are compared.

    python -m bench.journal_cost [--pairs 5] [--seconds 8] [--connections 32]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.replies import fixtures, request_bodies
from bench.servers import serve, wrk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sa-bench-") as tmp:
        directory = Path(tmp)
        fixture, _ = fixtures(directory)
        body, _ = request_bodies(directory)
        servers = {
            "on": serve(
                "journal on", database_url=f"sqlite:///{directory / 'on.sqlite3'}", fixture=fixture
            ),
            "off": serve(
                "journal off",
                database_url=f"sqlite:///{directory / 'off.sqlite3'}",
                fixture=fixture,
                env={"STATIC_AGENTS_JOURNAL": "off"},
            ),
        }
        rates: dict[str, list[float]] = {"on": [], "off": []}
        with servers["on"], servers["off"]:
            for pair in range(args.pairs):
                for name in ("on", "off") if pair % 2 == 0 else ("off", "on"):
                    url = servers[name].url + "/v1/chat/completions"
                    load = wrk(url, body, seconds=args.seconds, connections=args.connections)
                    rates[name].append(load.requests_per_second)
    on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
    print(f"{args.pairs} pairs of {args.seconds} s runs, {args.connections} connections (req/s)")
    for name in ("on", "off"):
        print(f"  journal {name:<4} " + "  ".join(f"{rate:8.0f}" for rate in rates[name]))
    print(f"  medians: on {on:.0f}, off {off:.0f}; the journal costs {(1 - on / off) * 100:.1f} %")


if __name__ == "__main__":
    main()
