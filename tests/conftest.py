"""Shared fixtures: a real ASGI server on a free port, rule loading, and Galaxy's own fixture."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

# tests/wheel/ runs against the installed wheel only (.ci/wheel-check), never from the checkout.
collect_ignore = ["wheel"]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# Our own fixture in Galaxy's style, for the tests that need one but not Galaxy's own.
GALAXY_STYLE_FIXTURE = FIXTURES / "galaxy-style.yml"
# Names Galaxy's own static_agents.yml, a third party's file (.ci/run sets it when present).
GALAXY_FIXTURE_VARIABLE = "STATIC_AGENTS_GALAXY_FIXTURE"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """uvicorn serving ``staticagents.asgi.application`` in a background thread."""

    def __init__(self) -> None:
        import uvicorn

        from staticagents.asgi import application

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        from staticagents.serving.protocol import ServiceHttpProtocol, websocket_protocol

        config = uvicorn.Config(
            application,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            access_log=False,  # as serve runs it: the access log is serving.telemetry's
            lifespan="off",
            http=ServiceHttpProtocol,
            ws=websocket_protocol,  # type: ignore[arg-type]
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> None:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="session")
def live_server_session(django_db_setup: None, django_db_blocker: Any) -> Iterator[LiveServer]:
    server = LiveServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def live_url(live_server_session: LiveServer, transactional_db: None) -> str:
    """The base URL of the running ASGI app; the test's database writes are visible to it."""
    return live_server_session.url


@pytest.fixture
def load_rules(db: None) -> Callable[[Any], dict[str, Any]]:
    """Validate and import a fixture given as a mapping, YAML text or a path."""
    from staticagents.document.files import load_fixture
    from staticagents.services import import_fixture

    def load(source: Any) -> dict[str, Any]:
        if isinstance(source, Path):
            document = load_fixture(source.read_bytes(), str(source))
        elif isinstance(source, str):
            document = load_fixture(source)
        else:
            document = load_fixture(yaml.safe_dump(source))
        import_fixture(document=document)
        return document

    return load


@pytest.fixture
def galaxy_fixture() -> Path:
    """Galaxy's own fixture, for a test that proves compatibility with it.

    Without ``STATIC_AGENTS_GALAXY_FIXTURE`` the test is skipped, except under
    ``CI=true``, where it fails: CI must prove compatibility, not skip it.
    """
    value = os.environ.get(GALAXY_FIXTURE_VARIABLE, "")
    if not value:
        reason = f"{GALAXY_FIXTURE_VARIABLE} is not set (the path of Galaxy's static_agents.yml)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; under CI=true it must be", pytrace=False)
        pytest.skip(reason)
    path = Path(value)
    if not path.is_file():
        pytest.fail(f"{GALAXY_FIXTURE_VARIABLE}={value}: no such file", pytrace=False)
    return path


CONTROL_TOKEN = "test-control-token"


@pytest.fixture
def control(live_url: str, settings: Any) -> Iterator[Any]:
    """An httpx client for the control API, holding the configured bearer token."""
    import httpx

    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    headers = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    with httpx.Client(base_url=f"{live_url}/control", headers=headers, timeout=10) as client:
        yield client


def galaxy_query(live_url: str, query: str, session: str | None = None, **body: Any) -> Any:
    """``POST /api/ai/agents/query`` as Galaxy's client sends it; ``session`` sets the header."""
    import httpx

    headers = {"X-Static-Session": session} if session else {}
    payload = {"query": query, "agent_type": "router", **body}
    return httpx.post(f"{live_url}/api/ai/agents/query", json=payload, headers=headers)


def seed_drawing_both(chaos: dict[str, Any], session: str, rule: str, requests: int) -> int:
    """The first seed from ``chaos["seed"]`` on whose draws, for this session and rule, some of
    the first ``requests`` requests fault and some do not: the testing kit's session key is
    new in every run, and a fixed seed draws all or none about once in a hundred runs."""
    from staticagents.core.replies import chaos_fault

    seed = chaos["seed"]
    while True:
        draws = {
            chaos_fault({**chaos, "seed": seed}, session, rule, n) is None
            for n in range(1, requests + 1)
        }
        if len(draws) == 2:
            return seed
        seed += 1
