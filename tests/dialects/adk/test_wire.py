"""The ADK dialect alone: requests read as ADK reads them, events written as ADK writes them."""

from __future__ import annotations

from typing import Any

import pytest

from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import compile_ruleset, match_inquiry
from staticagents.core.replies import Reply, build_reply
from staticagents.core.timing import TimedFrame
from staticagents.dialects.adk import wire as adk
from staticagents.serving.route import sse_frames

IDS = adk.EventIds("e-1", "ev-1", 1700000000.5, "router")


def reply_for(response: dict[str, Any], query: str = "hi there") -> Reply:
    rules = compile_ruleset(stamp="t", rules=[{"name": "only", "response": response}])
    inquiry = Inquiry(query, dialect="adk")
    return build_reply(rules, inquiry, match_inquiry(rules, inquiry))


def message(*parts: dict[str, Any]) -> adk.ContentIn:
    return adk.ContentIn.model_validate({"role": "user", "parts": list(parts)})


# -- requests -------------------------------------------------------------------------------


def test_camel_case_and_snake_case_requests_read_the_same() -> None:
    camel = adk.parse_body(
        b'{"appName": "a", "userId": "u", "sessionId": "s", "stateDelta": {"k": 1},'
        b' "newMessage": {"parts": [{"functionResponse": {"name": "f", "response": {}}}]}}',
        adk.RunRequest,
    )
    snake = adk.parse_body(
        b'{"app_name": "a", "user_id": "u", "session_id": "s", "state_delta": {"k": 1},'
        b' "new_message": {"parts": [{"function_response": {"name": "f", "response": {}}}]}}',
        adk.RunRequest,
    )
    assert camel == snake
    assert camel.new_message is not None
    assert camel.new_message.parts is not None
    assert camel.new_message.parts[0].function_response is not None


def test_unknown_keys_are_ignored_as_adk_ignores_them() -> None:
    request = adk.parse_body(b'{"userId": "u", "sessionId": "s", "future": 1}', adk.RunRequest)
    assert request.user_id == "u"


def test_a_missing_field_is_named_by_its_wire_name() -> None:
    with pytest.raises(adk.InvalidRequest) as caught:
        adk.parse_body(b'{"sessionId": "s"}', adk.RunRequest)
    assert caught.value.detail == [
        {"type": "missing", "loc": ["body", "userId"], "msg": "Field required"}
    ]


def test_invalid_json_names_the_position() -> None:
    with pytest.raises(adk.InvalidRequest) as caught:
        adk.parse_body(b'{"userId": }', adk.RunRequest)
    [problem] = caught.value.detail
    assert problem["type"] == "json_invalid"
    assert problem["loc"] == ["body", 11]


def test_an_optional_body_may_be_absent_or_null() -> None:
    assert adk.parse_optional_body(b"", adk.CreateSessionRequest) is None
    assert adk.parse_optional_body(b"null", adk.CreateSessionRequest) is None
    with pytest.raises(adk.InvalidRequest):
        adk.parse_body(b"", adk.UpdateSessionRequest)


def test_the_older_create_route_body_must_be_an_object() -> None:
    assert adk.parse_state(b'{"a": 1}') == {"a": 1}
    assert adk.parse_state(b"") is None
    with pytest.raises(adk.InvalidRequest):
        adk.parse_state(b"[1]")


# -- what a message asks ------------------------------------------------------------------


def test_a_message_needs_text_or_a_function_response() -> None:
    with pytest.raises(adk.InvalidRequest) as caught:
        adk.read_message(message({"thought": True, "text": "hmm"}))
    assert caught.value.detail[0]["loc"] == ["body", "newMessage", "parts"]
    with pytest.raises(adk.InvalidRequest):
        adk.read_message(None)


def test_text_parts_join_and_thought_parts_are_left_out() -> None:
    sent = message({"text": "one"}, {"text": "aside", "thought": True}, {"text": "two"})
    assert adk.read_message(sent) == adk.Message("one\ntwo", None, sent)


