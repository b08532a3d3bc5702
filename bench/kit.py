"""The testing kit: what an agent test costs beyond its reply, and how soon the service answers.

    python -m bench.kit [--tests 100] [--rounds 3] [--starts 5] [--tree ../other-checkout]

**Per test.** A generated suite of ``--tests`` agent tests runs under pytest with
the plugin, in a subprocess, as a user's suite does. Each test first times a
plain reply (``POST /v1/chat/completions`` without a session, on a warm HTTP
connection; the second of two, as the first may find a snapshot to rebuild),
then its kit calls: a ``replies()`` script, or rules installed (each test's
marker installs two rules before it; the test installs them again, or them
with one rule changed), then one reply in the test's session and
``requests()``. The row gives the medians, and the median over the tests of
each test's kit time divided by its own plain reply; a whole test (fixture
setup and teardown included) is set against a trivial test (two plain replies),
and each kind's first test is given apart (the suite's first starts the service).

**Start-up.** The time from starting the service to its first reply, against a
bare uvicorn app (``bench/raw_asgi.py``) started the same way, alternating,
best of ``--starts``; beside it, the median CPU time each server's process spent
from its start to that reply (``/proc/PID/stat``), which a loaded machine moves
far less than the wall time.

``--rounds`` runs the suite that many times (the trees taking turns); each row is
the round with the lowest "kit ÷ plain reply", the others' ratios beside it. ``--tree``
runs the suite and the start-up against another checkout (an earlier version, say)
with this interpreter. Nothing here asserts a time.
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
from typing import Any

import httpx

from bench.servers import ROOT, free_port

SUITE = """
import json, os, time

import httpx
import pytest

TESTS = int(os.environ["KIT_BENCH_TESTS"])
TIMES: dict[str, list[float]] = {}
BODY = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}


def note(kind, seconds):
    TIMES.setdefault(kind, []).append(seconds)


@pytest.fixture(scope="session")
def http():
    with httpx.Client() as client:
        yield client
    with open(os.environ["KIT_BENCH_OUT"], "w") as out:
        json.dump(TIMES, out)


