"""Find regexes that a backtracking engine can take super-linear time on, before they are saved.

The pattern is read by Python's own parser and turned into a position
automaton (one state per character item, one edge per way of moving from one
to the next: ``(a+)+`` has two edges from ``a`` back to itself, one per loop).
A backtracking engine tries every path through it, so a pattern is refused
when some text has many paths:

* **exponential**: a loop can come back to where it started along two
  different paths reading the same text (``(a|a)*``, ``(a|aa)+``, ``(a+)+``,
  ``(\\w+\\s?)+``);
* **polynomial**: one loop can hand the same text on to a later loop
  (``\\d+\\d+$``, ``.*a.*a``, ``(a+){20}``).

Either only hurts when something after it can still fail (``$``, more text):
a loop the pattern may end with never has to give anything back. Atomic
groups and possessive repeats are never re-entered once matched, so what
they contain is checked on its own and counts outside as a single step.
Counted repeats above ``MAX_COPIES`` are checked as loops.
"""

from __future__ import annotations

import re._constants as sre  # the parser's opcodes, stable since 3.11
import re._parser as sre_parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from staticagents.core.charclasses import Ranges, char_ranges, intersect, normalize

MAX_COPIES = 10  # a counted repeat up to this is expanded copy by copy; above it, a loop
MAX_WORK = 200_000  # steps of the search for ambiguity; a pattern needing more is refused
MAX_POSITIONS = 20_000  # character items of one region, counted repeats written out
MAX_EDGES = 200_000  # (a nullable run such as a*b*c*... links every item to every later one)

EXPONENTIAL = (
    "regex can backtrack exponentially: a repeated part can match the same text in more "
    "than one way (as in (a|a)*, (a+)+ or (\\w+\\s?)+); make it unambiguous, or use an "
    "atomic group (?>...) or a possessive quantifier such as a++"
)
POLYNOMIAL = (
    "regex can backtrack in polynomial time: a repeat can hand the same text on to a later "
    "one (as in \\d+\\d+$, .*a.*a or (a+){20}); make them exclude each other, or use an "
    "atomic group (?>...) or a possessive quantifier such as a++"
)
TOO_COMPLEX = "regex is too complex to check for catastrophic backtracking: simplify it"

_CHARACTER = (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN)
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT)


def backtracking_problem(pattern: str) -> str | None:
    """Why ``pattern`` could backtrack super-linearly, or None when it cannot.

    ``pattern`` must compile with ``re``.
    """
    parsed = sre_parse.parse(pattern)
    regions: list[_Automaton] = []
    budget = _Budget()
    try:
        _Automaton.read(parsed.data, parsed.state.flags, regions)
        for automaton in regions:
            problem = automaton.problem(budget)
            if problem is not None:
                return problem
    except _OutOfWork:
        return TOO_COMPLEX
    return None


# -- the automaton -------------------------------------------------------------


@dataclass
class _Fragment:
    """Part of a pattern: where it can start and end, and ``free``: the positions after
    which the rest of it can match nothing without any assertion that could fail."""

    first: list[int] = field(default_factory=list)
    last: list[int] = field(default_factory=list)
    free: list[int] = field(default_factory=list)
    nullable: bool = True
    transparent: bool = True  # matches empty with no assertion
    # In how many ways it matches empty (at most 2: enough to show ambiguity). A position
    # is listed in ``first``/``last`` once per way, so ``(a(|))*`` gets two edges a -> a.
    empties: int = 1


ASSERTION = _Fragment(transparent=False)


def _twice(positions: list[int], times: int = 1) -> list[int]:
    """``positions`` repeated ``times``, each position kept at most twice."""
    kept: list[int] = []
    for p in positions * times:
        if kept.count(p) < 2:
            kept.append(p)
    return kept


