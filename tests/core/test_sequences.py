"""Scripted sequences: which response a step selects (pure)."""

from __future__ import annotations

from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import compile_ruleset
from staticagents.core.replies import Step, build_reply

SCRIPT = [{"tool_calls": [{"name": "lookup"}]}, {"content": "final"}]


def rules(on_exhausted: str | None = None):  # type: ignore[no-untyped-def]
    rule = {"name": "script", "responses": SCRIPT}
    if on_exhausted:
        rule["on_exhausted"] = on_exhausted
    return compile_ruleset(stamp="t", rules=[rule])


def test_each_step_answers_with_its_response() -> None:
    ruleset = rules()
    rule = ruleset.rules[0]
    assert build_reply(ruleset, Inquiry("q"), rule, Step(0)).tool_calls[0].name == "lookup"
    assert build_reply(ruleset, Inquiry("q"), rule, Step(1)).content == "final"


def test_repeat_last_is_the_default_after_the_script() -> None:
    ruleset = rules()
    assert build_reply(ruleset, Inquiry("q"), ruleset.rules[0], Step(5)).content == "final"


def test_on_exhausted_error_fails_with_a_clear_message() -> None:
    ruleset = rules("error")
    reply = build_reply(ruleset, Inquiry("q"), ruleset.rules[0], Step(2))
    assert reply.error is not None
    assert reply.error.type == "script_exhausted"
    assert "script" in reply.error.message.lower()


def test_only_sequences_and_fail_first_rules_need_session_state() -> None:
    ruleset = compile_ruleset(
        stamp="t",
        rules=[
            {"name": "plain", "response": {"content": "x"}},
            {"name": "seq", "responses": SCRIPT},
            {"name": "flaky", "response": {"content": "x", "fail_first": 1}},
        ],
    )
    assert [r.stateful for r in ruleset.rules] == [False, True, True]
