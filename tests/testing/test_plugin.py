"""The pytest plugin, run as a user runs it: inner pytest sessions (pytester) in subprocesses.

Each inner run loads only this plugin (autoloading is off, so whether the
package is installed does not matter) and starts its own service subprocess.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

import staticagents

pytest_plugins = ["pytester"]

SOURCE_ROOT = Path(staticagents.__file__).resolve().parents[1]

AGENT_TESTS = """
import anthropic
import httpx
import openai
import pytest

from staticagents.testing.client import tool_call
from staticagents.testing.assertions import assert_tool_result_sent


def ask(base_url, headers, question):
    agent = openai.OpenAI(
        base_url=base_url, api_key="sk-test", default_headers=headers, max_retries=0
    )
    messages = [{"role": "user", "content": question}]
    return agent.chat.completions.create(model="m", messages=messages).choices[0].message


@pytest.mark.static_agents_fixture("rules/greeting.yml")
def test_the_marker_installs_a_yaml_file(static_agents, openai_base_url, static_agents_headers):
    assert ask(openai_base_url, static_agents_headers, "hello").content == "Hi from YAML."
    [request] = static_agents.requests()
    assert request.rule == "greeting"


SCRIPTED_SESSIONS = []


def test_a_test_scripts_its_own_replies(
    static_agents, openai_base_url, static_agents_headers, static_agents_server
):
    static_agents.replies(tool_call("lookup", id="call_1"), "Done.")
    SCRIPTED_SESSIONS.append(static_agents.session)
    # The script is the session's own: a request outside the session gets the rules.
    assert ask(f"{static_agents_server.url}/v1", {}, "unscripted").content == "unscripted"
    first = ask(openai_base_url, static_agents_headers, "go")
    assert first.tool_calls[0].id == "call_1"
    agent = openai.OpenAI(
        base_url=openai_base_url, api_key="x", default_headers=static_agents_headers
    )
    messages = [
        {"role": "user", "content": "go"},
        first.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": "call_1", "content": "looked up"},
    ]
    done = agent.chat.completions.create(model="m", messages=messages)
    assert done.choices[0].message.content == "Done."
    assert_tool_result_sent(static_agents, call_id="call_1", contains="looked up")


def test_the_next_test_gets_the_demo_rules_and_a_new_session(
    static_agents, openai_base_url, static_agents_headers
):
    assert ask(openai_base_url, static_agents_headers, "echo me").content == "echo me"
    assert [r.query for r in static_agents.requests()] == ["echo me"]
    assert static_agents.script(SCRIPTED_SESSIONS[0]) is None  # it ended with its test
    assert static_agents.session.startswith("test_the_next_test_gets_the_demo_rules")


def test_the_anthropic_sdk_finds_the_service(
    static_agents, anthropic_base_url, static_agents_server
):
    assert anthropic_base_url == f"{static_agents_server.url}/sessions/{static_agents.session}"
    agent = anthropic.Anthropic(base_url=anthropic_base_url, api_key="x")
    answer = agent.messages.create(
        model="m", max_tokens=50, messages=[{"role": "user", "content": "ping"}]
    )
    assert answer.content[0].text == "ping"
    assert static_agents.requests()[0].dialect == "anthropic"


def test_the_base_urls_bind_the_session_with_no_header(
    static_agents, openai_base_url, galaxy_base_url, adk_base_url
):
    agent = openai.OpenAI(base_url=openai_base_url, api_key="x", max_retries=0)
    agent.chat.completions.create(model="m", messages=[{"role": "user", "content": "o"}])
    httpx.post(f"{galaxy_base_url}/api/ai/agents/query", json={"query": "g"})
    message = {"role": "user", "parts": [{"text": "a"}]}
    run = {"appName": "router", "userId": "u", "sessionId": "s", "newMessage": message}
    httpx.post(f"{adk_base_url}/run", json=run)
    assert [(r.dialect, r.query) for r in static_agents.requests()] == [
        ("openai", "o"), ("galaxy", "g"), ("adk", "a")
    ]


def test_a_request_without_the_session_is_pointed_out(static_agents, static_agents_server):
    agent = openai.OpenAI(base_url=f"{static_agents_server.url}/v1", api_key="x")
    agent.chat.completions.create(model="m", messages=[{"role": "user", "content": "lost"}])
    httpx.post(f"{static_agents_server.url}/api/ai/agents/query", json={"query": "lost too"})
    assert static_agents.requests(), "the agent's requests are not in the test's session"


def test_a_failing_agent_test_shows_its_journal(
    static_agents, openai_base_url, static_agents_headers
):
    ask(openai_base_url, static_agents_headers, "remember this question")
    assert False, "deliberately failing"


@pytest.mark.static_agents_fixture({"rules": [{"match": {"querry": "x"}, "response": {}}]})
def test_a_rejected_marker_fixture_is_a_setup_error(static_agents):
    pass