class _Automaton:
    """Positions (character items) and edges (with repeats: parallel edges are distinct)."""

    def __init__(self, regions: list[_Automaton]) -> None:
        self.regions = regions  # every automaton of the pattern, this one included
        self.chars: list[int] = []  # each position's characters, as an index in ``classes``
        self.classes: list[Ranges] = []
        self.class_index: dict[Ranges, int] = {}
        self.meets: dict[tuple[int, int], int] = {}  # intersections; -1 when empty
        self.edges: list[tuple[int, int]] = []
        self.groups: dict[int, tuple[Any, int]] = {}
        self.free: frozenset[int] = frozenset()

    @classmethod
    def read(
        cls, items: Any, flags: int, regions: list[_Automaton]
    ) -> tuple[_Automaton, _Fragment]:
        """Add the automaton of a region (the pattern, or a part matched on its own)."""
        automaton = cls(regions)
        regions.append(automaton)
        fragment = automaton.sequence(items, flags)
        automaton.free = frozenset(fragment.free)
        return automaton, fragment

    # building

    def sequence(self, items: Iterable[Any], flags: int) -> _Fragment:
        fragment = _Fragment()
        for op, arg in items:
            fragment = self.concat(fragment, self.item(op, arg, flags))
        return fragment

    def item(self, op: Any, arg: Any, flags: int) -> _Fragment:
        if op in _CHARACTER:
            return self.position(char_ranges(op, arg, flags))
        if op is sre.BRANCH:
            return self.either(self.sequence(branch, flags) for branch in arg[1])
        if op is sre.SUBPATTERN:
            group, add, remove, body = arg
            inner = (flags | add) & ~remove
            fragment = self.sequence(body, inner)
            if group is not None:
                self.groups[group] = (body, inner)
            return fragment
        if op in _REPEATS:
            low, high, body = arg
            return self.repeat(low, high, lambda: self.sequence(body, flags))
        if op is sre.POSSESSIVE_REPEAT:
            return self.atomic([(sre.MAX_REPEAT, arg)], flags)
        if op is sre.ATOMIC_GROUP:
            return self.atomic(arg, flags)
        if op is sre.ASSERT or op is sre.ASSERT_NOT:
            _Automaton.read(arg[1], flags, self.regions)
            return ASSERTION
        if op is sre.GROUPREF and arg in self.groups:
            body, inner = self.groups[arg]
            return self.sequence(body, inner)  # the same text again: modeled by its group
        if op is sre.GROUPREF_EXISTS:
            _group, yes, no = arg
            choice = self.either([self.sequence(yes, flags), self.sequence(no or [], flags)])
            return self.concat(ASSERTION, choice)
        return ASSERTION  # \b, ^, $ and the like: match nothing, may fail

    def position(self, chars: Ranges) -> _Fragment:
        if len(self.chars) >= MAX_POSITIONS:
            raise _OutOfWork
        self.chars.append(self.intern(chars))
        p = len(self.chars) - 1
        return _Fragment([p], [p], [p], nullable=False, transparent=False, empties=0)

    def intern(self, chars: Ranges) -> int:
        if chars not in self.class_index:
            self.class_index[chars] = len(self.classes)
            self.classes.append(chars)
        return self.class_index[chars]

    def meet(self, a: int, b: int) -> int:
        """The class of the characters both classes hold (-1: none)."""
        if a == b or a < 0 or b < 0:
            return a if a == b else -1
        key = (a, b) if a < b else (b, a)
        if key not in self.meets:
            both = intersect(self.classes[a], self.classes[b])
            self.meets[key] = self.intern(both) if both else -1
        return self.meets[key]

    def concat(self, a: _Fragment, b: _Fragment) -> _Fragment:
        self.link(a.last, b.first)
        return _Fragment(
            first=_twice(a.first + _twice(b.first, a.empties)),
            last=_twice(b.last + _twice(a.last, b.empties)),
            free=b.free + a.free if b.transparent else b.free,
            nullable=a.nullable and b.nullable,
            transparent=a.transparent and b.transparent,
            empties=min(a.empties * b.empties, 2),
        )

    def either(self, fragments: Iterable[_Fragment]) -> _Fragment:
        result = _Fragment(nullable=False, transparent=False, empties=0)
        for f in fragments:
            result.first = _twice(result.first + f.first)
            result.last = _twice(result.last + f.last)
            result.free += f.free
            result.nullable |= f.nullable
            result.transparent |= f.transparent
            result.empties = min(result.empties + f.empties, 2)
        return result

    def repeat(self, low: int, high: int, copy: Any) -> _Fragment:
        if high > MAX_COPIES:  # MAXREPEAT too
            mandatory = [copy() for _ in range(min(low, 2) - 1)]
            fragment = self.loop(copy(), optional=low == 0)
        else:
            mandatory = [copy() for _ in range(low)]
            fragment = _Fragment()
            for _ in range(high - low):
                fragment = self.concat(fragment, self.optional(copy()))
        for part in reversed(mandatory):
            fragment = self.concat(part, fragment)
        return fragment

    def loop(self, body: _Fragment, *, optional: bool) -> _Fragment:
        self.link(body.last, body.first)
        return self.optional(body) if optional else body

    def optional(self, body: _Fragment) -> _Fragment:
        empties = min(body.empties + 1, 2)
        return _Fragment(body.first, body.last, body.free, True, True, empties)

    def atomic(self, body: Any, flags: int) -> _Fragment:
        """Checked on its own; outside, one step over the characters it can start with."""
        owner, inner = _Automaton.read(body, flags, self.regions)
        chars = normalize([r for p in inner.first for r in owner.classes[owner.chars[p]]])
        if not chars:
            return ASSERTION if inner.nullable else _Fragment(nullable=False, transparent=False)
        step = self.position(chars)
        if inner.nullable:  # one way or none: atomic
            return _Fragment(step.first, step.last, step.free, nullable=True, transparent=False)
        return step

    # checking

    def link(self, sources: list[int], targets: list[int]) -> None:
        if len(self.edges) + len(sources) * len(targets) > MAX_EDGES:
            raise _OutOfWork
        self.edges.extend((p, q) for p in sources for q in targets)

    def problem(self, budget: _Budget) -> str | None:
        self.out: dict[int, list[tuple[int, int]]] = {}
        for index, (p, q) in enumerate(self.edges):
            self.out.setdefault(p, []).append((index, q))
        components = _components(len(self.chars), self.edges)
        loops = [
            c
            for c in components
            if len(c) > 1 or any(q in c for p in c for _, q in self.out.get(p, ()))
        ]
        if not loops:
            return None
        for component in loops:
            if self.exponential(component, budget):
                return EXPONENTIAL
        if self.polynomial(loops, budget):
            return POLYNOMIAL
        return None

    def exponential(self, component: frozenset[int], budget: _Budget) -> bool:
        """Two different paths reading the same text from a position back to itself."""
        if component <= self.free:
            return False  # whatever fails after it, the pattern ends there instead
        out = {
            p: [(index, q) for index, q in self.out.get(p, ()) if q in component] for p in component
        }
        pairs: dict[tuple[int, int], list[tuple[tuple[int, int], bool]]] = {}
        for p in component:
            for q in component:
                budget.spend()
                if p <= q and self.meet(self.chars[p], self.chars[q]) >= 0:
                    pairs[(p, q)] = []
        for p, q in pairs:
            for e1, p2 in out.get(p, ()):
                for e2, q2 in out.get(q, ()):
                    budget.spend()
                    key = (min(p2, q2), max(p2, q2))
                    if key in pairs:
                        pairs[(p, q)].append((key, e1 != e2))
        graph = {node: [target for target, _ in targets] for node, targets in pairs.items()}
        for group in _components_of(graph):
            if not any(p == q for p, q in group):
                continue
            if any(differ and t in group for n in group for t, differ in pairs[n]):
                return True
        return False

    def polynomial(self, loops: list[frozenset[int]], budget: _Budget) -> bool:
        """A loop reading some text, and a later loop the same text can reach and repeat."""
        harmful = [late for late in loops if not late <= self.free]
        if not harmful:
            return False
        reach = _reachability(len(self.chars), self.edges, budget)
        for early in loops:
            for late in harmful:
                budget.spend()
                if early is late:
                    continue
                p0 = next(iter(early))
                if next(iter(late)) not in reach[p0]:
                    continue
                if self.hands_on(early, late, reach, budget):
                    return True
        return False

    def hands_on(
        self,
        early: frozenset[int],
        late: frozenset[int],
        reach: list[set[int]],
        budget: _Budget,
    ) -> bool:
        """Whether p -w-> p, p -w-> q and q -w-> q for some p in early, q in late, text w."""
        q0 = next(iter(late))
        budget.spend(len(self.chars))
        between = {y for y in reach[next(iter(early))] if q0 in reach[y]} | early
        out = {p: [q for _, q in targets] for p, targets in self.out.items()}
        for p in early:
            for q in late:
                seen = {(p, p, q)}
                todo = [(p, p, q)]
                while todo:
                    x, y, z = todo.pop()
                    for x2 in out.get(x, ()):
                        if x2 not in early:
                            continue
                        for y2 in out.get(y, ()):
                            if y2 not in between and y2 not in late:
                                continue
                            chars = self.meet(self.chars[x2], self.chars[y2])
                            if chars < 0:
                                continue
                            for z2 in out.get(z, ()):
                                budget.spend()
                                if z2 in late and self.meet(chars, self.chars[z2]) >= 0:
                                    state = (x2, y2, z2)
                                    if state == (p, q, q):
                                        return True
                                    if state not in seen:
                                        seen.add(state)
                                        todo.append(state)
        return False


