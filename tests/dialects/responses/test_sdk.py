"""The official openai SDK's Responses client against the service the pytest plugin runs.

Every SDK client carries the test's session (``static_agents_headers``), so the
journal read through ``static_agents`` is this test's alone.
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
        "name": "lookup",
        "description": "Look a topic up.",
        "parameters": {"type": "object", "properties": {"topic": {"type": "string"}}},
        "strict": False,
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
                    {
                        "name": "lookup",
                        "id": "call_lookup",
                        "arguments": {"topic": "weather", "units": "metric"},
                    }
                ],
                "stream": {"chunk": 3, "word_delay_ms": 1},
            },
        },
        {
            "name": "report",
            "match": {"contains": "#tool", "tool_result": True},
            "response": {"template": True, "content": "lookup said: $tool_result (turn $turn)"},
        },
        {
            "name": "long",
            "match": {"contains": "#long"},
            "response": {"content": "cut short", "finish_reason": "length"},
        },
        {"name": "coder", "match": {"agent_type": "coder"}, "response": {"content": "coder here"}},
        {
            "name": "strict",
            "match": {
                "system": "(?i)be terse",
                "context": {"team": "^qa$", "tools": "lookup"},
                "dialect": "responses",
            },
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
API_KEY = "sk-secret-responses-key-0123456789"

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


# -- answers ----------------------------------------------------------------------------


def test_create_returns_the_scripted_answer(client: openai.OpenAI) -> None:
    response = client.responses.create(model="gpt-5", input="hello there")
    assert response.output_text == "hello there"
    assert response.status == "completed"
    assert response.object == "response"
    assert response.model == "gpt-5"
    assert response.id.startswith("resp_")
    assert response._request_id == response.id
    [message] = response.output
    assert message.type == "message" and message.role == "assistant"
    assert message.status == "completed"
    assert response.usage is not None
    assert response.usage.output_tokens == 2
    assert response.usage.input_tokens == 2
    assert response.usage.total_tokens == 4


async def test_async_create_reads_input_items(async_client: openai.AsyncOpenAI) -> None:
    response = await async_client.responses.create(
        model="gpt-5",
        input=[
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "an answer"},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "async hello"}],
            },
        ],
    )
    assert response.output_text == "async hello"


def test_instructions_metadata_tools_and_the_dialect_reach_the_rules(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    response = client.responses.create(
        model="gpt-5",
        instructions="Be terse.",
        input="status?",
        tools=TOOLS,
        metadata={"team": "qa"},
        # What SDKs and agent frameworks send besides: all accepted, the settings repeated.
        store=True,
        parallel_tool_calls=False,
        temperature=0.2,
        text={"format": {"type": "text"}},
        truncation="auto",
        include=["reasoning.encrypted_content"],
        tool_choice="auto",
        max_output_tokens=500,
        user="someone",
    )
    assert response.output_text == "terse for qa"
    assert response.instructions == "Be terse."
    assert response.metadata == {"team": "qa"}
    assert response.parallel_tool_calls is False
    assert response.temperature == 0.2
    assert response.max_output_tokens == 500
    assert [tool.name for tool in response.tools] == ["lookup"]  # type: ignore[union-attr]
    assert_system_prompt(static_agents, equals="Be terse.")


def test_the_turn_counts_the_user_messages(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="gpt-5",
        input=[
            {"role": "user", "content": "#count one"},
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "#count two"},
        ],
    )
    assert response.output_text == "second turn"


def test_an_agent_prefix_selects_that_agent_types_rules(
    static_agents: StaticAgentsClient,
) -> None:
    coder = openai.OpenAI(
        base_url=f"{static_agents.base_url}/agents/coder/v1",
        api_key="x",
        max_retries=0,
        default_headers=static_agents.headers,
    )
    assert coder.responses.create(model="gpt-5", input="hi").output_text == "coder here"
    [entry] = static_agents.requests()
    assert (entry.agent_type, entry.dialect) == ("coder", "responses")


# -- tools -------------------------------------------------------------------------------


def test_a_tool_call_then_its_output_via_previous_response_id(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    first = client.responses.create(model="gpt-5", input="#tool weather?", tools=TOOLS)
    [call] = first.output
    assert call.type == "function_call"
    assert call.name == "lookup" and call.call_id == "call_lookup"
    assert json.loads(call.arguments) == {"topic": "weather", "units": "metric"}
    assert first.output_text == ""

    second = client.responses.create(
        model="gpt-5",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=TOOLS,
    )
    # The query and the turn come from the stored conversation; the tool result from the input.
    assert second.output_text == "lookup said: sunny (turn 1)"
    assert second.previous_response_id == first.id
    assert [entry.rule for entry in static_agents.requests()] == ["call", "report"]
    assert_tool_result_sent(static_agents, "call_lookup", contains="sunny")


def test_a_tool_call_then_its_output_in_the_full_input(client: openai.OpenAI) -> None:
    conversation: list[Any] = [{"role": "user", "content": "#tool weather?"}]
    first = client.responses.create(model="gpt-5", input=conversation, tools=TOOLS, store=False)
    conversation += [item.model_dump(exclude_none=True) for item in first.output]
    conversation.append(
        {"type": "function_call_output", "call_id": "call_lookup", "output": "hail"}
    )
    second = client.responses.create(model="gpt-5", input=conversation, tools=TOOLS, store=False)
    assert second.output_text == "lookup said: hail (turn 1)"


def test_a_follow_up_continues_a_conversation_over_several_responses(
    client: openai.OpenAI,
) -> None:
    first = client.responses.create(model="gpt-5", input="#count one")
    assert first.output_text == "#count one"
    second = client.responses.create(
        model="gpt-5", input="#count two", previous_response_id=first.id
    )
    assert second.output_text == "second turn"


def test_a_follow_up_to_an_unknown_or_unstored_response_is_refused(
    client: openai.OpenAI,
) -> None:
    unstored = client.responses.create(model="gpt-5", input="hi", store=False)
    for missing in ("resp_nobody", unstored.id):
        with pytest.raises(openai.BadRequestError) as raised:
            client.responses.create(model="gpt-5", input="again", previous_response_id=missing)
        error: Any = raised.value.body
        assert error["param"] == "previous_response_id"
        assert error["code"] == "previous_response_not_found"
        assert missing in error["message"]


# -- streams ------------------------------------------------------------------------------


def test_stream_sends_typed_events_in_order(client: openai.OpenAI) -> None:
    events = list(client.responses.create(model="gpt-5", input="one two three", stream=True))
    types = [event.type for event in events]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert deltas == ["one ", "two ", "three"]
    created, completed = events[0], events[-1]
    assert created.response.status == "in_progress"  # type: ignore[union-attr]
    assert completed.response.status == "completed"  # type: ignore[union-attr]
    assert completed.response.output_text == "one two three"  # type: ignore[union-attr]
    assert completed.response.id == created.response.id  # type: ignore[union-attr]


def test_stream_helper_collects_text_deltas_and_the_final_response(
    client: openai.OpenAI,
) -> None:
    with client.responses.stream(model="gpt-5", input="streamed words here") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert deltas == ["streamed ", "words ", "here"]
    assert final.output_text == "streamed words here"
    assert final.usage is not None and final.usage.output_tokens == 3


def test_stream_helper_assembles_a_function_call_from_argument_deltas(
    client: openai.OpenAI,
) -> None:
    with client.responses.stream(model="gpt-5", input="#tool weather?", tools=TOOLS) as stream:
        events = list(stream)
        final = stream.get_final_response()
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(pieces) > 3  # the arguments arrive in several pieces
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert "".join(pieces) == done.arguments
    [call] = final.output
    assert call.type == "function_call" and call.call_id == "call_lookup"
    assert json.loads(call.arguments) == {"topic": "weather", "units": "metric"}


async def test_async_stream_with_thinking_sends_reasoning_summary_events_first(
    async_client: openai.AsyncOpenAI,
) -> None:
    async with async_client.responses.stream(model="gpt-5", input="#think") as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()
    types = [event.type for event in events]
    assert types.index("response.reasoning_summary_text.delta") < types.index(
        "response.output_text.delta"
    )
    summary = [e.delta for e in events if e.type == "response.reasoning_summary_text.delta"]
    assert "".join(summary) == "Let me weigh this."
    reasoning, message = final.output
    assert reasoning.type == "reasoning"
    assert reasoning.summary[0].text == "Let me weigh this."
    assert message.type == "message"
    assert final.output_text == "Here it is."


def test_a_reply_cut_short_is_an_incomplete_response(client: openai.OpenAI) -> None:
    response = client.responses.create(model="gpt-5", input="#long")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete"  # type: ignore[union-attr]
    events = list(client.responses.create(model="gpt-5", input="#long", stream=True))
    assert events[-1].type == "response.incomplete"
    [done] = [event for event in events if event.type == "response.output_item.done"]
    assert done.item.status == "incomplete"  # type: ignore[union-attr]


# -- stored responses --------------------------------------------------------------------


def test_retrieve_returns_the_stored_response_and_delete_forgets_it(
    client: openai.OpenAI,
) -> None:
    created = client.responses.create(model="gpt-5", input="keep me")
    retrieved = client.responses.retrieve(created.id)
    assert retrieved.id == created.id
    assert retrieved.output_text == "keep me"
    assert retrieved.to_dict() == created.to_dict()
    streamed = list(client.responses.create(model="gpt-5", input="keep me too", stream=True))
    final: Any = streamed[-1].response  # type: ignore[union-attr]
    assert client.responses.retrieve(final.id).output_text == "keep me too"

    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError) as raised:
        client.responses.retrieve(created.id)
    assert created.id in raised.value.message
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)


# -- journal and errors -------------------------------------------------------------------


def test_the_journal_records_the_request_with_the_key_masked(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    client.responses.create(model="gpt-5", input="remember me")
    [entry] = static_agents.requests()
    assert (entry.dialect, entry.route, entry.session, entry.query, entry.rule) == (
        "responses",
        f"/sessions/{static_agents.session}/v1/responses",
        static_agents.session,
        "remember me",
        "echo",
    )
    assert entry.headers["authorization"] == "Bearer ***"
    assert_no_credentials([entry], secrets=[API_KEY])
    assert json.loads(entry.raw_body)["input"] == "remember me"


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        (400, openai.BadRequestError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
    ],
)
def test_a_scripted_error_raises_the_sdk_exception_for_its_status(
    static_agents: StaticAgentsClient,
    client: openai.OpenAI,
    status: int,
    exception: type[Exception],
) -> None:
    static_agents.replies(
        {"error": {"status": status, "type": "scripted", "message": f"failing with {status}"}},
        on_exhausted="repeat_last",
    )
    for stream in (False, True):
        with pytest.raises(exception) as raised:
            client.responses.create(model="gpt-5", input="hi", stream=stream)
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
        client.responses.create(model="gpt-5", input="hi")
    assert raised.value.response.headers["retry-after"] == "7"
    assert raised.value.response.headers["retry-after-ms"] == "7000"


def test_the_sdks_own_retries_get_past_fail_first(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    answer = client.with_options(max_retries=2).responses.create(
        model="gpt-5", input="#flaky please"
    )
    assert answer.output_text == "made it"
    outcomes = [entry.outcome for entry in static_agents.requests()]
    assert outcomes == ["failed_first", "failed_first", "answered"]


def test_a_bad_request_raises_bad_request_error_naming_the_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model="gpt-5", input=[{"role": "boss", "content": "hi"}])
    error: Any = raised.value.body
    assert error["param"] == "input[0].role"
    assert "must be one of" in error["message"]
