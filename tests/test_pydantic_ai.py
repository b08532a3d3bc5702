"""pydantic-ai's OpenAI model pointed at the service, running real agent loops."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ThinkingPart, ToolCallPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from staticagents.models import JournalEntry
from tests.conftest import FIXTURES


def model_at(base_url: str, name: str = "gpt-4o") -> OpenAIChatModel:
    return OpenAIChatModel(name, provider=OpenAIProvider(base_url=f"{base_url}/v1", api_key="x"))


def weather_agent(model: OpenAIChatModel, calls: list[str]) -> Agent[None, str]:
    agent = Agent(model, system_prompt="You answer with the lookup tool.")

    @agent.tool_plain
    def lookup(topic: str) -> str:
        """Look a topic up."""
        calls.append(topic)
        return f"sunny ({topic})"

    return agent


def test_an_agent_runs_the_demo_tool_loop_to_its_final_answer(
    live_url: str, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(FIXTURES / "demo.yml")
    calls: list[str] = []
    result = weather_agent(model_at(live_url), calls).run_sync("#tool what is the weather?")
    assert calls == ["weather"]
    assert result.output == "The lookup tool returned: sunny (weather)"
    journal = JournalEntry.objects.order_by("id")
    assert [(e.rule, e.dialect) for e in journal] == [
        ("tool-call", "openai"),
        ("tool-report", "openai"),
    ]


def test_a_streamed_agent_run_follows_a_scripted_sequence(
    live_url: str, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(
        {
            "rules": [
                {
                    "name": "script",
                    "responses": [
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
                    ],
                }
            ]
        }
    )
    calls: list[str] = []
    agent = weather_agent(model_at(live_url, "router"), calls)
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
    live_url: str, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(
        {
            "rules": [
                {
                    "response": {
                        "error": {"status": 503, "type": "overloaded", "message": "try later"}
                    }
                }
            ]
        }
    )
    client = openai.AsyncOpenAI(base_url=f"{live_url}/v1", api_key="x", max_retries=0)
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))
    with pytest.raises(ModelHTTPError) as raised:
        Agent(model).run_sync("hello")
    assert raised.value.status_code == 503
    assert "try later" in str(raised.value.body)
