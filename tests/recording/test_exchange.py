"""The rule a recorded exchange becomes (pure: no database)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import compile_ruleset, match_inquiry
from staticagents.core.replies import Timing, build_reply
from staticagents.core.timing import Slots, plan_stream
from staticagents.document.schema import RuleSpec, validate_part
from staticagents.recording.exchange import Exchange, RecordedReply, recorded_rule, rule_name

AT = datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)
QUESTION = Inquiry(query="What is 2+2? (exactly)", agent_type="router", model="gpt-4o")


def exchange(reply: RecordedReply, inquiry: Inquiry = QUESTION) -> Exchange:
    return Exchange(upstream="real-openai", inquiry=inquiry, reply=reply)


def test_a_plain_answer_becomes_a_rule_on_the_exact_question_at_its_turn() -> None:
    rule = recorded_rule(exchange(RecordedReply("Four.", finish_reason="stop")), at=AT)

    assert re.fullmatch(r"real-openai-[0-9a-f]{12}", rule["name"])
    assert rule["match"] == {
        "agent_type": "router",
        "query": r"^What is 2\+2\? \(exactly\)$",
        "turn": 1,
        "tool_result": False,
    }
    assert rule["response"] == {"content": "Four.", "finish_reason": "stop"}
    assert rule["recorded"] == {
        "upstream": "real-openai",
        "at": "2026-03-01T09:30:15Z",
        "reviewed": False,
    }
    assert validate_part(RuleSpec, rule) == rule


def test_the_name_is_stable_and_differs_by_turn_tool_result_and_matched_model() -> None:
    reply = RecordedReply("x")
    base = rule_name(exchange(reply), match_model=False)
    assert rule_name(exchange(RecordedReply("another reply")), match_model=False) == base
    other_model = Inquiry(query=QUESTION.query, model="gpt-5")
    assert rule_name(exchange(reply, other_model), match_model=False) == base
    assert rule_name(exchange(reply, other_model), match_model=True) != rule_name(
        exchange(reply), match_model=True
    )
    later = Inquiry(query=QUESTION.query, turn=2)
    with_result = Inquiry(query=QUESTION.query, tool_result="42")
    names = {base, rule_name(exchange(reply, later), match_model=False)}
    names.add(rule_name(exchange(reply, with_result), match_model=False))
    assert len(names) == 3


def test_matching_the_model_anchors_it_too() -> None:
    rule = recorded_rule(exchange(RecordedReply("Four.")), at=AT, match_model=True)
    assert rule["match"]["model"] == "^gpt\\-4o$"


def test_a_tool_call_keeps_its_arguments_and_the_upstream_words_are_the_fixtures() -> None:
    reply = RecordedReply(
        "",
        tool_calls=({"name": "lookup", "arguments": {"topic": "weather", "days": [1, 2]}},),
        finish_reason="tool_use",
        usage={"input_tokens": 12, "output_tokens": 7},
        thinking="Need the weather.",
    )
    response = recorded_rule(exchange(reply), at=AT)["response"]
    assert response == {
        "thinking": "Need the weather.",
        "tool_calls": [{"name": "lookup", "arguments": {"topic": "weather", "days": [1, 2]}}],
        "finish_reason": "tool_calls",
        "usage": {"input_tokens": 12, "output_tokens": 7},
    }


def test_credentials_and_configured_patterns_are_masked_everywhere_in_the_reply() -> None:
    key = "sk-proj-" + "A1b2C3d4" * 4
    reply = RecordedReply(
        f"Use {key} for ticket-4711.",
        thinking=f"The key is {key}.",
        tool_calls=({"name": "store", "arguments": {"auth": key, "notes": ["ticket-12"]}},),
    )
    response = recorded_rule(exchange(reply), at=AT, patterns=[re.compile(r"ticket-[0-9]+")])[
        "response"
    ]
    assert response["content"] == "Use [redacted] for [redacted]."
    assert response["thinking"] == "The key is [redacted]."
    assert response["tool_calls"][0]["arguments"] == {
        "auth": "[redacted]",
        "notes": ["[redacted]"],
    }
    assert key not in str(response)


def test_a_credential_in_the_question_is_not_kept_in_its_regex() -> None:
    key = "sk-ant-" + "x" * 30
    inquiry = Inquiry(query=f"Is {key} valid?")
    rule = recorded_rule(exchange(RecordedReply("no"), inquiry), at=AT)
    assert key not in rule["match"]["query"]
    compiled = compile_ruleset(stamp="t", rules=[rule])
    assert match_inquiry(compiled, inquiry) is not None


def test_the_stream_keeps_its_chunking_and_with_keep_timing_its_schedule() -> None:
    chunks = ((0.25, "Hel"), (0.35, "lo "), (0.45, "the"), (0.55, "re"))
    reply = RecordedReply("Hello there", chunks=chunks)

    untimed = recorded_rule(exchange(reply), at=AT)["response"]
    assert untimed["stream"] == {"chunk": 3}
    timed = recorded_rule(exchange(reply), at=AT, keep_timing=True)["response"]
    assert timed["stream"] == {"chunk": 3, "first_delay_ms": 250, "word_delay_ms": 100}

    compiled = compile_ruleset(stamp="t", rules=[{"name": "r", "response": timed}])
    found = match_inquiry(compiled, QUESTION)
    assert found is not None
    replayed = build_reply(compiled, QUESTION, found)
    assert replayed.timing == Timing(250, 100, 3)
    pieces = [(round(p.at, 3), p.text) for p in plan_stream(replayed, Slots(replayed.timing))]
    assert pieces == list(chunks)


def test_word_chunks_need_no_chunk_setting_and_unknown_cuts_fall_back_to_words() -> None:
    words = RecordedReply("one two three", chunks=((0.1, "one "), (0.2, "two "), (0.3, "three")))
    assert "stream" not in recorded_rule(exchange(words), at=AT)["response"]
    odd = RecordedReply("one two", chunks=((0.1, "o"), (0.2, "ne two")))
    assert "stream" not in recorded_rule(exchange(odd), at=AT)["response"]


def test_thinking_streamed_before_the_content_is_cut_the_same_way() -> None:
    chunks = tuple((i / 10, c) for i, c in enumerate("hmok"))
    reply = RecordedReply("ok", thinking="hm", chunks=chunks)
    assert recorded_rule(exchange(reply), at=AT)["response"]["stream"] == {"chunk": "char"}


def test_untimed_thinking_goes_before_the_timed_content_on_the_same_schedule() -> None:
    chunks = ((0.5, "Four "), (0.6, "it "), (0.7, "is."))
    reply = RecordedReply("Four it is.", thinking="Two plus two.", chunks=chunks)
    stream = recorded_rule(exchange(reply), at=AT, keep_timing=True)["response"]["stream"]
    assert stream == {"first_delay_ms": 200, "word_delay_ms": 100}  # 3 thinking chunks first

    compiled = compile_ruleset(
        stamp="t",
        rules=[
            {
                "name": "r",
                "response": {
                    "thinking": "Two plus two.",
                    "content": "Four it is.",
                    "stream": stream,
                },
            }
        ],
    )
    found = match_inquiry(compiled, QUESTION)
    assert found is not None
    replayed = build_reply(compiled, QUESTION, found)
    texts = [
        (round(p.at, 3), p.kind, p.text) for p in plan_stream(replayed, Slots(replayed.timing))
    ]
    assert [(at, text) for at, kind, text in texts if kind == "text"] == list(chunks)
