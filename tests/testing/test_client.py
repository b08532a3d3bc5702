"""The testing kit's client and assertions, against the real ASGI app (live_url).

The agent side is the official openai SDK, bound to the client's session
through ``default_headers=client.headers``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from staticagents.testing.assertions import (
    assert_no_credentials,
    assert_system_prompt,
    assert_tool_result_sent,
)
from staticagents.testing.client import (
    ControlAPIError,
    FixtureRejected,
    Reply,
    ServiceUnreachable,
    StaticAgentsClient,
    ToolCall,
    Unauthorized,
    error,
    text,
    thinking,
    tool_call,
)
from tests.conftest import CONTROL_TOKEN, free_port

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a topic up.",
        "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}},
    },
}


@pytest.fixture
def client(live_url: str, settings: Any) -> Iterator[StaticAgentsClient]:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    with StaticAgentsClient(live_url, token=CONTROL_TOKEN) as client:
        yield client


def sdk(client: StaticAgentsClient) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=client.openai_base_url,
        api_key="sk-test",
        default_headers=client.headers,
        max_retries=0,
    )


def run_tool_loop(agent: openai.OpenAI, question: str, system: str = "Be brief.") -> str:
    """A minimal agent: call the model, run the tools it asks for, until it answers."""
    messages: list[Any] = [
        {"role": "system", "content": system},
        {"role": "user", "content": question},
    ]
    for _ in range(5):
        completion = agent.chat.completions.create(
            model="gpt-4o", messages=messages, tools=[WEATHER_TOOL]
        )
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            topic = json.loads(call.function.arguments)["topic"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"{topic}: sunny"})
    raise AssertionError("the agent never answered")


# -- scripting and reading the journal ---------------------------------------------------


def test_replies_script_a_tool_loop_and_requests_show_what_the_agent_sent(
    client: StaticAgentsClient,
) -> None:
    installed = client.replies(tool_call("lookup", {"topic": "weather"}, id="call_1"), "Sunny.")
    assert installed.session == client.session and client.scripted

    assert run_tool_loop(sdk(client), "How is the weather?") == "Sunny."

    first, second = client.requests()
    assert first.id < second.id
    assert (first.dialect, first.route, first.rule, first.outcome) == (
        "openai",
        f"/sessions/{client.session}/v1/chat/completions",  # the route the SDK used
        "replies",
        "answered",
    )
    assert first.session == client.session and not first.fallback
    assert first.body["messages"][1] == {"role": "user", "content": "How is the weather?"}
    assert second.messages[-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "weather: sunny",
    }
    assert second.raw_body.startswith("{") and json.loads(second.raw_body) == second.body
    assert "rule 'replies', answered 200" in second.describe()


def test_reply_helpers_script_thinking_errors_and_finish_reasons(
    client: StaticAgentsClient,
) -> None:
    client.replies(
        thinking("Weighing it.", "Here."),
        text("cut short", finish_reason="length"),
        error("slow down", status=429, type="rate_limit_error", retry_after=2),
        {"content": "from a mapping"},
        Reply(tool_calls=(ToolCall("a", {"x": 1}, "c1"), ToolCall("b", id="c2"))),
    )
    agent = sdk(client)

    def ask() -> Any:
        return agent.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "go"}]
        )

    thought = ask().choices[0].message
    assert thought.content == "Here."
    assert thought.model_extra == {"reasoning_content": "Weighing it."}
    assert ask().choices[0].finish_reason == "length"
    with pytest.raises(openai.RateLimitError) as limited:
        ask()
    assert limited.value.response.headers["retry-after"] == "2"
    assert "slow down" in str(limited.value)
    assert ask().choices[0].message.content == "from a mapping"
    calls = ask().choices[0].message.tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [  # type: ignore[union-attr]
        ("c1", "a", '{"x": 1}'),
        ("c2", "b", "{}"),
    ]


def test_a_script_is_exhausted_with_a_clear_error_unless_it_repeats(
    client: StaticAgentsClient,
) -> None:
    client.replies("only once")
    agent = sdk(client)
    question: Any = [{"role": "user", "content": "hi"}]
    assert agent.chat.completions.create(model="m", messages=question).choices[0].message.content
    with pytest.raises(openai.InternalServerError, match="Script exhausted"):
        agent.chat.completions.create(model="m", messages=question)

    client.replies("again and again", on_exhausted="repeat_last")
    for _ in range(3):
        answer = agent.chat.completions.create(model="m", messages=question)
        assert answer.choices[0].message.content == "again and again"


def test_install_takes_a_path_a_mapping_or_a_list_of_replies(
    client: StaticAgentsClient, tmp_path: Path
) -> None:
    path = tmp_path / "rules.yml"
    path.write_text("rules:\n  - name: from-yaml\n    response: {content: yaml}\n")
    assert client.install(path).created == 1
    again = client.install(str(path))  # the same rules: kept as they are
    assert (again.created, again.updated, again.deleted, again.unchanged) == (0, 0, 0, 1)
    assert [r["name"] for r in client.export_fixture()["rules"]] == ["from-yaml"]

    mapping = {"rules": [{"name": "from-mapping", "response": {"content": "json"}}]}
    result = client.install(mapping)
    assert (result.created, result.deleted) == (1, 1)

    client.install(["first", tool_call("lookup")])  # a list is the session's own script
    assert [r["name"] for r in client.export_fixture()["rules"]] == ["from-mapping"]
    assert client.script() == {
        "name": "replies",
        "responses": [{"content": "first"}, {"tool_calls": [{"name": "lookup", "arguments": {}}]}],
        "on_exhausted": "error",
    }
    assert client.installs == 3  # the script replaced no rule


def test_install_starts_the_session_afresh_and_keeps_its_key(client: StaticAgentsClient) -> None:
    agent = sdk(client)  # built once, before the second install: it must stay bound
    question: Any = [{"role": "user", "content": "next"}]
    client.replies("one", "two")
    assert agent.chat.completions.create(model="m", messages=question).choices[0].message.content
    key = client.session

    client.replies("one", "two")
    assert client.session == key
    assert client.requests() == []
    answer = agent.chat.completions.create(model="m", messages=question)
    assert answer.choices[0].message.content == "one"
    assert len(client.requests()) == 1


def test_a_rejected_fixture_names_every_error_and_changes_nothing(
    client: StaticAgentsClient, tmp_path: Path
) -> None:
    client.replies("kept")
    path = tmp_path / "broken.yml"
    path.write_text(
        "rules:\n"
        "  - name: one\n"
        "    match:\n"
        "      querry: hello\n"
        "    response:\n"
        "      confidence: certain\n"
    )
    with pytest.raises(FixtureRejected) as rejected:
        client.install(path)
    errors = {e.path: e for e in rejected.value.errors}
    assert set(errors) == {"rules[0].match.querry", "rules[0].response.confidence"}
    assert (errors["rules[0].match.querry"].message, errors["rules[0].match.querry"].line) == (
        "unknown key (did you mean 'query'?)",
        4,
    )
    message = str(rejected.value)
    assert message.startswith(f"fixture {path} was rejected (HTTP 400); no rule was changed:")
    assert "  rules[0].match.querry: unknown key (did you mean 'query'?) (line 4)" in message
    assert client.script() is not None  # the session was not started afresh either


def test_bad_arguments_are_refused_before_anything_is_sent(
    client: StaticAgentsClient, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError, match="fixture file not found"):
        client.install(tmp_path / "missing.yml")
    with pytest.raises(TypeError, match="step 2 must be a str, a Reply or a response mapping"):
        client.replies("fine", 42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one step"):
        client.replies()
    with pytest.raises(TypeError, match="install\\(\\) takes a path"):
        client.install(3.5)  # type: ignore[arg-type]
    assert client.installs == 0


def test_requests_counters_and_reset_cover_one_session(
    client: StaticAgentsClient, live_url: str
) -> None:
    client.install({"rules": [{"name": "hello", "match": {"contains": "hello"}, "response": {}}]})
    with StaticAgentsClient(live_url, token=CONTROL_TOKEN) as other:
        for bound, question in ((client, "hello"), (client, "nothing matches"), (other, "hello")):
            sdk(bound).chat.completions.create(
                model="m", messages=[{"role": "user", "content": question}]
            )

        assert [r.query for r in client.requests()] == ["hello", "nothing matches"]
        assert [r.query for r in client.requests(fallback=True)] == ["nothing matches"]
        assert [r.session for r in client.requests(other.session)] == [other.session]
        assert len(client.requests(every_session=True)) == 3

        counters = client.counters()
        assert (counters.session, counters.requests, counters.rules, counters.fallbacks) == (
            client.session,
            2,
            {"hello": 1},
            1,
        )
        assert client.counters(every_session=True).requests == 3

        reset = client.reset()
        assert (reset.session, reset.journal) == (client.session, 2)
        assert client.requests() == [] and client.counters().requests == 0
        assert len(other.requests()) == 1


def test_requests_follows_the_journal_past_its_first_page(client: StaticAgentsClient) -> None:
    from staticagents.models import JournalEntry

    JournalEntry.objects.bulk_create(
        JournalEntry(
            session=client.session,
            dialect="openai",
            route="/v1/chat/completions",
            query=f"question {n}",
            body="{}",
            outcome="answered",
        )
        for n in range(1001)  # the client asks for pages of 1,000
    )
    assert [r.query for r in client.requests()] == [f"question {n}" for n in range(1001)]


def test_explain_names_the_rule_and_why_earlier_rules_did_not_match(
    client: StaticAgentsClient,
) -> None:
    client.install(
        {
            "rules": [
                {"name": "coder", "match": {"agent_type": "coder"}, "response": {}},
                {"name": "weather", "match": {"query": "weather"}, "response": {}},
            ]
        }
    )
    explained = client.explain("weather today?", model="gpt-4o", dialect="openai")
    assert (explained.rule, explained.fallback) == ("weather", False)
    assert [(v.rule, v.matched, v.predicate) for v in explained.verdicts] == [
        ("coder", False, "agent_type"),
        ("weather", True, None),
    ]
    assert client.explain("nothing").fallback is True
    with pytest.raises(ControlAPIError) as bad:
        client.explain("x", turn=0)
    assert bad.value.status == 400 and bad.value.errors[0].path == "turn"


def test_service_errors_are_raised_as_clear_exceptions(
    client: StaticAgentsClient, live_url: str
) -> None:
    with pytest.raises(ControlAPIError) as unknown:
        client.requests(dialcet="openai")
    assert str(unknown.value) == (
        "reading the journal failed with HTTP 400\n  dialcet: unknown query parameter"
    )
    intruder = StaticAgentsClient(live_url, token="wrong")
    with intruder, pytest.raises(Unauthorized) as refused:
        intruder.counters()
    assert refused.value.status == 401
    assert "STATIC_AGENTS_CONTROL_TOKEN" in str(refused.value)
    nowhere = StaticAgentsClient(f"http://127.0.0.1:{free_port()}", token="t")
    with nowhere, pytest.raises(ServiceUnreachable, match="cannot reach Static Agents at"):
        nowhere.counters()


def test_the_client_takes_the_proxy_the_environment_names_for_its_host(
    client: StaticAgentsClient, live_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")  # nothing listens
    with (
        StaticAgentsClient(live_url, token=CONTROL_TOKEN) as proxied,
        pytest.raises(ServiceUnreachable, match="cannot reach Static Agents at"),
    ):
        proxied.counters()
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with StaticAgentsClient(live_url, token=CONTROL_TOKEN) as direct:
        assert direct.counters().requests == 0


def test_the_token_defaults_to_the_environment(
    client: StaticAgentsClient, live_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATIC_AGENTS_CONTROL_TOKEN", CONTROL_TOKEN)
    with StaticAgentsClient(live_url + "/") as from_environment:
        assert from_environment.base_url == live_url
        assert from_environment.counters().requests == 0
        assert from_environment.headers == {"X-Static-Session": from_environment.session}
        assert from_environment.session != client.session
        first = from_environment.session
        second = from_environment.new_session()
        assert second != first
        assert from_environment.headers == {"X-Static-Session": second}


# -- assertions over what was sent --------------------------------------------------------


def test_assertions_pass_on_a_clean_agent_run(client: StaticAgentsClient) -> None:
    client.replies(tool_call("lookup", {"topic": "tides"}, id="call_7"), "Done.")
    run_tool_loop(sdk(client), "tides?", system="You are a harbour assistant.")

    assert_no_credentials(client, secrets=["hunter2"])
    found = assert_tool_result_sent(client, call_id="call_7", contains="tides: sunny")
    assert found.messages[-1]["tool_call_id"] == "call_7"
    assert assert_system_prompt(client, contains="harbour").id == client.requests()[0].id
    assert_system_prompt(client.requests(), equals="You are a harbour assistant.", every=True)


def test_assert_no_credentials_names_the_request_the_place_and_masks_the_secret(
    client: StaticAgentsClient,
) -> None:
    client.replies("ok", on_exhausted="repeat_last")
    agent = sdk(client)
    agent.chat.completions.create(model="m", messages=[{"role": "user", "content": "clean"}])
    leaked_key = "sk-proj-" + "A1b2C3d4" * 6
    agent.chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": "db is postgres://app:s3cret@db/prod"},
            {"role": "user", "content": f"use {leaked_key} and password hunter2"},
        ],
    )
    with pytest.raises(AssertionError) as caught:
        assert_no_credentials(client, secrets=["hunter2"])
    message = str(caught.value)
    assert message.splitlines()[0] == "credentials found in request bodies:"
    route = f"/sessions/{client.session}/v1/chat/completions"
    label = f"request 2 of 2 (openai {route} -> rule 'replies', answered 200)"
    assert f"{label}: messages[1].content: secret #1 given to the check ('hunt…'" in message
    assert "messages[1].content: an OpenAI API key 'sk-p…' (56 characters)" in message
    assert "messages[0].content: a password in a URL" in message
    assert "request 1 of 2" not in message
    assert leaked_key not in message and "hunter2" not in message
    with pytest.raises(ValueError, match="non-empty"):
        assert_no_credentials(client, secrets=[""])


def test_assert_tool_result_sent_lists_the_results_that_were_sent(
    client: StaticAgentsClient,
) -> None:
    client.replies(tool_call("lookup", {"topic": "rain"}, id="call_1"), "Done.")
    run_tool_loop(sdk(client), "rain?")
    with pytest.raises(AssertionError) as wrong_id:
        assert_tool_result_sent(client, call_id="call_9")
    assert str(wrong_id.value) == (
        "no tool result for call 'call_9' was sent; tool results sent:\n"
        f"  request 2 of 2 ({client.requests()[1].describe()}): messages[3]: "
        "call 'call_1' -> 'rain: sunny'"
    )
    with pytest.raises(AssertionError, match="for call 'call_1' containing 'snow'"):
        assert_tool_result_sent(client, call_id="call_1", contains="snow")
    with pytest.raises(AssertionError, match="none of the 1 request\\(s\\) carried a tool result"):
        assert_tool_result_sent(client.requests()[:1], call_id="call_1")


def test_assert_system_prompt_shows_the_prompts_that_were_used(
    client: StaticAgentsClient,
) -> None:
    client.replies("ok", on_exhausted="repeat_last")
    agent = sdk(client)
    agent.chat.completions.create(
        model="m",
        messages=[
            {"role": "developer", "content": "You are terse."},
            {"role": "user", "content": "a"},
        ],
    )
    agent.chat.completions.create(model="m", messages=[{"role": "user", "content": "b"}])
    assert_system_prompt(client, contains="terse")
    with pytest.raises(AssertionError) as not_every:
        assert_system_prompt(client, contains="terse", every=True)
    assert str(not_every.value).splitlines() == [
        "not every request used a system prompt containing 'terse':",
        f"  request 2 of 2 ({client.requests()[1].describe()}): no system prompt",
    ]
    with pytest.raises(AssertionError, match="no request used a system prompt equal to 'terse'"):
        assert_system_prompt(client, equals="terse")


def test_an_assertion_over_an_empty_journal_fails_instead_of_passing(
    client: StaticAgentsClient,
) -> None:
    with pytest.raises(AssertionError) as empty:
        assert_no_credentials(client)
    assert f"no requests to check in session '{client.session}'" in str(empty.value)
    assert "X-Static-Session" in str(empty.value)
