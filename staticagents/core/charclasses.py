"""The characters one single-character regex item matches, exactly as Python's ``re`` decides.

A literal, ``.``, or a class such as ``[a-f\\d]``, under the flags in force
(``(?i)``, ``(?a)``, ``(?s)``) matches a set of code points. Both the
backtracking analysis (``core.backtracking``) and the translation for the
linear-time engine (``core.regexes``) need that set as ranges. Plain items are
read directly; anything that involves case folding or ``\\d \\s \\w`` is asked
of ``re`` itself, over every code point once, so Unicode tables and case rules
are Python's own rather than a re-implementation of them.
"""

from __future__ import annotations

import _sre
import array
import functools
import re
import re._constants as sre  # the parser's opcodes, stable since 3.11
import re._parser as sre_parse
import sys
from typing import Any

MAX_CODE = 0x10FFFF
Ranges = tuple[tuple[int, int], ...]  # sorted, disjoint, inclusive
EVERYTHING: Ranges = ((0, MAX_CODE),)
# Plain ints: the enum's ``&`` costs ten times an int's, on every character of every pattern.
_DOTALL, _IGNORECASE, _ASCII = int(re.DOTALL), int(re.IGNORECASE), int(re.ASCII)

_CATEGORIES = {
    sre.CATEGORY_DIGIT: r"\d",
    sre.CATEGORY_NOT_DIGIT: r"\D",
    sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S",
    sre.CATEGORY_WORD: r"\w",
    sre.CATEGORY_NOT_WORD: r"\W",
}


@functools.lru_cache(maxsize=256)  # a rule's gate and its searcher parse the same pattern
def parsed_pattern(pattern: str) -> Any:
    """Python's parse of ``pattern`` (never to be changed: it is shared), or None when it
    cannot parse it."""
    try:
        return sre_parse.parse(pattern)
    except (re.error, RecursionError, OverflowError):
        return None


def char_ranges(op: Any, arg: Any, flags: int) -> Ranges:
    """The code points the item ``(op, arg)`` of a parsed pattern matches under ``flags``."""
    if op is sre.ANY:
        return EVERYTHING if flags & _DOTALL else ((0, 9), (11, MAX_CODE))
    folded = bool(flags & _IGNORECASE)
    if op is sre.LITERAL or op is sre.NOT_LITERAL:
        same: Ranges = ((arg, arg),)
        if folded and _sre.unicode_iscased(arg):
            same = _case_variants(arg, flags & _ASCII)
        return same if op is sre.LITERAL else complement(same)
    if op is sre.IN and not folded and all(kind is not sre.CATEGORY for kind, _ in arg):
        return _plain_class(arg)
    source = _item_source(op, arg)
    return _asked_of_re(source, flags & (_IGNORECASE | _ASCII))


def _plain_class(items: Any) -> Ranges:
    ranges: list[tuple[int, int]] = []
    negate = False
    for kind, value in items:
        if kind is sre.NEGATE:
            negate = True
        elif kind is sre.LITERAL:
            ranges.append((value, value))
        else:  # RANGE
            ranges.append(value)
    merged = normalize(ranges)
    return complement(merged) if negate else merged


def _item_source(op: Any, arg: Any) -> str:
    """The item written back as pattern text (every character as ``\\U`` escape)."""
    if op is sre.LITERAL:
        return _escape(arg)
    if op is sre.NOT_LITERAL:
        return f"[^{_escape(arg)}]"
    parts = []
    for kind, value in arg:
        if kind is sre.NEGATE:
            parts.append("^")
        elif kind is sre.LITERAL:
            parts.append(_escape(value))
        elif kind is sre.RANGE:
            parts.append(f"{_escape(value[0])}-{_escape(value[1])}")
        else:
            parts.append(_CATEGORIES[value])
    return "[" + "".join(parts) + "]"


def _escape(code: int) -> str:
    return f"\\U{code:08x}"


@functools.lru_cache(maxsize=4096)
def _case_variants(code: int, flags: int) -> Ranges:
    """What ``(?i)`` and a cased character match: only cased characters, as a test checks
    over the whole of Unicode, so only those are asked."""
    matches = re.compile(_escape(code), flags | re.IGNORECASE).fullmatch
    return normalize([(c, c) for c in _cased() if matches(chr(c))] + [(code, code)])


# Above this no code point is cased (a test checks it over the whole of Unicode): the
# scan below it is a sixth of the time of one over everything (30 ms), paid by the first
# (?i) rule compiled, at the testing kit's first reply (bench/README.md, step 21).
CASED_BELOW = 0x20000


@functools.cache
def _cased() -> tuple[int, ...]:
    return tuple(c for c in range(CASED_BELOW) if _sre.unicode_iscased(c))


@functools.lru_cache(maxsize=4096)
def _asked_of_re(source: str, flags: int) -> Ranges:
    # Runs of consecutive code points that match are the ranges.
    runs = re.compile(f"(?:{source})+", flags).finditer(_every_character())
    return tuple((run.start(), run.end() - 1) for run in runs)


@functools.cache
def _every_character() -> str:
    # Ten times faster than joining chr() of each code point.
    code_points = array.array("I", range(MAX_CODE + 1)).tobytes()
    return code_points.decode(
        "utf-32-le" if sys.byteorder == "little" else "utf-32-be", "surrogatepass"
    )


def normalize(ranges: list[tuple[int, int]]) -> Ranges:
    """Sorted, with overlapping and touching ranges merged."""
    merged: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return tuple(merged)


def complement(ranges: Ranges) -> Ranges:
    result: list[tuple[int, int]] = []
    start = 0
    for low, high in ranges:
        if low > start:
            result.append((start, low - 1))
        start = high + 1
    if start <= MAX_CODE:
        result.append((start, MAX_CODE))
    return tuple(result)


def intersect(a: Ranges, b: Ranges) -> Ranges:
    result: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        low, high = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if low <= high:
            result.append((low, high))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(result)
