"""Reachability: which earlier rule always answers first, predicate kind by predicate kind."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from staticagents.conf import settings
from staticagents.core.reach import Answer, first_shadowing, shadowed_rules, shadows

YES, NO, UNKNOWN = Answer.YES, Answer.NO, Answer.UNKNOWN


@pytest.mark.parametrize(
    ("earlier", "later", "answer"),
    [
        # no predicates at all: a catch-all shadows everything after it
        ({}, {"contains": "x"}, YES),
        ({}, {}, YES),
        # agent types
        ({"agent_type": "router"}, {"agent_type": "router", "query": "x"}, YES),
        ({"agent_type": "router"}, {"agent_type": "other"}, NO),
        ({"agent_type": "router"}, {"contains": "x"}, NO),  # the later serves every type
        ({"contains": "#a"}, {"agent_type": "router", "contains": "#a"}, YES),
        # contains: literals inside the later rule's literals
        ({"contains": "err"}, {"contains": "#error"}, YES),
        ({"contains": ["#a", "#b"]}, {"contains": ["#b", "x #a"]}, YES),
        ({"contains": ["#a", "#b"]}, {"contains": "#a"}, NO),
        ({"contains": "#a"}, {}, NO),
        ({"contains": "#a"}, {"query": "^#a"}, YES),  # a run the later regex requires
        ({"contains": "#a"}, {"query": "(?i)#a"}, UNKNOWN),  # "#A" also matches
        ({"contains": "#a"}, {"query": "#(a|b)"}, UNKNOWN),
        # query regexes
        ({"query": "^hi"}, {"query": "^hi", "contains": "x"}, YES),
        ({"query": ".*"}, {"contains": "x"}, YES),
        ({"query": "(a|)"}, {}, YES),
        ({"query": "hello"}, {"contains": "say hello"}, YES),
        ({"query": "(?i)hello"}, {"contains": "HELLO there"}, YES),
        ({"query": "hello"}, {"contains": "HELLO"}, NO),
        ({"query": "^hello"}, {"contains": "hello"}, UNKNOWN),  # "hello" at the start, or not
        ({"query": "^hello"}, {}, NO),  # the empty question
        ({"query": "^$"}, {}, UNKNOWN),
        ({"query": "^hello"}, {"query": "^hello world"}, UNKNOWN),
        # model and system regexes
        ({"model": "gpt"}, {"model": "gpt"}, YES),
        ({"model": "gpt"}, {"model": "^gpt-4"}, YES),
        ({"model": "gpt"}, {}, NO),
        ({"system": "(?i)terse"}, {"system": "Be (?i:terse)"}, UNKNOWN),
        # context
        ({"context": {"page": "."}}, {"context": {"page": ".", "user": "x"}}, YES),
        ({"context": {"page": "."}}, {}, NO),
        ({"context": {"page": "."}}, {"context": {"user": "x"}}, NO),
        ({"context": {"page": "^p"}}, {"context": {"page": "^p-1"}}, UNKNOWN),
        # dialect and turn: equality
        ({"dialect": "openai"}, {"dialect": "openai", "turn": 2}, YES),
        ({"dialect": "openai"}, {"dialect": "anthropic"}, NO),
        ({"dialect": "openai"}, {}, NO),
        ({"turn": 1}, {"turn": 1}, YES),
        ({"turn": 1}, {"turn": 2}, NO),
        # tool results
        ({"tool_result": True}, {"tool_result": "ok"}, YES),
        ({"tool_result": True}, {"tool_result": False}, NO),
        ({"tool_result": False}, {}, NO),
        ({"tool_result": False}, {"tool_result": False}, YES),
        ({"tool_result": "ok"}, {"tool_result": True}, NO),  # an empty result
        ({"tool_result": "ok"}, {"tool_result": "^ok$"}, YES),
        ({"tool_result": "^ok"}, {"tool_result": "ok"}, UNKNOWN),
        ({"tool_result": "ok"}, {}, NO),
        # one refuted predicate is enough; otherwise one undecided one makes it undecided
        ({"contains": "#a", "turn": 1}, {"contains": "#a", "turn": 2}, NO),
        ({"query": "^a", "turn": 1}, {"query": "^ab", "turn": 1}, UNKNOWN),
    ],
)
def test_an_earlier_rule_shadows_a_later_one_only_when_proved(
    earlier: dict[str, Any], later: dict[str, Any], answer: Answer
) -> None:
    assert shadows(earlier, later).answer is answer


def test_the_verdict_names_the_predicate_that_decided() -> None:
    assert shadows({"contains": "#a", "turn": 1}, {"contains": "#a"}).reason == "turn 1"
    assert "cannot tell" in shadows({"query": "^a"}, {"query": "^ab"}).reason


def rule(name: str, match: dict[str, Any] | None = None, enabled: bool = True) -> dict[str, Any]:
    return {"name": name, "enabled": enabled, "match": match or {}}


def test_the_first_enabled_earlier_rule_that_shadows_is_named() -> None:
    rules = [
        rule("off", {"contains": "#"}, enabled=False),
        rule("router-hi", {"agent_type": "router", "query": "hi"}),
        rule("broad", {"contains": "#e"}),
        rule("narrow", {"contains": "#error"}),
        rule("router-hi-again", {"agent_type": "router", "contains": "oh hi"}),
        rule("echo"),
        rule("late", {"contains": "#late"}),
    ]
    found = shadowed_rules(rules)
    assert {name: shadow.by for name, shadow in found.items()} == {
        "narrow": "broad",
        "router-hi-again": "router-hi",
        "late": "echo",
    }
    assert found["narrow"].message().startswith("rule 'narrow' (#4) is shadowed by 'broad' (#3)")


def test_a_new_rules_first_shadowing_rule_is_its_place() -> None:
    rules = [rule("a", {"contains": "#a"}), rule("kind", {"agent_type": "k"}), rule("echo")]
    assert first_shadowing(rules, {"contains": "#b"}) == 2
    assert first_shadowing(rules, {"agent_type": "k", "contains": "#b"}) == 1
    assert first_shadowing(rules, {"contains": "#a", "turn": 2}) == 0
    assert first_shadowing(rules[:2], {"contains": "#b"}) is None


def test_the_demo_rules_shadow_none_of_each_other() -> None:
    demo = yaml.safe_load(settings.STATIC_AGENTS_DEFAULT_FIXTURE.read_text())
    assert shadowed_rules(demo["rules"]) == {}


def test_a_thousand_rules_are_checked_without_comparing_every_pair() -> None:
    rules = [rule(f"r{i}", {"contains": f"#topic-{i}-end"}) for i in range(3000)]
    rules.append(rule("dup", {"contains": "say #topic-7-end now"}))
    assert {s.rule: s.by for s in shadowed_rules(rules).values()} == {"dup": "r7"}