@pytest.mark.parametrize(
    ("response", "text"),
    [
        ({"result": "sunny"}, "sunny"),
        ({"output": "42"}, "42"),
        ({"result": {"temp": 20}}, '{"result": {"temp": 20}}'),
        ({"a": 1, "b": "x"}, '{"a": 1, "b": "x"}'),
        ({}, ""),
        (None, ""),
    ],
)
def test_a_function_response_becomes_the_tool_result_text(
    response: dict[str, Any] | None, text: str
) -> None:
    assert adk.tool_result_text(response) == text


def user(text: str) -> dict[str, Any]:
    return {"author": "user", "content": {"role": "user", "parts": [{"text": text}]}}


HISTORY = [
    user("first"),
    {"author": "router", "content": {"role": "model", "parts": [{"text": "reply"}]}},
    user("second"),
    {"author": "user", "content": {"parts": [{"functionResponse": {"name": "f"}}]}},
    {"author": "user", "actions": {"stateDelta": {"x": 1}}},
]


def test_turn_counts_user_text_messages_including_this_one() -> None:
    turn = adk.read_turn(adk.Message("third", None, message()), adk.UserTurns().after(HISTORY))
    assert turn == adk.Turn("third", 3, None)


def test_user_turns_add_up_event_by_event_as_over_the_whole_history() -> None:
    one_by_one = adk.UserTurns()
    for event in HISTORY:
        one_by_one = one_by_one.after([event])
    assert one_by_one == adk.UserTurns().after(HISTORY) == adk.UserTurns(2, "second")


def test_a_runs_message_counts_as_its_user_event_would() -> None:
    event = user("one\n")  # as adk.user_event stores the message
    event["content"]["parts"].append({"text": "two", "thought": False})
    event["content"]["parts"].append({"text": "hidden", "thought": True})
    content = adk.ContentIn.model_validate(event["content"])
    text = adk.read_message(content).text
    assert adk.UserTurns(1, "a").with_message(text) == adk.UserTurns(1, "a").after([event])
    assert adk.UserTurns(1, "a").with_message(None) == adk.UserTurns(1, "a")


def test_a_tool_result_alone_continues_the_last_user_text() -> None:
    turn = adk.read_turn(adk.Message(None, "sunny", message()), adk.UserTurns().after(HISTORY))
    assert turn == adk.Turn("second", 2, "sunny")
    assert adk.read_turn(adk.Message(None, "x", message()), adk.UserTurns()) == adk.Turn("", 1, "x")


def test_the_context_is_the_state_and_the_custom_metadata() -> None:
    assert adk.inquiry_context({"plan": "gold"}, {"trace": "t1"}) == {"plan": "gold", "trace": "t1"}
    assert adk.inquiry_context({}, None) is None


# -- events ---------------------------------------------------------------------------------


def test_the_final_event_has_adk_shape() -> None:
    event = adk.final_event(reply_for({"content": "Hello you", "metadata": {"k": "v"}}), IDS)
    assert event == {
        "modelVersion": "static-agents",
        "content": {"parts": [{"text": "Hello you"}], "role": "model"},
        "turnComplete": True,
        "finishReason": "STOP",
        "customMetadata": {"k": "v", "static_backend": True},
        "usageMetadata": {"candidatesTokenCount": 2, "promptTokenCount": 2, "totalTokenCount": 4},
        "invocationId": "e-1",
        "author": "router",
        "actions": {
            "stateDelta": {},
            "artifactDelta": {},
            "requestedAuthConfigs": {},
            "requestedToolConfirmations": {},
        },
        "id": "ev-1",
        "timestamp": 1700000000.5,
    }


def test_thought_parts_come_first_and_function_calls_last() -> None:
    reply = reply_for(
        {
            "thinking": "ponder",
            "content": "calling",
            "tool_calls": [{"name": "lookup", "arguments": {"q": 1}, "id": "call-9"}],
        }
    )
    event = adk.final_event(reply, IDS)
    assert event["content"]["parts"] == [
        {"text": "ponder", "thought": True},
        {"text": "calling"},
        {"functionCall": {"id": "call-9", "args": {"q": 1}, "name": "lookup"}},
    ]
    assert event["longRunningToolIds"] == ["call-9"]
    assert event["usageMetadata"]["thoughtsTokenCount"] == 1