def ask(http, url, headers):
    response = http.post(url + "/v1/chat/completions", json=BODY, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


def plain(http, url):
    ask(http, url, {})  # the first may find the rules just changed (a snapshot to rebuild)
    started = time.perf_counter()
    ask(http, url, {})
    note("plain", time.perf_counter() - started)


def rules(n):
    return {"rules": [
        {"name": "greet", "match": {"contains": "hello"}, "response": {"content": f"Hi {n}"}},
        {"name": "other", "match": {"contains": "bye"}, "response": {"content": "Bye"}},
    ]}


@pytest.mark.parametrize("n", range(TESTS))
def test_script(n, static_agents, http):
    plain(http, static_agents.base_url)
    started = time.perf_counter()
    static_agents.replies(f"answer {n}")
    answer = ask(http, static_agents.base_url, static_agents.headers)
    journal = static_agents.requests()
    note("script", time.perf_counter() - started)
    assert answer == f"answer {n}" and [entry.rule for entry in journal] == ["replies"]


@pytest.mark.static_agents_fixture(rules(0))
@pytest.mark.parametrize("n", range(TESTS))
def test_same_rules(n, static_agents, http):
    plain(http, static_agents.base_url)
    started = time.perf_counter()
    static_agents.install(rules(0))
    answer = ask(http, static_agents.base_url, static_agents.headers)
    journal = static_agents.requests()
    note("same rules", time.perf_counter() - started)
    assert answer == "Hi 0" and len(journal) == 1


@pytest.mark.static_agents_fixture(rules(0))
@pytest.mark.parametrize("n", range(TESTS))
def test_changed_rule(n, static_agents, http):
    plain(http, static_agents.base_url)
    started = time.perf_counter()
    static_agents.install(rules(n + 1))
    answer = ask(http, static_agents.base_url, static_agents.headers)
    journal = static_agents.requests()
    note("changed rule", time.perf_counter() - started)
    assert answer == f"Hi {n + 1}" and len(journal) == 1


@pytest.mark.parametrize("n", range(TESTS))
def test_trivial(n, static_agents_server, http):
    plain(http, static_agents_server.url)
"""

CONFTEST = """
import json, os, time

import pytest

WHOLE: dict[str, list[float]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started = time.perf_counter()
    yield
    WHOLE.setdefault(item.originalname, []).append(time.perf_counter() - started)


def pytest_sessionfinish(session):
    with open(os.environ["KIT_BENCH_OUT"] + ".whole", "w") as out:
        json.dump(WHOLE, out)
"""

KINDS = ("script", "same rules", "changed rule")
WHOLE_TESTS = {"script": "test_script", "same rules": "test_same_rules"}


def run_suite(tests: int, tree: Path) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    with tempfile.TemporaryDirectory(prefix="sa-kit-") as scratch:
        folder = Path(scratch)
        (folder / "test_agents.py").write_text(SUITE)
        (folder / "conftest.py").write_text(CONFTEST)
        out = folder / "times.json"
        environment = {
            **os.environ,
            "KIT_BENCH_TESTS": str(tests),
            "KIT_BENCH_OUT": str(out),
            "PYTHONPATH": str(tree),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        environment.pop("DJANGO_SETTINGS_MODULE", None)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "staticagents.testing.plugin"]
        command += ["-p", "no:cacheprovider", str(folder)]
        done = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the kit suite failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
        times = json.loads(out.read_text())
        whole = json.loads(Path(f"{out}.whole").read_text())
    return times, whole


def median_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2)


def suite_rows(tests: int, tree: Path, label: str) -> list[dict[str, Any]]:
    times, whole = run_suite(tests, tree)
    trivial = statistics.median(whole["test_trivial"])
    rows = []
    for index, kind in enumerate(KINDS):
        # Each test timed a plain reply just before its kit calls: the ratio of the two,
        # taken test by test, outlasts a machine whose speed moves from second to second.
        plain = times["plain"][index * tests : (index + 1) * tests]
        ratios = [kit / reply for kit, reply in zip(times[kind], plain, strict=True)]
        tests_of_kind = whole.get(f"test_{kind.replace(' ', '_')}", [])
        test = tests_of_kind[1:]  # the first of the suite starts the service
        rows.append(
            {
                "tree": label,
                "kit calls": kind,
                "kit ms": median_ms(times[kind]),
                "plain reply ms": median_ms(plain),
                "kit ÷ plain reply": round(statistics.median(ratios), 1),
                "whole test ms": median_ms(test),
                # The first of its kind: the suite's first starts the service; the others'
                # first installs (or first script) build what the later ones reuse.
                "first test ms": median_ms(tests_of_kind[:1]),
                "trivial test ms": round(trivial * 1000, 2),
            }
        )
    return rows


def best_rows(rounds: int, tests: int, trees: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    """Each tree's rows of the round with the lowest ratio, kind by kind; the trees take turns."""
    runs: dict[str, list[list[dict[str, Any]]]] = {label: [] for label, _ in trees}
    for _ in range(rounds):
        for label, tree in trees:
            runs[label].append(suite_rows(tests, tree, label))
    best = []
    for label, _ in trees:
        for kind_rows in zip(*runs[label], strict=True):
            row = dict(min(kind_rows, key=lambda r: r["kit ÷ plain reply"]))
            row["ratio each round"] = [r["kit ÷ plain reply"] for r in kind_rows]
            best.append(row)
    return best


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system) process ``pid`` has spent so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_reply(command: list[str], env: dict[str, str], url: str) -> tuple[float, float]:
    """Seconds from starting ``command`` to its first answered reply (polled every 10 ms),
    and the CPU seconds its process spent until then."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command} exited with {process.returncode}")
            try:
                if (
                    httpx.post(f"{url}/v1/chat/completions", json=body, timeout=1).status_code
                    == 200
                ):
                    return time.perf_counter() - started, cpu_seconds(process.pid)
            except httpx.HTTPError:
                time.sleep(0.01)
    finally:
        process.terminate()
        process.wait(timeout=20)


def start_ours(tree: Path) -> tuple[float, float]:
    """The plugin's way: ``StaticAgentsServer.start()``, then one reply."""
    code = (
        "import sys, tempfile, time, httpx\n"
        "from pathlib import Path\n"
        "import os\n"
        "started = time.perf_counter()\n"
        "from staticagents.testing.server import StaticAgentsServer\n"
        "with StaticAgentsServer(Path(tempfile.mkdtemp())) as server:\n"
        "    body = {'model': 'm', 'messages': [{'role': 'user', 'content': 'hello'}]}\n"
        "    httpx.post(server.url + '/v1/chat/completions', json=body).raise_for_status()\n"
        "    wall = time.perf_counter() - started\n"
        "    fields = open(f'/proc/{server.pid}/stat').read().rsplit(')', 1)[1].split()\n"
        "    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')\n"
        "    print(wall, cpu)\n"
    )
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    environment.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        # -P: the tree's code, not the working directory's (this checkout, when run from it).
        [sys.executable, "-P", "-c", code],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def start_bare() -> tuple[float, float]:
    port = free_port()
    with tempfile.NamedTemporaryFile(suffix=".json") as body:
        body.write(b'{"choices": []}')
        body.flush()
        environment = {**os.environ, "BENCH_RAW_BODY_FILE": body.name, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "uvicorn", "bench.raw_asgi:app", "--port", str(port)]
        command += ["--log-level", "warning"]
        return first_reply(command, environment, f"http://127.0.0.1:{port}")


def startup_rows(starts: int, trees: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    bare: list[tuple[float, float]] = []
    ours: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in trees}
    for _ in range(starts):
        bare.append(start_bare())
        for label, tree in trees:
            ours[label].append(start_ours(tree))
    bare_wall = min(wall for wall, _ in bare)
    bare_cpu = statistics.median(cpu for _, cpu in bare)
    rows = []
    for label, _ in trees:
        wall = min(wall for wall, _ in ours[label])
        cpu = statistics.median(cpu for _, cpu in ours[label])
        rows.append(
            {
                "tree": label,
                "first reply s (best)": round(wall, 3),
                "bare uvicorn s (best)": round(bare_wall, 3),
                "ours ÷ bare": round(wall / bare_wall, 2),
                "CPU s (median)": round(cpu, 2),
                "bare CPU s (median)": round(bare_cpu, 2),
                "CPU ÷ bare CPU": round(cpu / bare_cpu, 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--tests", type=int, default=100, help="tests of each kind")
    parser.add_argument("--rounds", type=int, default=1, help="runs of the suite; the best kept")
    parser.add_argument("--starts", type=int, default=3, help="start-ups of each server")
    parser.add_argument("--tree", type=Path, help="another checkout, run beside this one")
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    parser.add_argument("--tests-only", action="store_true", help="no start-up rows")
    parser.add_argument("--startup-only", action="store_true", help="no per-test rows")
    args = parser.parse_args()
    trees = [("this", ROOT)] + ([("other", args.tree.resolve())] if args.tree else [])
    if not args.startup_only:
        rows = best_rows(args.rounds, args.tests, trees)
        print(json.dumps(rows) if args.json else "\n".join(map(str, rows)))
    if not args.tests_only:
        starts = startup_rows(args.starts, trees)
        print(json.dumps(starts) if args.json else "\n".join(map(str, starts)))


if __name__ == "__main__":
    main()
