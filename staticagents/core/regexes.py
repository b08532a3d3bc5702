"""Rule regexes, searched in bounded time with Python's ``re`` semantics.

A pattern is read by Python's parser and written out again for RE2, a
linear-time engine, with every character item spelled as the exact set of
code points ``re`` would match (``core.charclasses``): case folding, ``\\d``,
``\\w``, ``.`` and the anchors keep their meaning, whatever RE2's defaults.
What RE2 cannot do (lookaround, backreferences, atomic groups, possessive
repeats, ``$`` before more pattern, repeats above 1,000) and the texts its
translation cannot read exactly (a lone surrogate; non-ASCII text under a
Unicode ``\\b``) go to the ``regex`` module with a timeout: the time left in
the inquiry's ``Deadline``. Running out raises ``MatchTimeout``.
"""

from __future__ import annotations

import functools
import re
import re._constants as sre  # the parser's opcodes, stable since 3.11
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import re2
from re2 import _re2  # the binding itself: re2.compile's Python layer costs 8x the search

from staticagents.core.charclasses import MAX_CODE, Ranges, char_ranges, parsed_pattern

DEFAULT_BUDGET = 0.05  # seconds of timed search one inquiry may spend, over all its rules
RE2_MAX_REPEAT = 1000
# RE2 expands counted repeats when it compiles: \w{1000} (734 ranges, a thousand times)
# takes seconds. Ranges times repeat counts above this go to the timed engine instead.
RE2_MAX_SIZE = 20_000
# The regex module expands counted repeats too (((\w{1000}){1000}){1000} exhausts memory):
# a pattern whose repeats expand to more items than this is refused when saved, and one
# already stored never answers (it fails closed).
MAX_EXPANDED = 100_000

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.never_capture = True
_RE2_OPTIONS.log_errors = False
_RE2_OPTIONS.max_mem = 64 << 20  # Unicode classes such as \w make big programs
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED
_MULTILINE, _ASCII = int(re.MULTILINE), int(re.ASCII)  # ints: the enum's & is slow


SURROGATE = re.compile("[\ud800-\udfff]")  # RE2 reads UTF-8: these take the timed engine


class MatchTimeout(Exception):
    """A timed search ran out of the inquiry's budget."""


class Deadline:
    """The time one inquiry's timed searches may take in all, and which rules ran out of it.

    The clock starts at the first timed search (RE2's are linear and need none);
    ``overruns`` maps each rule that ran out of time to the predicate that did.
    """

    __slots__ = ("budget", "overruns", "started")
    clock: Callable[[], float] = staticmethod(time.monotonic)  # a test's subclass sets its own

    def __init__(self, budget: float = DEFAULT_BUDGET) -> None:
        # Made for every inquiry: as little as can be.
        self.budget = budget
        self.started: float | None = None
        self.overruns: dict[str, str] = {}

    def remaining(self) -> float:
        now = self.clock()
        if self.started is None:
            self.started = now
        return self.budget - (now - self.started)


