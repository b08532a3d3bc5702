"""What proxying costs: the same request sent straight to a model and through the service.

    python -m bench.proxy [--requests 500]

Two ``serve`` subprocesses: one plays the real model (an echo rule, its API key
required), the other proxies an agent type to it. A client sends the same
OpenAI chat completion to each in turn and prints the median and 90th percentile
of each (the first 100 of each left out as warm-up). The difference is the
proxy's own share: parsing, the upstream request on a pooled connection, the
relay, the journal.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from staticagents.testing.server import StaticAgentsServer

KEY = "sk-bench-upstream"
WARM_UP = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=500, help="to each, after warm-up")
    args = parser.parse_args()
    os.environ["BENCH_UPSTREAM_KEY"] = KEY
    with tempfile.TemporaryDirectory() as tmp:
        model = StaticAgentsServer(Path(tmp, "model"), environment={"STATIC_AGENTS_API_KEYS": KEY})
        proxy = StaticAgentsServer(Path(tmp, "proxy"), environment={"BENCH_UPSTREAM_KEY": KEY})
        with model, proxy:
            with model.client() as control:
                echo = {"name": "echo", "response": {"template": True, "content": "said: $query"}}
                control.install({"rules": [echo]})
            with proxy.client() as control:
                upstream = {
                    "name": "model",
                    "dialect": "openai",
                    "base_url": f"{model.url}/v1",
                    "api_key_env": "BENCH_UPSTREAM_KEY",
                }
                modes = {"agent_types": {"proxied": {"mode": "proxy"}}}
                control.install({"rules": [], "upstreams": [upstream], "modes": modes})
            urls = {
                "direct": f"{model.url}/v1/chat/completions",
                "proxied": f"{proxy.url}/agents/proxied/v1/chat/completions",
            }
            print_latencies(measure(urls, args.requests + WARM_UP))


def measure(urls: dict[str, str], requests: int) -> dict[str, list[float]]:
    body = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
    seconds: dict[str, list[float]] = {name: [] for name in urls}
    with httpx.Client(headers={"Authorization": f"Bearer {KEY}"}) as client:
        for _ in range(requests):
            for name, url in urls.items():  # in turns: a slow moment costs both alike
                started = time.perf_counter()
                response = client.post(url, json=body)
                seconds[name].append(time.perf_counter() - started)
                response.raise_for_status()
    return {name: times[WARM_UP:] for name, times in seconds.items()}


def print_latencies(seconds: dict[str, list[float]]) -> None:
    print("| route | median ms | p90 ms |\n|---|---|---|")
    for name, times in seconds.items():
        p90 = statistics.quantiles(times, n=10)[8]
        print(f"| {name} | {statistics.median(times) * 1000:.2f} | {p90 * 1000:.2f} |")


if __name__ == "__main__":
    main()
