"""The OpenAI Chat Completions dialect: its parser, and its wire format over real HTTP."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from staticagents.core.replies import Reply, Timing, ToolCall
from staticagents.dialects.llm.wire import Envelope, InvalidRequest
from staticagents.dialects.openai.wire import parse_chat_request, stream_events

RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "call",
            "match": {"contains": "#tool"},
            "response": {
                "content": "Checking.",
                "tool_calls": [
                    {"name": "lookup", "arguments": {"topic": "weather"}, "id": "call_1"},
                    {"name": "clock", "arguments": {}},
                ],
            },
        },
        {
            "name": "cut",
            "match": {"contains": "#long"},
            "response": {"content": "a b c", "finish_reason": "length"},
        },
        {"name": "echo", "response": {"template": True, "content": "$query"}},
    ]
}


@pytest.fixture
def http(live_url: str, load_rules: Callable[[Any], Any]) -> Iterator[httpx.Client]:
    load_rules(RULES)
    with httpx.Client(base_url=live_url, timeout=10) as client:
        yield client


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


def data_lines(response: httpx.Response) -> list[str]:
    frames = [frame for frame in response.text.split("\n\n") if frame]
    assert all(frame.startswith("data: ") and "\n" not in frame for frame in frames)
    return [frame.removeprefix("data: ") for frame in frames]


# -- the parser --------------------------------------------------------------------------


def test_the_parser_reads_query_system_turn_and_tool_result_from_the_conversation() -> None:
    conversation = parse_chat_request(
        {
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "You help."},
                {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": "first answer"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "second"},
                        {"type": "image_url", "image_url": {"url": "x"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "result one"},
                {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "two"}]},
            ],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "metadata": {"team": "qa"},
        }
    )
    assert conversation.query == "second"
    assert conversation.system == "You help.\nBe brief."
    assert conversation.turn == 2
    assert conversation.tool_result == "result one\ntwo"
    assert conversation.context == {
        "team": "qa",
        "system": "You help.\nBe brief.",
        "model": "gpt-4o",
        "tools": ["f"],
    }
    assert not conversation.stream


def test_a_conversation_ending_with_a_user_message_has_no_tool_result() -> None:
    conversation = parse_chat_request(
        chat("hi", stream=True, stream_options={"include_usage": True})
    )
    assert (conversation.tool_result, conversation.turn) == (None, 1)
    assert conversation.stream and conversation.include_usage


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"messages": []}, "model", "field required"),
        ({"model": 3, "messages": []}, "model", "must be a string, not a number"),
        ({"model": "m"}, "messages", "field required"),
        ({"model": "m", "messages": {}}, "messages", "must be an array"),
        ({"model": "m", "messages": []}, "messages", "at least one message"),
        ({"model": "m", "messages": ["hi"]}, "messages[0]", "must be an object, not a string"),
        ({"model": "m", "messages": [{"content": "x"}]}, "messages[0].role", "field required"),
        (
            {"model": "m", "messages": [{"role": "robot", "content": "x"}]},
            "messages[0].role",
            "must be one of",
        ),
        ({"model": "m", "messages": [{"role": "user"}]}, "messages[0].content", "field required"),
        (
            {"model": "m", "messages": [{"role": "user", "content": 5}]},
            "messages[0].content",
            "must be a string or an array",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "messages[0].content[0].text",
            "field required",
        ),
        (
            {"model": "m", "messages": [{"role": "tool", "content": "x"}]},
            "messages[0].tool_call_id",
            "field required",
        ),
        ({**chat("x"), "stream": "yes"}, "stream", "must be a boolean, not a string"),
        (
            {**chat("x"), "stream_options": {"include_usage": 1}},
            "stream_options.include_usage",
            "must be a boolean",
        ),
        ({**chat("x"), "tools": [{"type": "function"}]}, "tools[0].function", "field required"),
        (
            {**chat("x"), "tools": [{"type": "function", "function": {"name": 1}}]},
            "tools[0].function.name",
            "must be a string",
        ),
        ({**chat("x"), "metadata": ["a"]}, "metadata", "must be an object, not an array"),
    ],
)
def test_the_parser_names_the_field_that_is_wrong(body: Any, param: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse_chat_request(body)
    assert raised.value.param == param
    assert words in raised.value.message and raised.value.message.startswith(param)


def test_tool_call_fragments_name_the_call_first_then_carry_its_arguments() -> None:
    reply = Reply(
        content="",
        confidence="medium",
        agent_type="router",
        finish_reason="tool_calls",
        tool_calls=(ToolCall("call_9", "lookup", {"topic": "rain"}),),
        timing=Timing(first_delay_ms=100, word_delay_ms=10),
    )
    events = list(stream_events(reply, Envelope("chatcmpl-1", 0, "m"), include_usage=False))
    deltas = [e.payload["choices"][0]["delta"] for e in events]
    assert deltas[1]["tool_calls"] == [
        {
            "index": 0,
            "id": "call_9",
            "type": "function",
            "function": {"name": "lookup", "arguments": ""},
        }
    ]
    pieces = [d["tool_calls"][0]["function"]["arguments"] for d in deltas[2:-1]]
    assert "".join(pieces) == '{"topic": "rain"}' and len(pieces) == 2
    assert [e.at for e in events] == pytest.approx([0.0, 0.1, 0.11, 0.12, 0.12])
    assert events[-1].payload["choices"][0]["finish_reason"] == "tool_calls"


def test_the_model_dialect_modules_import_nothing_from_django() -> None:
    probe = (
        "import sys, staticagents.dialects.openai.wire, staticagents.dialects.anthropic.wire;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'channels')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# -- the wire --------------------------------------------------------------------------


def test_a_stream_is_data_lines_of_chunks_ending_with_done(http: httpx.Client) -> None:
    response = http.post("/v1/chat/completions", json=chat("#tool now", stream=True))
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = data_lines(response)
    assert lines[-1] == "[DONE]"
    chunks = [orjson.loads(line) for line in lines[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    calls = [c["choices"][0]["delta"].get("tool_calls") for c in chunks]
    firsts = [call[0] for call in calls if call and "id" in call[0]]
    assert [(f["index"], f["id"], f["function"]["name"]) for f in firsts] == [
        (0, "call_1", "lookup"),
        (1, firsts[1]["id"], "clock"),
    ]
    assert firsts[1]["id"].startswith("call_")
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "Checking."
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
    }


def test_a_json_reply_carries_tool_calls_beside_its_content(http: httpx.Client) -> None:
    body = http.post("/v1/chat/completions", json=chat("#tool")).json()
    message = body["choices"][0]["message"]
    assert message["content"] == "Checking."
    assert [c["function"] for c in message["tool_calls"]] == [
        {"name": "lookup", "arguments": '{"topic": "weather"}'},
        {"name": "clock", "arguments": "{}"},
    ]
    assert body["choices"][0]["finish_reason"] == "tool_calls"


def test_a_scripted_finish_reason_is_sent_as_is(http: httpx.Client) -> None:
    body = http.post("/v1/chat/completions", json=chat("#long")).json()
    assert body["choices"][0]["finish_reason"] == "length"


def test_the_agents_prefix_and_a_trailing_slash_both_route(http: httpx.Client) -> None:
    response = http.post("/agents/router/v1/chat/completions/", json=chat("hi"))
    assert response.json()["choices"][0]["message"]["content"] == "hi"


@pytest.mark.parametrize(
    ("content", "param", "words"),
    [
        (b"{not json", None, "not valid JSON"),
        (b"", None, "empty"),
        (b"[1, 2]", None, "must be a JSON object"),
        (b'{"model": "m"}', "messages", "messages: field required"),
        (b'{"model": "m", "messages": "hi"}', "messages", "must be an array, not a string"),
        (
            b'{"model": "m", "messages": [{"role": "user", "content": null}]}',
            "messages[0].content",
            "field required",
        ),
    ],
)
def test_bad_bodies_get_a_400_in_openais_error_shape(
    http: httpx.Client, content: bytes, param: str | None, words: str
) -> None:
    response = http.post(
        "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert words in error["message"]


def test_a_wrong_method_gets_a_405_in_openais_error_shape(http: httpx.Client) -> None:
    response = http.get("/v1/chat/completions")
    assert response.status_code == 405
    assert "use POST" in response.json()["error"]["message"]
    assert http.post("/v1/models", json={}).status_code == 405


def test_a_body_over_the_size_limit_gets_a_413(http: httpx.Client, settings: Any) -> None:
    settings.STATIC_AGENTS_MAX_BODY_BYTES = 100
    response = http.post("/v1/chat/completions", json=chat("x" * 200))
    assert response.status_code == 413
    assert "exceeds 100 bytes" in response.json()["error"]["message"]


def test_models_are_listed_in_anthropics_shape_for_its_sdk(http: httpx.Client) -> None:
    listing = http.get("/v1/models", headers={"anthropic-version": "2023-06-01"}).json()
    assert [m["id"] for m in listing["data"]] == ["static-agents"]
    assert listing["data"][0]["type"] == "model" and listing["has_more"] is False
