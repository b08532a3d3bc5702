"""``wait_for`` / ``expect_request``: an agent that calls the model in the background."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from staticagents.testing.client import NoMatchingRequest, RulesetNotReached, StaticAgentsClient
from tests.conftest import CONTROL_TOKEN


@pytest.fixture
def client(live_url: str, settings: Any) -> Iterator[StaticAgentsClient]:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    with StaticAgentsClient(live_url, token=CONTROL_TOKEN) as client:
        client.replies("first answer", "second answer", "third answer")
        yield client


def ask_later(
    client: StaticAgentsClient, question: str, after: threading.Event
) -> threading.Thread:
    """An agent in the background: it asks once ``after`` is set."""

    def agent() -> None:
        after.wait(10)
        sdk = openai.OpenAI(
            base_url=client.openai_base_url, api_key="sk", default_headers=client.headers
        )
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": question}])

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    return thread


def test_wait_for_returns_a_request_that_arrives_while_it_waits(
    client: StaticAgentsClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    go = threading.Event()
    thread = ask_later(client, "summarise the report", go)
    read_journal = client.requests

    def then_let_the_agent_go(*args: Any, **kwargs: Any) -> Any:
        found = read_journal(*args, **kwargs)  # the journal holds nothing yet
        go.set()  # the request can only arrive on the live journal now
        return found

    monkeypatch.setattr(client, "requests", then_let_the_agent_go)
    entry = client.wait_for(lambda e: "report" in e.query, timeout=10)
    thread.join(10)
    assert entry.query == "summarise the report"
    assert entry.messages[0]["content"] == "summarise the report"


def test_wait_for_returns_a_request_that_arrived_before_the_call(
    client: StaticAgentsClient,
) -> None:
    go = threading.Event()
    go.set()
    ask_later(client, "already asked", go).join(10)
    entry = client.expect_request("already", dialect="openai")
    assert entry.query == "already asked" and entry.outcome == "answered"


def test_expect_request_skips_requests_that_do_not_match(client: StaticAgentsClient) -> None:
    go = threading.Event()
    go.set()
    for question in ("one", "two"):
        ask_later(client, question, go).join(10)
    go_later = threading.Event()
    ask_later(client, "three", go_later)
    go_later.set()
    assert client.expect_request("three", timeout=10).query == "three"


def test_wait_for_raises_naming_what_did_arrive(client: StaticAgentsClient) -> None:
    go = threading.Event()
    go.set()
    ask_later(client, "something else", go).join(10)
    with pytest.raises(NoMatchingRequest) as raised:
        client.expect_request("never asked", timeout=0.5)
    message = str(raised.value)
    assert "query containing 'never asked'" in message
    assert "'something else'" in message and "1 request(s) arrived" in message
    assert [entry.query for entry in raised.value.arrived] == ["something else"]


def test_wait_for_applies_the_journal_filters(client: StaticAgentsClient) -> None:
    go = threading.Event()
    go.set()
    ask_later(client, "a question", go).join(10)
    with pytest.raises(NoMatchingRequest):
        client.wait_for(dialect="anthropic", timeout=0.3)
    assert client.wait_for(dialect="openai", fallback=False).query == "a question"


def change_later(client: StaticAgentsClient, after: threading.Event) -> threading.Thread:
    """Someone else installs rules once ``after`` is set."""

    def install() -> None:
        after.wait(10)
        with StaticAgentsClient(client.base_url, token=CONTROL_TOKEN) as other:
            other.install({"rules": [{"name": "new", "response": {"content": "hi"}}]})

    thread = threading.Thread(target=install, daemon=True)
    thread.start()
    return thread


def newest_version(client: StaticAgentsClient) -> int:
    versions = client._send("GET", "/versions", "").json()["results"]
    return int(versions[0]["number"]) if versions else 0


def test_wait_for_ruleset_returns_once_another_client_installs(
    client: StaticAgentsClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    go = threading.Event()
    thread = change_later(client, go)
    before = newest_version(client)
    read = client._send

    def then_let_the_install_go(*args: Any, **kwargs: Any) -> Any:
        response = read(*args, **kwargs)
        if args[1] == "/versions":  # the version is read: the change can only be announced
            go.set()
        return response

    monkeypatch.setattr(client, "_send", then_let_the_install_go)
    reached = client.wait_for_ruleset(timeout=10)
    thread.join(10)
    assert reached == before + 1 == newest_version(client)


def test_wait_for_ruleset_counts_a_version_reached_before_the_call_and_times_out(
    client: StaticAgentsClient,
) -> None:
    current = newest_version(client)
    assert client.wait_for_ruleset(current, timeout=1) == current
    with pytest.raises(RulesetNotReached, match=f"version {current + 1} within 0.5 s"):
        client.wait_for_ruleset(timeout=0.5)
