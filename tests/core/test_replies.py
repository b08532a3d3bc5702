"""Rendering a reply: Galaxy's inheritance rules and the scripting fields."""

from __future__ import annotations

from typing import Any

from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import compile_ruleset, match_inquiry
from staticagents.core.replies import Fault, Step, Timing, build_reply, chaos_fault, count_tokens
from staticagents.core.timing import chunk_text, plan_stream


def reply_for(
    response: dict[str, Any],
    inquiry: Inquiry | None = None,
    *,
    defaults: dict[str, Any] | None = None,
    fallback: dict[str, Any] | None = None,
    step: Step | None = None,
):  # type: ignore[no-untyped-def]
    rules = compile_ruleset(
        stamp="t",
        rules=[{"name": "only", "response": response}],
        defaults=defaults,
        fallback=fallback,
    )
    inquiry = inquiry or Inquiry("hi", agent_type="router")
    return build_reply(rules, inquiry, match_inquiry(rules, inquiry), step or Step())


def test_absent_content_comes_from_the_fallback_then_empty() -> None:
    assert reply_for({}, fallback={"content": "from fallback"}).content == "from fallback"
    assert reply_for({}).content == ""


def test_empty_content_is_kept_not_inherited() -> None:
    assert reply_for({"content": ""}, fallback={"content": "fb"}).content == ""


def test_confidence_comes_from_rule_then_defaults_then_medium() -> None:
    assert reply_for({"confidence": "high"}, defaults={"confidence": "low"}).confidence == "high"
    assert reply_for({}, defaults={"confidence": "low"}).confidence == "low"
    assert reply_for({}).confidence == "medium"


def test_agent_type_comes_from_rule_then_the_request() -> None:
    assert reply_for({"agent_type": "custom_tool"}).agent_type == "custom_tool"
    assert reply_for({}, Inquiry("q", agent_type="page_assistant")).agent_type == "page_assistant"


def test_metadata_always_ends_with_static_backend_true() -> None:
    reply = reply_for({"metadata": {"tool_id": "x", "static_backend": False}})
    assert reply.metadata == {"tool_id": "x", "static_backend": True}
    assert list(reply.metadata)[-1] == "static_backend"


def test_reasoning_defaults_to_none() -> None:
    assert reply_for({}).reasoning is None
    assert reply_for({"reasoning": "because"}).reasoning == "because"


def test_fallback_answers_when_no_rule_matches() -> None:
    rules = compile_ruleset(
        stamp="t",
        rules=[{"name": "r", "match": {"query": "zzz"}, "response": {"content": "no"}}],
        fallback={
            "content": "Static backend: no matching rule.",
            "confidence": "low",
            "agent_type": "unknown",
        },
    )
    reply = build_reply(rules, Inquiry("hello"), None)
    assert (reply.content, reply.confidence, reply.agent_type, reply.rule) == (
        "Static backend: no matching rule.",
        "low",
        "unknown",
        None,
    )


def test_tool_calls_inherit_no_content_and_finish_with_tool_calls() -> None:
    reply = reply_for(
        {"tool_calls": [{"name": "lookup", "arguments": {"q": 1}}]}, fallback={"content": "fb"}
    )
    assert reply.content == ""
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls[0].name == "lookup"
    assert reply.tool_calls[0].id.startswith("call_")


def test_tool_call_ids_are_stable_across_runs() -> None:
    first = reply_for({"tool_calls": [{"name": "lookup"}]}).tool_calls[0].id
    again = reply_for({"tool_calls": [{"name": "lookup"}]}).tool_calls[0].id
    assert first == again


def test_error_reply_carries_status_and_retry_after() -> None:
    reply = reply_for(
        {"error": {"status": 429, "type": "rate_limit", "message": "slow down"}, "retry_after": 2}
    )
    assert reply.error is not None
    assert (reply.error.status, reply.error.type, reply.retry_after) == (429, "rate_limit", 2)
    assert reply.outcome == "error"


