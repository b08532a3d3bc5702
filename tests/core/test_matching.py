"""The pure matcher: Galaxy's static-backend semantics, plus the scripting predicates."""

from __future__ import annotations

from typing import Any

import pytest

from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import compile_ruleset, explain_inquiry, match_inquiry


def ruleset(*rules: dict[str, Any], **kwargs: Any):  # type: ignore[no-untyped-def]
    named = [{"name": f"r{i}", **rule} for i, rule in enumerate(rules)]
    return compile_ruleset(stamp="t", rules=named, **kwargs)


def matched(rules: Any, inquiry: Inquiry) -> str | None:
    rule = match_inquiry(rules, inquiry)
    return rule.name if rule else None


def test_first_rule_whose_predicates_all_hold_wins() -> None:
    rules = ruleset(
        {"match": {"query": "hello"}, "response": {}},
        {"match": {"query": "hel"}, "response": {}},
    )
    assert matched(rules, Inquiry("well hello there")) == "r0"
    assert matched(rules, Inquiry("help")) == "r1"


def test_query_is_an_unanchored_case_sensitive_search() -> None:
    rules = ruleset({"match": {"query": "RNA"}, "response": {}})
    assert matched(rules, Inquiry("tell me about RNA-seq")) == "r0"
    assert matched(rules, Inquiry("tell me about rna-seq")) is None


def test_query_case_insensitivity_comes_from_the_pattern() -> None:
    rules = ruleset({"match": {"query": "(?i)rna.?seq"}, "response": {}})
    assert matched(rules, Inquiry("RNASEQ please")) == "r0"


def test_rule_without_agent_type_serves_every_type() -> None:
    rules = ruleset({"match": {"query": "x"}, "response": {}})
    assert matched(rules, Inquiry("x", agent_type="router")) == "r0"
    assert matched(rules, Inquiry("x", agent_type="anything_else")) == "r0"


def test_rule_with_agent_type_serves_only_that_type() -> None:
    rules = ruleset(
        {"match": {"agent_type": "router"}, "response": {}},
        {"match": {}, "response": {}},
    )
    assert matched(rules, Inquiry("q", agent_type="router")) == "r0"
    assert matched(rules, Inquiry("q", agent_type="error_analysis")) == "r1"


def test_order_is_kept_across_typed_and_untyped_rules() -> None:
    rules = ruleset(
        {"match": {"query": "a"}, "response": {}},
        {"match": {"agent_type": "router"}, "response": {}},
    )
    assert matched(rules, Inquiry("a", agent_type="router")) == "r0"
    assert matched(rules, Inquiry("b", agent_type="router")) == "r1"


def test_disabled_rules_never_match() -> None:
    rules = ruleset({"enabled": False, "response": {}}, {"response": {}})
    assert matched(rules, Inquiry("q")) == "r1"


def test_no_match_means_none_so_the_fallback_answers() -> None:
    assert matched(ruleset({"match": {"query": "zzz"}, "response": {}}), Inquiry("q")) is None


@pytest.mark.parametrize("context", [None, {}])
def test_context_rule_fails_without_context(context: dict[str, Any] | None) -> None:
    rules = ruleset({"match": {"context": {"page_id": "."}}, "response": {}})
    assert matched(rules, Inquiry("q", context=context)) is None


def test_context_rule_requires_every_field() -> None:
    rules = ruleset({"match": {"context": {"page_id": ".", "history_id": "."}}, "response": {}})
    assert matched(rules, Inquiry("q", context={"page_id": "p1"})) is None
    assert matched(rules, Inquiry("q", context={"page_id": "p1", "history_id": "h"})) == "r0"


def test_context_values_are_matched_as_python_str() -> None:
    rules = ruleset({"match": {"context": {"count": "^42$", "flag": "^True$"}}, "response": {}})
    assert matched(rules, Inquiry("q", context={"count": 42, "flag": True})) == "r0"


def test_contains_needs_every_literal() -> None:
    rules = ruleset({"match": {"contains": ["P-17", "[x]"]}, "response": {}})
    assert matched(rules, Inquiry("solve P-17 [x]")) == "r0"
    assert matched(rules, Inquiry("solve P-17")) is None


