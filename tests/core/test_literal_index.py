"""The literal index never changes which rule answers: it only skips rules that cannot."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from staticagents.core.inquiry import Inquiry
from staticagents.core.literals import Gate, required_literal
from staticagents.core.matching import compile_ruleset, match_inquiry

PATTERNS = [
    "hello",
    "(?i)hello",
    "(?i)^topic 12\\b",
    "wor(ld)+",
    "abc|xyz",
    "(?i)rna.?seq",
    "[0-9]+ items",
    "caf\u00e9",
    "(?i)straße",
    "(?x) s p a c e",
    "a(?i:BCD)e",
    "(?i)sesame",
    "\\bend$",
]
WORDS = [
    "hello",
    "HeLLo",
    "topic 12",
    "TOPIC 12",
    "world",
    "worldld",
    "abc",
    "xyz",
    "RNA-seq",
    "rnaseq",
    "12 items",
    "café",
    "STRASSE",
    "straße",
    "\u017ftra\u00dfe",  # long s: matches (?i)s
    "space",
    "aBcDe",
    "end",
    "\u0131",  # dotless i: matches (?i)i
    "top\u0131c 12",
    "\u017fesame",
    "SESAME",
    "\u0130",
    "\u212a",  # Kelvin sign: matches (?i)k
]


def linear_match(ruleset, inquiry):  # type: ignore[no-untyped-def]
    for rule in ruleset.rules:
        if rule.agent_type in (None, inquiry.agent_type) and rule.matches(
            inquiry, ruleset.deadline()
        ):
            return rule
    return None


@settings(max_examples=1000, deadline=None)
@given(
    rules=st.lists(
        st.tuples(
            st.sampled_from(PATTERNS), st.sampled_from([None, "router", "other"]), st.booleans()
        ),
        min_size=1,
        max_size=12,
    ),
    words=st.lists(st.sampled_from(WORDS), min_size=0, max_size=4),
    agent_type=st.sampled_from(["router", "other", "third"]),
)
def test_indexed_matching_agrees_with_trying_every_rule(
    rules: list[tuple[str, str | None, bool]], words: list[str], agent_type: str
) -> None:
    documents = []
    for i, (pattern, typed, as_contains) in enumerate(rules):
        match: dict[str, str] = {"query": pattern}
        if as_contains:
            match = {"contains": pattern}
        if typed:
            match["agent_type"] = typed
        documents.append({"name": f"r{i}", "match": match, "response": {}})
    ruleset = compile_ruleset(stamp="t", rules=documents)
    inquiry = Inquiry(" ".join(words), agent_type=agent_type)
    assert match_inquiry(ruleset, inquiry) is linear_match(ruleset, inquiry)


def test_required_literals_are_found_only_where_certain() -> None:
    assert required_literal("(?i)^topic 12\\b") == Gate("topic 12", folded=True)
    assert required_literal("error 00002") == Gate("error 00002")
    assert required_literal("hello|hi") is None
    assert required_literal("a(?i:BCD)e") is None
    assert required_literal("[abc]def") == Gate("def")


def test_case_insensitive_rules_still_match_non_ascii_case_variants() -> None:
    # Python's re matches "(?i)s" against a long s and "(?i)i" against a dotless i,
    # which str.lower() does not map: the index must not skip such rules.
    for pattern, query in [("(?i)sesame", "\u017fesame"), ("(?i)^topic 12", "top\u0131c 12")]:
        ruleset = compile_ruleset(
            stamp="t", rules=[{"name": "r", "match": {"query": pattern}, "response": {}}]
        )
        assert match_inquiry(ruleset, Inquiry(query)) is not None, (pattern, query)
