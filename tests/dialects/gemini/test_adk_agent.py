"""A Google ADK agent on a Gemini model, pointed at the service: its tool runs, its answer is
the script's.

ADK's ``Gemini`` model takes the service's URL as ``base_url`` (google-genai's
``HttpOptions.base_url``; the ``GOOGLE_GEMINI_BASE_URL`` environment variable
works too), and the session header through ``client_kwargs``.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.models import Gemini
from google.adk.runners import InMemoryRunner
from google.genai import types

from staticagents.testing.assertions import assert_system_prompt, assert_tool_result_sent
from staticagents.testing.client import StaticAgentsClient

RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "ask-for-the-tool",
            "match": {"dialect": "gemini", "contains": "weather", "tool_result": False},
            "response": {
                "tool_calls": [
                    {"name": "get_weather", "id": "call_weather", "arguments": {"city": "Paris"}}
                ]
            },
        },
        {
            "name": "report",
            "match": {"dialect": "gemini", "contains": "weather", "tool_result": True},
            "response": {
                "template": True,
                "content": "Forecast: $tool_result",
                "stream": {"word_delay_ms": 1},
            },
        },
    ]
}
pytestmark = pytest.mark.static_agents_fixture(RULES)

ran: list[str] = []


def get_weather(city: str) -> str:
    """The weather in a city."""
    ran.append(city)
    return f"{city}: 21C and sunny"


def weather_agent(static_agents: StaticAgentsClient) -> LlmAgent:
    model = Gemini(
        model="gemini-2.5-flash",
        base_url=static_agents.gemini_base_url,
        client_kwargs={
            "api_key": "AIzaSyStaticAgentsNotARealKey0123456789",
            "http_options": {"headers": static_agents.headers},
        },
    )
    return LlmAgent(
        name="weather",
        model=model,
        instruction="You are a weather assistant.",
        tools=[get_weather],
    )


async def run(agent: LlmAgent, question: str, run_config: RunConfig | None = None) -> list[Any]:
    runner = InMemoryRunner(agent=agent, app_name="weather")
    session = await runner.session_service.create_session(app_name="weather", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text=question)])
    return [
        event
        async for event in runner.run_async(
            user_id="u", session_id=session.id, new_message=message, run_config=run_config
        )
    ]


def final_text(events: list[Any]) -> str:
    finals = [e for e in events if e.is_final_response() and e.content and e.content.parts]
    return "".join(part.text or "" for part in finals[-1].content.parts)


@pytest.mark.parametrize("streaming", [False, True], ids=["generate", "stream"])
async def test_an_adk_agent_runs_its_tool_and_answers_from_the_script(
    static_agents: StaticAgentsClient, streaming: bool
) -> None:
    ran.clear()
    config = RunConfig(streaming_mode=StreamingMode.SSE) if streaming else None
    events = await run(weather_agent(static_agents), "What is the weather in Paris?", config)

    assert ran == ["Paris"]
    assert final_text(events) == "Forecast: Paris: 21C and sunny"
    sent = static_agents.requests()
    assert [entry.rule for entry in sent] == ["ask-for-the-tool", "report"]
    method = "streamGenerateContent" if streaming else "generateContent"
    route = f"/sessions/{static_agents.session}/v1beta/models/gemini-2.5-flash:{method}"
    assert {entry.route for entry in sent} == {route}
    assert_tool_result_sent(sent, "call_weather", contains="21C and sunny")
    assert_system_prompt(sent, contains="You are a weather assistant.", every=True)
    assert sent[0].body["tools"][0]["functionDeclarations"][0]["name"] == "get_weather"