# -- graphs --------------------------------------------------------------------


class _OutOfWork(Exception):
    pass


class _Budget:
    def __init__(self) -> None:
        self.left = MAX_WORK

    def spend(self, steps: int = 1) -> None:
        self.left -= steps
        if self.left < 0:
            raise _OutOfWork


def _components(size: int, edges: list[tuple[int, int]]) -> list[frozenset[int]]:
    graph: dict[int, list[int]] = {node: [] for node in range(size)}
    for p, q in edges:
        graph[p].append(q)
    return _components_of(graph)


def _components_of(graph: dict[Any, list[Any]]) -> list[frozenset[Any]]:
    """Strongly connected components (Tarjan's algorithm, without recursion)."""
    index: dict[Any, int] = {}
    low: dict[Any, int] = {}
    stack: list[Any] = []
    on_stack: set[Any] = set()
    result: list[frozenset[Any]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph.get(target, ()))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    result.append(frozenset(component))
    return result


def _reachability(size: int, edges: list[tuple[int, int]], budget: _Budget) -> list[set[int]]:
    """For each position, the positions reachable from it in one or more steps."""
    out: list[set[int]] = [set() for _ in range(size)]
    for p, q in edges:
        out[p].add(q)
    reach: list[set[int]] = []
    for start in range(size):
        seen: set[int] = set()
        todo = list(out[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                budget.spend()
                seen.add(node)
                todo.extend(out[node])
        reach.append(seen)
    return reach
