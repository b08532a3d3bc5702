"""pydantic-ai's OpenAI model pointed at the service the pytest plugin runs, in real agent loops.

The model's OpenAI client carries the test's session (``static_agents_headers``),
so the journal read through ``static_agents`` holds this test's requests alone.
"""

from __future__ import annotations

import openai
import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ThinkingPart, ToolCallPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from staticagents.testing.assertions import assert_system_prompt, assert_tool_result_sent
from staticagents.testing.client import StaticAgentsClient, error
from tests.conftest import FIXTURES

SYSTEM_PROMPT = "You answer with the lookup tool."


def model_at(static_agents: StaticAgentsClient, name: str = "gpt-4o") -> OpenAIChatModel:
    # The provider's own base_url/api_key form takes no headers; the session rides on the client.
    client = openai.AsyncOpenAI(
        base_url=static_agents.openai_base_url,
        api_key="x",
        max_retries=0,
        default_headers=static_agents.headers,
    )
    return OpenAIChatModel(name, provider=OpenAIProvider(openai_client=client))


def weather_agent(model: OpenAIChatModel, calls: list[str]) -> Agent[None, str]:
    agent = Agent(model, system_prompt=SYSTEM_PROMPT)

    @agent.tool_plain
    def lookup(topic: str) -> str:
        """Look a topic up."""
        calls.append(topic)
        return f"sunny ({topic})"

    return agent


def tool_calls_in(messages: list[ModelMessage]) -> list[ToolCallPart]:
    parts = [part for message in messages for part in getattr(message, "parts", [])]
    return [part for part in parts if isinstance(part, ToolCallPart)]


@pytest.mark.static_agents_fixture(FIXTURES / "demo.yml")
def test_an_agent_runs_the_demo_tool_loop_to_its_final_answer(
    static_agents: StaticAgentsClient,
) -> None:
    calls: list[str] = []
    result = weather_agent(model_at(static_agents), calls).run_sync("#tool what is the weather?")
    assert calls == ["weather"]
    assert result.output == "The lookup tool returned: sunny (weather)"
    journal = static_agents.requests()
    assert [(e.rule, e.dialect) for e in journal] == [
        ("tool-call", "openai"),
        ("tool-report", "openai"),
    ]
    [call] = tool_calls_in(result.all_messages())
    assert_tool_result_sent(journal, call.tool_call_id, contains="sunny (weather)")
    assert_system_prompt(journal, equals=SYSTEM_PROMPT, every=True)


@pytest.mark.static_agents_fixture(
    [
        {
            "tool_calls": [{"name": "lookup", "arguments": {"topic": "tides"}}],
            "stream": {"chunk": 4, "word_delay_ms": 1},
        },
        {
            "thinking": "The tool answered.",
            "template": True,
            "content": "Done after turn $turn: $tool_result",
            "stream": {"word_delay_ms": 1},
        },
    ]
)
def test_a_streamed_agent_run_follows_a_scripted_sequence(
    static_agents: StaticAgentsClient,
) -> None:
    calls: list[str] = []
    agent = weather_agent(model_at(static_agents, "router"), calls)
    run = agent.run_stream_sync("tell me about the sea")
    pieces = list(run.stream_output(debounce_by=None))
    messages = run.all_messages()
    assert calls == ["tides"]
    assert pieces[-1] == "Done after turn 1: sunny (tides)"
    assert len(pieces) > 2  # it arrived word by word
    parts = [part for message in messages for part in getattr(message, "parts", [])]
    assert any(
        isinstance(p, ToolCallPart) and p.args_as_dict() == {"topic": "tides"} for p in parts
    )
    assert any(isinstance(p, ThinkingPart) and p.content == "The tool answered." for p in parts)


def test_a_scripted_error_reaches_the_agent_as_a_model_http_error(
    static_agents: StaticAgentsClient,
) -> None:
    static_agents.replies(error("try later", status=503, type="overloaded"))
    with pytest.raises(ModelHTTPError) as raised:
        Agent(model_at(static_agents)).run_sync("hello")
    assert raised.value.status_code == 503
    assert "try later" in str(raised.value.body)
