"""The WebSocket dialect on its own: reading client messages, timing the events of a reply."""

from __future__ import annotations

from typing import Any

import pytest

from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import compile_ruleset, match_inquiry
from staticagents.core.replies import Reply, build_reply
from staticagents.dialects.websocket import wire as ws


def reply_for(response: dict[str, Any], query: str = "hi there") -> Reply:
    rules = compile_ruleset(stamp="t", rules=[{"name": "only", "response": response}])
    inquiry = Inquiry(query, dialect="websocket")
    return build_reply(rules, inquiry, match_inquiry(rules, inquiry))


def test_a_full_message_is_read() -> None:
    message = ws.parse_message(
        '{"query": "q", "agent_type": "custom_tool", "context": {"page": 1}, "session": "s",'
        ' "request_id": 7, "tool_result": "done"}'
    )
    assert message == ws.ChatMessage(
        query="q",
        agent_type="custom_tool",
        context={"page": 1},
        session="s",
        request_id=7,
        tool_result="done",
    )


def test_only_the_query_is_required() -> None:
    message = ws.parse_message(None, b'{"query": "q"}')
    assert (message.agent_type, message.context, message.session) == ("router", None, None)


@pytest.mark.parametrize(
    ("frame", "problem"),
    [
        ("", "message is empty"),
        ("{oops", "message is not valid JSON"),
        ('["query"]', "message must be a JSON object, not list"),
        ("{}", "query: required key is missing"),
        ('{"query": ""}', "query: String should have at least 1 character"),
        ('{"query": 5}', "query: Input should be a valid string (got int 5)"),
        ('{"query": "q", "context": "page"}', "context: Input should be a valid dictionary"),
        ('{"query": "q", "agent_type": null}', "agent_type: Input should be a valid string"),
        ('{"query": "q", "sesion": "s"}', "sesion: unknown key"),
    ],
)
def test_a_bad_message_is_refused_naming_the_problem(frame: str, problem: str) -> None:
    with pytest.raises(ws.MessageInvalid) as caught:
        ws.parse_message(frame)
    assert problem in caught.value.message


def test_a_refused_message_still_echoes_its_request_id() -> None:
    with pytest.raises(ws.MessageInvalid) as caught:
        ws.parse_message('{"request_id": "r1"}')
    assert caught.value.request_id == "r1"


def test_events_come_in_order_on_the_reply_script() -> None:
    reply = reply_for(
        {
            "thinking": "hmm",
            "content": "a b",
            "tool_calls": [{"name": "lookup", "arguments": {"q": 1}, "id": "c1"}],
            "stream": {"first_delay_ms": 10, "word_delay_ms": 5},
        }
    )
    events = list(ws.stream_events(reply, session="s", request_id="r"))
    assert [(e.at, e.payload["type"]) for e in events] == [
        (pytest.approx(0.010), "thinking"),
        (pytest.approx(0.015), "delta"),
        (pytest.approx(0.020), "delta"),
        (pytest.approx(0.020), "tool_call"),
        (pytest.approx(0.020), "result"),
        (pytest.approx(0.020), "done"),
    ]
    assert [e.payload.get("text") for e in events[:3]] == ["hmm", "a ", "b"]
    assert events[3].data == {
        "type": "tool_call",
        "id": "c1",
        "name": "lookup",
        "arguments": {"q": 1},
        "request_id": "r",
    }
    assert all(e.payload["request_id"] == "r" for e in events)


def test_the_result_carries_galaxys_agent_response() -> None:
    reply = reply_for({"content": "answer", "confidence": "high", "usage": {"output_tokens": 9}})
    result = list(ws.stream_events(reply, session="s"))[-2].data
    assert result == {
        "type": "result",
        "response": {
            "content": "answer",
            "confidence": "high",
            "agent_type": "router",
            "suggestions": [],
            "metadata": {"static_backend": True},
            "reasoning": None,
        },
        "finish_reason": "stop",
        "usage": {"input_tokens": 2, "output_tokens": 9},
        "session": "s",
    }


def test_an_empty_reply_still_ends_with_result_and_done() -> None:
    events = ws.stream_events(
        reply_for({"content": "", "stream": {"first_delay_ms": 30}}), session="s"
    )
    assert [(e.at, e.data["type"]) for e in events] == [(0.03, "result"), (0.03, "done")]


def test_a_scripted_error_is_one_error_event() -> None:
    reply = reply_for({"error": {"status": 503, "type": "overloaded", "message": "later"}})
    [event] = ws.stream_events(reply, session="s")
    assert event.at == 0
    assert event.data == {
        "type": "error",
        "error": {"status": 503, "type": "overloaded", "message": "later"},
    }


def test_a_cut_off_names_the_limit() -> None:
    event = ws.cut_off_event(2.5, "r")
    assert event["error"]["type"] == "stream_cut_off"
    assert "2.5 s" in event["error"]["message"]
    assert event["request_id"] == "r"
