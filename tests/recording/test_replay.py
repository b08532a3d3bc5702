"""Replay offline: exchanges recorded by hand (no upstream anywhere) answer the same
questions through the official SDKs as they came: content, tool calls, thinking, stream
chunks, in every dialect."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from staticagents.core.inquiry import Inquiry
from staticagents.recording import Exchange, RecordedReply, record_exchange
from tests.conftest import galaxy_query

MODEL = "gpt-4o"
WEATHER = "What is the weather in Paris?"
CALL = {"name": "get_weather", "arguments": {"city": "Paris", "units": ["metric", "C"]}}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
STREAMED = "Streams arrive word by word, as recorded."
CHUNKS = ((0.03, "Streams "), (0.04, "arrive "), (0.05, "word "), (0.06, "by "))
CHUNKS += ((0.07, "word, "), (0.08, "as "), (0.09, "recorded."))


def record(query: str, reply: RecordedReply, **inquiry: Any) -> str:
    name = record_exchange(
        Exchange(
            upstream="real", inquiry=Inquiry(query=query, model=MODEL, **inquiry), reply=reply
        ),
        keep_timing=True,
    )
    assert name is not None
    return name


@pytest.fixture
def openai_client(live_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live_url}/v1", api_key="sk-none", max_retries=0)


@pytest.fixture
def anthropic_client(live_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=live_url, api_key="sk-none", max_retries=0)


def test_a_plain_answer_replays_in_every_dialect(
    live_url: str, openai_client: openai.OpenAI, anthropic_client: anthropic.Anthropic
) -> None:
    reply = RecordedReply(
        "Paris is the capital.",
        finish_reason="stop",
        usage={"input_tokens": 9, "output_tokens": 4},
    )
    record("Capital of France?", reply)
    question = [{"role": "user", "content": "Capital of France?"}]

    completion = openai_client.chat.completions.create(model=MODEL, messages=question)  # type: ignore[arg-type]
    assert completion.choices[0].message.content == "Paris is the capital."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (9, 4)

    message = anthropic_client.messages.create(model=MODEL, max_tokens=64, messages=question)  # type: ignore[arg-type]
    assert [block.text for block in message.content if block.type == "text"] == [
        "Paris is the capital."
    ]
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (9, 4)

    galaxy = galaxy_query(live_url, "Capital of France?").json()
    assert galaxy["response"]["content"] == "Paris is the capital."

    other = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Capital of France? Really?"}]
    )
    assert other.choices[0].message.content != "Paris is the capital."  # the exact question only


def test_a_tool_call_then_its_answer_replay_over_two_requests(
    openai_client: openai.OpenAI, anthropic_client: anthropic.Anthropic
) -> None:
    record(WEATHER, RecordedReply("", tool_calls=(CALL,), finish_reason="tool_calls"))
    record(WEATHER, RecordedReply("It is 21 C in Paris.", finish_reason="stop"), tool_result="21")

    messages: list[Any] = [{"role": "user", "content": WEATHER}]
    first = openai_client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == CALL["arguments"]
    messages += [
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "21"},
    ]
    second = openai_client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "It is 21 C in Paris."

    tools: list[Any] = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    asked: list[Any] = [{"role": "user", "content": WEATHER}]
    used = anthropic_client.messages.create(model=MODEL, max_tokens=64, messages=asked, tools=tools)
    assert used.stop_reason == "tool_use"
    (block,) = [block for block in used.content if block.type == "tool_use"]
    assert (block.name, block.input) == (CALL["name"], CALL["arguments"])
    asked += [
        {"role": "assistant", "content": used.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "21"}],
        },
    ]
    answered = anthropic_client.messages.create(
        model=MODEL, max_tokens=64, messages=asked, tools=tools
    )
    assert [b.text for b in answered.content if b.type == "text"] == ["It is 21 C in Paris."]


def test_thinking_replays_before_the_answer(
    openai_client: openai.OpenAI, anthropic_client: anthropic.Anthropic
) -> None:
    record("Is 91 prime?", RecordedReply("No: 7 x 13.", thinking="Try 7: 7 x 13 = 91."))
    question: list[Any] = [{"role": "user", "content": "Is 91 prime?"}]

    message = openai_client.chat.completions.create(model=MODEL, messages=question).choices[0]
    assert getattr(message.message, "reasoning_content", None) == "Try 7: 7 x 13 = 91."
    assert message.message.content == "No: 7 x 13."

    answer = anthropic_client.messages.create(
        model=MODEL,
        max_tokens=2048,
        messages=question,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    assert [block.type for block in answer.content] == ["thinking", "text"]
    assert answer.content[0].thinking == "Try 7: 7 x 13 = 91."  # type: ignore[union-attr]


def test_a_stream_replays_its_chunks(
    openai_client: openai.OpenAI, anthropic_client: anthropic.Anthropic
) -> None:
    record("Tell me about streams.", RecordedReply(STREAMED, chunks=CHUNKS))
    question: list[Any] = [{"role": "user", "content": "Tell me about streams."}]
    expected = [text for _, text in CHUNKS]

    stream = openai_client.chat.completions.create(model=MODEL, messages=question, stream=True)
    deltas = [
        c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content
    ]
    assert deltas == expected

    with anthropic_client.messages.stream(model=MODEL, max_tokens=64, messages=question) as events:
        texts = [
            event.delta.text
            for event in events
            if event.type == "content_block_delta" and event.delta.type == "text_delta"
        ]
    assert texts == expected


def test_a_stream_cut_by_characters_replays_cut_the_same_way(openai_client: openai.OpenAI) -> None:
    chunks = tuple((0.01 * i, text) for i, text in enumerate(["Fixe", "d si", "ze c", "uts"]))
    record("Cut it.", RecordedReply("Fixed size cuts", chunks=chunks))
    stream = openai_client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Cut it."}], stream=True
    )
    deltas = [
        c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content
    ]
    assert deltas == ["Fixe", "d si", "ze c", "uts"]