class Searcher:
    """``re.search(pattern, text) is not None``, in time bounded by RE2 or by a deadline."""

    __slots__ = ("_timed", "ascii_only", "empty", "linear", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.linear: Any = None
        self.ascii_only = False
        self.empty: bool | None = None
        # Compiled when first needed: most patterns never need it, and it costs more than RE2.
        self._timed: Any = _NOT_YET
        parsed = parsed_pattern(pattern)  # one parse for the size and the translation
        if parsed is not None and _expanded(parsed) > MAX_EXPANDED:
            self._timed = False  # no engine: every search fails closed
            return
        translation = None if parsed is None else _translated(parsed)
        if translation is not None:
            compiled = _re2.RE2(translation.pattern.encode(), _RE2_OPTIONS)
            if compiled.ok():  # else too big for RE2: the timed engine takes it
                self.linear = compiled
            self.ascii_only = translation.ascii_only
        # The answer for the empty text, where re's \B never holds and the engines' does.
        if translation is not None and translation.non_boundary:
            self.empty = _re2_search(to_re2(pattern, empty_text=True), b"")
        elif translation is None and r"\B" in pattern:
            self.empty = re.search(pattern, "") is not None
        if self.linear is None:
            self.timed()

    @property
    def engine(self) -> str:
        return "re2" if self.linear is not None else "regex"

    def search(self, text: str, deadline: Deadline) -> bool:
        if not text and self.empty is not None:
            return self.empty
        if self.linear is not None and (not self.ascii_only or text.isascii()):
            try:
                encoded = text.encode()
            except UnicodeEncodeError:
                pass  # a lone surrogate: RE2 reads UTF-8 only
            else:
                span: tuple[int, int] = self.linear.Match(_UNANCHORED, encoded, 0, len(encoded))[0]
                return span[0] >= 0
        timed = self.timed()
        remaining = deadline.remaining()
        if remaining <= 0 or timed is None:
            raise MatchTimeout
        try:
            # concurrent: the GIL is released, so a caller's other threads keep running.
            return timed.search(text, timeout=remaining, concurrent=True) is not None
        except TimeoutError:
            raise MatchTimeout from None

    def timed(self) -> Any:
        """The ``regex`` module's compilation, or None when it cannot compile the pattern
        (then a text RE2 cannot read fails closed)."""
        if self._timed is _NOT_YET:
            # Imported here: most services never need it, and it cost their start 6 ms.
            import regex

            try:
                self._timed = regex.compile(self.pattern, regex.VERSION0)
            except (regex.error, RecursionError, OverflowError):
                self._timed = False
        return self._timed or None


_NOT_YET = object()


def expanded_size(pattern: str) -> int:
    """How many items ``pattern`` holds with its counted repeats written out."""
    parsed = parsed_pattern(pattern)
    return 0 if parsed is None else _expanded(parsed)


def _expanded(parsed: Any) -> int:
    try:
        return _size(parsed.data)
    except (RecursionError, OverflowError):
        return 0


def _size(items: Any) -> int:
    total = 0
    for op, arg in items:
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            low, high, body = arg
            total += max(low if high == sre.MAXREPEAT else high, 1) * _size(body)
        elif op is sre.SUBPATTERN:
            total += _size(arg[3])
        elif op is sre.BRANCH:
            total += sum(_size(branch) for branch in arg[1])
        elif op is sre.ATOMIC_GROUP:
            total += _size(arg)
        elif op is sre.ASSERT or op is sre.ASSERT_NOT:
            total += _size(arg[1])
        elif op is sre.GROUPREF_EXISTS:
            total += _size(arg[1]) + _size(arg[2] or [])
        else:
            total += 1
    return total


# -- translation ---------------------------------------------------------------


@dataclass(frozen=True)
class Translation:
    pattern: str
    ascii_only: bool  # exact on ASCII text only (RE2's \b knows ASCII words only)
    non_boundary: bool  # has \B, which re never holds in an empty text


def _re2_search(translation: Translation | None, text: bytes) -> bool | None:
    """One search with a translation compiled for it (None when RE2 cannot)."""
    if translation is None:
        return None
    compiled = _re2.RE2(translation.pattern.encode(), _RE2_OPTIONS)
    if not compiled.ok():
        return None
    start: int = compiled.Match(_UNANCHORED, text, 0, len(text))[0][0]
    return start >= 0


class _Unsupported(Exception):
    pass


def to_re2(pattern: str, *, empty_text: bool = False) -> Translation | None:
    """RE2 syntax with ``pattern``'s meaning under ``re.search``, or None when RE2 cannot;
    ``empty_text``: for the empty text only."""
    parsed = parsed_pattern(pattern)
    return None if parsed is None else _translated(parsed, empty_text=empty_text)


def _translated(parsed: Any, *, empty_text: bool = False) -> Translation | None:
    writer = _Writer(empty_text)
    try:
        text = writer.sequence(parsed.data, parsed.state.flags, tail=True)
    except (_Unsupported, RecursionError):
        return None
    return Translation(text, writer.ascii_only, writer.non_boundary)


class _Writer:
    def __init__(self, empty_text: bool) -> None:
        self.empty_text = empty_text
        self.ascii_only = False
        self.non_boundary = False
        self.size = 0  # character ranges written, each times the repeats around it
        self.weight = 1  # the product of the counts of the repeats being written

    def ranges(self, ranges: Ranges) -> str:
        self.size += self.weight * max(len(ranges), 1)
        if self.size > RE2_MAX_SIZE:
            raise _Unsupported
        return _class(ranges)

    def sequence(self, items: Any, flags: int, *, tail: bool) -> str:
        items = list(items)
        last = len(items) - 1
        return "".join(
            self.item(op, arg, flags, tail=tail and i == last) for i, (op, arg) in enumerate(items)
        )

    def item(self, op: Any, arg: Any, flags: int, *, tail: bool) -> str:
        if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            return self.ranges(char_ranges(op, arg, flags))
        if op is sre.AT:
            return self.anchor(arg, flags, tail=tail)
        if op is sre.BRANCH:
            branches = (self.sequence(b, flags, tail=tail) for b in arg[1])
            return "(?:" + "|".join(branches) + ")"
        if op is sre.SUBPATTERN:
            _group, add, remove, body = arg
            return "(?:" + self.sequence(body, (flags | add) & ~remove, tail=tail) + ")"
        if op is sre.MAX_REPEAT or op is sre.MIN_REPEAT:
            low, high, body = arg
            lazy = "?" if op is sre.MIN_REPEAT else ""
            count = _count(low, high)
            outer = self.weight
            self.weight *= max(low, 1) if high == sre.MAXREPEAT else max(high, 1)
            inner = self.sequence(body, flags, tail=tail and high <= 1)
            self.weight = outer
            return f"(?:{inner}){count}{lazy}"
        raise _Unsupported  # lookaround, backreferences, atomic, possessive

    def anchor(self, at: Any, flags: int, *, tail: bool) -> str:
        multiline = bool(flags & _MULTILINE)
        if at is sre.AT_BEGINNING:
            return "(?m:^)" if multiline else r"\A"
        if at is sre.AT_BEGINNING_STRING:
            return r"\A"
        if at is sre.AT_END_STRING:
            return r"\z"
        if at is sre.AT_END:
            if multiline:
                return "(?m:$)"
            if tail:  # re's $ also holds before a final newline; nothing follows to read it
                return r"(?:\n?\z)"
            raise _Unsupported
        if at is sre.AT_NON_BOUNDARY:
            self.non_boundary = True
            if self.empty_text:
                return _class(())
        if at in (sre.AT_BOUNDARY, sre.AT_NON_BOUNDARY):
            if not flags & _ASCII:
                self.ascii_only = True
            return r"\b" if at is sre.AT_BOUNDARY else r"\B"
        raise _Unsupported


def _count(low: int, high: int) -> str:
    if high == sre.MAXREPEAT:
        if low > RE2_MAX_REPEAT:
            raise _Unsupported
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if high > RE2_MAX_REPEAT:
        raise _Unsupported
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


@functools.lru_cache(maxsize=4096)  # the same characters recur across a fixture's patterns
def _class(ranges: Ranges) -> str:
    if not ranges:
        return r"[^\x00-\x{10ffff}]"
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _char(ranges[0][0])
    if ranges == ((0, MAX_CODE),):
        return r"(?s:.)"
    body = "".join(_char(lo) if lo == hi else f"{_char(lo)}-{_char(hi)}" for lo, hi in ranges)
    return f"[{body}]"


def _char(code: int) -> str:
    if code < 0x80 and (chr(code).isalnum() or chr(code) == "_"):
        return chr(code)
    return f"\\x{{{code:x}}}"
