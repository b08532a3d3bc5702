"""The pytest plugin: a stand-in model per test session, a fresh session per test.

Registered through the ``pytest11`` entry point. Nothing happens until a test
uses one of its fixtures; then the service starts once for the whole test run
(a subprocess on a free port, a temporary SQLite database, a random control
token) and stops at its end.

Fixtures:

* ``static_agents``: a ``StaticAgentsClient`` on a new session for this test.
  Before the test, the rules are replaced with the test's fixture (see
  ``static_agents_fixture``), else with the bundled demo rules. A script given
  with ``replies()`` is the session's own and ends with the test.
* ``static_agents_fixture``: the fixture a test starts with; by default the
  argument of ``@pytest.mark.static_agents_fixture("rules.yml")`` (a path
  relative to the test file, a mapping, or a list of replies), else None.
  Override it in a ``conftest.py`` to give a directory of tests a default.
* ``openai_base_url``, ``anthropic_base_url``, ``gemini_base_url``,
  ``galaxy_base_url``, ``adk_base_url``: base URLs bound to the test's session
  (``/sessions/{key}/...``), so an SDK needs no header; ``static_agents_headers``:
  the same session as a header, for a client that builds its own URLs.
* ``static_agents_server``: the running service (``.url``, ``.token``), once per run.

An agent that calls the model in the background (a task, a thread, a worker) is
waited for, not polled: ``static_agents.expect_request("summarise", timeout=5)``
returns the first request of the test's session whose query contains that text
(``wait_for(predicate, **filters)`` for any condition), even one that arrived
before the call, and raises ``NoMatchingRequest`` listing what did arrive.

When a test that used the service fails, its report shows the journal of its session,
and the requests that reached the global session while it ran (a forgotten header, a
URL built by hand). Under pytest-xdist each worker starts a service of its own, or,
with ``--static-agents-shared``, the workers share one (``testing.shared``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from staticagents.testing.client import FixtureSource, RecordedRequest, StaticAgentsClient
    from staticagents.testing.server import StaticAgentsServer
    from staticagents.testing.shared import SharedService

MARKER = "static_agents_fixture"
CLIENT_KEY = pytest.StashKey["StaticAgentsClient"]()
STARTED_KEY = pytest.StashKey[datetime]()
# Whether the service holds rules other than the demo it starts with (set before an
# install is tried: a failed one may leave the question open).
CUSTOM_RULES_KEY = pytest.StashKey[bool]()
SHARED_KEY: pytest.StashKey[SharedService] = pytest.StashKey()
LAUNCHED_KEY: pytest.StashKey[StaticAgentsServer] = pytest.StashKey()
JOURNAL_SECTION = "Static Agents journal"
STRAY_SECTION = "Static Agents: requests in the global session"
# What puts a stray request of each dialect in the test's session.
SESSION_BOUND = {
    "openai": "openai_base_url",
    "responses": "openai_base_url",
    "embeddings": "openai_base_url",
    "anthropic": "anthropic_base_url",
    "gemini": "gemini_base_url",
    "galaxy": "galaxy_base_url",
    "adk": "adk_base_url",
    "websocket": "static_agents.websocket_url",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("static_agents").addoption(
        "--static-agents-shared",
        action="store_true",
        help="under pytest-xdist, one Static Agents service for every worker "
        "(tests with rules of their own then run one at a time)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(fixture): the Static Agents fixture the test starts with "
        "(a path relative to the test file, a mapping, or a list of replies)",
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """Launch the service as soon as the tests are known to need it, so that it starts
    while pytest sets up what comes before the first of them (an xdist worker, which
    runs only some of the tests it collected, starts it when a test asks)."""
    config = session.config
    runs_nothing = config.option.collectonly or getattr(config.option, "setupplan", False)
    if runs_nothing or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if any("static_agents_server" in getattr(item, "fixturenames", ()) for item in session.items):
        from staticagents.testing.server import StaticAgentsServer

        factory: pytest.TempPathFactory = config._tmp_path_factory  # type: ignore[attr-defined]
        server = StaticAgentsServer(factory.mktemp("static-agents"))
        server.launch()
        config.stash[LAUNCHED_KEY] = server


@pytest.fixture(scope="session")
def static_agents_server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[StaticAgentsServer]:
    """The service, started once for the test run (or for each xdist worker, or shared)."""
    from staticagents.testing.server import StaticAgentsServer

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and request.config.getoption("static_agents_shared"):
        yield from shared_server(request.config, tmp_path_factory, worker)
        return
    server = request.config.stash.get(LAUNCHED_KEY, None)
    if server is None:
        server = StaticAgentsServer(tmp_path_factory.mktemp("static-agents"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def shared_server(
    config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, worker: str
) -> Iterator[StaticAgentsServer]:
    """The service every worker shares, met in the directory xdist's workers share."""
    from staticagents.testing.shared import SharedService

    service = SharedService(tmp_path_factory.getbasetemp().parent, worker)
    server = service.join()
    config.stash[SHARED_KEY] = service
    try:
        yield server
    finally:
        service.leave()