@pytest.mark.static_agents_fixture("rules/missing.yml")
def test_a_missing_marker_file_is_a_setup_error(static_agents):
    pass
"""


@pytest.fixture
def inner_pytest(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """Inner runs see only this plugin, and import Static Agents from this source tree."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTHONPATH", str(SOURCE_ROOT))
    monkeypatch.delenv("DJANGO_SETTINGS_MODULE", raising=False)
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)  # an inner run is no worker of this run's
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p", "staticagents.testing.plugin", "-p", "no:cacheprovider", "--strict-markers", *args
    )


def test_agent_tests_get_the_service_their_fixture_and_a_session_of_their_own(
    inner_pytest: pytest.Pytester,
) -> None:
    inner_pytest.mkdir("rules")
    (inner_pytest.path / "rules" / "greeting.yml").write_text(
        "rules:\n  - name: greeting\n    match: {contains: hello}\n"
        "    response: {content: Hi from YAML.}\n"
    )
    inner_pytest.makepyfile(test_agent=AGENT_TESTS)

    result = run(inner_pytest)

    result.assert_outcomes(passed=5, failed=2, errors=2)
    output = result.stdout.str()
    # The failing test's report carries its session's journal, and only that.
    assert output.count("Static Agents journal") == 2
    journal = output.split("Static Agents journal (session test_a_failing_agent_test_shows")[1]
    journal = journal.split("short test summary")[0]
    assert "/v1/chat/completions -> rule 'echo', answered 200" in journal
    assert "query: 'remember this question'" in journal
    assert '"content": "remember this question"' in journal
    assert "echo me" not in journal
    # Requests that missed the test's session are pointed out, in that test's report only.
    assert output.count("Static Agents: requests in the global session") == 1
    strays = output.split("Static Agents: requests in the global session")[1]
    strays = strays.split("test_a_failing_agent_test_shows_its_journal")[0]
    assert "2 request(s) reached the global session, not this test's session" in strays
    assert "POST /v1/chat/completions (openai): use openai_base_url" in strays
    assert "POST /api/ai/agents/query (galaxy): use galaxy_base_url" in strays
    # Fixtures the service refuses are setup errors naming the problem.
    assert "the test's Static Agents fixture was not installed:" in output
    assert "rules[0].match.querry: unknown key" in output
    assert "fixture file not found:" in output and "rules/missing.yml" in output


def test_the_plugin_does_nothing_unless_a_test_uses_it(inner_pytest: pytest.Pytester) -> None:
    inner_pytest.makepyfile(
        test_plain="""
        import sys
        import pytest

        @pytest.mark.static_agents_fixture("unused.yml")
        def test_plain():
            assert "staticagents.testing.client" not in sys.modules
            assert "httpx" not in sys.modules
        """
    )
    result = run(inner_pytest, "--setup-show")
    result.assert_outcomes(passed=1)
    assert "static_agents" not in result.stdout.str().replace("static_agents_fixture", "")


PARALLEL_TESTS = """
import os

import openai
import pytest

from staticagents.testing.client import tool_call


def ask(base_url, question):
    agent = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
    messages = [{"role": "user", "content": question}]
    return agent.chat.completions.create(model="m", messages=messages).choices[0].message


def note_the_service(static_agents_server, name):
    worker = os.environ["PYTEST_XDIST_WORKER"]
    with open(os.path.join(os.environ["SERVICES_SEEN"], name), "w") as seen:
        seen.write(f"{worker} {static_agents_server.url}")


@pytest.mark.parametrize("n", range(6))
def test_a_script_of_its_own(static_agents, static_agents_server, openai_base_url, n):
    note_the_service(static_agents_server, f"script-{n}")
    static_agents.replies(f"first {n}", tool_call("lookup", id=f"call_{n}"))
    assert ask(openai_base_url, "q").content == f"first {n}"
    assert ask(openai_base_url, "q").tool_calls[0].id == f"call_{n}"
    assert [r.query for r in static_agents.requests()] == ["q", "q"]


@pytest.mark.parametrize("n", range(4))
@pytest.mark.static_agents_fixture({"rules": [{"name": "fixed", "response": {"content": "F"}}]})
def test_rules_of_its_own(static_agents, static_agents_server, openai_base_url, n):
    note_the_service(static_agents_server, f"rules-{n}")
    assert ask(openai_base_url, f"r{n}").content == "F"
    [request] = static_agents.requests()
    assert (request.query, request.rule) == (f"r{n}", "fixed")


def test_a_failure_shows_its_journal_and_its_strays(static_agents, static_agents_server):
    ask(f"{static_agents_server.url}/v1", "stray")
    assert static_agents.requests()
"""


