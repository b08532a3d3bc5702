"""The OpenAI Responses dialect: its parser, its renderer, and its wire format over real HTTP."""

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
from staticagents.dialects.responses.wire import (
    Item,
    parse_responses_request,
    response_body,
    stream_events,
)
from staticagents.models import JournalEntry, StoredResponse

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
            "name": "slow",
            "match": {"contains": "#slow"},
            "response": {"content": "w1 w2 w3 w4 w5 w6", "stream": {"word_delay_ms": 50}},
        },
        {
            "name": "filtered",
            "match": {"contains": "#filtered"},
            "response": {"content": "", "finish_reason": "content_filter"},
        },
        {"name": "echo", "response": {"template": True, "content": "$query"}},
    ]
}


@pytest.fixture
def http(live_url: str, load_rules: Callable[[Any], Any]) -> Iterator[httpx.Client]:
    load_rules(RULES)
    with httpx.Client(base_url=live_url, timeout=10) as client:
        yield client


def ask(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "input": text, **extra}


def reply(**fields: Any) -> Reply:
    return Reply(**{"content": "", "confidence": "medium", "agent_type": "router", **fields})


def sse_events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """Each frame's ``event:`` name and its data; the name must be the data's type."""
    events = []
    for frame in filter(None, response.text.split("\n\n")):
        name, data = frame.split("\n")
        payload = orjson.loads(data.removeprefix("data: "))
        assert name == f"event: {payload['type']}", frame
        events.append((payload["type"], payload))
    return events


# -- the parser --------------------------------------------------------------------------


def test_a_string_input_is_one_user_message() -> None:
    request = parse_responses_request({"model": "gpt-5", "input": "hi", "instructions": "Help."})
    conversation = request.conversation()
    assert (conversation.query, conversation.system, conversation.turn) == ("hi", "Help.", 1)
    assert conversation.tool_result is None
    assert request.store and not request.stream


def test_input_items_give_the_query_system_turn_and_tool_result() -> None:
    request = parse_responses_request(
        {
            "model": "gpt-5",
            "instructions": "You help.",
            "input": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "first"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "ok", "annotations": []}],
                },
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "second"},
                        {"type": "input_image", "image_url": "https://x/y.png"},
                    ],
                },
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "a", "output": "one"},
                {
                    "type": "function_call_output",
                    "call_id": "b",
                    "output": [{"type": "input_text", "text": "two"}],
                },
                {"type": "web_search_call", "id": "ws_1", "status": "completed"},
            ],
            "tools": [
                {"type": "function", "name": "f", "parameters": {}},
                {"type": "web_search"},
                {"type": "custom", "name": "g"},
            ],
            "metadata": {"team": "qa"},
        }
    )
    conversation = request.conversation()
    assert conversation.query == "second"
    assert conversation.system == "You help.\nBe brief."
    assert conversation.turn == 2
    assert conversation.tool_result == "one\ntwo"
    assert conversation.context == {
        "team": "qa",
        "system": "You help.\nBe brief.",
        "model": "gpt-5",
        "tools": ["f", "g"],
    }


def test_a_follow_up_continues_the_stored_conversation() -> None:
    history = [Item("user", "what is the weather?"), Item("call", "lookup")]
    request = parse_responses_request(
        {
            "model": "gpt-5",
            "previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "c", "output": "sunny"}],
        }
    )
    conversation = request.conversation(history)
    assert (conversation.query, conversation.turn) == ("what is the weather?", 1)
    assert conversation.tool_result == "sunny"
    assert request.previous_response_id == "resp_1"