@pytest.fixture
def static_agents_fixture(request: pytest.FixtureRequest) -> FixtureSource | None:
    """The argument of the ``static_agents_fixture`` marker; paths are relative to the test."""
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        return None
    if len(marker.args) != 1 or marker.kwargs:
        raise pytest.UsageError(
            f"@pytest.mark.{MARKER} takes one argument (a path, a mapping or a list of "
            f"replies), not {marker.args!r} {marker.kwargs!r}"
        )
    fixture: FixtureSource = marker.args[0]
    if isinstance(fixture, str | os.PathLike):
        return request.path.parent / Path(fixture)  # an absolute path stays as it is
    return fixture


@pytest.fixture
def static_agents(
    static_agents_server: StaticAgentsServer,
    static_agents_fixture: FixtureSource | None,
    request: pytest.FixtureRequest,
) -> Iterator[StaticAgentsClient]:
    """A client on a new session, the rules replaced with the test's fixture (or the demo)."""
    shared = request.config.stash.get(SHARED_KEY, None)
    if shared is None:
        yield from own_service_client(static_agents_server, static_agents_fixture, request)
        return
    from staticagents.testing.shared import installs_rules

    alone = installs_rules(static_agents_fixture)
    with shared.test(alone=alone):
        try:
            yield from shared_service_client(static_agents_server, static_agents_fixture, request)
        finally:
            if alone:
                shared.restore_demo_rules()


def own_service_client(
    server: StaticAgentsServer, fixture: FixtureSource | None, request: pytest.FixtureRequest
) -> Iterator[StaticAgentsClient]:
    """A client of this run's (or this worker's) own service."""
    from staticagents.testing.client import new_session_key
    from staticagents.testing.server import DEFAULT_FIXTURE

    client = server.client(session=new_session_key(session_prefix(request)))
    request.node.stash[STARTED_KEY] = datetime.now(UTC)
    # Every test starts from known rules, so an earlier test's install never leaks in;
    # the demo rules the service starts with are installed again only when changed.
    rules = request.config.stash
    try:
        if fixture is not None:
            rules[CUSTOM_RULES_KEY] = True
            install_test_fixture(client, fixture)
        elif rules.get(CUSTOM_RULES_KEY, False):
            client.install(DEFAULT_FIXTURE)
            rules[CUSTOM_RULES_KEY] = False
        installed_before_test = client.installs
        request.node.stash[CLIENT_KEY] = client
        yield client
        if client.installs > installed_before_test:
            rules[CUSTOM_RULES_KEY] = True
        if client.scripted:  # a script lives as long as its session: this test
            client.reset()
    finally:
        client.close()


def shared_service_client(
    server: StaticAgentsServer, fixture: FixtureSource | None, request: pytest.FixtureRequest
) -> Iterator[StaticAgentsClient]:
    """A client of the service the workers share; the demo rules unless the test holds the
    service alone (its fixture's rules, which it may replace again)."""
    from staticagents.testing.client import StaticAgentsClient, new_session_key
    from staticagents.testing.shared import SessionOnlyClient, installs_rules

    kind = StaticAgentsClient if installs_rules(fixture) else SessionOnlyClient
    session = new_session_key(session_prefix(request))
    client = kind(server.url, token=server.token, session=session)
    request.node.stash[STARTED_KEY] = datetime.now(UTC)
    try:
        if fixture is not None:
            install_test_fixture(client, fixture)
        request.node.stash[CLIENT_KEY] = client
        yield client
        if client.scripted:
            client.reset()
    finally:
        client.close()


