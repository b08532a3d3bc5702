"""Reachability: whether an earlier rule always answers before a later one can.

An earlier enabled rule *shadows* a later rule when it matches every inquiry the
later one matches (first match wins, so the later rule never answers). Rules are
compared one pair at a time, predicate by predicate, in their fixture form, and
each comparison has one of three answers:

* ``yes``: proved (every inquiry the later rule matches, the earlier matches);
* ``no``: some inquiry the later rule matches misses the earlier rule (assuming
  the later rule can match anything at all);
* ``cannot tell``: undecided; never reported as shadowing.

Decided exactly: ``agent_type``, ``dialect``, ``turn``, ``tool_result: true/false``,
and a context that the later rule lacks. Regexes (``query``, ``model``,
``system``, context fields, a ``tool_result`` regex) are proved implied only when
the later rule repeats the pattern verbatim, when the pattern matches every text
(empty, or only optional parts such as ``.*``), or when it is a plain literal
(``(?i)`` allowed for ASCII) found inside a literal the later rule requires in the
same field (its ``contains`` literals or the literal runs of its own pattern).
``contains`` literals are implied the same way. A regex is proved *not* implied
when it fails on a text the later rule accepts (its ``contains`` literals joined,
or the empty text where the later rule leaves the field free). All else: cannot tell.
"""

from __future__ import annotations

import enum
import functools
import re
import re._constants as sre  # the parser's opcodes, stable since 3.11
import re._parser as sre_parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ahocorasick

from staticagents.core.literals import literal_runs_of

Match = Mapping[str, Any]


class Answer(enum.Enum):
    YES = "yes"
    NO = "no"
    UNKNOWN = "cannot tell"


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether an earlier rule shadows a later one; ``reason``: the predicate that decided."""

    answer: Answer
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Shadow:
    """A rule that never answers: ``by``, earlier and enabled, matches all it matches."""

    rule: str
    index: int
    by: str
    by_index: int

    def message(self) -> str:
        return (
            f"rule {self.rule!r} (#{self.index + 1}) is shadowed by {self.by!r} "
            f"(#{self.by_index + 1}): that earlier rule matches every question this one "
            "matches, so this one never answers"
        )


# -- one pair ---------------------------------------------------------------------


def shadows(earlier: Match, later: Match) -> Verdict:
    """Whether a rule matching ``earlier`` matches every inquiry that ``later`` matches."""
    earlier_type = earlier.get("agent_type")
    if earlier_type is not None and later.get("agent_type") != earlier_type:
        return Verdict(Answer.NO, f"the later rule serves agent types other than {earlier_type!r}")
    unknown: Verdict | None = None
    for key in earlier:
        if key == "agent_type":
            continue
        verdict = _implied(key, earlier[key], later)
        if verdict.answer is Answer.NO:
            return verdict
        if verdict.answer is Answer.UNKNOWN and unknown is None:
            unknown = verdict
    return unknown or Verdict(Answer.YES, "every predicate of the earlier rule holds")


def _implied(key: str, value: Any, later: Match) -> Verdict:
    if key in ("dialect", "turn"):
        same = later.get(key) == value
        return Verdict(Answer.YES if same else Answer.NO, f"{key} {value!r}")
    if key == "tool_result":
        return _tool_result_implied(value, later.get("tool_result"))
    if key == "context":
        return _context_implied(value, later.get("context"))
    if key == "contains":
        return _contains_implied(_as_list(value), later)
    if key == "query":
        return _query_implied(value, later)
    # model, system: a regex on a field that is the empty text when not given
    later_pattern = later.get(key)
    return _regex_implied(key, value, later_pattern, (), "" if later_pattern is None else None)


def _query_implied(pattern: str, later: Match) -> Verdict:
    literals = _as_list(later.get("contains"))
    later_pattern = later.get("query")
    witness = "\n".join(literals) if later_pattern is None else None
    return _regex_implied("query", pattern, later_pattern, literals, witness)


def _contains_implied(needles: list[str], later: Match) -> Verdict:
    texts = [*_as_list(later.get("contains")), *_case_sensitive_runs(later.get("query"))]
    missing = [n for n in needles if not any(n in text for text in texts)]
    if not missing:
        return Verdict(Answer.YES, "contains")
    if later.get("query") is None:
        # The later rule's literals alone make a question it matches; one of ours is not there.
        return Verdict(Answer.NO, f"contains {missing[0]!r}")
    return Verdict(Answer.UNKNOWN, f"cannot tell whether the query always contains {missing[0]!r}")


def _context_implied(fields: Mapping[str, str], later: Mapping[str, str] | None) -> Verdict:
    if later is None:
        return Verdict(Answer.NO, "context (the later rule answers without one)")
    unknown: Verdict | None = None
    for name, pattern in fields.items():
        if name not in later:
            return Verdict(Answer.NO, f"context.{name} (the later rule answers without it)")
        verdict = _regex_implied(f"context.{name}", pattern, later[name], (), witness=None)
        if verdict.answer is not Answer.YES and unknown is None:
            unknown = verdict
    return unknown or Verdict(Answer.YES, "context")


def _tool_result_implied(value: bool | str, later: bool | str | None) -> Verdict:
    reason = f"tool_result {value!r}"
    if value is False:
        return Verdict(Answer.YES if later is False else Answer.NO, reason)
    if later is None or later is False:  # the later rule answers a question without a result
        return Verdict(Answer.NO, reason)
    if value is True:
        return Verdict(Answer.YES, reason)
    if later is True:
        return _regex_implied("tool_result", value, None, (), witness="")
    return _regex_implied("tool_result", value, later, (), witness=None)


def _regex_implied(
    key: str,
    pattern: str,
    later_pattern: str | None,
    later_literals: Sequence[str],
    witness: str | None,
) -> Verdict:
    """``witness``: a text the later rule accepts in this field, when one is known."""
    if pattern == later_pattern or _matches_everything(pattern):
        return Verdict(Answer.YES, f"{key} /{pattern}/")
    plain = _plain_literal(pattern)
    if plain is not None and _literal_required(plain, later_pattern, later_literals):
        return Verdict(Answer.YES, f"{key} /{pattern}/")
    if witness is not None and re.search(pattern, witness) is None:
        return Verdict(Answer.NO, f"{key} /{pattern}/")
    return Verdict(Answer.UNKNOWN, f"cannot tell whether /{pattern}/ always holds on {key}")


def _literal_required(
    plain: tuple[str, bool], later_pattern: str | None, later_literals: Sequence[str]
) -> bool:
    """Whether the later rule's field always contains the literal ``plain``."""
    literal, folded = plain
    runs, runs_folded = _runs_of(later_pattern)
    texts = [*later_literals, *([] if runs_folded else runs)]
    if not folded:
        return any(literal in text for text in texts)
    folded_texts = [t.lower() for t in [*texts, *(runs if runs_folded else [])] if t.isascii()]
    return any(literal.lower() in text for text in folded_texts)


