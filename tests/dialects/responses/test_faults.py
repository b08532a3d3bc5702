"""Scripted faults in the middle of a Responses stream, as the openai SDK and the Agents SDK
meet them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled
from agents.exceptions import ModelBehaviorError

from staticagents.models import JournalEntry, StoredResponse
from staticagents.testing.client import StaticAgentsClient

CONTENT = "one two three four five six seven eight"


def faulty(kind: str, after: int = 5) -> dict[str, Any]:
    return {
        "name": kind,
        "match": {"contains": f"#{kind}"},
        "response": {
            "content": CONTENT,
            "stream": {"word_delay_ms": 1},
            "fault": {"after_chunks": after, "kind": kind},
        },
    }


RULES = {"rules": [faulty(kind) for kind in ("disconnect", "malformed", "error_event", "stall")]}
pytestmark = pytest.mark.static_agents_fixture(RULES)


@pytest.fixture
def client(openai_base_url: str, static_agents_headers: dict[str, str]) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=openai_base_url,
        api_key="sk-test",
        max_retries=0,
        default_headers=static_agents_headers,
    )


def stream_until_it_fails(client: openai.OpenAI, text: str, events: list[Any]) -> None:
    for event in client.responses.create(model="gpt-5", input=text, stream=True):
        events.append(event)


def only_outcome(static_agents: StaticAgentsClient) -> str:
    [entry] = static_agents.requests()
    return entry.outcome


def failed_stored(static_agents: StaticAgentsClient, client: openai.OpenAI) -> Any:
    """The stored response of the session's one request (its id names the journal entry)."""
    [entry] = static_agents.requests()
    return client.responses.retrieve(f"resp_static{entry.id}")


def test_a_disconnect_drops_the_connection_midway(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    events: list[Any] = []
    with pytest.raises(openai.APIConnectionError):
        stream_until_it_fails(client, "#disconnect", events)
    assert [event.type for event in events][-1] == "response.output_text.delta"
    assert only_outcome(static_agents) == "fault"
    assert failed_stored(static_agents, client).status == "failed"


def test_a_malformed_event_makes_the_sdk_raise_on_decoding(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    events: list[Any] = []
    with pytest.raises(json.JSONDecodeError):
        stream_until_it_fails(client, "#malformed", events)
    assert len(events) == 5
    assert only_outcome(static_agents) == "fault"


def test_an_error_event_ends_the_stream_and_the_stream_helper_has_no_final_response(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    events: list[Any] = []
    stream_until_it_fails(client, "#error_event", events)
    error = events[-1]
    assert error.type == "error"
    assert "overloaded" in error.message
    assert [event.sequence_number for event in events] == list(range(6))
    with client.responses.stream(model="gpt-5", input="#error_event") as stream:
        assert [event.type for event in stream][-1] == "error"
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            stream.get_final_response()
    assert {entry.outcome for entry in static_agents.requests()} == {"fault"}


async def test_the_agents_sdk_raises_on_an_error_event(
    static_agents: StaticAgentsClient, openai_base_url: str, static_agents_headers: dict[str, str]
) -> None:
    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(
        base_url=openai_base_url,
        api_key="sk-test",
        max_retries=0,
        default_headers=static_agents_headers,
    )
    agent = Agent(name="a", model=OpenAIResponsesModel(model="gpt-5", openai_client=client))
    result = Runner.run_streamed(agent, "#error_event")
    with pytest.raises(ModelBehaviorError, match="overloaded"):
        async for _ in result.stream_events():
            pass
    assert only_outcome(static_agents) == "fault"


def test_a_stall_ends_with_response_failed_at_the_maximum_duration(
    live_url: str, load_rules: Callable[[Any], Any], settings: Any
) -> None:
    load_rules(RULES)
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.2
    body = {"model": "m", "input": "#stall", "stream": True}
    frames = httpx.post(f"{live_url}/v1/responses", json=body).text.strip().split("\n\n")
    events = [json.loads(frame.split("data: ", 1)[1]) for frame in frames]
    assert [event["type"] for event in events][-2:] == [
        "response.output_text.delta",
        "response.failed",
    ]
    assert [event["sequence_number"] for event in events] == list(range(6))
    assert "maximum stream duration" in events[-1]["response"]["error"]["message"]
    assert JournalEntry.objects.get().outcome == "fault"
    assert StoredResponse.objects.get().body["status"] == "failed"


def test_a_stall_cut_off_reaches_the_stream_helper_as_response_failed(
    live_url: str, load_rules: Callable[[Any], Any], settings: Any
) -> None:
    load_rules(RULES)
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.2
    client = openai.OpenAI(base_url=f"{live_url}/v1", api_key="sk-test", max_retries=0)
    with client.responses.stream(model="gpt-5", input="#stall") as stream:
        events = list(stream)
    assert events[-1].type == "response.failed"
    assert "maximum stream duration" in events[-1].response.error.message


def test_the_agents_sdk_raises_on_a_stall_cut_off(
    live_url: str, load_rules: Callable[[Any], Any], settings: Any
) -> None:
    # A plain test (the rules are loaded through the ORM), running the agent's loop itself.
    load_rules(RULES)
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.2
    set_tracing_disabled(True)

    async def streamed_run() -> None:
        client = openai.AsyncOpenAI(base_url=f"{live_url}/v1", api_key="sk-test", max_retries=0)
        agent = Agent(name="a", model=OpenAIResponsesModel(model="gpt-5", openai_client=client))
        async for _ in Runner.run_streamed(agent, "#stall").stream_events():
            pass

    with pytest.raises(ModelBehaviorError, match="maximum stream duration"):
        asyncio.run(streamed_run())
