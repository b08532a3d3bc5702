"""The OpenAI Agents SDK on its default model path (the Responses API) against the service.

An agent with a function tool runs to its final answer, plain and streamed: the
model calls the tool, the SDK runs it and sends its output back, and the
scripted answer ends the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.models import _openai_shared
from openai.types.responses import ResponseTextDeltaEvent

from staticagents.testing.assertions import assert_system_prompt, assert_tool_result_sent
from staticagents.testing.client import StaticAgentsClient, tool_call

INSTRUCTIONS = "You know the weather."
FORECAST = "Sunny in Paris, 21 degrees."


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    set_tracing_disabled(True)  # traces would go to OpenAI's servers


@pytest.fixture
def client(openai_base_url: str, static_agents_headers: dict[str, str]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=openai_base_url,
        api_key="sk-agents-test",
        max_retries=0,
        default_headers=static_agents_headers,
    )


@pytest.fixture
def default_client(client: openai.AsyncOpenAI) -> Iterator[openai.AsyncOpenAI]:
    """The service as the SDK's default OpenAI client, for this test only."""
    previous = _openai_shared.get_default_openai_client()
    set_default_openai_client(client, use_for_tracing=False)
    yield client
    _openai_shared.set_default_openai_client(previous)  # type: ignore[arg-type]


@pytest.fixture
def weather(static_agents: StaticAgentsClient) -> list[str]:
    """The model's script: call the tool, then answer. Returns the cities the tool was asked."""
    static_agents.replies(tool_call("get_weather", {"city": "Paris"}, id="call_weather"), FORECAST)
    return []


def weather_agent(asked: list[str], model: Any = "gpt-5") -> Agent[Any]:
    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"{city}: sunny, 21C"

    return Agent(name="forecaster", instructions=INSTRUCTIONS, model=model, tools=[get_weather])


def assert_the_tool_round_trip(static_agents: StaticAgentsClient) -> None:
    sent = static_agents.requests()
    route = f"/sessions/{static_agents.session}/v1/responses"
    assert [(r.dialect, r.route) for r in sent] == [("responses", route)] * 2
    assert_tool_result_sent(sent, "call_weather", contains="Paris: sunny, 21C")
    assert_system_prompt(sent, equals=INSTRUCTIONS, every=True)


async def test_an_agent_on_the_default_client_runs_its_tool_and_answers(
    static_agents: StaticAgentsClient, default_client: openai.AsyncOpenAI, weather: list[str]
) -> None:
    result = await Runner.run(weather_agent(weather), "What is the weather in Paris?")
    assert result.final_output == FORECAST
    assert weather == ["Paris"]
    assert_the_tool_round_trip(static_agents)


async def test_a_streamed_run_runs_the_tool_and_streams_the_answer(
    static_agents: StaticAgentsClient, client: openai.AsyncOpenAI, weather: list[str]
) -> None:
    model = OpenAIResponsesModel(model="gpt-5", openai_client=client)
    result = Runner.run_streamed(weather_agent(weather, model), "What is the weather in Paris?")
    deltas, kinds = [], []
    async for event in result.stream_events():
        if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
            deltas.append(event.data.delta)
        elif event.type == "run_item_stream_event":
            kinds.append(event.item.type)
    assert result.final_output == FORECAST
    assert "".join(deltas) == FORECAST
    assert kinds == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert weather == ["Paris"]
    assert all(request.body["stream"] for request in static_agents.requests())
    assert_the_tool_round_trip(static_agents)


async def test_a_run_chained_by_previous_response_id_sends_only_the_new_items(
    static_agents: StaticAgentsClient, client: openai.AsyncOpenAI, weather: list[str]
) -> None:
    """The SDK's server-managed conversation: the service continues what it stored."""
    agent = weather_agent(weather, OpenAIResponsesModel(model="gpt-5", openai_client=client))
    result = await Runner.run(
        agent, "What is the weather in Paris?", auto_previous_response_id=True
    )
    assert result.final_output == FORECAST
    first, second = (request.body for request in static_agents.requests())
    assert "previous_response_id" not in first
    assert second["previous_response_id"] == result.raw_responses[0].response_id
    assert [item["type"] for item in second["input"]] == ["function_call_output"]
    assert_tool_result_sent(static_agents, "call_weather", contains="Paris: sunny, 21C")


async def test_a_run_config_with_the_openai_provider_takes_the_responses_path_too(
    static_agents: StaticAgentsClient, client: openai.AsyncOpenAI, weather: list[str]
) -> None:
    from agents import OpenAIProvider

    config = RunConfig(model_provider=OpenAIProvider(openai_client=client))
    result = await Runner.run(weather_agent(weather), "Weather in Paris?", run_config=config)
    assert result.final_output == FORECAST
    assert_the_tool_round_trip(static_agents)