# -- regex facts (cached: the same patterns recur across many pairs) ----------------------


@dataclass(frozen=True, slots=True)
class _RegexFacts:
    """What the comparisons ask of a pattern, from one parse of it."""

    plain: tuple[str, bool] | None  # ``(text, ignores case)`` when it is only literal text
    everything: bool  # whether ``re.search`` finds it in every text
    runs: tuple[str, ...]  # the literal runs every match contains, as written
    folded: bool  # whether it ignores case


_NOT_A_REGEX = _RegexFacts(plain=None, everything=False, runs=(), folded=False)


# One entry a pattern: a ruleset's analysis asks of each of its patterns in two passes (its
# index, then each rule's candidates), so a cache smaller than the ruleset parses every
# pattern twice over (bench/README.md, "The admin's rule list").
@functools.lru_cache(maxsize=16384)
def _facts(pattern: str) -> _RegexFacts:
    try:
        parsed = sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return _NOT_A_REGEX
    folded = bool(parsed.state.flags & re.IGNORECASE)
    runs = literal_runs_of(parsed)
    plain = None
    if parsed.data and all(op is sre.LITERAL for op, _ in parsed.data):
        text = "".join(chr(arg) for _, arg in parsed.data)
        plain = None if folded and not text.isascii() else (text, folded)
    return _RegexFacts(plain=plain, everything=_optional(parsed.data), runs=runs, folded=folded)


def _plain_literal(pattern: str) -> tuple[str, bool] | None:
    """``(text, ignores case)`` when the pattern is nothing but literal text."""
    return _facts(pattern).plain


