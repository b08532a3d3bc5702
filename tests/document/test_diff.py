"""What changed between two ruleset documents: rule by rule, field by field (pure)."""

from __future__ import annotations

from typing import Any

from staticagents.document.diff import EMPTY_DOCUMENT, FieldChange, RuleChange, diff_documents


def document(*rules: dict[str, Any], **parts: Any) -> dict[str, Any]:
    return {"version": 1, "defaults": {"confidence": "medium"}, "rules": list(rules), **parts}


def rule(name: str, content: str = "hi", **fields: Any) -> dict[str, Any]:
    return {"name": name, "response": {"content": content}, **fields}


def test_the_same_document_has_no_changes() -> None:
    same = document(rule("a"), rule("b"), fallback={"content": "no"})
    assert not diff_documents(same, same)
    assert diff_documents(same, same).as_dict() == {"defaults": [], "fallback": [], "rules": []}


def test_a_changed_rule_lists_each_field_that_changed_old_to_new() -> None:
    old = document(rule("greet", "Hello", match={"query": "hi", "agent_type": "router"}))
    new = document(rule("greet", "Hi!", match={"query": "hello", "agent_type": "router"}))
    (change,) = diff_documents(old, new).rules
    assert change == RuleChange(
        "greet",
        "changed",
        (
            FieldChange("match.query", "hi", "hello"),
            FieldChange("response.content", "Hello", "Hi!"),
        ),
    )
    assert change.summary() == 'changed rule "greet"'


def test_a_field_given_or_taken_away_is_absent_on_one_side() -> None:
    old = document(rule("greet", match={"query": "hi"}))
    new = document(rule("greet", match={"contains": "hi"}, enabled=False))
    (change,) = diff_documents(old, new).rules
    assert change.fields == (
        FieldChange("enabled", True, False),
        FieldChange("match.query", "hi", None),
        FieldChange("match.contains", None, "hi"),
    )


def test_added_and_removed_rules_carry_all_their_fields() -> None:
    old = document(rule("a"), rule("gone", "bye", match={"contains": "x"}))
    new = document(rule("a"), rule("new", "hello", enabled=False))
    assert diff_documents(old, new).rules == (
        RuleChange(
            "new",
            "added",
            (FieldChange("enabled", None, False), FieldChange("response.content", None, "hello")),
        ),
        RuleChange(
            "gone",
            "removed",
            (
                FieldChange("match.contains", "x", None),
                FieldChange("response.content", "bye", None),
            ),
        ),
    )


def test_a_sequence_names_each_response_by_its_index() -> None:
    old = document({"name": "s", "responses": [{"content": "one"}, {"content": "two"}]})
    new = document(
        {
            "name": "s",
            "responses": [{"content": "one"}, {"content": "2"}, {"content": "three"}],
            "on_exhausted": "error",
        }
    )
    (change,) = diff_documents(old, new).rules
    assert change.fields == (
        FieldChange("responses[1].content", "two", "2"),
        FieldChange("responses[2].content", None, "three"),
        FieldChange("on_exhausted", None, "error"),
    )


def test_a_rule_that_changed_place_is_moved_and_the_others_are_not() -> None:
    old = document(rule("a"), rule("b"), rule("c"), rule("d"))
    new = document(rule("d"), rule("a"), rule("b", "changed"), rule("c"))
    assert diff_documents(old, new).rules == (
        RuleChange("d", "moved", (FieldChange("position", 4, 1),)),
        RuleChange("b", "changed", (FieldChange("response.content", "hi", "changed"),)),
    )


def test_a_rule_added_at_the_top_moves_no_other() -> None:
    old = document(rule("a"), rule("b"))
    new = document(rule("new"), rule("a"), rule("b"))
    assert [(c.name, c.change) for c in diff_documents(old, new).rules] == [("new", "added")]


def test_a_reversal_of_many_rules_is_found_quickly() -> None:
    names = [f"r{i}" for i in range(5000)]
    old = document(*(rule(name) for name in names))
    new = document(*(rule(name) for name in reversed(names)))
    changes = diff_documents(old, new).rules
    assert len(changes) == 4999 and {c.change for c in changes} == {"moved"}


def test_defaults_and_fallback_are_compared_field_by_field() -> None:
    old = document(
        defaults={"confidence": "medium"}, fallback={"content": "No", "confidence": "low"}
    )
    new = document(defaults={"confidence": "high", "stream": {"word_delay_ms": 5}})
    diff = diff_documents(old, new)
    assert diff.defaults == (
        FieldChange("confidence", "medium", "high"),
        FieldChange("stream", None, {"word_delay_ms": 5}),
    )
    assert diff.fallback == (
        FieldChange("content", "No", None),
        FieldChange("confidence", "low", None),
    )


def test_the_first_version_is_compared_with_an_empty_ruleset() -> None:
    diff = diff_documents(EMPTY_DOCUMENT, document(rule("a")))
    assert diff.as_dict() == {
        "defaults": [],
        "fallback": [],
        "rules": [
            {
                "name": "a",
                "change": "added",
                "fields": [{"field": "response.content", "old": None, "new": "hi"}],
            }
        ],
    }
