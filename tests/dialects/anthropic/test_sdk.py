"""The official anthropic SDK, sync and async, against the service the pytest plugin runs.

Every SDK client carries the test's session (``static_agents_headers``), so the
journal read through ``static_agents`` is this test's alone.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest
from anthropic.types import ThinkingConfigEnabledParam

from staticagents.testing.assertions import (
    assert_no_credentials,
    assert_system_prompt,
    assert_tool_result_sent,
)
from staticagents.testing.client import StaticAgentsClient
from tests.conftest import FIXTURES

FAST = {"word_delay_ms": 1}
TOOLS: list[Any] = [
    {
        "name": "lookup",
        "description": "Look a topic up.",
        "input_schema": {"type": "object", "properties": {"topic": {"type": "string"}}},
    }
]
RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "flaky",
            "match": {"contains": "#flaky"},
            "response": {"fail_first": 2, "retry_after": 0.01, "content": "made it"},
        },
        {
            "name": "think",
            "match": {"contains": "#think"},
            "response": {
                "thinking": "Let me weigh this.",
                "content": "Here it is.",
                "stream": FAST,
            },
        },
        {
            "name": "call",
            "match": {"contains": "#tool", "tool_result": False},
            "response": {
                "content": "Let me look.",
                "tool_calls": [
                    {"name": "lookup", "arguments": {"topic": "weather", "units": "metric"}}
                ],
                "stream": {"chunk": 3, "word_delay_ms": 1},
            },
        },
        {
            "name": "report",
            "match": {"contains": "#tool", "tool_result": True},
            "response": {"template": True, "content": "lookup said: $tool_result"},
        },
        {
            "name": "long",
            "match": {"contains": "#long"},
            "response": {"content": "cut", "finish_reason": "length"},
        },
        {
            "name": "filtered",
            "match": {"contains": "#filtered"},
            "response": {"content": "", "finish_reason": "content_filter"},
        },
        {"name": "coder", "match": {"agent_type": "coder"}, "response": {"content": "coder here"}},
        {
            "name": "strict",
            "match": {"system": "(?i)be terse", "context": {"user_id": "^u-7$"}},
            "response": {"content": "terse for u-7"},
        },
        {
            "name": "second",
            "match": {"contains": "#count", "turn": 2},
            "response": {"content": "second turn"},
        },
        {"name": "echo", "response": {"template": True, "content": "$query", "stream": FAST}},
    ]
}
API_KEY = "sk-ant-secret"

# Every test starts from RULES unless its own marker (or an install) says otherwise.
pytestmark = pytest.mark.static_agents_fixture(RULES)


@pytest.fixture
def client(anthropic_base_url: str, static_agents_headers: dict[str, str]) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=anthropic_base_url,
        api_key=API_KEY,
        max_retries=0,
        default_headers=static_agents_headers,
    )


@pytest.fixture
def async_client(
    anthropic_base_url: str, static_agents_headers: dict[str, str]
) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=anthropic_base_url,
        api_key=API_KEY,
        max_retries=0,
        default_headers=static_agents_headers,
    )


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


MODEL = "claude-sonnet-4-5"


# -- answers ----------------------------------------------------------------------------


def test_create_returns_the_scripted_answer(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model=MODEL, max_tokens=100, messages=ask("hello there"))
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "hello there"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.model == MODEL and message.role == "assistant"
    assert message.id.startswith("msg_")
    assert message._request_id == message.id  # the id names the journal entry
    assert message.usage.output_tokens == 2 and message.usage.input_tokens == 2


async def test_async_create_returns_the_scripted_answer(
    async_client: anthropic.AsyncAnthropic,
) -> None:
    message = await async_client.messages.create(
        model=MODEL, max_tokens=100, messages=ask("async hello")
    )
    assert message.content[0].text == "async hello"  # type: ignore[union-attr]


def test_stream_sends_text_deltas_and_a_final_message(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model=MODEL, max_tokens=100, messages=ask("one two three four")
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert pieces == ["one ", "two ", "three ", "four"]
    assert final.content[0].text == "one two three four"  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 4


async def test_async_stream_gives_the_final_message(async_client: anthropic.AsyncAnthropic) -> None:
    async with async_client.messages.stream(
        model=MODEL, max_tokens=100, messages=ask("async stream")
    ) as stream:
        final = await stream.get_final_message()
    assert final.content[0].text == "async stream"  # type: ignore[union-attr]


def test_tool_use_then_a_tool_result_gives_the_final_answer(
    static_agents: StaticAgentsClient, client: anthropic.Anthropic
) -> None:
    messages: list[Any] = ask("#tool weather?")
    first = client.messages.create(model=MODEL, max_tokens=100, messages=messages, tools=TOOLS)
    assert first.stop_reason == "tool_use"
    assert [block.type for block in first.content] == ["text", "tool_use"]
    call = first.content[1]
    assert call.type == "tool_use"
    assert call.name == "lookup" and call.input == {"topic": "weather", "units": "metric"}
    messages.append({"role": "assistant", "content": first.content})
    messages.append(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        }
    )
    second = client.messages.create(model=MODEL, max_tokens=100, messages=messages, tools=TOOLS)
    assert second.content[0].text == "lookup said: sunny"  # type: ignore[union-attr]
    assert second.stop_reason == "end_turn"
    assert_tool_result_sent(static_agents, call.id, contains="sunny")


@pytest.mark.static_agents_fixture(FIXTURES / "demo.yml")
def test_the_demo_fixtures_tool_loop_runs_through_the_sdk(
    static_agents: StaticAgentsClient, client: anthropic.Anthropic
) -> None:
    messages: list[Any] = ask("#tool what is the weather?")
    first = client.messages.create(model=MODEL, max_tokens=100, messages=messages, tools=TOOLS)
    call = first.content[0]
    assert call.type == "tool_use" and call.input == {"topic": "weather"}
    messages += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": call.id,
                    "content": [{"type": "text", "text": "rain"}],
                }
            ],
        },
    ]
    second = client.messages.create(model=MODEL, max_tokens=100, messages=messages, tools=TOOLS)
    assert second.content[0].text == "The lookup tool returned: rain"  # type: ignore[union-attr]
    assert [entry.rule for entry in static_agents.requests()] == ["tool-call", "tool-report"]
    assert_tool_result_sent(static_agents, call.id, contains="rain")


def test_streamed_tool_input_is_assembled_from_json_deltas(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model=MODEL, max_tokens=100, messages=ask("#tool weather?"), tools=TOOLS
    ) as stream:
        partials = [e.partial_json for e in stream if e.type == "input_json"]
        final = stream.get_final_message()
    assert len(partials) > 3
    assert json.loads("".join(partials)) == {"topic": "weather", "units": "metric"}
    tool_use = final.content[1]
    assert tool_use.type == "tool_use" and tool_use.input == {"topic": "weather", "units": "metric"}
    assert final.stop_reason == "tool_use"


def test_thinking_comes_first_as_a_signed_thinking_block(client: anthropic.Anthropic) -> None:
    thinking: ThinkingConfigEnabledParam = {"type": "enabled", "budget_tokens": 1024}
    message = client.messages.create(
        model=MODEL, max_tokens=2048, messages=ask("#think"), thinking=thinking
    )
    assert [block.type for block in message.content] == ["thinking", "text"]
    block = message.content[0]
    assert block.type == "thinking" and block.thinking == "Let me weigh this." and block.signature
    with client.messages.stream(
        model=MODEL, max_tokens=2048, messages=ask("#think"), thinking=thinking
    ) as stream:
        kinds = [event.type for event in stream if event.type in ("thinking", "text", "signature")]
        final = stream.get_final_message()
    assert kinds == ["thinking"] * 4 + ["signature"] + ["text"] * 3
    assert final.content[0] == block
    assert final.content[1].text == "Here it is."  # type: ignore[union-attr]


def test_a_thinking_block_sent_back_is_accepted(client: anthropic.Anthropic) -> None:
    first = client.messages.create(model=MODEL, max_tokens=100, messages=ask("#think"))
    history = [*ask("#think"), {"role": "assistant", "content": first.content}, *ask("next")]
    second = client.messages.create(model=MODEL, max_tokens=100, messages=history)
    assert second.content[0].text == "next"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("query", "stop_reason"), [("#long", "max_tokens"), ("#filtered", "refusal")]
)
def test_finish_reasons_become_anthropics_stop_reasons(
    client: anthropic.Anthropic, query: str, stop_reason: str
) -> None:
    message = client.messages.create(model=MODEL, max_tokens=100, messages=ask(query))
    assert message.stop_reason == stop_reason
    with client.messages.stream(model=MODEL, max_tokens=100, messages=ask(query)) as stream:
        assert stream.get_final_message().stop_reason == stop_reason


# -- agent type, inquiry fields, journal ---------------------------------------------------


def test_an_agent_prefix_in_the_base_url_selects_that_agent_types_rules(
    static_agents: StaticAgentsClient,
) -> None:
    coder = anthropic.Anthropic(
        base_url=f"{static_agents.base_url}/agents/coder",
        api_key="x",
        max_retries=0,
        default_headers=static_agents.headers,
    )
    message = coder.messages.create(model=MODEL, max_tokens=10, messages=ask("hi"))
    assert message.content[0].text == "coder here"  # type: ignore[union-attr]


def test_system_blocks_metadata_and_turn_reach_the_rules(
    static_agents: StaticAgentsClient, client: anthropic.Anthropic
) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=10,
        system=[{"type": "text", "text": "Be terse."}],
        metadata={"user_id": "u-7"},
        messages=ask("status?"),
    )
    assert message.content[0].text == "terse for u-7"  # type: ignore[union-attr]
    assert_system_prompt(static_agents, equals="Be terse.")
    history = [*ask("#count one"), {"role": "assistant", "content": "one"}, *ask("#count two")]
    second = client.messages.create(model=MODEL, max_tokens=10, messages=history)
    assert second.content[0].text == "second turn"  # type: ignore[union-attr]


def test_the_journal_records_the_request_with_the_key_masked(
    static_agents: StaticAgentsClient, client: anthropic.Anthropic
) -> None:
    client.messages.create(model=MODEL, max_tokens=10, messages=ask("remember me"))
    [entry] = static_agents.requests()
    # The session is the one the X-Static-Session header carried (the client's default header).
    assert (entry.dialect, entry.session, entry.query, entry.model) == (
        "anthropic",
        static_agents.session,
        "remember me",
        MODEL,
    )
    # This SDK sends the key as a bearer token; older ones send x-api-key. Either is masked.
    assert entry.headers.get("authorization", "Bearer ***") == "Bearer ***"
    assert entry.headers.get("x-api-key", "***") == "***"
    assert API_KEY not in json.dumps(entry.headers)
    assert_no_credentials([entry], secrets=[API_KEY])


def test_models_list_in_anthropics_shape(client: anthropic.Anthropic) -> None:
    assert [model.id for model in client.models.list()] == ["static-agents", "coder"]


# -- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        (400, anthropic.BadRequestError),
        (401, anthropic.AuthenticationError),
        (403, anthropic.PermissionDeniedError),
        (404, anthropic.NotFoundError),
        (413, anthropic.ContentTooLargeError),
        (429, anthropic.RateLimitError),
        (500, anthropic.InternalServerError),
        (503, anthropic.ServiceUnavailableError),
        (529, anthropic.OverloadedError),
    ],
)
def test_every_scripted_error_raises_the_sdk_exception_for_its_status(
    static_agents: StaticAgentsClient,
    client: anthropic.Anthropic,
    status: int,
    exception: type[Exception],
) -> None:
    static_agents.install(
        {
            "rules": [
                {
                    "response": {
                        "error": {
                            "status": status,
                            "type": "overloaded_error",
                            "message": f"failing with {status}",
                        }
                    }
                }
            ]
        }
    )
    with pytest.raises(exception) as raised:
        client.messages.create(model=MODEL, max_tokens=10, messages=ask("hi"))
    error: Any = raised.value
    assert error.status_code == status
    assert error.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": f"failing with {status}"},
    }
    with (
        pytest.raises(exception),
        client.messages.stream(model=MODEL, max_tokens=10, messages=ask("hi")) as stream,
    ):
        stream.get_final_message()


@pytest.mark.static_agents_fixture(
    {
        "rules": [
            {
                "response": {
                    "retry_after": 2.5,
                    "error": {"status": 429, "type": "rate_limit_error", "message": "slow down"},
                }
            }
        ]
    }
)
def test_a_rate_limit_error_carries_retry_after(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.RateLimitError) as raised:
        client.messages.create(model=MODEL, max_tokens=10, messages=ask("hi"))
    assert raised.value.response.headers["retry-after"] == "3"
    assert raised.value.response.headers["retry-after-ms"] == "2500"


def test_the_sdks_own_retries_get_past_fail_first(
    static_agents: StaticAgentsClient, client: anthropic.Anthropic
) -> None:
    message = client.with_options(max_retries=2).messages.create(
        model=MODEL, max_tokens=10, messages=ask("#flaky please")
    )
    assert message.content[0].text == "made it"  # type: ignore[union-attr]
    outcomes = [entry.outcome for entry in static_agents.requests()]
    assert outcomes == ["failed_first", "failed_first", "answered"]
    assert static_agents.counters().failed_first == 2