@pytest.mark.parametrize(
    ("finish", "word"),
    [
        ("stop", "STOP"),
        ("length", "MAX_TOKENS"),
        ("tool_calls", "STOP"),
        ("content_filter", "SAFETY"),
    ],
)
def test_finish_reasons_map_to_gemini_words(finish: str, word: str) -> None:
    event = adk.final_event(reply_for({"content": "x", "finish_reason": finish}), IDS)
    assert event["finishReason"] == word


def test_a_scripted_error_is_an_error_code_event() -> None:
    reply = reply_for({"error": {"status": 429, "type": "rate_limited", "message": "slow down"}})
    event = adk.final_event(reply, IDS)
    assert event["errorCode"] == "rate_limited"
    assert event["errorMessage"] == "slow down"
    assert event["customMetadata"]["error_status"] == 429
    assert "content" not in event and "finishReason" not in event
    assert list(adk.partial_events(reply, IDS)) == []


def test_partial_events_carry_the_deltas_at_their_scripted_offsets() -> None:
    reply = reply_for(
        {"thinking": "a b", "content": "c d", "stream": {"first_delay_ms": 10, "word_delay_ms": 5}}
    )
    partials = list(adk.partial_events(reply, IDS))
    assert [frame.at for frame in partials] == pytest.approx([0.010, 0.015, 0.020, 0.025])
    assert [frame.payload["content"]["parts"] for frame in partials] == [
        [{"text": "a ", "thought": True}],
        [{"text": "b", "thought": True}],
        [{"text": "c "}],
        [{"text": "d"}],
    ]
    assert all(
        frame.payload["partial"] is True and frame.payload["id"] == "ev-1" for frame in partials
    )


def test_the_user_event_keeps_the_message_and_the_state_delta() -> None:
    ids = adk.EventIds("e-1", "ev-0", 1.0, "user")
    event = adk.user_event(adk.ContentIn(parts=[adk.PartIn(text="hi")]), ids, {"k": 1})
    assert event["content"] == {"parts": [{"text": "hi"}], "role": "user"}
    assert event["author"] == "user"
    assert event["actions"]["stateDelta"] == {"k": 1}


def test_a_cut_off_stream_ends_with_an_error_event() -> None:
    event = adk.cut_off_event(IDS, 120)
    assert event["errorCode"] == "STREAM_CUT_OFF"
    assert "120 s" in event["errorMessage"]


def test_run_sse_sends_the_final_event_alone_unless_streaming() -> None:
    reply = reply_for({"content": "a b", "stream": {"word_delay_ms": 5}})
    final = TimedFrame(0.0, adk.final_event(reply, IDS))
    assert list(adk.sse_events(reply, IDS, streaming=False)) == [final]
    streamed = list(adk.sse_events(reply, IDS, streaming=True))
    assert [(frame.at, "partial" in frame.payload) for frame in streamed] == [
        (0.0, True),
        (pytest.approx(0.005), True),
        (pytest.approx(0.005), False),
    ]


def test_a_streamed_tool_call_alone_still_waits_the_first_delay() -> None:
    reply = reply_for({"tool_calls": [{"name": "f"}], "stream": {"first_delay_ms": 40}})
    [frame] = adk.sse_events(reply, IDS, streaming=True)
    assert frame.at == pytest.approx(0.04)
    assert "functionCall" in frame.data["content"]["parts"][0]


@pytest.mark.parametrize(
    "response",
    [
        {"thinking": "weigh it up", "content": 'two words\n and \u00e9 "more"'},
        {"content": "a b c", "tool_calls": [{"name": "f", "arguments": {"x": 1}}]},
        {"tool_calls": [{"name": "f"}]},
        {"content": "by char", "stream": {"chunk": "char"}},
        {"error": {"status": 429, "type": "rate_limited", "message": "slow down"}},
    ],
)
@pytest.mark.parametrize("streaming", [True, False])
def test_a_stream_due_at_once_is_the_bytes_of_its_timed_frames(
    response: dict[str, Any], streaming: bool
) -> None:
    reply = reply_for(response)
    final = adk.final_event(reply, IDS)
    at_once = adk.sse_body_at_once(reply, IDS, final, streaming=streaming)
    assert at_once == sse_frames(adk.sse_events(reply, IDS, streaming=streaming))
    assert at_once.count(b"data: ") > (1 if streaming and reply.content else 0)
