"""Running the service as an operator does: stopping it, its options, its access log, /metrics.

Each test runs ``static-agents serve`` in a subprocess, as an operator would.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from websockets.sync.client import connect

from staticagents.testing.server import StaticAgentsServer

COMMAND = Path(sys.executable).parent / "static-agents"
WORDS = 40
WORD_DELAY_MS = 500  # a stream takes WORDS * WORD_DELAY_MS = 20 s when left to run
SLOW_TEXT = " ".join(f"word{index}" for index in range(WORDS))
RULES = {
    "rules": [
        {
            "name": "slow",
            "match": {"contains": "slow"},
            "response": {"content": SLOW_TEXT, "stream": {"word_delay_ms": WORD_DELAY_MS}},
        },
        {
            "name": "broken",
            "match": {"contains": "broken"},
            "response": {"error": {"status": 500, "type": "api_error", "message": "scripted"}},
        },
        {"name": "hello", "match": {"contains": "hello"}, "response": {"content": "hi"}},
    ]
}


class Service(StaticAgentsServer):
    """``static-agents serve`` with the rules above and the given options."""

    def __init__(self, workdir: Path, *options: str, environment: dict[str, str] | None = None):
        super().__init__(workdir, environment=environment)
        self.options = options
        self.fixture = workdir / "rules.yml"
        self.startup_seconds = 0.0

    def command(self) -> list[str]:
        return [*super().command(), "--fixture", str(self.fixture), *self.options]

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.fixture.write_text(yaml.safe_dump(RULES))
        started = time.monotonic()
        super().start()
        self.startup_seconds = time.monotonic() - started

    @property
    def process(self) -> subprocess.Popen[bytes]:
        assert self._process is not None
        return self._process

    def journal(self) -> list[tuple[str, str, str]]:
        with sqlite3.connect(self.workdir / "db.sqlite3") as db:
            query = "SELECT dialect, rule, outcome FROM staticagents_journalentry ORDER BY id"
            return [tuple(row) for row in db.execute(query)]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    started: list[Service] = []

    def start(*options: str, environment: dict[str, str] | None = None) -> Service:
        server = Service(tmp_path / f"service-{len(started)}", *options, environment=environment)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop()


# -- stopping ---------------------------------------------------------------------


class OpenStream(threading.Thread):
    """Reads one stream to its end in a thread; ``begun`` is set at its first chunk."""

    def __init__(self, read: Callable[[OpenStream], None]) -> None:
        super().__init__(daemon=True)
        self.read = read
        self.begun = threading.Event()
        self.received = ""
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self.read(self)
        except BaseException as exc:  # reported by the test
            self.failure = exc
        finally:
            self.begun.set()

    def sse(self, url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as response:
            for chunk in response.iter_text():
                self.received += chunk
                self.begun.set()

    def websocket(self, url: str) -> None:
        with connect(url, open_timeout=30) as socket_:
            socket_.send(json.dumps({"query": "slow please"}))
            while True:
                event = json.loads(socket_.recv(timeout=60))
                self.received += json.dumps(event) + "\n"
                self.begun.set()
                if event["type"] in ("done", "error"):
                    return


def open_streams(url: str) -> dict[str, OpenStream]:
    question = [{"role": "user", "content": "slow please"}]
    streams = {
        "openai": OpenStream(
            lambda s: s.sse(
                f"{url}/v1/chat/completions",
                {"model": "m", "stream": True, "messages": question},
            )
        ),
        "anthropic": OpenStream(
            lambda s: s.sse(
                f"{url}/v1/messages",
                {"model": "m", "max_tokens": 100, "stream": True, "messages": question},
                {"anthropic-version": "2023-06-01"},
            )
        ),
        "galaxy": OpenStream(
            lambda s: s.sse(f"{url}/api/chat/stream?agent_type=router", {"query": "slow please"})
        ),
        "websocket": OpenStream(
            lambda s: s.websocket(url.replace("http://", "ws://") + "/ws/chat/")
        ),
    }
    for stream in streams.values():
        stream.start()
    for stream in streams.values():
        assert stream.begun.wait(30)
    return streams


def words_received(text: str) -> list[str]:
    return re.findall(r"word\d+", text)


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_service_at_once_and_open_streams_end_whole(
    service: Callable[..., Service], workers: str, stop_signal: signal.Signals
) -> None:
    server = service("--workers", workers)
    opening = time.monotonic()
    streams = open_streams(server.url)
    opened = time.monotonic()

    server.process.send_signal(stop_signal)
    server.process.wait(timeout=60)
    stopped = time.monotonic()
    for stream in streams.values():
        stream.join(30)

    # Left to run, the streams would have needed this much longer: the service did not wait.
    remaining = WORDS * WORD_DELAY_MS / 1000 - (opened - opening)
    assert stopped - opened < remaining / 2, (stopped - opened, remaining)
    for name, stream in streams.items():
        assert stream.failure is None, (name, stream.failure)
        # Every word, in order (Galaxy's result event then repeats the answer whole).
        assert words_received(stream.received)[:WORDS] == SLOW_TEXT.split(), name
    assert streams["openai"].received.rstrip().endswith("data: [DONE]")
    assert "event: message_stop" in streams["anthropic"].received
    assert "event: done" in streams["galaxy"].received
    assert streams["websocket"].received.rstrip().endswith('{"type": "done"}')
    journal = server.journal()
    assert sorted(journal) == sorted(
        [
            (dialect, "slow", "answered")
            for dialect in ("openai", "anthropic", "galaxy", "websocket")
        ]
    ), journal


# -- options, binding and the token -------------------------------------------------


def serve_command(
    tmp_path: Path, *arguments: str, **variables: str
) -> subprocess.CompletedProcess[str]:
    """``static-agents`` with ``arguments``, in ``tmp_path``, in a clean environment."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
        and not name.startswith("STATIC_AGENTS_")
    }
    environment.update(variables)
    return subprocess.run(
        [COMMAND, *arguments],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_bad_option_is_refused_before_anything_is_touched(tmp_path: Path) -> None:
    run = serve_command(tmp_path, "serve", "--port", "0", "--log-level", "nonsense")

    assert run.returncode == 2
    assert "--log-level: invalid choice: 'nonsense'" in run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
    assert list(tmp_path.iterdir()) == []  # not migrated, nothing imported


def test_a_port_in_use_stops_serve_before_the_database_or_the_token(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        run = serve_command(tmp_path, "serve", "--port", port)

    assert run.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port} (--host, --port): address already in use" in (
        run.stderr
    )
    assert "Traceback" not in run.stderr
    assert "serving on" not in run.stdout and "token" not in run.stdout
    assert list(tmp_path.iterdir()) == []  # no database: the token is still to be made