def test_the_plugin_runs_under_xdist_with_a_service_per_worker(
    inner_pytest: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = inner_pytest.mkdir("services-seen")
    monkeypatch.setenv("SERVICES_SEEN", str(seen))
    inner_pytest.makepyfile(test_parallel=PARALLEL_TESTS)

    result = run(inner_pytest, "-p", "xdist.plugin", "-n", "2")

    result.assert_outcomes(passed=10, failed=1)
    services = {path.read_text() for path in seen.iterdir()}
    workers = {service.split()[0] for service in services}
    urls = {service.split()[1] for service in services}
    assert workers == {"gw0", "gw1"} and len(urls) == 2  # one service each, used throughout
    output = result.stdout.str()
    assert "Static Agents journal (session test_a_failure_shows_its_journal" in output
    assert "POST /v1/chat/completions (openai): use openai_base_url" in output


SHARED_SCRIPTS = """
import os

import openai
import pytest

from staticagents.testing.client import StaticAgentsError, tool_call


def ask(base_url, question):
    agent = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
    messages = [{"role": "user", "content": question}]
    return agent.chat.completions.create(model="m", messages=messages).choices[0].message


def note(static_agents_server, name):
    worker = os.environ["PYTEST_XDIST_WORKER"]
    with open(os.path.join(os.environ["SERVICES_SEEN"], name), "w") as seen:
        seen.write(f"{worker} {static_agents_server.url}")


@pytest.mark.parametrize("n", range(8))
def test_a_script_of_its_own(static_agents, static_agents_server, openai_base_url, n):
    note(static_agents_server, f"script-{n}")
    static_agents.replies(f"first {n}", tool_call("lookup", id=f"call_{n}"))
    assert ask(openai_base_url, f"q{n}").content == f"first {n}"
    assert ask(openai_base_url, f"q{n}").tool_calls[0].id == f"call_{n}"
    assert [r.query for r in static_agents.requests()] == [f"q{n}", f"q{n}"]


@pytest.mark.parametrize("n", range(4))
def test_the_demo_rules_answer_beside_the_others(static_agents, openai_base_url, n):
    assert ask(openai_base_url, f"echo {n}").content == f"echo {n}"
    [request] = static_agents.requests()
    assert request.rule == "echo"


def test_a_test_without_a_marker_may_not_replace_the_rules(static_agents):
    with pytest.raises(StaticAgentsError, match="static_agents_fixture"):
        static_agents.install({"rules": [{"name": "mine", "response": {"content": "M"}}]})
"""

SHARED_RULES = """
import openai
import pytest


@pytest.fixture
def static_agents_fixture(request):
    n = request.node.callspec.params["n"]
    return {"rules": [{"name": f"fixed-{n}", "response": {"content": f"F{n}"}}]}


@pytest.mark.parametrize("n", range(4))
def test_rules_of_its_own(static_agents, openai_base_url, n):
    agent = openai.OpenAI(base_url=openai_base_url, api_key="x", max_retries=0)
    messages = [{"role": "user", "content": f"r{n}"}]
    answer = agent.chat.completions.create(model="m", messages=messages)
    assert answer.choices[0].message.content == f"F{n}"
    static_agents.install({"rules": [{"name": "again", "response": {"content": "A"}}]})
    answer = agent.chat.completions.create(model="m", messages=messages)
    assert answer.choices[0].message.content == "A"
"""


def test_the_plugin_shares_one_service_among_xdist_workers_on_request(
    inner_pytest: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = inner_pytest.mkdir("services-seen")
    monkeypatch.setenv("SERVICES_SEEN", str(seen))
    inner_pytest.makepyfile(test_scripts=SHARED_SCRIPTS, test_rules=SHARED_RULES)

    result = run(inner_pytest, "-p", "xdist.plugin", "-n", "2", "--static-agents-shared")

    result.assert_outcomes(passed=17)
    services = {path.read_text() for path in seen.iterdir()}
    workers = {service.split()[0] for service in services}
    urls = {service.split()[1] for service in services}
    assert workers == {"gw0", "gw1"} and len(urls) == 1  # both workers, one service
    # The last worker out stopped it.
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{urls.pop()}/v1/models", timeout=5)


EARLY_LAUNCH = """
from staticagents.testing.plugin import LAUNCHED_KEY

PIDS = []


def test_a_test_before_any_agent_test_finds_the_service_launched(request):
    PIDS.append(request.config.stash[LAUNCHED_KEY].pid)
    assert PIDS[0] is not None


def test_the_first_agent_test_gets_the_launched_service(static_agents_server):
    assert static_agents_server.pid == PIDS[0]
    assert static_agents_server.client().counters(every_session=True).requests == 0
"""


def test_the_service_is_launched_once_the_tests_are_collected(
    inner_pytest: pytest.Pytester,
) -> None:
    inner_pytest.makepyfile(test_early=EARLY_LAUNCH)
    result = run(inner_pytest)
    result.assert_outcomes(passed=2)