def test_a_message_after_the_tool_results_ends_them() -> None:
    request = parse_responses_request(
        {
            "model": "m",
            "input": [
                {"type": "function_call_output", "call_id": "a", "output": "old"},
                {"role": "user", "content": "new question"},
            ],
        }
    )
    assert request.conversation().tool_result is None


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": "hi"}, "model", "field required"),
        ({"model": 3}, "model", "must be a string, not a number"),
        ({"model": "m", "input": 5}, "input", "must be a string or an array of items"),
        ({"model": "m", "input": ["hi"]}, "input[0]", "must be an object, not a string"),
        ({"model": "m", "input": [{"content": "x"}]}, "input[0].role", "field required"),
        ({"model": "m", "input": [{"role": "boss", "content": "x"}]}, "input[0].role", "one of"),
        ({"model": "m", "input": [{"role": "user"}]}, "input[0].content", "field required"),
        (
            {"model": "m", "input": [{"role": "user", "content": 5}]},
            "input[0].content",
            "must be a string or an array of content parts, not a number",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
            "field required",
        ),
        ({"model": "m", "input": [{"type": 7}]}, "input[0].type", "must be a string"),
        (
            {"model": "m", "input": [{"type": "function_call_output", "output": "x"}]},
            "input[0].call_id",
            "field required",
        ),
        (
            {"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]},
            "input[0].output",
            "field required",
        ),
        (
            {"model": "m", "input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]},
            "input[0].name",
            "field required",
        ),
        ({"model": "m", "instructions": ["x"]}, "instructions", "must be a string"),
        ({"model": "m", "stream": "yes"}, "stream", "must be a boolean, not a string"),
        ({"model": "m", "store": 1}, "store", "must be a boolean"),
        ({"model": "m", "previous_response_id": 5}, "previous_response_id", "must be a string"),
        ({"model": "m", "tools": [{"name": "f"}]}, "tools[0].type", "field required"),
        ({"model": "m", "tools": [{"type": "function"}]}, "tools[0].name", "field required"),
        ({"model": "m", "metadata": ["a"]}, "metadata", "must be an object, not an array"),
        ({"model": "m", "temperature": "hot"}, "temperature", "must be a number, not a string"),
        ({"model": "m", "max_output_tokens": 1.5}, "max_output_tokens", "an integer"),
        ({"model": "m", "parallel_tool_calls": "no"}, "parallel_tool_calls", "boolean"),
        ({"model": "m", "conversation": "conv_1"}, "conversation", "previous_response_id"),
    ],
)
def test_the_parser_names_the_field_that_is_wrong(body: Any, param: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        parse_responses_request(body)
    assert raised.value.param == param
    assert words in raised.value.message and raised.value.message.startswith(param)


def test_the_dialect_modules_import_nothing_from_django() -> None:
    probe = (
        "import sys, staticagents.dialects.responses.wire;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'channels')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


# -- the renderer ------------------------------------------------------------------------

ENVELOPE = Envelope("resp_static7", 1700000000, "gpt-5")
REQUEST = parse_responses_request({"model": "gpt-5", "input": "hi"})


def test_a_response_holds_reasoning_then_the_message_then_the_function_calls() -> None:
    body = response_body(
        reply(
            content="Checking.",
            thinking="Hmm.",
            tool_calls=(ToolCall("call_9", "lookup", {"topic": "rain"}),),
            finish_reason="tool_calls",
        ),
        ENVELOPE,
        REQUEST,
    )
    assert [item["type"] for item in body["output"]] == ["reasoning", "message", "function_call"]
    reasoning, message, call = body["output"]
    assert reasoning["id"] == "rs_static7"
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Hmm."}]
    assert message["id"] == "msg_static7"
    assert message["content"][0]["text"] == "Checking."
    assert call == {
        "id": "fc_static7_0",
        "type": "function_call",
        "status": "completed",
        "call_id": "call_9",
        "name": "lookup",
        "arguments": '{"topic": "rain"}',
    }
    assert body["status"] == "completed" and body["completed_at"] == ENVELOPE.created
    assert (body["tool_choice"], body["parallel_tool_calls"], body["store"]) == ("auto", True, True)


def test_a_stream_numbers_its_events_and_keeps_the_script_timing() -> None:
    events = list(
        stream_events(
            reply(
                content="a b",
                tool_calls=(ToolCall("call_9", "lookup", {"topic": "rain"}),),
                finish_reason="tool_calls",
                timing=Timing(first_delay_ms=100, word_delay_ms=10),
            ),
            ENVELOPE,
            REQUEST,
        )
    )

    payloads = [event.payload for event in events]
    assert [p["sequence_number"] for p in payloads] == list(range(len(events)))
    assert [event.event for event in events] == [p["type"] for p in payloads]
    timeline = [(p["type"], round(e.at, 3)) for p, e in zip(payloads, events, strict=True)]
    assert timeline == [
        ("response.created", 0.0),
        ("response.in_progress", 0.0),
        ("response.output_item.added", 0.1),
        ("response.content_part.added", 0.1),
        ("response.output_text.delta", 0.1),
        ("response.output_text.delta", 0.11),
        ("response.output_text.done", 0.11),
        ("response.content_part.done", 0.11),
        ("response.output_item.done", 0.11),
        ("response.output_item.added", 0.12),
        ("response.function_call_arguments.delta", 0.13),
        ("response.function_call_arguments.delta", 0.14),
        ("response.function_call_arguments.done", 0.14),
        ("response.output_item.done", 0.14),
        ("response.completed", 0.14),
    ]
    added_call = payloads[9]
    assert added_call["output_index"] == 1
    assert added_call["item"]["arguments"] == "" and added_call["item"]["status"] == "in_progress"
    assert payloads[-1]["response"]["output"][1]["call_id"] == "call_9"


# -- over HTTP ----------------------------------------------------------------------------


def test_a_stream_is_named_events_ending_with_response_completed(http: httpx.Client) -> None:
    response = http.post("/v1/responses", json=ask("#tool now", stream=True))
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response)
    types = [kind for kind, _ in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    calls = [p["item"] for kind, p in events if kind == "response.output_item.done"]
    assert [(c["type"], c.get("name")) for c in calls] == [
        ("message", None),
        ("function_call", "lookup"),
        ("function_call", "clock"),
    ]
    assert [p["sequence_number"] for _, p in events] == list(range(len(events)))


def test_the_agents_prefix_and_a_trailing_slash_both_route(
    http: httpx.Client,
) -> None:
    response = http.post("/agents/coder/v1/responses/", json=ask("hi"))
    assert response.json()["output"][0]["content"][0]["text"] == "hi"
    stored = http.get(f"/agents/coder/v1/responses/{response.json()['id']}/")
    assert stored.json() == response.json()
    assert JournalEntry.objects.get().agent_type == "coder"


def test_a_content_filter_stream_ends_with_response_incomplete(http: httpx.Client) -> None:
    events = sse_events(http.post("/v1/responses", json=ask("#filtered", stream=True)))
    kind, last = events[-1]
    assert kind == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "content_filter"}


def test_the_maximum_duration_cuts_a_stream_off_with_response_failed(
    http: httpx.Client, settings: Any
) -> None:
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.12
    events = sse_events(http.post("/v1/responses", json=ask("#slow", stream=True)))
    deltas = [p["delta"] for kind, p in events if kind == "response.output_text.delta"]
    assert deltas == ["w1 ", "w2 ", "w3 "]  # due at 0, 50 and 100 ms
    kind, failed = events[-1]
    assert kind == "response.failed"
    assert failed["sequence_number"] == len(events) - 1
    assert failed["response"]["status"] == "failed"
    assert "maximum stream duration of 0.12 s" in failed["response"]["error"]["message"]
    assert JournalEntry.objects.get().outcome == "cut_off"
    stored = http.get(f"/v1/responses/{failed['response']['id']}").json()
    assert stored["status"] == "failed"


def test_store_false_keeps_nothing(http: httpx.Client) -> None:
    response = http.post("/v1/responses", json=ask("hi", store=False)).json()
    assert response["store"] is False
    assert not StoredResponse.objects.exists()
    missing = http.get(f"/v1/responses/{response['id']}")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "invalid_request_error"


def test_stored_responses_are_pruned_to_the_journals_cap(http: httpx.Client, settings: Any) -> None:
    settings.STATIC_AGENTS_JOURNAL_MAX = 3
    ids = [http.post("/v1/responses", json=ask(f"q{i}")).json()["id"] for i in range(6)]
    kept = list(StoredResponse.objects.values_list("response_id", flat=True))
    assert kept == ids[-3:]


def test_get_and_delete_of_an_unknown_response_are_404s_in_openais_shape(
    http: httpx.Client,
) -> None:
    for method in ("GET", "DELETE"):
        response = http.request(method, "/v1/responses/resp_nobody")
        assert response.status_code == 404
        assert response.json() == {
            "error": {
                "message": "Response with id 'resp_nobody' not found.",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }


def test_delete_answers_the_deleted_object(http: httpx.Client) -> None:
    response_id = http.post("/v1/responses", json=ask("hi")).json()["id"]
    deleted = http.delete(f"/v1/responses/{response_id}")
    assert deleted.json() == {"id": response_id, "object": "response.deleted", "deleted": True}


def test_wrong_methods_get_405s(http: httpx.Client) -> None:
    assert http.get("/v1/responses").status_code == 405
    assert http.post("/v1/responses/resp_1", json={}).status_code == 405
    assert "GET or DELETE" in http.put("/v1/responses/resp_1").json()["error"]["message"]