def test_the_token_command_shows_rotates_and_never_repeats_a_token(tmp_path: Path) -> None:
    before = serve_command(tmp_path, "token")
    rotated = serve_command(tmp_path, "token", "--rotate")
    token = rotated.stdout.split(": ")[-1].strip()
    shown = serve_command(tmp_path, "token")
    again = serve_command(tmp_path, "token", "--rotate")

    assert "No control token yet" in before.stdout
    assert rotated.returncode == 0 and len(token) >= 40
    assert f"it begins {token[:6]!r}" in shown.stdout
    assert token[:7] not in shown.stdout  # a hint, never the token
    assert again.stdout.split(": ")[-1].strip() != token


def test_a_rotated_token_opens_the_control_api_and_the_old_one_no_longer_does(
    tmp_path: Path,
) -> None:
    first = serve_command(tmp_path, "token", "--rotate").stdout.split(": ")[-1].strip()
    second = serve_command(tmp_path, "token", "--rotate").stdout.split(": ")[-1].strip()
    server = StaticAgentsServer(tmp_path / "served")
    server.workdir.mkdir()
    # The server reads the database of the commands above, and no configured token.
    environment = server.child_environment()
    environment.pop("STATIC_AGENTS_CONTROL_TOKEN")
    environment["DATABASE_URL"] = f"sqlite:///{tmp_path / 'static-agents.sqlite3'}"
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "staticagents", "serve", "--port", str(port)],
        cwd=server.workdir,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        printed = []
        for line in process.stdout:
            printed.append(line)
            if "serving on" in line:
                break
        url = f"http://127.0.0.1:{port}/control/counters"
        statuses = [
            httpx.get(url, headers={"Authorization": f"Bearer {token}"}).status_code
            for token in (second, first)
        ]
    finally:
        process.terminate()
        process.wait(30)

    assert statuses == [200, 401]
    assert not any("Control API token" in line for line in printed)  # none made: one exists


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_configured_token_cannot_be_rotated_here(tmp_path: Path) -> None:
    token = {"STATIC_AGENTS_CONTROL_TOKEN": "configured-token"}
    run = serve_command(tmp_path, "token", "--rotate", **token)
    shown = serve_command(tmp_path, "token", **token)

    assert run.returncode == 1
    assert "STATIC_AGENTS_CONTROL_TOKEN: change it there" in run.stderr
    assert shown.stdout == "The control token is set by STATIC_AGENTS_CONTROL_TOKEN.\n"
    assert "configured-token" not in run.stdout + run.stderr + shown.stdout


def test_help_and_version_are_static_agents_own(tmp_path: Path) -> None:
    help_text = serve_command(tmp_path, "--help").stdout
    version = serve_command(tmp_path, "--version").stdout

    assert help_text.startswith("usage: static-agents <command>")
    for command in ("serve", "token", "import_fixture", "export_fixture", "check_fixture"):
        assert f"\n  {command} " in help_text
    assert "[auth]" not in help_text and "changepassword" not in help_text
    assert re.fullmatch(r"static-agents \d+\.\d+\.\d+\S*\n", version), version


def test_runserver_refuses_and_points_to_serve(tmp_path: Path) -> None:
    run = serve_command(tmp_path, "runserver", "8001")

    assert run.returncode == 1
    assert "static-agents serve" in run.stderr
    assert list(tmp_path.iterdir()) == []