def _matches_everything(pattern: str) -> bool:
    """Whether ``re.search`` finds the pattern in every text: it can match the empty text
    without any assertion (anchor, boundary, lookaround), so it matches at position 0."""
    return _facts(pattern).everything


def _optional(items: Any) -> bool:
    for op, arg in items:
        if op is sre.MAX_REPEAT or op is sre.MIN_REPEAT or op is sre.POSSESSIVE_REPEAT:
            if arg[0] != 0 and not _optional(arg[2]):
                return False
        elif op is sre.SUBPATTERN:
            if not _optional(arg[3]):
                return False
        elif op is sre.BRANCH:
            if not any(_optional(branch) for branch in arg[1]):
                return False
        else:
            return False
    return True


def _runs_of(pattern: str | None) -> tuple[tuple[str, ...], bool]:
    if pattern is None:
        return (), False
    facts = _facts(pattern)
    return facts.runs, facts.folded


def _case_sensitive_runs(pattern: str | None) -> tuple[str, ...]:
    runs, folded = _runs_of(pattern)
    return () if folded else runs


def _as_list(value: str | Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


# -- a whole ruleset ----------------------------------------------------------------


def shadowed_rules(rules: Sequence[Mapping[str, Any]]) -> dict[str, Shadow]:
    """Every rule (in fixture form, in order) that an earlier enabled rule shadows, by name."""
    index = _ShadowIndex(rules)
    found: dict[str, Shadow] = {}
    for i, rule in enumerate(rules):
        by = index.first_shadowing(rule.get("match") or {}, before=i)
        if by is not None:
            found[rule["name"]] = Shadow(rule["name"], i, rules[by]["name"], by)
    return found


def first_shadowing(rules: Sequence[Mapping[str, Any]], match: Match) -> int | None:
    """The index of the first enabled rule of ``rules`` that would shadow a rule placed
    after them with this ``match``; None when none is proved to."""
    return _ShadowIndex(rules).first_shadowing(match, before=len(rules))


class _ShadowIndex:
    """Finds the few earlier rules that could shadow a rule, so a large ruleset is not
    compared pair by pair: a rule that requires a literal can only shadow rules that
    require it too, and one with an intricate query regex only rules with the same one."""

    def __init__(self, rules: Sequence[Mapping[str, Any]]) -> None:
        self.matches = [rule.get("match") or {} for rule in rules]
        self.free: dict[str | None, list[int]] = {}
        self.same_query: dict[str, list[int]] = {}
        literals: dict[str, list[int]] = {}
        for i, (rule, match) in enumerate(zip(rules, self.matches, strict=True)):
            if not rule.get("enabled", True):
                continue
            literal = _anchor_literal(match)
            query = match.get("query")
            if literal is not None:
                literals.setdefault(literal.lower(), []).append(i)
            elif query is not None and not _matches_everything(query):
                self.same_query.setdefault(query, []).append(i)
            else:
                self.free.setdefault(match.get("agent_type"), []).append(i)
        self.automaton: Any = None
        if literals:
            self.automaton = ahocorasick.Automaton()
            for literal, positions in literals.items():
                self.automaton.add_word(literal, positions)
            self.automaton.make_automaton()

    def first_shadowing(self, match: Match, *, before: int) -> int | None:
        for i in sorted(p for p in self._candidates(match) if p < before):
            if shadows(self.matches[i], match).answer is Answer.YES:
                return i
        return None

    def _candidates(self, match: Match) -> set[int]:
        agent_type = match.get("agent_type")
        found = set(self.free.get(None, ()))
        if agent_type is not None:  # an untyped rule is shadowed by untyped rules only
            found.update(self.free.get(agent_type, ()))
        found.update(self.same_query.get(match.get("query") or "", ()))
        if self.automaton is not None:
            for text in _required_texts(match):
                hits = self.automaton.iter(text.lower())
                found.update(p for _, positions in hits for p in positions)
        return found


def _anchor_literal(match: Match) -> str | None:
    """A literal every question this rule matches contains (the longest one)."""
    literals = _as_list(match.get("contains"))
    query = match.get("query")
    plain = _plain_literal(query) if query is not None else None
    if plain is not None:
        literals.append(plain[0])
    return max(literals, key=len, default=None)


def _required_texts(match: Match) -> Iterable[str]:
    yield from _as_list(match.get("contains"))
    yield from _runs_of(match.get("query"))[0]
