"""The official openai SDK, sync and async, against the service the pytest plugin runs.

Every SDK client carries the test's session (``static_agents_headers``), so the
journal and the counters read through ``static_agents`` are this test's alone.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from staticagents.testing.assertions import (
    assert_no_credentials,
    assert_system_prompt,
    assert_tool_result_sent,
)
from staticagents.testing.client import StaticAgentsClient

FAST = {"word_delay_ms": 1}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a topic up.",
            "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}},
        },
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
        {"name": "coder", "match": {"agent_type": "coder"}, "response": {"content": "coder here"}},
        {
            "name": "strict",
            "match": {"system": "(?i)be terse", "context": {"team": "^qa$"}},
            "response": {"content": "terse for qa"},
        },
        {
            "name": "second",
            "match": {"contains": "#count", "turn": 2},
            "response": {"content": "second turn"},
        },
        {"name": "echo", "response": {"template": True, "content": "$query", "stream": FAST}},
    ]
}
API_KEY = "sk-secret"

# Every test starts from RULES unless its own marker (or an install) says otherwise.
pytestmark = pytest.mark.static_agents_fixture(RULES)


@pytest.fixture
def client(openai_base_url: str, static_agents_headers: dict[str, str]) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=openai_base_url,
        api_key=API_KEY,
        max_retries=0,
        default_headers=static_agents_headers,
    )


@pytest.fixture
def async_client(openai_base_url: str, static_agents_headers: dict[str, str]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=openai_base_url,
        api_key=API_KEY,
        max_retries=0,
        default_headers=static_agents_headers,
    )


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


# -- answers ----------------------------------------------------------------------------


def test_create_returns_the_scripted_answer(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="gpt-4o", messages=ask("hello there"))
    choice = completion.choices[0]
    assert choice.message.content == "hello there"
    assert choice.message.role == "assistant"
    assert choice.finish_reason == "stop"
    assert completion.model == "gpt-4o"
    assert completion.id.startswith("chatcmpl-")
    assert completion._request_id == completion.id  # the id names the journal entry
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 2
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + 2


async def test_async_create_returns_the_scripted_answer(async_client: openai.AsyncOpenAI) -> None:
    completion = await async_client.chat.completions.create(
        model="gpt-4o", messages=ask("async hello")
    )
    assert completion.choices[0].message.content == "async hello"


def test_stream_sends_the_answer_in_word_chunks(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="gpt-4o", messages=ask("one two three four"), stream=True
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert deltas == ["one ", "two ", "three ", "four"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)


async def test_async_stream_with_include_usage_ends_with_a_usage_chunk(
    async_client: openai.AsyncOpenAI,
) -> None:
    stream = await async_client.chat.completions.create(
        model="gpt-4o",
        messages=ask("count these words"),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
    assert all(chunk.usage is None for chunk in chunks[:-1])
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1]) == "count these words"


def test_stream_helper_assembles_tool_calls_from_fragments(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(
        model="gpt-4o", messages=ask("#tool weather?"), tools=TOOLS
    ) as stream:
        fragments = [
            call
            for event in stream
            if event.type == "chunk"
            for call in event.chunk.choices[0].delta.tool_calls or []
        ]
        final = stream.get_final_completion()
    assert fragments[0].id and fragments[0].type == "function"
    assert fragments[0].function is not None and fragments[0].function.name == "lookup"
    assert len(fragments) > 3  # the arguments arrive in several pieces
    assert all(f.id is None and f.index == 0 for f in fragments[1:])
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"topic": "weather", "units": "metric"}


async def test_async_stream_helper_assembles_tool_calls(async_client: openai.AsyncOpenAI) -> None:
    async with async_client.chat.completions.stream(
        model="gpt-4o", messages=ask("#tool weather?"), tools=TOOLS
    ) as stream:
        final = await stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert json.loads(call.function.arguments) == {"topic": "weather", "units": "metric"}


def test_a_tool_result_sent_back_gets_the_final_answer(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    messages: list[Any] = ask("#tool weather?")
    first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
    message = first.choices[0].message
    assert message.content is None and message.tool_calls
    # The call's name and serialized arguments count as output, as text does.
    assert first.usage is not None and first.usage.completion_tokens > 0
    messages.append(message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "sunny"})
    second = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "lookup said: sunny"
    assert second.choices[0].finish_reason == "stop"
    assert_tool_result_sent(static_agents, message.tool_calls[0].id, contains="sunny")


def test_thinking_arrives_as_reasoning_content_before_the_answer(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="gpt-4o", messages=ask("#think"))
    message = completion.choices[0].message
    assert message.content == "Here it is."
    assert getattr(message, "reasoning_content", None) == "Let me weigh this."
    chunks = list(
        client.chat.completions.create(model="gpt-4o", messages=ask("#think"), stream=True)
    )
    kinds = [
        "thinking" if getattr(c.choices[0].delta, "reasoning_content", None) else "text"
        for c in chunks
        if getattr(c.choices[0].delta, "reasoning_content", None) or c.choices[0].delta.content
    ]
    assert kinds == ["thinking"] * 4 + ["text"] * 3


# -- agent type, session, inquiry fields -------------------------------------------------


def test_an_agent_prefix_in_the_base_url_selects_that_agent_types_rules(
    static_agents: StaticAgentsClient,
) -> None:
    coder = openai.OpenAI(
        base_url=f"{static_agents.base_url}/agents/coder/v1",
        api_key="x",
        max_retries=0,
        default_headers=static_agents.headers,
    )
    answer = coder.chat.completions.create(model="gpt-4o", messages=ask("hi"))
    assert answer.choices[0].message.content == "coder here"
    [entry] = static_agents.requests()
    assert entry.agent_type == "coder"


def test_the_agent_type_header_or_a_model_named_after_it_selects_its_rules(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    headed = openai.OpenAI(
        base_url=static_agents.openai_base_url,
        api_key="x",
        max_retries=0,
        default_headers={**static_agents.headers, "X-Agent-Type": "coder"},
    )
    by_header = headed.chat.completions.create(model="gpt-4o", messages=ask("hi"))
    assert by_header.choices[0].message.content == "coder here"
    by_model = client.chat.completions.create(model="coder", messages=ask("hi"))
    assert by_model.choices[0].message.content == "coder here"
    default = client.chat.completions.create(model="gpt-4o", messages=ask("hi"))
    assert default.choices[0].message.content == "hi"
    agent_types = [entry.agent_type for entry in static_agents.requests()]
    assert agent_types == ["coder", "coder", "router"]


def test_models_list_names_the_default_and_one_model_per_agent_type(
    client: openai.OpenAI,
) -> None:
    assert [model.id for model in client.models.list()] == ["static-agents", "coder"]


def test_system_prompt_metadata_and_turn_reach_the_rules(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    answer = client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "developer", "content": "Be terse."}, *ask("status?")],
        metadata={"team": "qa"},
        store=True,
    )
    assert answer.choices[0].message.content == "terse for qa"
    assert_system_prompt(static_agents, equals="Be terse.")
    history = [*ask("#count one"), {"role": "assistant", "content": "one"}, *ask("#count two")]
    second = client.chat.completions.create(model="gpt-4o", messages=history)
    assert second.choices[0].message.content == "second turn"


def test_the_journal_records_the_request_with_the_key_masked(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    client.chat.completions.create(model="gpt-4o", messages=ask("remember me"))
    [entry] = static_agents.requests()
    # The session is the one the X-Static-Session header carried (the client's default header).
    assert (entry.dialect, entry.session, entry.query, entry.rule) == (
        "openai",
        static_agents.session,
        "remember me",
        "echo",
    )
    assert entry.headers["authorization"] == "Bearer ***"
    assert API_KEY not in json.dumps(entry.headers)
    assert_no_credentials([entry], secrets=[API_KEY])
    assert json.loads(entry.raw_body)["messages"][0]["content"] == "remember me"


# -- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (403, openai.PermissionDeniedError),
        (404, openai.NotFoundError),
        (409, openai.ConflictError),
        (422, openai.UnprocessableEntityError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_every_scripted_error_raises_the_sdk_exception_for_its_status(
    static_agents: StaticAgentsClient,
    client: openai.OpenAI,
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
                            "type": "scripted",
                            "message": f"failing with {status}",
                        }
                    }
                }
            ]
        }
    )
    for stream in (False, True):
        with pytest.raises(exception) as raised:
            client.chat.completions.create(model="gpt-4o", messages=ask("hi"), stream=stream)
        error: Any = raised.value
        assert error.status_code == status
        assert error.body["message"] == f"failing with {status}"
        assert error.type == "scripted"


@pytest.mark.static_agents_fixture(
    {
        "rules": [
            {
                "response": {
                    "retry_after": 7,
                    "error": {"status": 429, "type": "rate_limit_exceeded", "message": "slow down"},
                }
            }
        ]
    }
)
def test_a_rate_limit_error_carries_retry_after(client: openai.OpenAI) -> None:
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="gpt-4o", messages=ask("hi"))
    assert raised.value.response.headers["retry-after"] == "7"
    assert raised.value.response.headers["retry-after-ms"] == "7000"


def test_the_sdks_own_retries_get_past_fail_first(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    answer = client.with_options(max_retries=2).chat.completions.create(
        model="gpt-4o", messages=ask("#flaky please")
    )
    assert answer.choices[0].message.content == "made it"
    outcomes = [entry.outcome for entry in static_agents.requests()]
    assert outcomes == ["failed_first", "failed_first", "answered"]
    assert static_agents.counters().failed_first == 2


def test_without_retries_fail_first_reaches_the_caller_as_a_503(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as raised:
        client.chat.completions.create(model="gpt-4o", messages=ask("#flaky once"))
    assert raised.value.status_code == 503