# -- access log -----------------------------------------------------------------------


def exercise(url: str) -> None:
    """A reply, a scripted 500, a /v1 400, a WebSocket with a key in its query."""
    secret = "sk-secret-abc123"
    chat = f"{url}/v1/chat/completions?api_key={secret}"
    hello = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    broken = {"model": "m", "messages": [{"role": "user", "content": "broken"}]}
    headers = {"Authorization": f"Bearer {secret}", "x-api-key": secret}
    assert httpx.post(chat, json=hello, headers=headers).status_code == 200
    assert httpx.post(chat, json=broken, headers=headers).status_code == 500
    assert httpx.post(chat, content=b"{", headers=headers).status_code == 400
    ws_url = url.replace("http://", "ws://") + f"/ws/chat/?api_key={secret}&token={secret}"
    with connect(ws_url) as socket_:
        socket_.send(json.dumps({"query": "hello"}))
        while json.loads(socket_.recv(timeout=30))["type"] != "done":
            pass


def test_every_request_gets_one_access_line_without_its_key(
    service: Callable[..., Service],
) -> None:
    server = service("--log-level", "info")
    exercise(server.url)
    server.stop()
    log = server.log()

    lines = [line for line in log.splitlines() if "dialect=" in line]
    chat = [line for line in lines if "/v1/chat/completions" in line]
    assert len(chat) == 3, lines
    assert re.search(
        r"POST /v1/chat/completions 200 dialect=openai rule=hello outcome=answered", log
    )
    assert "POST /v1/chat/completions 500 dialect=openai rule=broken outcome=error" in log
    assert "POST /v1/chat/completions 400 dialect=openai rule=- outcome=-" in log
    assert re.search(r"WS /ws/chat/ 101 dialect=websocket rule=hello outcome=answered \d", log)
    assert "?api_key" not in "\n".join(lines)  # the path, without its query
    assert "sk-secret-abc123" not in log  # nowhere: not uvicorn's WebSocket line either
    assert "api_key=***" in log  # uvicorn's own line, masked


def test_the_json_access_log_has_one_object_a_request(service: Callable[..., Service]) -> None:
    server = service("--log-level", "info", "--log-format", "json")
    exercise(server.url)
    server.stop()

    objects = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    access = [
        entry
        for entry in objects
        if entry["logger"] == "staticagents.access" and entry["path"] != "/control/counters"
    ]  # the readiness probe's requests left out
    scripted = next(entry for entry in access if entry["status"] == 500)
    assert scripted["method"] == "POST"
    assert scripted["path"] == "/v1/chat/completions"
    assert (scripted["dialect"], scripted["rule"], scripted["outcome"]) == (
        "openai",
        "broken",
        "error",
    )
    assert isinstance(scripted["duration_ms"], float)
    assert sorted(entry["status"] for entry in access) == [101, 200, 400, 500]
    assert "sk-secret-abc123" not in server.log()


def test_warning_level_logs_no_access_lines(service: Callable[..., Service]) -> None:
    server = service()  # --log-level warning
    exercise(server.url)
    server.stop()

    assert "dialect=" not in server.log()


# -- metrics --------------------------------------------------------------------------


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, value = line.rsplit(" ", 1)
        if all(f'{key}="{wanted}"' in head for key, wanted in labels.items()):
            total += float(value)
    return total


@pytest.mark.parametrize("workers", ["1", "2"])
def test_metrics_count_every_worker_behind_the_control_token(
    service: Callable[..., Service], workers: str
) -> None:
    server = service("--workers", workers)
    url = server.url
    hello = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    broken = {"model": "m", "messages": [{"role": "user", "content": "broken"}]}
    with httpx.Client() as client:  # new connections: spread over the workers
        for _ in range(20):
            httpx.post(f"{url}/v1/chat/completions", json=hello)
        for _ in range(3):
            httpx.post(f"{url}/v1/chat/completions", json=broken)
        streams = open_streams(url)
        anonymous = client.get(f"{url}/metrics")
        scraped = client.get(f"{url}/metrics", headers={"Authorization": f"Bearer {server.token}"})
    for stream in streams.values():
        stream.join(0)

    assert anonymous.status_code == 401
    assert scraped.status_code == 200, scraped.text
    text = scraped.text
    requests = "static_agents_requests_total"
    assert metric(text, requests, dialect="openai", outcome="answered", status="200") == 20
    assert metric(text, requests, dialect="openai", outcome="error", status="500") == 3
    latency = "static_agents_reply_seconds_count"
    assert metric(text, latency, dialect="openai") >= 23
    assert metric(text, "static_agents_streams_open") == 4
    assert metric(text, "static_agents_journal_entries") == 27  # 23 replies, 4 streams begun


def test_metrics_can_be_open(service: Callable[..., Service]) -> None:
    server = service(environment={"STATIC_AGENTS_METRICS": "open"})

    response = httpx.get(f"{server.url}/metrics")

    assert response.status_code == 200
    assert "static_agents_journal_entries" in response.text
