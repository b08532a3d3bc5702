"""The Anthropic Messages dialect: its parser, and its wire format over real HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from staticagents.core.replies import Reply, Timing, ToolCall
from staticagents.dialects.anthropic.wire import parse_messages_request, stream_events
from staticagents.dialects.llm.wire import Envelope, InvalidRequest

RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "all",
            "match": {"contains": "#all"},
            "response": {
                "thinking": "hmm",
                "content": "Checking now.",
                "tool_calls": [{"name": "lookup", "arguments": {"q": 1}, "id": "toolu_1"}],
            },
        },
        {"name": "empty", "match": {"contains": "#empty"}, "response": {"content": ""}},
        {"name": "echo", "response": {"template": True, "content": "$query"}},
    ]
}


@pytest.fixture
def http(live_url: str, load_rules: Callable[[Any], Any]) -> Iterator[httpx.Client]:
    load_rules(RULES)
    with httpx.Client(base_url=live_url, timeout=10) as client:
        yield client


def message(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "model": "claude",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }


def named_events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    frames = [frame for frame in response.text.split("\n\n") if frame]
    events = []
    for frame in frames:
        name_line, data_line = frame.split("\n")
        name = name_line.removeprefix("event: ")
        data = orjson.loads(data_line.removeprefix("data: "))
        assert data["type"] == name  # every event is named after its type
        events.append((name, data))
    return events


# -- the parser --------------------------------------------------------------------------


def test_the_parser_reads_query_turn_and_tool_result_from_the_conversation() -> None:
    conversation = parse_messages_request(
        {
            "model": "claude",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "You help."}, {"type": "text", "text": "Briefly."}],
            "metadata": {"user_id": "u-1"},
            "tools": [{"name": "lookup", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "second"},
                        {"type": "image", "source": {}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "t", "signature": "s"},
                        {"type": "tool_use", "id": "a", "name": "lookup", "input": {}},
                        {"type": "tool_use", "id": "b", "name": "lookup", "input": {}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "a", "content": "one"},
                        {
                            "type": "tool_result",
                            "tool_use_id": "b",
                            "content": [{"type": "text", "text": "two"}],
                        },
                    ],
                },
            ],
        }
    )
    assert conversation.query == "second"
    assert conversation.turn == 2  # tool results are not turns
    assert conversation.tool_result == "one\ntwo"
    assert conversation.system == "You help.\nBriefly."
    assert conversation.context == {
        "user_id": "u-1",
        "system": "You help.\nBriefly.",
        "model": "claude",
        "tools": ["lookup"],
    }


def test_a_conversation_ending_with_a_question_has_no_tool_result() -> None:
    conversation = parse_messages_request(message("hi", stream=True, system="Be kind."))
    assert (conversation.query, conversation.turn, conversation.tool_result) == ("hi", 1, None)
    assert conversation.stream and conversation.system == "Be kind."


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"max_tokens": 1, "messages": []}, "model", "field required"),
        ({"model": "c", "messages": []}, "max_tokens", "field required"),
        (
            {"model": "c", "max_tokens": "10", "messages": []},
            "max_tokens",
            "must be an integer, not a string",
        ),
        ({"model": "c", "max_tokens": True, "messages": []}, "max_tokens", "not a boolean"),
        ({"model": "c", "max_tokens": 0, "messages": []}, "max_tokens", "at least 1"),
        ({"model": "c", "max_tokens": 1}, "messages", "field required"),
        ({"model": "c", "max_tokens": 1, "messages": []}, "messages", "at least one"),
        (
            {"model": "c", "max_tokens": 1, "messages": [{"role": "system", "content": "x"}]},
            "messages[0].role",
            "must be one of user, assistant",
        ),
        (
            {"model": "c", "max_tokens": 1, "messages": [{"role": "user"}]},
            "messages[0].content",
            "field required",
        ),
        (
            {"model": "c", "max_tokens": 1, "messages": [{"role": "user", "content": 4}]},
            "messages[0].content",
            "must be a string or an array",
        ),
        (
            {"model": "c", "max_tokens": 1, "messages": [{"role": "user", "content": [{}]}]},
            "messages[0].content[0].type",
            "field required",
        ),
        (
            {
                "model": "c",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "tool_result"}]}],
            },
            "messages[0].content[0].tool_use_id",
            "field required",
        ),
        ({**message("x"), "system": 3}, "system", "must be a string or an array"),
        ({**message("x"), "system": [{"type": "text"}]}, "system[0].text", "field required"),
        ({**message("x"), "tools": [{"description": "d"}]}, "tools[0].name", "field required"),
        ({**message("x"), "stream": 1}, "stream", "must be a boolean, not a number"),
        ({**message("x"), "metadata": "u"}, "metadata", "must be an object"),
    ],
)
def test_the_parser_names_the_field_that_is_wrong(body: Any, param: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse_messages_request(body)
    assert raised.value.param == param
    assert words in raised.value.message


def test_blocks_open_and_close_around_their_deltas_on_the_schedule() -> None:
    reply = Reply(
        content="a b",
        confidence="medium",
        agent_type="router",
        thinking="t",
        finish_reason="tool_calls",
        tool_calls=(ToolCall("toolu_1", "f", {}),),
        timing=Timing(first_delay_ms=100, word_delay_ms=10),
    )
    events = list(stream_events(reply, Envelope("msg_1", 0, "claude")))
    timeline = [(round(e.at, 3), e.event, e.payload.get("index")) for e in events]
    assert timeline == [
        (0.0, "message_start", None),
        (0.0, "ping", None),
        (0.1, "content_block_start", 0),
        (0.1, "content_block_delta", 0),
        (0.1, "content_block_delta", 0),
        (0.1, "content_block_stop", 0),
        (0.1, "content_block_start", 1),
        (0.11, "content_block_delta", 1),
        (0.12, "content_block_delta", 1),
        (0.12, "content_block_stop", 1),
        (0.13, "content_block_start", 2),
        (0.14, "content_block_delta", 2),
        (0.14, "content_block_stop", 2),
        (0.14, "message_delta", None),
        (0.14, "message_stop", None),
    ]


# -- the wire --------------------------------------------------------------------------


def test_a_stream_sends_named_events_in_anthropics_order(http: httpx.Client) -> None:
    response = http.post("/v1/messages", json=message("#all", stream=True))
    assert response.headers["content-type"].startswith("text/event-stream")
    events = named_events(response)
    assert [name for name, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    started = events[0][1]["message"]
    assert started["content"] == [] and started["stop_reason"] is None
    blocks = [data["content_block"] for name, data in events if name == "content_block_start"]
    assert blocks == [
        {"type": "thinking", "thinking": "", "signature": ""},
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}},
    ]
    deltas = [data["delta"] for name, data in events if name == "content_block_delta"]
    assert [d["type"] for d in deltas] == [
        "thinking_delta",
        "signature_delta",
        "text_delta",
        "text_delta",
        "input_json_delta",
        "input_json_delta",
    ]
    assert "".join(d.get("partial_json", "") for d in deltas) == '{"q": 1}'
    assert events[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 5},  # two words of text; the call's name, its arguments' two
    }


def test_a_json_reply_holds_thinking_text_and_tool_use_blocks(http: httpx.Client) -> None:
    body = http.post("/v1/messages", json=message("#all")).json()
    assert [block["type"] for block in body["content"]] == ["thinking", "text", "tool_use"]
    assert body["content"][2] == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "lookup",
        "input": {"q": 1},
    }
    assert (body["type"], body["role"], body["stop_reason"]) == ("message", "assistant", "tool_use")


def test_an_empty_reply_still_has_one_text_block(http: httpx.Client) -> None:
    body = http.post("/v1/messages", json=message("#empty")).json()
    assert body["content"] == [{"type": "text", "text": ""}]
    streamed = named_events(http.post("/v1/messages", json=message("#empty", stream=True)))
    assert [name for name, _ in streamed].count("content_block_start") == 1


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"{oops", "not valid JSON"),
        (b"", "empty"),
        (b'"text"', "must be a JSON object"),
        (
            b'{"model": "c", "messages": [{"role": "user", "content": "x"}]}',
            "max_tokens: field required",
        ),
        (b'{"model": "c", "max_tokens": 5, "messages": "x"}', "messages: must be an array"),
    ],
)
def test_bad_bodies_get_a_400_in_anthropics_error_shape(
    http: httpx.Client, content: bytes, words: str
) -> None:
    response = http.post(
        "/v1/messages", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert words in body["error"]["message"]


def test_a_wrong_method_gets_a_405_in_anthropics_error_shape(http: httpx.Client) -> None:
    response = http.get("/v1/messages")
    assert response.status_code == 405
    assert response.json()["type"] == "error"
