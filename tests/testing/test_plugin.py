"""The pytest plugin, run as a user runs it: inner pytest sessions (pytester) in subprocesses.

Each inner run loads only this plugin (autoloading is off, so whether the
package is installed does not matter) and starts its own service subprocess.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import staticagents

pytest_plugins = ["pytester"]

SOURCE_ROOT = Path(staticagents.__file__).resolve().parents[1]

AGENT_TESTS = """
import anthropic
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


def test_a_test_scripts_its_own_replies(static_agents, openai_base_url, static_agents_headers):
    static_agents.replies(tool_call("lookup", id="call_1"), "Done.")
    SCRIPTED_SESSIONS.append(static_agents.session)
    # The script is the session's own: a request without the session gets the rules.
    assert ask(openai_base_url, {}, "unscripted").content == "unscripted"
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
    static_agents, anthropic_base_url, static_agents_headers, static_agents_server
):
    assert anthropic_base_url == static_agents.base_url == static_agents_server.url
    agent = anthropic.Anthropic(
        base_url=anthropic_base_url, api_key="x", default_headers=static_agents_headers
    )
    answer = agent.messages.create(
        model="m", max_tokens=50, messages=[{"role": "user", "content": "ping"}]
    )
    assert answer.content[0].text == "ping"
    assert static_agents.requests()[0].dialect == "anthropic"


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

    result.assert_outcomes(passed=4, failed=1, errors=2)
    output = result.stdout.str()
    # The failing test's report carries its session's journal, and only that.
    assert output.count("Static Agents journal") == 1
    journal = output.split("Static Agents journal (session test_a_failing_agent_test_shows")[1]
    journal = journal.split("short test summary")[0]
    assert "#1 openai /v1/chat/completions -> rule 'echo', answered 200" in journal
    assert "query: 'remember this question'" in journal
    assert '"content": "remember this question"' in journal
    assert "echo me" not in journal
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