def test_template_substitutes_inquiry_fields_safely() -> None:
    reply = reply_for(
        {"content": "$query/$agent_type/$model/$turn/$session/$unknown", "template": True},
        Inquiry("hi", agent_type="router", model="m1", turn=3, session="s"),
    )
    assert reply.content == "hi/router/m1/3/s/$unknown"


def test_content_is_not_a_template_unless_asked() -> None:
    assert reply_for({"content": "$query"}).content == "$query"


def test_a_failing_fail_first_step_renders_the_scripted_or_default_error() -> None:
    reply = reply_for({"content": "ok", "fail_first": 2}, step=Step(0, failing=True))
    assert reply.error is not None and reply.error.status == 503
    assert reply.outcome == "failed_first"
    assert reply_for({"content": "ok", "fail_first": 2}).content == "ok"


def test_stream_timing_merges_rule_over_defaults() -> None:
    reply = reply_for(
        {"stream": {"word_delay_ms": 5}},
        defaults={"stream": {"first_delay_ms": 100, "word_delay_ms": 1}},
    )
    assert reply.timing == Timing(first_delay_ms=100, word_delay_ms=5, chunk="word")


def test_usage_is_counted_unless_scripted() -> None:
    assert reply_for({"content": "one two three"}).usage.output_tokens == 3
    scripted = reply_for({"content": "x", "usage": {"input_tokens": 7, "output_tokens": 9}})
    assert (scripted.usage.input_tokens, scripted.usage.output_tokens) == (7, 9)


def test_tool_calls_count_their_name_and_serialized_arguments_as_output() -> None:
    call = {"name": "lookup", "arguments": {"city": "Paris", "days": 3}}
    # "lookup" is 1; '{"city": "Paris", "days": 3}' is 4 whitespace-separated words.
    assert reply_for({"tool_calls": [call]}).usage.output_tokens == 5
    both = reply_for({"content": "let me look", "tool_calls": [call, {"name": "noop"}]})
    assert both.usage.output_tokens == 3 + 5 + 2  # noop's arguments are "{}"
    templated = reply_for({"content": "$query", "template": True, "tool_calls": [call]})
    assert templated.usage.output_tokens == 1 + 5
    scripted = reply_for({"tool_calls": [call], "usage": {"output_tokens": 42}})
    assert scripted.usage.output_tokens == 42


def test_a_fault_is_carried_as_scripted_and_absent_otherwise() -> None:
    reply = reply_for({"content": "x", "fault": {"after_chunks": 2, "kind": "stall"}})
    assert reply.fault == Fault(after_chunks=2, kind="stall")
    assert reply_for({"content": "x"}).fault is None


def test_chaos_draws_the_same_faults_for_the_same_seed_session_and_request() -> None:
    chaos = {"probability": 0.5, "kinds": ["stall", "malformed"], "seed": 7}
    draws = [chaos_fault(chaos, "s1", "flaky", n) for n in range(1, 201)]
    assert draws == [chaos_fault(chaos, "s1", "flaky", n) for n in range(1, 201)]
    faults = [d for d in draws if d is not None]
    assert 60 < len(faults) < 140  # about half
    assert {f.kind for f in faults} == {"stall", "malformed"}
    assert {f.after_chunks for f in faults} == {1}
    other_seed = [chaos_fault({**chaos, "seed": 8}, "s1", "flaky", n) for n in range(1, 201)]
    other_session = [chaos_fault(chaos, "s2", "flaky", n) for n in range(1, 201)]
    assert draws != other_seed and draws != other_session
    assert chaos_fault({"probability": 0.0}, "s", "r", 1) is None
    assert chaos_fault({"probability": 1.0, "kinds": ["stall"]}, "s", "r", 1) == Fault(1, "stall")


def test_chunks_concatenate_back_to_the_text() -> None:
    text = "Hello,  world!\nSecond line "
    for chunk in ("word", "char", 4):
        assert "".join(chunk_text(text, chunk)) == text
    assert chunk_text("a b", "word") == ["a ", "b"]
    assert chunk_text("abcdef", 4) == ["abcd", "ef"]


