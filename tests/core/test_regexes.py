"""Rule regexes in bounded time: the same answers as ``re.search``, from RE2 or a timed engine.

The translation for RE2 spells every character item as the code points ``re``
matches, so these tests compare with ``re`` itself on texts chosen where RE2's
own defaults differ (case folding beyond ASCII, Unicode ``\\w``/``\\d``/``\\s``,
``$`` before a final newline, ``\\Z``, ``\\b`` next to a non-ASCII letter).
"""

from __future__ import annotations

import _sre
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from staticagents.core.backtracking import backtracking_problem
from staticagents.core.charclasses import CASED_BELOW, _cased, char_ranges
from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import compile_ruleset, explain_inquiry, match_inquiry
from staticagents.core.regexes import Deadline, MatchTimeout, Searcher, to_re2

PATTERNS = [
    r"(?i)^topic 00001\b",
    r"^hello$",
    r"hello$",
    r"(?m)^b$",
    r"\w+",
    r"(?a)\w+$",
    r"\d",
    r"(?i)straße",
    r"(?i)k",
    r"(?i)[k-m]x",
    r"(?ai)k",
    r"\s+$",
    r"^$",
    r"",
    r"a.c",
    r"(?s)a.c",
    r"\bé",
    r"(?i)İ",
    r"(?i)\u0131",
    r"x\Z",
    r"\Ax",
    r"[^a]",
    r"(?i)[^k]",
    r"\W",
    r"\S\s\S",
    r"a{2,3}b",
    r"(ab)+?c",
    r"(?x) a b # c",
    r"a|b$|c",
    r"[\d\s]+",
    r"(?i:HeLLo) World",
    r"(?i)a(?-i:a)",
    r"[\u0100-\u017f]",
    r"\n$",
    r"$\n",
    r"(?=a)a",
    r"(a)\1",
    r"(?>a+)b",
    r"a++b",
    r"\N{LATIN SMALL LETTER E WITH ACUTE}",
    r"(?i)[a-z]+\d{2}",
    r"^\s*(yes|no)\s*$",
    r"(?i)(hello|hi)\b",
    r"x{1001}",
    r"a{0,1500}$",
    r"[\U0001F600-\U0001F64F]",
    r"(?i)rna.?seq",
    r"\$\d+\.\d\d",
    r"[.*+?^${}()|\[\]\\]",
    r"\t\x00\u2028",
]
TEXTS = [
    "",
    "a",
    "aa",
    "hello",
    "hello\n",
    "hello\n\n",
    "Topic 00001 x",
    "topic 000012",
    "topic 00001é",
    "b\nc",
    "a\nb\n",
    "STRASSE",
    "STRAßE",
    "K",
    "\u212a",
    "kx",
    "\u212ax",
    "\u017f",
    "é",
    "xé",
    " é",
    "İ",
    "i",
    "\u0131",
    "I",
    "x",
    "x\n",
    "abc",
    "a\nc",
    "aabbb",
    "ababc",
    "yes",
    " no \n",
    "Hi there",
    "héllo wörld",
    "HELLO World",
    "ab12",
    "AB12",
    "١٢",
    "\u00a0",
    "\u2028",
    "\x1c",
    "\U0001f600",
    "x" * 1001,
    "a" * 1400,
    "RNA-Seq",
    "costs $12.50",
    "a[b",
    "\t\x00\u2028",
    "lone \ud800 surrogate a",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_search_answers_as_re_search_does(pattern: str) -> None:
    searcher, expected = Searcher(pattern), re.compile(pattern)
    for text in TEXTS:
        assert searcher.search(text, Deadline()) is (expected.search(text) is not None), text


@pytest.mark.parametrize(
    "pattern",
    [r"(?i)^topic \d+\b", r"^hello$", r"(?m)^b$", r"(a|a)*$", r"(?i)straße", r"\w+\s\d{2,5}"],
)
def test_patterns_without_backtracking_features_run_on_the_linear_engine(pattern: str) -> None:
    assert Searcher(pattern).engine == "re2"


@pytest.mark.parametrize(
    "pattern", [r"(?=a)b", r"(?<!a)b", r"(a)\1", r"(?>a+)b", r"a++", r"(a)?(?(1)b|c)", r"$a"]
)
def test_lookaround_backreferences_and_atomic_groups_take_the_timed_engine(pattern: str) -> None:
    assert to_re2(pattern) is None
    assert Searcher(pattern).engine == "regex"


def test_case_folding_is_pythons_own_even_beyond_ascii() -> None:
    """re matches the Kelvin sign for (?i)k and both dotted and dotless i for (?i)i."""
    assert Searcher(r"(?i)k").search("\u212a", Deadline())
    assert Searcher(r"(?i)i").search("\u0131", Deadline())  # dotless i
    assert not Searcher(r"(?ai)k").search("\u212a", Deadline())


def test_case_variants_of_a_cased_letter_are_cased_letters_only() -> None:
    """``char_ranges`` asks re only about cased characters for (?i): check that no other
    character of the whole of Unicode would match."""
    literal = re._constants.LITERAL  # type: ignore[attr-defined]
    everything = "".join(map(chr, range(0x110000)))
    for letter in "aksiAKSI\u00df\u00b5\u03c3":
        found = char_ranges(literal, ord(letter), re.IGNORECASE | re.UNICODE)
        pattern = re.compile(re.escape(letter), re.IGNORECASE)
        expected = [m.start() for m in pattern.finditer(everything)]
        assert [c for low, high in found for c in range(low, high + 1)] == expected


def test_no_code_point_from_where_the_search_for_cased_ones_stops_is_cased() -> None:
    assert not [c for c in range(CASED_BELOW, 0x110000) if _sre.unicode_iscased(c)]
    assert max(_cased()) >= 0x1E900  # Adlam's letters, the last cased ones today


# -- the time budget ------------------------------------------------------------

HOSTILE = r"((a|a)*)\1$"  # a backreference: the timed engine, exponential on a near-miss


def test_a_timed_search_that_runs_out_of_time_raises() -> None:
    with pytest.raises(MatchTimeout):
        Searcher(HOSTILE).search("a" * 40 + "b", Deadline(budget=0.01))


def test_an_exhausted_deadline_fails_a_timed_search_at_once() -> None:
    ticks = iter([0.0, 5.0])

    class Ticking(Deadline):
        __slots__ = ()
        clock = staticmethod(lambda: next(ticks))

    deadline = Ticking(budget=1.0)
    assert deadline.remaining() == 1.0  # the clock starts at the first timed search
    with pytest.raises(MatchTimeout):
        Searcher(r"(?=a)a").search("a", deadline)


def test_a_stored_regex_too_large_for_either_engine_fails_closed() -> None:
    searcher = Searcher("((a{1000}){1000}){1000}")  # compiles in re, not in RE2 or regex
    with pytest.raises(MatchTimeout):
        searcher.search("a" * 10, Deadline())


def test_a_linear_search_needs_no_time_budget() -> None:
    exhausted = Deadline(budget=0.0)
    assert Searcher(r"(a|a)*$").search("a" * 40, exhausted)
    assert not Searcher(r"(a|a)*c").search("a" * 10_000 + "b", exhausted)


def rules(*documents: dict[str, Any], budget: float = 0.01) -> Any:
    return compile_ruleset(stamp="t", rules=list(documents), budget=budget)


def test_a_rule_that_runs_out_of_time_fails_closed_and_the_next_rule_answers() -> None:
    ruleset = rules(
        {"name": "hostile", "match": {"query": HOSTILE}, "response": {}},
        {"name": "next", "match": {"query": "b$"}, "response": {}},
    )
    deadline = ruleset.deadline()
    rule = match_inquiry(ruleset, Inquiry("a" * 40 + "b"), deadline)
    assert rule is not None and rule.name == "next"
    assert deadline.overruns == {"hostile": "query"}


def test_explain_reports_the_rule_that_ran_out_of_time() -> None:
    ruleset = rules(
        {"name": "hostile", "match": {"context": {"page": HOSTILE}}, "response": {}},
        {"name": "other", "match": {"query": "^nothing"}, "response": {}},
    )
    inquiry = Inquiry("q", context={"page": "a" * 40 + "b"})
    deadline = ruleset.deadline()
    assert match_inquiry(ruleset, inquiry, deadline) is None
    verdicts = explain_inquiry(ruleset, inquiry, deadline)  # reuses what matching found
    assert [(v.rule, v.matched, v.predicate) for v in verdicts] == [
        ("hostile", False, "context"),
        ("other", False, "query"),
    ]
    assert "ran out of the 10 ms time budget" in (verdicts[0].reason or "")
    assert "fails closed" in (verdicts[0].reason or "")
    fresh = explain_inquiry(ruleset, inquiry)  # explain on its own finds the same
    assert fresh[0].reason == verdicts[0].reason


def test_one_deadline_bounds_every_timed_rule_of_an_inquiry() -> None:
    hostile = [{"name": f"h{i}", "match": {"query": HOSTILE}, "response": {}} for i in range(5)]
    ruleset = rules(*hostile, budget=0.02)
    deadline = ruleset.deadline()
    assert match_inquiry(ruleset, Inquiry("a" * 40 + "b"), deadline) is None
    assert list(deadline.overruns) == ["h0", "h1", "h2", "h3", "h4"]
    assert deadline.remaining() <= 0


# -- generated: patterns built from the pieces whose meaning differs between engines ----

ALPHABET = [
    "a",
    "A",
    "k",
    "K",
    "\u212a",
    "\u0131",
    "I",
    "\u00e9",
    "\u00c9",
    " ",
    "\n",
    "1",
    "_",
    "-",
]
ATOMS = [
    *(re.escape(c) for c in ALPHABET),
    "[a-k]",
    "[^a]",
    r"[\w-]",
    r"\w",
    r"\W",
    r"\d",
    r"\s",
    r"\S",
    ".",
    r"\b",
    r"\B",
    "^",
    "$",
    r"\A",
    r"\Z",
]
FLAGS = ["", "(?i)", "(?m)", "(?s)", "(?a)", "(?im)", "(?ai)"]


@st.composite
def patterns(draw: st.DrawFn, depth: int = 2) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if depth and draw(st.booleans()):
            inner = draw(patterns(depth=depth - 1))
            if draw(st.booleans()):
                inner += "|" + draw(patterns(depth=depth - 1))
            atom = f"({inner})"
        else:
            atom = draw(st.sampled_from(ATOMS))
        parts.append(atom + draw(st.sampled_from(["", "", "*", "+", "?", "{1,2}", "*?", "{2}"])))
    return "".join(parts)


@settings(max_examples=300, deadline=None)
@given(
    flags=st.sampled_from(FLAGS),
    pattern=patterns(),
    texts=st.lists(st.text(alphabet=ALPHABET, max_size=8), min_size=1, max_size=6),
)
def test_generated_patterns_answer_as_re_search_does(
    flags: str, pattern: str, texts: list[str]
) -> None:
    try:
        expected = re.compile(flags + pattern)
    except re.error:
        return  # nothing to compare with: such a pattern is refused when saved
    if backtracking_problem(flags + pattern) is not None:
        return  # refused when saved too, and re itself may take minutes to compare with
    searcher = Searcher(flags + pattern)
    for text in texts:
        assert searcher.search(text, Deadline()) is (expected.search(text) is not None), (
            flags + pattern,
            text,
            searcher.engine,
        )
