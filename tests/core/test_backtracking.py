"""The save-time check: regexes a backtracking engine could take super-linear time on."""

from __future__ import annotations

import pytest

from staticagents.core.backtracking import EXPONENTIAL, POLYNOMIAL, backtracking_problem

EXPONENTIAL_PATTERNS = [
    r"(a|a)*$",  # two alternatives read the same text
    r"(a|aa)+$",  # a run of a's splits in many ways
    r"(\w+\s?)+$",  # the optional separator lets iterations split a word
    r"((a+))+$",  # nested repeats, through groups
    r"(?:(?:a)+)+$",
    r"(a+?)+$",  # laziness changes the order, not the number of paths
    r"^(a|a)*b",
    r"(?=(a+)+$)x",  # inside a lookahead
    r"(?>(a+)+b)",  # inside an atomic group, before something that can fail
    r"((a|a)*)\1$",
    r"(a+){20}$",  # a counted repeat of a repeat
    r"(.*a){20}",  # .* repeated
]
POLYNOMIAL_PATTERNS = [r"\d+\d+$", r".*a.*a.*$", r"\w+\s*\w+$", r"a*[ab]*c"]
SAFE_PATTERNS = [
    r"(a+)++$",  # possessive: never given back
    r"(?>a+)+$",  # atomic: the same
    r"(a|a)*",  # nothing after it can fail: the first way found is the answer
    r"(a+)+",
    r"(?i)^topic 00001\b",
    r"^hello$",
    r"(\d+\.)+$",
    r"\d+\s+\d+$",
    r"(\w+)\s+\1",
    r"[a-z]+@[a-z]+\.com$",
    r"(?i)(hello|hi|hey)\b",
    r"\w{1,30}$",
    r"^\s*(yes|no)\s*$",
    r"\bfoo\b.*\bbar\b",
    r"^(?:\w+ )*$",
    r"a*b*c*$",
    r'[^"]*"[^"]*"$',
    r"(\d{1,3}\.){3}\d{1,3}$",
    r"(?i)what (is|are) .*\?$",
]


@pytest.mark.parametrize("pattern", EXPONENTIAL_PATTERNS)
def test_a_repeat_that_can_match_the_same_text_two_ways_is_exponential(pattern: str) -> None:
    assert backtracking_problem(pattern) in (EXPONENTIAL, POLYNOMIAL)


@pytest.mark.parametrize("pattern", EXPONENTIAL_PATTERNS[:10])
def test_the_simplest_ambiguous_repeats_are_named_exponential(pattern: str) -> None:
    assert backtracking_problem(pattern) == EXPONENTIAL


@pytest.mark.parametrize("pattern", POLYNOMIAL_PATTERNS)
def test_repeats_handing_the_same_text_on_are_polynomial(pattern: str) -> None:
    assert backtracking_problem(pattern) == POLYNOMIAL


@pytest.mark.parametrize("pattern", SAFE_PATTERNS)
def test_unambiguous_possessive_and_atomic_patterns_pass(pattern: str) -> None:
    assert backtracking_problem(pattern) is None
