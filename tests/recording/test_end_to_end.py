"""Record from a real model, then replay with it gone: a second Static Agents server plays
the real model, the service under test (``live_url``) proxies the official openai SDK's
requests to it in ``record`` mode, the model is stopped, and the same requests get the
same answers from the recorded rules."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import yaml

from staticagents.document.files import dump_fixture, load_fixture
from staticagents.models import Rule
from staticagents.selectors import export_document, stored_rule
from staticagents.services import import_fixture
from staticagents.testing.server import StaticAgentsServer
from tests.conftest import galaxy_query

KEY = f"sk-upstream-{secrets.token_hex(16)}"
KEY_VARIABLE = "RECORD_TEST_UPSTREAM_KEY"
MODEL = "gpt-4o"
FIRST_DELAY_MS = 120
MODEL_RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "ask-tool",
            "match": {"contains": "weather", "tool_result": False},
            "response": {
                "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]
            },
        },
        {
            "name": "use-tool",
            "match": {"contains": "weather", "tool_result": True},
            "response": {"template": True, "content": "The tool says $tool_result."},
        },
        {
            "name": "paced",
            "match": {"contains": "#paced"},
            "response": {
                "content": "Chunks come at the pace they came.",
                "stream": {"first_delay_ms": FIRST_DELAY_MS, "word_delay_ms": 15},
            },
        },
        {
            "name": "echo",
            "response": {
                "template": True,
                "content": "model says: $query",
                "usage": {"input_tokens": 11, "output_tokens": 4},
            },
        },
    ]
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def real_model(tmp_path: Path) -> Iterator[StaticAgentsServer]:
    server = StaticAgentsServer(tmp_path, environment={"STATIC_AGENTS_API_KEYS": KEY})
    with server:
        with server.client() as client:
            client.install(MODEL_RULES)
        yield server


@pytest.fixture
def service(
    live_url: str,
    load_rules: Callable[[Any], Any],
    real_model: StaticAgentsServer,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    monkeypatch.setenv(KEY_VARIABLE, KEY)
    load_rules(
        {
            "rules": [
                {"name": "local", "match": {"contains": "#local"}, "response": {"content": "ours"}},
            ],
            "upstreams": [
                {
                    "name": "real",
                    "dialect": "openai",
                    "base_url": f"{real_model.url}/v1",
                    "api_key_env": KEY_VARIABLE,
                    "record_timing": True,
                },
                {
                    "name": "real-anthropic",
                    "dialect": "anthropic",
                    "base_url": real_model.url,
                    "api_key_env": KEY_VARIABLE,
                },
            ],
            "modes": {
                "upstream": "real",
                "agent_types": {
                    "rec": {"mode": "record"},
                    "miss": {"mode": "record_on_miss"},
                    "rec-an": {"mode": "record", "upstream": "real-anthropic"},
                },
            },
        }
    )
    return live_url


def client(service: str, agent_type: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{service}/agents/{agent_type}/v1", api_key="sk-client-own", max_retries=0
    )


def conversation(sdk: openai.OpenAI) -> list[Any]:
    """A plain question, a tool call and its answer, and a paced stream: what each gave."""
    seen: list[Any] = []
    plain = sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    seen.append((plain.choices[0].message.content, plain.choices[0].finish_reason))

    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    asked = sdk.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    choice = asked.choices[0]
    assert choice.message.tool_calls is not None
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    seen.append((calls, choice.finish_reason))
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": choice.message.tool_calls[0].id, "content": "21 C"},
    ]
    answered = sdk.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    seen.append(answered.choices[0].message.content)

    stream = sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "#paced please"}], stream=True
    )
    seen.append(
        [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    )
    return seen


def recorded_rules() -> list[Rule]:
    """The rules recorded from the real model (each recorded before its answer ended)."""
    return list(Rule.objects.filter(recorded_upstream="real").order_by("position"))


def replay_offline(real_model: StaticAgentsServer) -> None:
    """Stop the real model; load the exported fixture as CI would, every agent type static."""
    real_model.stop()
    document = export_document()
    document["modes"] = {}
    import_fixture(document=load_fixture(dump_fixture(document)))


def test_recorded_requests_replay_identically_with_the_model_gone(
    service: str, real_model: StaticAgentsServer
) -> None:
    sdk = client(service, "rec")
    recorded = conversation(sdk)
    assert recorded == [
        ("model says: hi", "stop"),
        ([("get_weather", {"city": "Paris", "days": 3})], "tool_calls"),
        "The tool says 21 C.",
        ["Chunks ", "come ", "at ", "the ", "pace ", "they ", "came."],
    ]
    rules = recorded_rules()
    assert len(rules) == 4  # one per request: the tool conversation's two turns apart
    paced = next(
        stored_rule(rule.name)
        for rule in rules
        if (stored_rule(rule.name) or {})["response"].get("content", "").startswith("Chunks")
    )
    assert paced is not None
    # The upstream cannot send its first chunk before its scripted delay.
    assert paced["response"]["stream"]["first_delay_ms"] >= FIRST_DELAY_MS
    assert set(paced["response"]["stream"]) == {"first_delay_ms", "word_delay_ms"}
    assert all(rule.match_agent_type == "rec" and not rule.recorded_reviewed for rule in rules)

    again = conversation(sdk)  # recorded twice: updated, not duplicated
    assert again == recorded
    assert len(recorded_rules()) == 4

    replay_offline(real_model)
    assert conversation(sdk) == recorded
    exported = yaml.safe_dump(export_document())
    assert KEY not in exported and "sk-client-own" not in exported


def test_record_on_miss_records_what_the_rules_leave_and_replays_it(
    service: str, real_model: StaticAgentsServer
) -> None:
    sdk = client(service, "miss")
    local = sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "#local"}]
    )
    assert local.choices[0].message.content == "ours"
    missed = sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "new"}])
    assert missed.choices[0].message.content == "model says: new"
    assert [rule.match_query for rule in recorded_rules()] == ["^new$"]

    replay_offline(real_model)
    replayed = sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "new"}]
    )
    assert replayed.choices[0].message.content == "model says: new"
    assert replayed.usage is not None and replayed.usage.completion_tokens == 4
    galaxy = galaxy_query(service, "new", agent_type="miss").json()["response"]
    assert galaxy["content"] == "model says: new"


def anthropic_conversation(sdk: anthropic.Anthropic) -> list[Any]:
    """A tool call and its answer, then a streamed answer: what each gave."""
    seen: list[Any] = []
    tools: list[Any] = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    asked = sdk.messages.create(model=MODEL, max_tokens=64, messages=messages, tools=tools)
    calls = [(b.name, b.input) for b in asked.content if b.type == "tool_use"]
    seen.append((calls, asked.stop_reason))
    messages += [
        {"role": "assistant", "content": asked.content},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": asked.content[-1].id, "content": "21 C"}
            ],  # type: ignore[union-attr]
        },
    ]
    answered = sdk.messages.create(model=MODEL, max_tokens=64, messages=messages, tools=tools)
    seen.append([b.text for b in answered.content if b.type == "text"])
    question: list[Any] = [{"role": "user", "content": "#paced please"}]
    with sdk.messages.stream(model=MODEL, max_tokens=64, messages=question) as events:
        seen.append(
            [
                event.delta.text
                for event in events
                if event.type == "content_block_delta" and event.delta.type == "text_delta"
            ]
        )
    return seen


def test_an_anthropic_upstream_is_recorded_and_replayed(
    service: str, real_model: StaticAgentsServer
) -> None:
    sdk = anthropic.Anthropic(
        base_url=f"{service}/agents/rec-an", api_key="sk-client-own", max_retries=0
    )
    recorded = anthropic_conversation(sdk)
    assert recorded == [
        ([("get_weather", {"city": "Paris", "days": 3})], "tool_use"),
        ["The tool says 21 C."],
        ["Chunks ", "come ", "at ", "the ", "pace ", "they ", "came."],
    ]
    assert Rule.objects.filter(recorded_upstream="real-anthropic").count() == 3

    replay_offline(real_model)
    assert anthropic_conversation(sdk) == recorded