def test_stream_plan_sends_thinking_first_on_an_absolute_schedule() -> None:
    reply = reply_for(
        {
            "thinking": "hmm ok",
            "content": "a b",
            "stream": {"first_delay_ms": 100, "word_delay_ms": 10},
        }
    )
    plan = list(plan_stream(reply))
    assert [(p.kind, p.text) for p in plan] == [
        ("thinking", "hmm "),
        ("thinking", "ok"),
        ("text", "a "),
        ("text", "b"),
    ]
    assert [round(p.at, 3) for p in plan] == [0.1, 0.11, 0.12, 0.13]


def test_one_snapshot_answers_each_inquiry_with_its_own_agent_type_usage_and_template() -> None:
    # The snapshot renders each response once; what depends on the inquiry must not stick.
    rules = compile_ruleset(
        stamp="t",
        rules=[
            {"name": "plain", "match": {"contains": "plain"}, "response": {"content": "two words"}},
            {
                "name": "echo",
                "match": {"contains": "echo"},
                "response": {"content": "you said $query", "template": True},
            },
            {
                "name": "typed",
                "match": {"contains": "typed"},
                "response": {"content": "x", "agent_type": "fixed", "usage": {"input_tokens": 7}},
            },
        ],
        defaults=None,
        fallback={"content": "no rule for that"},
    )

    def answer(query: str, agent_type: str) -> Any:
        inquiry = Inquiry(query, agent_type=agent_type)
        return build_reply(rules, inquiry, match_inquiry(rules, inquiry))

    first, second = answer("plain", "router"), answer("plain and more words", "custom")
    assert (first.agent_type, second.agent_type) == ("router", "custom")
    assert (first.usage.input_tokens, second.usage.input_tokens) == (1, 4)
    assert first.usage.output_tokens == second.usage.output_tokens == 2
    assert answer("echo one", "router").content == "you said echo one"
    echoed = answer("echo two three", "router")
    assert echoed.content == "you said echo two three"
    assert echoed.usage.output_tokens == 5
    typed = answer("typed", "router")
    assert typed.agent_type == "fixed" and typed.usage.input_tokens == 7
    assert answer("nothing", "a").agent_type == "a"
    assert answer("nothing at all", "b").agent_type == "b"
    assert answer("nothing at all", "b").usage.input_tokens == 3


def test_chaos_in_the_defaults_reaches_every_response_without_its_own() -> None:
    chaos = {"probability": 1.0, "kinds": ["stall"], "seed": 1}
    rules = compile_ruleset(
        stamp="t",
        rules=[
            {"name": "plain", "match": {"contains": "plain"}, "response": {"content": "a"}},
            {
                "name": "own",
                "match": {"contains": "own"},
                "response": {"content": "b", "chaos": {"probability": 0.0}},
            },
            {
                "name": "scripted",
                "match": {"contains": "scripted"},
                "response": {"content": "c", "fault": {"after_chunks": 4, "kind": "malformed"}},
            },
            {"name": "failing", "match": {"contains": "failing"}, "response": {"error": {}}},
        ],
        defaults={"chaos": chaos},
    )
    plain, own, scripted, failing = rules.rules
    assert plain.stateful and plain.responses[0]["chaos"] == chaos
    assert own.responses[0]["chaos"] == {"probability": 0.0}  # the rule's own chaos wins
    assert "chaos" not in scripted.responses[0] and not scripted.stateful
    assert "chaos" not in failing.responses[0]

    def fault(query: str) -> Fault | None:
        inquiry = Inquiry(query=query, agent_type="router", session="s")
        rule = match_inquiry(rules, inquiry)
        assert rule is not None
        return build_reply(rules, inquiry, rule, Step(request=1)).fault

    assert fault("plain") == Fault(1, "stall")
    assert fault("own") is None
    assert fault("scripted") == Fault(4, "malformed")


def test_tokens_are_counted_as_split_counts_them_across_slices() -> None:
    """A long text is counted a slice at a time; words at the cuts count once."""
    text = ("a bc\\tdé  fgh\\u3000ij\\n" * 20_000 + "x" * 100_000 + " y ") * 2
    text = text.encode().decode("unicode_escape")
    assert count_tokens(text) == len(text.split())
    assert count_tokens("") == 0 and count_tokens("   ") == 0
