"""Start and stop the servers a benchmark compares, and drive wrk against them."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "bench" / ".cache"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A server process on a free port, stopped with SIGINT (a graceful shutdown)."""

    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ready_path: str = "/"
    cwd: Path = ROOT
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> Server:
        command = [part.replace("{port}", str(self.port)) for part in self.command]
        self.process = subprocess.Popen(
            command,
            cwd=self.cwd,
            env={**os.environ, **self.env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.process.stderr.read().decode()}")  # type: ignore[union-attr]
            try:
                httpx.get(self.url + self.ready_path, timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not start within {timeout} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def python_of(tree: Path) -> str:
    """The interpreter ``tree`` is served on: its own ``.venv``'s, if it has one, else this one."""
    python = tree / ".venv" / "bin" / "python"
    return str(python) if tree != ROOT and python.exists() else sys.executable


def machine(trees: list[Path]) -> str:
    """The CPU, the interpreter each tree runs on and aimock's Node: a ratio between
    servers on different runtimes moves with each (bench/README.md, "a slower machine")."""
    cpuinfo = Path("/proc/cpuinfo")
    models = [
        line.split(":", 1)[1].strip()
        for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
        if line.startswith("model name")
    ]
    lines = [f"Machine: {models[0] if models else 'an unknown CPU'}, {os.cpu_count()} cores"]
    for tree in trees:
        python = python_of(tree)
        version = _version([python, "-c", "import sys; print(sys.version.split()[0])"])
        name = "this checkout" if tree == ROOT else tree.name
        lines.append(f"Python of {name}: {version}, {os.path.realpath(python)}")
    node = shutil.which("node")
    if node is not None:
        lines.append(f"Node (aimock): {_version([node, '--version'])}")
    return "\n".join(f"* {line}" for line in lines) + "\n"


def _version(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True).stdout.strip() or "unknown"


def serve(
    name: str,
    *,
    database_url: str,
    fixture: Path | None = None,
    workers: int = 1,
    env: dict[str, str] | None = None,
    tree: Path = ROOT,
) -> Server:
    """Our service through `manage.py serve`, with its production settings.

    ``tree`` is another checkout to serve instead of this one (an earlier version,
    to compare with in the same run); it runs on its own ``.venv`` when it has one.
    """
    command = [python_of(tree), "manage.py", "serve", "--port", "{port}", "--workers", str(workers)]
    if fixture is not None:
        command += ["--fixture", str(fixture)]
    return Server(
        name,
        command,
        env={
            "DATABASE_URL": database_url,
            "DEBUG": "false",
            "STATIC_AGENTS_FIXTURE": "",
            "STATIC_AGENTS_CONTROL_TOKEN": "bench",
            **(env or {}),
        },
        ready_path="/v1/models",
        cwd=tree,
    )


@dataclass(frozen=True)
class Load:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    errors: int
    # The server's CPU time (user and system, its worker processes included) per request
    # answered, when measured: it moves less with a noisy neighbour than the rate does.
    cpu_us: float | None = None


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` and its children have used so far."""
    total = 0
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    for process in [pid, *map(int, children)]:
        fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / os.sysconf("SC_CLK_TCK")


def wrk_command(
    url: str,
    body: Path,
    *,
    seconds: int,
    connections: int,
    threads: int = 2,
    script: Path | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that drive ``url`` with wrk, POSTing ``body``."""
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk is not installed: apt-get install wrk")
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{seconds}s",
        "--latency",
        "-s",
        str(script or ROOT / "bench" / "post.lua"),
        url,
    ]
    return command, {**os.environ, "BENCH_BODY_FILE": str(body)}


def wrk(
    url: str,
    body: Path,
    *,
    seconds: int,
    connections: int,
    threads: int = 2,
    script: Path | None = None,
    server_pid: int | None = None,
) -> Load:
    """Drive ``url`` with wrk, POSTing ``body`` (through ``script``, else ``post.lua``);
    requests/s and latency percentiles, and with ``server_pid`` the server's CPU time per
    request."""
    command, env = wrk_command(
        url, body, seconds=seconds, connections=connections, threads=threads, script=script
    )
    before = cpu_seconds(server_pid) if server_pid is not None else 0.0
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    load = parse_wrk(output)
    if server_pid is None:
        return load
    spent = cpu_seconds(server_pid) - before
    answered = int(re.search(r"(\d+) requests in", output)[1])  # type: ignore[index]
    return replace(load, cpu_us=spent / max(1, answered) * 1e6)


def parse_wrk(output: str) -> Load:
    """wrk's report, as a ``Load``."""
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", output))
    errors += sum(int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", output))
    return Load(
        requests_per_second=float(re.search(r"Requests/sec:\s+([\d.]+)", output)[1]),  # type: ignore[index]
        p50_ms=_latency(output, "50%"),
        p99_ms=_latency(output, "99%"),
        errors=errors,
    )


def _latency(output: str, percentile: str) -> float:
    match = re.search(rf"^\s*{percentile}\s+([\d.]+)(us|ms|s)\s*$", output, re.MULTILINE)
    if match is None:
        return float("nan")
    value, unit = float(match[1]), match[2]
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value