def install_test_fixture(client: StaticAgentsClient, fixture: FixtureSource) -> None:
    """Install the test's fixture; a refusal fails the test's setup with the reason alone."""
    from staticagents.testing.client import StaticAgentsError

    try:
        client.install(fixture)
        return
    except (StaticAgentsError, OSError) as exc:
        reason = str(exc)
    # Outside the except block: the reason alone, without the exception it came from.
    pytest.fail(f"the test's Static Agents fixture was not installed:\n{reason}", pytrace=False)


@pytest.fixture
def openai_base_url(static_agents: StaticAgentsClient) -> str:
    """``base_url`` for the OpenAI SDK, in this test's session (no header needed)."""
    return static_agents.openai_base_url


@pytest.fixture
def anthropic_base_url(static_agents: StaticAgentsClient) -> str:
    """``base_url`` for the Anthropic SDK, in this test's session (no header needed)."""
    return static_agents.anthropic_base_url


@pytest.fixture
def gemini_base_url(static_agents: StaticAgentsClient) -> str:
    """``base_url`` for google-genai (``HttpOptions``) and ADK's ``Gemini`` model."""
    return static_agents.gemini_base_url


@pytest.fixture
def galaxy_base_url(static_agents: StaticAgentsClient) -> str:
    """The Galaxy agent API's base URL (``.../api/ai/agents/query``), in this test's session."""
    return static_agents.galaxy_base_url


@pytest.fixture
def adk_base_url(static_agents: StaticAgentsClient) -> str:
    """The ADK API server's base URL (``.../run``, ``.../run_sse``), in this test's session."""
    return static_agents.adk_base_url


@pytest.fixture
def static_agents_headers(static_agents: StaticAgentsClient) -> dict[str, str]:
    """Headers carrying this test's session, for an SDK's ``default_headers``."""
    return static_agents.headers


def session_prefix(request: pytest.FixtureRequest) -> str:
    """The test's name, as a readable start of its session key."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")
    return name[:80] or "test"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """A failed test that used the service gets its session's journal in its report."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    client = item.stash.get(CLIENT_KEY, None)
    if client is None or not report.failed or call.when == "teardown":
        return
    report.sections.append((f"{JOURNAL_SECTION} (session {client.session})", journal_text(client)))
    strays = stray_text(client, item.stash[STARTED_KEY])
    if strays:
        report.sections.append((STRAY_SECTION, strays))


def journal_text(client: StaticAgentsClient) -> str:
    from staticagents.testing.assertions import format_requests

    try:
        return format_requests(client.requests())
    except Exception as exc:  # a report must never fail because the service did
        return f"(the journal could not be read: {exc})"


def stray_text(client: StaticAgentsClient, started: datetime) -> str:
    """The requests that reached the global session since the test started, and the fix."""
    from staticagents.core.inquiry import GLOBAL_SESSION

    try:
        strays = [
            entry
            for entry in client.requests(GLOBAL_SESSION)
            if entry.created_at is not None and entry.created_at >= started
        ]
    except Exception as exc:  # a report must never fail because the service did
        return f"(the global session could not be read: {exc})"
    if not strays:
        return ""
    lines = [
        f"{len(strays)} request(s) reached the global session, not this test's session "
        f"{client.session!r}, so requests() does not list them:"
    ]
    lines += [f"  {stray_line(entry)}" for entry in strays]
    lines.append(
        f"Send them in the test's session: a base URL under {client.session_url}, "
        "or the static_agents_headers fixture's X-Static-Session header."
    )
    return "\n".join(lines)


def stray_line(entry: RecordedRequest) -> str:
    method = entry.method or ("GET" if entry.dialect == "websocket" else "POST")
    fixture = SESSION_BOUND.get(entry.dialect, "static_agents.session_url")
    if entry.dialect == "embeddings" and ":" in entry.route:  # Gemini's embedding methods
        fixture = "gemini_base_url"
    return f"{method} {entry.route} ({entry.dialect}): use {fixture}"
