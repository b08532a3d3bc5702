"""Compile rule documents into an immutable snapshot and match inquiries against it.

Galaxy's semantics, exactly: the first enabled rule whose every predicate holds
wins; a rule without ``agent_type`` serves every type; ``query`` is an unanchored
``re.search``; ``context`` fails closed on a missing or empty context.

Regexes run in bounded time (``core.regexes``): a rule whose regex runs out of
the inquiry's time budget does not answer it (it fails closed), and the
``Deadline`` of the inquiry names it, for the journal and ``explain``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import ahocorasick
import orjson

from staticagents.core.inquiry import Inquiry
from staticagents.core.literals import Gate, required_literal
from staticagents.core.regexes import (
    DEFAULT_BUDGET,
    SURROGATE,
    Deadline,
    MatchTimeout,
    Searcher,
)
from staticagents.core.routing import STATIC_ROUTING, Routing

# Regexes run on at most this many characters of any text, so no inquiry can make
# a rule's pattern take unbounded time (issue: hostile input).
DEFAULT_MATCH_WINDOW = 100_000


@dataclass(frozen=True, slots=True)
class Predicate:
    """One condition of a rule: ``holds`` decides, ``explain`` says why it failed."""

    key: str
    holds: Callable[[Inquiry, Deadline], bool]
    explain: Callable[[Inquiry, Deadline], str]


@dataclass(frozen=True, slots=True)
class CompiledRule:
    name: str
    position: int
    agent_type: str | None
    predicates: tuple[Predicate, ...]
    responses: tuple[Mapping[str, Any], ...]
    sequence: bool
    on_exhausted: str
    gate: Gate | None = None  # a literal the query must contain for this rule to match
    timed_texts: str = "none"  # which texts its patterns send to the timed engine (Ruleset's)
    # Decided once, when the rule is compiled (read on every answer):
    # whether the reply depends on the session's position in this rule's script
    # (a one-reply script that fails when exhausted counts: its second match must fail),
    sequenced: bool = field(init=False)
    # and whether answering needs per-session counters from the database.
    stateful: bool = field(init=False)

    def __post_init__(self) -> None:
        sequenced = self.sequence and (len(self.responses) > 1 or self.on_exhausted == "error")
        stateful = sequenced or any(r.get("fail_first") or r.get("chaos") for r in self.responses)
        object.__setattr__(self, "sequenced", sequenced)
        object.__setattr__(self, "stateful", stateful)

    def matches(self, inquiry: Inquiry, deadline: Deadline) -> bool:
        """Whether every predicate holds; False (and noted) when one ran out of time."""
        predicate = None
        try:
            # A plain loop: all() over a generator costs twice as much, on every candidate.
            for predicate in self.predicates:
                if not predicate.holds(inquiry, deadline):
                    return False
        except MatchTimeout:
            deadline.overruns[self.name] = predicate.key if predicate else ""
            return False
        return True


@dataclass(frozen=True, slots=True)
class RuleVerdict:
    """Why one rule did or did not answer an inquiry (for ``explain``)."""

    rule: str
    matched: bool
    predicate: str | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        # dataclasses.asdict deep-copies: thirty times slower, on the fallback's path.
        return {
            "rule": self.rule,
            "matched": self.matched,
            "predicate": self.predicate,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class RuleGroup:
    """The rules that can serve one agent type, in order, split by the literal index.

    ``free`` rules are always tried; a ``gated`` rule needs a literal in the
    query, so it is tried only when the index finds that literal there.
    """

    free: tuple[CompiledRule, ...] = ()
    gated: frozenset[int] = frozenset()


@dataclass(frozen=True, eq=False)
class Ruleset:
    """An immutable, compiled snapshot of the rules, defaults and fallback.

    Compared by identity: each compilation is a snapshot of its own (and a key
    for what is derived from it, such as ``core.replies``' rendered responses).
    """

    stamp: str
    rules: tuple[CompiledRule, ...]
    defaults: Mapping[str, Any]
    fallback: Mapping[str, Any] | None
    groups: Mapping[str, RuleGroup] = field(default_factory=dict)
    untyped: RuleGroup = RuleGroup()
    literals: Any = None  # Aho-Corasick automaton: literal → positions of rules gated on it
    folded_literals: Any = None  # the same for case-insensitive literals, over query.lower()
    folded_gated: frozenset[int] = frozenset()
    by_position: Mapping[int, CompiledRule] = field(default_factory=dict)
    # Sessions' own scripts (``compile_scripts``), tried before any rule for their session.
    scripts: Mapping[str, CompiledRule] = field(default_factory=dict)
    budget: float = DEFAULT_BUDGET  # seconds of timed regex search per inquiry
    # Which texts take the timed engine: any (a pattern RE2 cannot run), non-ASCII ones
    # (a Unicode \b), or only those with a lone surrogate (any regex).
    timed_texts: str = "none"  # "any", "non-ascii", "surrogates", "none"
    # Which agent types an upstream answers instead of the rules (``core.routing``).
    routing: Routing = STATIC_ROUTING

    def deadline(self, inquiry: Inquiry | None = None) -> Deadline:
        """The deadline for matching ``inquiry``: a fresh one, or (when no timed search can
        run for it) a shared one that nothing reads, which is cheaper to hand out."""
        if inquiry is not None and not self.may_take_time(inquiry):
            return NO_TIMED_SEARCH
        return Deadline(self.budget)

    def may_take_time(self, inquiry: Inquiry) -> bool:
        """Whether matching ``inquiry`` may run a timed search (up to the budget): a caller
        on an event loop then matches in a thread."""
        if self.timed_texts == "any" or self.timed_texts == "none":
            return self.timed_texts == "any"
        if (
            inquiry.query.isascii()
            and inquiry.system.isascii()
            and inquiry.model.isascii()
            and (inquiry.tool_result is None or inquiry.tool_result.isascii())
            and not inquiry.context
        ):
            return False  # RE2 reads every ASCII text exactly
        texts = [inquiry.query, inquiry.system, inquiry.model, inquiry.tool_result or ""]
        texts += [str(value) for value in (inquiry.context or {}).values()]
        wide = [text for text in texts if not text.isascii()]
        if self.timed_texts == "non-ascii":
            return bool(wide)
        return any(SURROGATE.search(text) for text in wide)

    def candidates(self, inquiry: Inquiry) -> Iterable[CompiledRule]:
        """The rules that may answer, in order: other types' rules and rules whose
        required literal is absent from the query are never tried."""
        group = self.groups.get(inquiry.agent_type, self.untyped)
        if not group.gated:
            return group.free
        hits = sorted(self._found(inquiry.query) & group.gated)
        if not hits:
            return group.free
        gated = [self.by_position[p] for p in hits]
        if not group.free:
            return gated
        return heapq.merge(group.free, gated, key=lambda rule: rule.position)

    def _found(self, query: str) -> set[int]:
        """Positions of gated rules whose literal occurs in ``query``."""
        found: set[int] = set()
        if self.literals is not None:
            found.update(p for _, positions in self.literals.iter(query) for p in positions)
        if self.folded_literals is not None:
            if query.isascii():
                lowered = query.lower()
                found.update(
                    p for _, positions in self.folded_literals.iter(lowered) for p in positions
                )
            else:
                # Case-insensitive regexes match some non-ASCII letters that lower()
                # does not map (dotless i, long s): try every folded rule instead.
                found.update(self.folded_gated)
        return found

    @property
    def agent_types(self) -> list[str]:
        """The agent types a rule names, or a mode."""
        if not self.routing.agent_types:
            return sorted(self.groups)
        return sorted({*self.groups, *self.routing.agent_types})


class RuleCompiler:
    """Compiles the rules of successive snapshots, reusing every rule whose document
    (with the match window and the defaults' chaos) is the same as in one of the two
    snapshots before (so rules that alternate, as a test's own and the demo do, stay
    compiled); ``compiled`` counts the rules it actually compiled."""

    def __init__(self) -> None:
        self.compiled = 0
        self._known: dict[tuple[bytes, int, bytes], CompiledRule] = {}
        self._older: dict[tuple[bytes, int, bytes], CompiledRule] = {}

    def compile(
        self,
        rules: Sequence[Mapping[str, Any]],
        *,
        window: int,
        chaos: Mapping[str, Any] | None = None,
    ) -> list[CompiledRule]:
        known, older = self._known, self._older
        self._known, self._older = {}, known
        chaos_key = orjson.dumps(chaos, option=orjson.OPT_SORT_KEYS)
        searchers: dict[str, Searcher] = {}  # one compilation per distinct new pattern
        result = []
        for position, rule in enumerate(rules):
            if not rule.get("enabled", True):
                continue
            key = (orjson.dumps(rule, option=orjson.OPT_SORT_KEYS), window, chaos_key)
            compiled = known.get(key) or older.get(key)
            if compiled is None:
                compiled = compile_rule(
                    rule, position=position, window=window, chaos=chaos, searchers=searchers
                )
                self.compiled += 1
            elif compiled.position != position:
                compiled = replace(compiled, position=position)
            self._known[key] = compiled
            result.append(compiled)
        while older:  # freed one by one: all at once held the GIL 0.4 s at 45,000 rules
            older.popitem()
        return result


def compile_ruleset(
    *,
    stamp: str,
    rules: Sequence[Mapping[str, Any]],
    defaults: Mapping[str, Any] | None = None,
    fallback: Mapping[str, Any] | None = None,
    window: int = DEFAULT_MATCH_WINDOW,
    scripts: Mapping[str, CompiledRule] | None = None,
    compiler: RuleCompiler | None = None,
    budget: float = DEFAULT_BUDGET,
) -> Ruleset:
    """The snapshot of ``rules`` (in order; disabled ones left out) and the sessions' scripts;
    ``compiler`` reuses what an earlier snapshot compiled."""
    compiled = tuple(
        (compiler or RuleCompiler()).compile(
            rules, window=window, chaos=(defaults or {}).get("chaos")
        )
    )
    untyped = [rule for rule in compiled if rule.agent_type is None]
    typed: dict[str, list[CompiledRule]] = {}
    for rule in compiled:
        if rule.agent_type is not None:
            typed.setdefault(rule.agent_type, []).append(rule)
    groups = {
        agent_type: _group(heapq.merge(untyped, own, key=lambda rule: rule.position))
        for agent_type, own in typed.items()
    }
    return Ruleset(
        stamp=stamp,
        rules=compiled,
        defaults=dict(defaults or {}),
        fallback=dict(fallback) if fallback is not None else None,
        groups=groups,
        untyped=_group(untyped),
        literals=_literal_index([r for r in compiled if r.gate and not r.gate.folded]),
        folded_literals=_literal_index([r for r in compiled if r.gate and r.gate.folded]),
        folded_gated=frozenset(r.position for r in compiled if r.gate and r.gate.folded),
        by_position={rule.position: rule for rule in compiled},
        scripts=dict(scripts or {}),
        budget=budget,
        timed_texts=_strongest_timed_texts(
            [rule.timed_texts for rule in (*compiled, *(scripts or {}).values())]
        ),
    )


def compile_scripts(
    scripts: Mapping[str, tuple[int, Mapping[str, Any]]],
    *,
    window: int = DEFAULT_MATCH_WINDOW,
    previous: Mapping[str, CompiledRule] | None = None,
) -> dict[str, CompiledRule]:
    """Each session's script (its stored row's id and a rule document without ``match``),
    compiled; a session whose script is the one in ``previous`` (an earlier snapshot's)
    keeps that compiled form, so a new script compiles itself alone.

    A script's position is its row's id, negated: positions key what a snapshot renders
    once per response (``core.replies``), no rule has a negative one, and a script
    ending elsewhere moves no other.
    """
    previous = previous or {}
    compiled = {}
    for session, (row, document) in scripts.items():
        kept = previous.get(session)
        if kept is None or not _same_script(kept, document):
            kept = compile_rule(document, position=-row, window=window)
        elif kept.position != -row:
            kept = replace(kept, position=-row)
        compiled[session] = kept
    return compiled


def _same_script(compiled: CompiledRule, document: Mapping[str, Any]) -> bool:
    """Whether ``compiled`` is the script ``document`` compiles to (a script has no
    match: its name, responses and end are all there is)."""
    return (
        compiled.name == document.get("name")
        and compiled.on_exhausted == document.get("on_exhausted", "repeat_last")
        and compiled.responses == tuple(document.get("responses") or ())
    )


TIMED_TEXTS = ("any", "non-ascii", "surrogates")  # strongest first; else "none"


def _timed_texts(searchers: Iterable[Searcher]) -> str:
    """Which texts may take the timed engine (``Ruleset.timed_texts``)."""
    return _strongest_timed_texts(
        "any" if s.linear is None else "non-ascii" if s.ascii_only else "surrogates"
        for s in searchers
    )


def _strongest_timed_texts(kinds: Iterable[str]) -> str:
    found = set(kinds)
    return next((kind for kind in TIMED_TEXTS if kind in found), "none")


NO_TIMED_SEARCH = Deadline(0.0)  # handed out where no timed search can run: never read


def _group(rules: Iterable[CompiledRule]) -> RuleGroup:
    ordered = list(rules)
    return RuleGroup(
        free=tuple(rule for rule in ordered if rule.gate is None),
        gated=frozenset(rule.position for rule in ordered if rule.gate is not None),
    )


def _literal_index(rules: Sequence[CompiledRule]) -> Any:
    gates: dict[str, list[int]] = {}
    for rule in rules:
        if rule.gate is not None:
            gates.setdefault(rule.gate.literal, []).append(rule.position)
    if not gates:
        return None
    automaton = ahocorasick.Automaton()
    for literal, positions in gates.items():
        automaton.add_word(literal, tuple(positions))
    automaton.make_automaton()
    return automaton


def compile_rule(
    rule: Mapping[str, Any],
    *,
    position: int,
    window: int,
    chaos: Mapping[str, Any] | None = None,
    searchers: dict[str, Searcher] | None = None,
) -> CompiledRule:
    """``chaos`` (the defaults') goes to each response that scripts no error, fault or
    chaos of its own; ``searchers`` compiles each distinct pattern once across rules."""
    match: Mapping[str, Any] = rule.get("match") or {}
    sequence = "responses" in rule
    responses = tuple(rule["responses"]) if sequence else (rule.get("response") or {},)
    if chaos:
        responses = tuple(_with_chaos(response, chaos) for response in responses)
    used: dict[str, Searcher] = {}
    predicates = tuple(_predicates(match, window, {} if searchers is None else searchers, used))
    return CompiledRule(
        name=str(rule.get("name") or f"rule-{position + 1}"),
        position=position,
        agent_type=match.get("agent_type"),
        predicates=predicates,
        responses=responses,
        sequence=sequence,
        on_exhausted=str(rule.get("on_exhausted", "repeat_last")),
        gate=_gate(match),
        timed_texts=_timed_texts(used.values()),
    )


def _with_chaos(response: Mapping[str, Any], chaos: Mapping[str, Any]) -> Mapping[str, Any]:
    if any(key in response for key in ("error", "fault", "chaos")):
        return response
    return {**response, "chaos": chaos}


def match_inquiry(
    ruleset: Ruleset, inquiry: Inquiry, deadline: Deadline | None = None
) -> CompiledRule | None:
    """The session's script if it has one, else the first enabled rule whose every
    predicate holds, else None (the fallback answers).

    ``deadline`` (default: a fresh one) bounds the timed searches and names the rules
    that ran out of it.
    """
    if ruleset.scripts:
        script = ruleset.scripts.get(inquiry.session)
        if script is not None:
            return script
    if deadline is None:
        deadline = ruleset.deadline(inquiry)
    for rule in ruleset.candidates(inquiry):
        if rule.matches(inquiry, deadline):
            return rule
    return None


def explain_inquiry(
    ruleset: Ruleset, inquiry: Inquiry, deadline: Deadline | None = None
) -> list[RuleVerdict]:
    """For every rule up to the one that answers, which predicate failed and why.

    Given the deadline ``match_inquiry`` used, a rule that ran out of time then is
    reported as such without searching again.
    """
    if inquiry.session in ruleset.scripts:
        return [RuleVerdict(ruleset.scripts[inquiry.session].name, True)]
    if deadline is None:
        deadline = ruleset.deadline()
    verdicts: list[RuleVerdict] = []
    for rule in ruleset.rules:
        if rule.agent_type is not None and rule.agent_type != inquiry.agent_type:
            verdicts.append(
                RuleVerdict(
                    rule.name,
                    False,
                    "agent_type",
                    f"agent type {inquiry.agent_type!r} is not {rule.agent_type!r}",
                )
            )
            continue
        if rule.name not in deadline.overruns:
            failed = _failed_predicate(rule, inquiry, deadline)
            if failed is None:
                verdicts.append(RuleVerdict(rule.name, True))
                break
            if rule.name not in deadline.overruns:
                reason = failed.explain(inquiry, deadline)
                verdicts.append(RuleVerdict(rule.name, False, failed.key, reason))
                continue
        key = deadline.overruns[rule.name]
        verdicts.append(RuleVerdict(rule.name, False, key, _overrun(key, ruleset.budget)))
    return verdicts


def _failed_predicate(rule: CompiledRule, inquiry: Inquiry, deadline: Deadline) -> Any:
    """The first predicate that does not hold (noting a timeout as ``matches`` does)."""
    for predicate in rule.predicates:
        try:
            if not predicate.holds(inquiry, deadline):
                return predicate
        except MatchTimeout:
            deadline.overruns[rule.name] = predicate.key
            return predicate
    return None


def _overrun(key: str, budget: float) -> str:
    return (
        f"the {key} regex ran out of the {budget * 1000:g} ms time budget of an inquiry: "
        "the rule fails closed"
    )


# -- predicates ---------------------------------------------------------------


def _predicates(
    match: Mapping[str, Any],
    window: int,
    searchers: dict[str, Searcher],
    used: dict[str, Searcher],
) -> Iterable[Predicate]:
    """The rule's predicates; each pattern's searcher comes from ``searchers`` (made there
    when new) and is noted in ``used``."""

    def searcher(pattern: str) -> Searcher:
        if pattern not in searchers:
            searchers[pattern] = Searcher(pattern)
        used[pattern] = searchers[pattern]
        return searchers[pattern]

    # agent_type is handled by the per-type index, so it needs no predicate here.
    if "query" in match:
        yield _regex_predicate("query", searcher(match["query"]), lambda i: i.query, window)
    if "contains" in match:
        yield _contains_predicate(match["contains"])
    if "context" in match:
        fields = {name: searcher(pattern) for name, pattern in match["context"].items()}
        yield _context_predicate(fields, window)
    if "model" in match:
        yield _regex_predicate("model", searcher(match["model"]), lambda i: i.model, window)
    if "system" in match:
        yield _regex_predicate("system", searcher(match["system"]), lambda i: i.system, window)
    if "dialect" in match:
        yield _equals_predicate("dialect", match["dialect"], lambda i: i.dialect)
    if "turn" in match:
        yield _equals_predicate("turn", match["turn"], lambda i: i.turn)
    if "tool_result" in match:
        expected = match["tool_result"]
        yield _tool_result_predicate(
            expected if isinstance(expected, bool) else searcher(expected), window
        )


def _regex_predicate(
    key: str, searcher: Searcher, field_of: Callable[[Inquiry], str], window: int
) -> Predicate:
    search = searcher.search
    return Predicate(
        key,
        lambda i, d: search(field_of(i)[:window], d),
        lambda i, d: f"{key} {_clip(field_of(i))!r} does not match /{searcher.pattern}/",
    )


def _contains_predicate(value: str | Sequence[str]) -> Predicate:
    needles = (value,) if isinstance(value, str) else tuple(value)

    def missing(inquiry: Inquiry) -> list[str]:
        return [n for n in needles if n not in inquiry.query]

    return Predicate(
        "contains",
        lambda i, d: all(n in i.query for n in needles),
        lambda i, d: f"query does not contain {', '.join(map(repr, missing(i)))}",
    )


def _context_predicate(fields: Mapping[str, Searcher], window: int) -> Predicate:
    def failure(inquiry: Inquiry, deadline: Deadline) -> str | None:
        context = inquiry.context
        if not context:
            return "the inquiry has no context"
        for name, searcher in fields.items():
            if name not in context:
                return f"context has no field {name!r}"
            value = str(context[name])
            if not searcher.search(value[:window], deadline):
                return f"context.{name} {_clip(value)!r} does not match /{searcher.pattern}/"
        return None

    return Predicate(
        "context", lambda i, d: failure(i, d) is None, lambda i, d: failure(i, d) or ""
    )


def _equals_predicate(
    key: str, expected: object, field_of: Callable[[Inquiry], object]
) -> Predicate:
    return Predicate(
        key,
        lambda i, d: field_of(i) == expected,
        lambda i, d: f"{key} is {field_of(i)!r}, not {expected!r}",
    )


def _tool_result_predicate(expected: bool | Searcher, window: int) -> Predicate:
    if isinstance(expected, bool):
        return Predicate(
            "tool_result",
            lambda i, d: (i.tool_result is not None) is expected,
            lambda i, d: (
                "the last message is not a tool result"
                if expected
                else "the last message is a tool result"
            ),
        )
    searcher = expected

    def holds(inquiry: Inquiry, deadline: Deadline) -> bool:
        result = inquiry.tool_result
        return result is not None and searcher.search(result[:window], deadline)

    def explain(inquiry: Inquiry, deadline: Deadline) -> str:
        if inquiry.tool_result is None:
            return "the last message is not a tool result"
        return f"tool result {_clip(inquiry.tool_result)!r} does not match /{searcher.pattern}/"

    return Predicate("tool_result", holds, explain)


def _literals(match: Mapping[str, Any]) -> tuple[str, ...]:
    contains = match.get("contains")
    if contains is None:
        return ()
    return (contains,) if isinstance(contains, str) else tuple(contains)


def _gate(match: Mapping[str, Any]) -> Gate | None:
    """The longest literal the query must contain, from ``contains`` or the ``query`` regex."""
    gates = [Gate(literal) for literal in _literals(match)]
    query = match.get("query")
    if isinstance(query, str) and (from_regex := required_literal(query)) is not None:
        gates.append(from_regex)
    return max(gates, key=lambda gate: (not gate.folded, len(gate.literal)), default=None)


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