def test_model_system_dialect_turn_and_tool_result_predicates() -> None:
    rules = ruleset(
        {
            "match": {
                "model": "^gpt-a",
                "system": "(?i)helpful",
                "dialect": "openai",
                "turn": 2,
                "tool_result": "sunny",
            },
            "response": {},
        }
    )
    ok = Inquiry(
        "q",
        model="gpt-a1",
        system="You are HELPFUL",
        dialect="openai",
        turn=2,
        tool_result="it is sunny",
    )
    assert matched(rules, ok) == "r0"
    for change in (
        {"model": "gpt-b"},
        {"dialect": "anthropic"},
        {"turn": 1},
        {"tool_result": None},
        {"system": ""},
    ):
        fields = {
            **{k: getattr(ok, k) for k in ("model", "system", "dialect", "turn", "tool_result")},
            **change,
        }
        assert matched(rules, Inquiry("q", **fields)) is None, change


def test_tool_result_flag_tells_tool_results_from_questions() -> None:
    rules = ruleset(
        {"match": {"tool_result": True}, "response": {}},
        {"match": {"tool_result": False}, "response": {}},
    )
    assert matched(rules, Inquiry("q", tool_result="42")) == "r0"
    assert matched(rules, Inquiry("q")) == "r1"


def test_regexes_run_on_a_bounded_window_of_the_text() -> None:
    rules = compile_ruleset(
        stamp="t", rules=[{"name": "tail", "match": {"query": "END"}, "response": {}}], window=10
    )
    assert match_inquiry(rules, Inquiry("x" * 20 + "END")) is None
    assert match_inquiry(rules, Inquiry("xEND")) is not None


def test_explain_names_the_failing_predicate_of_every_rule_before_the_match() -> None:
    rules = ruleset(
        {"match": {"agent_type": "custom_tool"}, "response": {}},
        {"match": {"query": "^hello"}, "response": {}},
        {"match": {"context": {"page_id": "."}}, "response": {}},
        {"response": {}},
    )
    verdicts = explain_inquiry(rules, Inquiry("say hello", agent_type="router"))
    assert [(v.rule, v.matched, v.predicate) for v in verdicts] == [
        ("r0", False, "agent_type"),
        ("r1", False, "query"),
        ("r2", False, "context"),
        ("r3", True, None),
    ]
    assert "/^hello/" in (verdicts[1].reason or "")
    assert "no context" in (verdicts[2].reason or "")


def test_agent_types_lists_the_types_rules_name_sorted() -> None:
    rules = ruleset(
        {"match": {"agent_type": "router"}, "response": {}},
        {"match": {"agent_type": "error_analysis"}, "response": {}},
        {"response": {}},
    )
    assert rules.agent_types == ["error_analysis", "router"]


def test_literal_index_keeps_rule_order_between_gated_and_free_rules() -> None:
    rules = ruleset(
        {"match": {"contains": "P-2"}, "response": {}},
        {"match": {"query": "^never$"}, "response": {}},
        {"match": {"query": "P-1"}, "response": {}},
        {"response": {}},
    )
    assert matched(rules, Inquiry("solve P-1 and P-2")) == "r0"
    assert matched(rules, Inquiry("solve P-1")) == "r2"
    assert matched(rules, Inquiry("solve P-3")) == "r3"


def test_literal_index_respects_agent_types() -> None:
    rules = ruleset(
        {"match": {"agent_type": "router", "contains": "X-1"}, "response": {}},
        {"match": {"contains": "X-1"}, "response": {}},
    )
    assert matched(rules, Inquiry("X-1", agent_type="router")) == "r0"
    assert matched(rules, Inquiry("X-1", agent_type="other")) == "r1"


def test_only_rules_whose_literal_occurs_are_tried() -> None:
    rules = ruleset(
        *({"match": {"contains": f"problem-{i:04d}"}, "response": {}} for i in range(1000))
    )
    tried = list(rules.candidates(Inquiry("please solve problem-0999")))
    assert [r.name for r in tried] == ["r999"]
