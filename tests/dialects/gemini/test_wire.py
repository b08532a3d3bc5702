"""The Gemini dialect's pure parser and renderer (no server, no database)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from staticagents.core.replies import Reply, ReplyError, Timing, ToolCall, Usage
from staticagents.dialects.gemini import wire as gemini
from staticagents.dialects.llm.wire import Envelope, InvalidRequest

ENVELOPE = Envelope(id="static7", created=0, model="gemini-2.5-flash")


def user(*parts: Any, role: str = "user") -> dict[str, Any]:
    return {"role": role, "parts": [{"text": p} if isinstance(p, str) else p for p in parts]}


def reply(**fields: Any) -> Reply:
    defaults: dict[str, Any] = {"content": "", "confidence": "medium", "agent_type": "router"}
    return Reply(**{**defaults, "usage": Usage(3, 2), **fields})


# -- requests -----------------------------------------------------------------------------


def test_the_query_is_the_last_user_text_and_the_turn_counts_user_texts() -> None:
    payload = {
        "contents": [
            user("first question"),
            user("an answer", role="model"),
            user({"text": "thinking aloud", "thought": True}, "second question"),
        ],
        "systemInstruction": {"parts": [{"text": "Be terse."}, {"text": "Be kind."}]},
    }
    conversation = gemini.parse_generate_request(payload, "gemini-2.5-flash").conversation
    assert conversation.query == "second question"  # the thought part is left out
    assert conversation.turn == 2
    assert conversation.system == "Be terse.\nBe kind."
    assert conversation.model == "gemini-2.5-flash"
    assert conversation.tool_result is None
    assert conversation.context == {
        "system": "Be terse.\nBe kind.",
        "model": "gemini-2.5-flash",
        "tools": [],
    }


def test_function_responses_that_end_the_contents_are_the_tool_result() -> None:
    call = {"functionCall": {"id": "call_1", "name": "lookup", "args": {"city": "Paris"}}}
    payload = {
        "contents": [
            user("weather?"),
            user(call, role="model"),
            user(
                {
                    "functionResponse": {
                        "id": "call_1",
                        "name": "lookup",
                        "response": {"result": "sunny"},
                    }
                },
                {"function_response": {"name": "clock", "response": {"hour": 12}}},
            ),
        ],
        "tools": [
            {"functionDeclarations": [{"name": "lookup"}, {"name": "clock"}]},
            {"googleSearch": {}},
        ],
    }
    conversation = gemini.parse_generate_request(payload, "m").conversation
    assert conversation.query == "weather?"
    assert conversation.turn == 1
    assert conversation.tool_result == 'sunny\n{"hour": 12}'
    assert conversation.context["tools"] == ["lookup", "clock"]


def test_snake_case_fields_are_read_as_the_api_reads_them() -> None:
    payload = {
        "contents": [user("hi")],
        "system_instruction": {"parts": [{"text": "sys"}]},
        "tools": [{"function_declarations": [{"name": "f"}]}],
        "generation_config": {"thinking_config": {"include_thoughts": True}},
    }
    generation = gemini.parse_generate_request(payload, "m")
    assert generation.conversation.system == "sys"
    assert generation.conversation.context["tools"] == ["f"]
    assert generation.include_thoughts is True


@pytest.mark.parametrize(
    ("config", "included"),
    [
        (None, False),
        ({}, False),
        ({"thinkingConfig": {"thinkingBudget": 1024}}, False),
        ({"thinkingConfig": {"includeThoughts": False}}, False),
        ({"thinkingConfig": {"includeThoughts": True}}, True),
    ],
)
def test_thoughts_are_included_only_when_the_thinking_config_asks(
    config: dict[str, Any] | None, included: bool
) -> None:
    payload: dict[str, Any] = {"contents": [user("hi")]}
    if config is not None:
        payload["generationConfig"] = config
    assert gemini.parse_generate_request(payload, "m").include_thoughts is included


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({}, "contents: field required"),
        ({"contents": []}, "contents: must contain at least one content"),
        ({"contents": "hi"}, "contents: must be an array, not a string"),
        ({"contents": ["hi"]}, "contents[0]: must be an object, not a string"),
        (
            {"contents": [{"role": "boss", "parts": [{"text": "x"}]}]},
            "contents[0].role: must be one of",
        ),
        ({"contents": [{"role": "user"}]}, "contents[0].parts: field required"),
        ({"contents": [{"parts": []}]}, "contents[0].parts: must not be empty"),
        ({"contents": [{"parts": [{"text": 5}]}]}, "contents[0].parts[0].text: must be a string"),
        (
            {"contents": [{"parts": [{"functionCall": {"args": {}}}]}]},
            "contents[0].parts[0].functionCall.name: field required",
        ),
        (
            {"contents": [{"parts": [{"functionResponse": {"name": "f", "response": "x"}}]}]},
            "contents[0].parts[0].functionResponse.response: must be an object",
        ),
        (
            {"contents": [user("x")], "systemInstruction": "be nice"},
            "systemInstruction: must be an object, not a string",
        ),
        (
            {"contents": [user("x")], "tools": [{"functionDeclarations": [{"description": "d"}]}]},
            "tools[0].functionDeclarations[0].name: field required",
        ),
        (
            {
                "contents": [user("x")],
                "generationConfig": {"thinkingConfig": {"includeThoughts": "yes"}},
            },
            "generationConfig.thinkingConfig.includeThoughts: must be a boolean",
        ),
        ({"contents": [user("x")], "safetySettings": {}}, "safetySettings: must be an array"),
        ({"contents": [user("x")], "toolConfig": []}, "toolConfig: must be an object"),
    ],
)
def test_a_bad_request_names_the_field_and_what_is_wrong(
    payload: dict[str, Any], where: str
) -> None:
    with pytest.raises(InvalidRequest) as raised:
        gemini.parse_generate_request(payload, "m")
    assert where in raised.value.message


def test_count_tokens_reads_the_contents_or_a_wrapped_generate_request() -> None:
    contents = [user("one two three"), user("four", role="model")]
    assert gemini.prompt_tokens({"contents": contents}) == 4
    wrapped = {
        "generateContentRequest": {
            "model": "models/m",
            "contents": contents,
            "systemInstruction": {"parts": [{"text": "five six"}]},
        }
    }
    assert gemini.prompt_tokens(wrapped) == 6
    with pytest.raises(InvalidRequest, match=r"generateContentRequest\.contents: field required"):
        gemini.prompt_tokens({"generateContentRequest": {}})


def test_a_google_client_is_known_by_its_key_or_library_header_or_key_parameter() -> None:
    assert gemini.is_google_client({"x-goog-api-key": "k"})
    assert gemini.is_google_client({"x-goog-api-client": "google-genai-sdk/2.34.0"})
    assert gemini.is_google_client({}, b"key=abc&pageSize=5")
    assert not gemini.is_google_client({"authorization": "Bearer k"}, b"limit=5")


# -- replies ------------------------------------------------------------------------------


def test_a_reply_becomes_one_candidate_with_usage_and_identity() -> None:
    body = gemini.response_body(reply(content="Hello there."), ENVELOPE, include_thoughts=False)
    assert body == {
        "candidates": [
            {
                "content": {"parts": [{"text": "Hello there."}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 3,
            "candidatesTokenCount": 2,
            "totalTokenCount": 5,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 3}],
        },
        "modelVersion": "gemini-2.5-flash",
        "responseId": "static7",
    }


def test_thinking_is_counted_always_and_shown_only_when_asked() -> None:
    thoughtful = reply(thinking="Let me weigh this.", content="Yes.")
    hidden = gemini.response_body(thoughtful, ENVELOPE, include_thoughts=False)
    shown = gemini.response_body(thoughtful, ENVELOPE, include_thoughts=True)
    assert hidden["candidates"][0]["content"]["parts"] == [{"text": "Yes."}]
    assert shown["candidates"][0]["content"]["parts"] == [
        {"text": "Let me weigh this.", "thought": True},
        {"text": "Yes."},
    ]
    for body in (hidden, shown):
        assert body["usageMetadata"]["thoughtsTokenCount"] == 4
        assert body["usageMetadata"]["totalTokenCount"] == 3 + 2 + 4


def test_tool_calls_become_function_call_parts_after_the_text() -> None:
    calls = (ToolCall("call_1", "lookup", {"city": "Paris"}), ToolCall("call_2", "clock", {}))
    body = gemini.response_body(
        reply(content="Checking.", tool_calls=calls, finish_reason="tool_calls"),
        ENVELOPE,
        include_thoughts=False,
    )
    assert body["candidates"][0]["content"]["parts"] == [
        {"text": "Checking."},
        {"functionCall": {"id": "call_1", "name": "lookup", "args": {"city": "Paris"}}},
        {"functionCall": {"id": "call_2", "name": "clock", "args": {}}},
    ]
    assert body["candidates"][0]["finishReason"] == "STOP"


@pytest.mark.parametrize(
    ("finish", "word"),
    [
        ("stop", "STOP"),
        ("length", "MAX_TOKENS"),
        ("tool_calls", "STOP"),
        ("content_filter", "SAFETY"),
    ],
)
def test_finish_reasons_are_googles_words(finish: str, word: str) -> None:
    body = gemini.response_body(
        reply(content="x", finish_reason=finish), ENVELOPE, include_thoughts=False
    )
    assert body["candidates"][0]["finishReason"] == word


def test_a_blocked_empty_answer_has_no_content_and_an_empty_one_an_empty_text() -> None:
    blocked = gemini.response_body(
        reply(finish_reason="content_filter"), ENVELOPE, include_thoughts=False
    )
    assert "content" not in blocked["candidates"][0]
    empty = gemini.response_body(reply(), ENVELOPE, include_thoughts=False)
    assert empty["candidates"][0]["content"]["parts"] == [{"text": ""}]


def payloads(chunks: list[Any]) -> list[dict[str, Any]]:
    return [chunk.payload for chunk in chunks]


def test_a_stream_sends_text_chunks_on_schedule_and_finishes_on_the_last() -> None:
    timed = reply(content="one two three", timing=Timing(first_delay_ms=100, word_delay_ms=10))
    chunks = list(gemini.stream_chunks(timed, ENVELOPE, include_thoughts=False))
    assert [chunk.at for chunk in chunks] == pytest.approx([0.1, 0.11, 0.12])
    bodies = payloads(chunks)
    assert [b["candidates"][0]["content"]["parts"] for b in bodies] == [
        [{"text": "one "}],
        [{"text": "two "}],
        [{"text": "three"}],
    ]
    assert ["finishReason" in b["candidates"][0] for b in bodies] == [False, False, True]
    assert bodies[0]["usageMetadata"] == {
        "promptTokenCount": 3,
        "totalTokenCount": 3,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 3}],
    }
    assert bodies[-1]["usageMetadata"]["candidatesTokenCount"] == 2
    assert {b["responseId"] for b in bodies} == {"static7"}


def test_hidden_thinking_still_takes_its_time_and_shown_thinking_streams_first() -> None:
    thoughtful = reply(thinking="hmm well", content="yes", timing=Timing(word_delay_ms=10))
    hidden = list(gemini.stream_chunks(thoughtful, ENVELOPE, include_thoughts=False))
    assert [c.at for c in hidden] == pytest.approx([0.02])
    shown = payloads(gemini.stream_chunks(thoughtful, ENVELOPE, include_thoughts=True))
    assert [b["candidates"][0]["content"]["parts"][0] for b in shown] == [
        {"text": "hmm ", "thought": True},
        {"text": "well", "thought": True},
        {"text": "yes"},
    ]


def test_a_streamed_tool_call_comes_whole_in_the_last_chunk() -> None:
    calls = (ToolCall("call_1", "lookup", {"city": "Paris"}),)
    chunks = list(
        gemini.stream_chunks(
            reply(content="Let me look.", tool_calls=calls, timing=Timing(word_delay_ms=10)),
            ENVELOPE,
            include_thoughts=False,
        )
    )
    assert [c.at for c in chunks] == pytest.approx([0.0, 0.01, 0.02, 0.03])
    last = payloads(chunks)[-1]["candidates"][0]
    assert last["content"]["parts"] == [
        {"functionCall": {"id": "call_1", "name": "lookup", "args": {"city": "Paris"}}}
    ]
    assert last["finishReason"] == "STOP"


def test_an_empty_stream_still_finishes() -> None:
    [only] = payloads(gemini.stream_chunks(reply(), ENVELOPE, include_thoughts=False))
    assert only["candidates"][0]["finishReason"] == "STOP"


def test_the_json_array_form_is_one_array_sent_element_by_element() -> None:
    chunks = list(gemini.stream_chunks(reply(content="a b"), ENVELOPE, include_thoughts=False))
    array = gemini.ArrayChunks()  # as the sender calls it: once per batch of due chunks
    sent = b"".join(array([chunk]) for chunk in chunks) + gemini.ARRAY_END
    assert [p["candidates"][0]["content"]["parts"][0]["text"] for p in orjson.loads(sent)] == [
        "a ",
        "b",
    ]
    sse = gemini.sse_chunks(chunks)
    assert sse.count(b"data: ") == 2 and sse.endswith(b"\r\n\r\n")


def test_an_array_cut_short_ends_with_the_error_as_its_last_element() -> None:
    chunks = list(gemini.stream_chunks(reply(content="a b"), ENVELOPE, include_thoughts=False))
    error = orjson.dumps(gemini.cut_off_body(1.0))
    unopened = gemini.ArrayChunks()
    assert orjson.loads(unopened.ending_with(error)) == [gemini.cut_off_body(1.0)]
    opened = gemini.ArrayChunks()
    sent = opened(chunks[:1]) + opened.ending_with(error)
    assert orjson.loads(sent)[-1] == gemini.cut_off_body(1.0)


# -- errors and listings ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "word"),
    [
        (400, "INVALID_ARGUMENT"),
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
        (404, "NOT_FOUND"),
        (429, "RESOURCE_EXHAUSTED"),
        (500, "INTERNAL"),
        (503, "UNAVAILABLE"),
        (504, "DEADLINE_EXCEEDED"),
        (418, "FAILED_PRECONDITION"),
        (599, "INTERNAL"),
    ],
)
def test_errors_carry_the_canonical_status_of_their_http_code(status: int, word: str) -> None:
    assert gemini.error_body(status, "no") == {
        "error": {"code": status, "message": "no", "status": word}
    }


def test_a_scripted_error_keeps_a_canonical_type_and_puts_retry_after_in_retry_info() -> None:
    quota = ReplyError(429, "rate_limit", "slow down")
    body = gemini.scripted_error_body(quota, 7)["error"]
    assert (body["code"], body["status"], body["message"]) == (
        429,
        "RESOURCE_EXHAUSTED",
        "slow down",
    )
    assert body["details"] == [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}
    ]
    own = gemini.scripted_error_body(ReplyError(400, "FAILED_PRECONDITION", "no"), None)["error"]
    assert own["status"] == "FAILED_PRECONDITION" and "details" not in own


def test_models_list_the_default_and_one_per_agent_type() -> None:
    body = gemini.models_body(["coder", "static-agents"])
    assert [model["name"] for model in body["models"]] == ["models/static-agents", "models/coder"]
    assert "generateContent" in body["models"][0]["supportedGenerationMethods"]
