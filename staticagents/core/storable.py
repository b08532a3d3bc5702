"""Values the service can store and send back: no NUL, nothing JSON cannot hold.

PostgreSQL's ``text`` and ``jsonb`` cannot hold U+0000, so a request carrying
one in any string would fail when it is journaled. Every parser refuses such a
request up front, naming where the character is, instead of a 500 later.
"""

from __future__ import annotations

import datetime
import json
import math
from typing import Any

NUL = "\x00"
NUL_PROBLEM = "contains a NUL character (U+0000), which the service cannot store"


def first_nul(value: Any, path: str = "") -> str | None:
    """Where the first string holding a NUL is in a JSON value (``messages[0].content``), else None.

    A key that holds one is reported at the path of its mapping. The walk uses
    its own stack, so nesting depth is bounded by the JSON parser, not by
    Python's recursion limit.
    """
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, str):
            if NUL in item:
                return where or "body"
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                if NUL in str(key):
                    return where or "body"
                stack.append((f"{where}.{key}" if where else str(key), child))
        elif isinstance(item, list):
            stack.extend(
                (f"{where}[{index}]", child) for index, child in reversed(list(enumerate(item)))
            )
    return None


def nul_in_json(raw: str | bytes, payload: Any) -> str | None:
    """``first_nul`` of a value parsed from JSON ``raw``, skipping the walk when it cannot find one.

    JSON can only put a NUL into a string as the escape ``\\u0000`` (raw control
    characters are invalid), so a body without that text holds none: the cheap
    test that nearly every request takes.
    """
    # ``find`` on bytes: ``in`` makes and drops a TypeError first (``ReplyRoute.admission``).
    escaped = raw.find(b"\\u0000") >= 0 if isinstance(raw, bytes) else "\\u0000" in raw
    return first_nul(payload) if escaped else None


# -- values that survive JSON and the database ------------------------------------------

# Deeper nesting is refused wherever the service stores a value it did not write itself
# (fixtures, ADK session state): renderers (orjson allows 255 levels) wrap it in more.
MAX_DEPTH = 64
# What orjson, the renderers' encoder, can write: a signed or an unsigned 64-bit integer.
INT_MIN, INT_MAX = -(2**63), 2**64 - 1


class HugeNumber(str):
    """An integer literal too long to convert (Python refuses over 4,300 digits): its text."""


def parse_json_int(text: str) -> int | HugeNumber:
    """``json.loads``'s ``parse_int`` that never raises: a huge literal is kept as a marker."""
    return int(text) if len(text) <= 40 else HugeNumber(text)


def repeated_json_keys(text: str | bytes) -> list[str]:
    """The keys given twice in one object of ``text`` (valid JSON), in the order met."""
    repeated: list[str] = []
    json.loads(text, parse_int=parse_json_int, object_pairs_hook=noting_repeats(repeated))
    return repeated


def noting_repeats(repeated: list[str]) -> Any:
    """A ``json.loads`` ``object_pairs_hook`` that notes keys given twice in one object."""

    def pairs_to_dict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for key, value in pairs:
            if key in found:
                repeated.append(key)
            found[key] = value
        return found

    return pairs_to_dict


# Where a value sits, kept cheap: (the parent's trail, key or index); None at the top.
Trail = tuple[Any, Any] | None


def storable_problems(value: Any, path: str = "") -> list[tuple[str, str, str]]:
    """Every value in ``value`` that would not come back the same from JSON and the database.

    Returns ``(path, message, code)`` for each: a type JSON has no word for (a
    date, a set, binary data), a number out of range or not finite, a string
    with a NUL or a lone surrogate, a key that is not a string, nesting deeper
    than ``MAX_DEPTH``. Walks with its own stack, never recursing.
    """
    problems: list[tuple[str, str, str]] = []
    # Paths are built only for a problem: each entry keeps its trail (parent trail, key).
    stack: list[tuple[Any, int, Trail]] = [(value, 1, None)]
    while stack:
        item, depth, trail = stack.pop()
        if isinstance(item, dict | list) and depth > MAX_DEPTH:
            message = f"nested deeper than {MAX_DEPTH} levels"
            problems.append((path_of(path, trail), message, "too_deep"))
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                problem = _key_problem(key)
                if problem is not None:
                    problems.append((path_of(path, (trail, key)), problem, "type"))
                else:
                    stack.append((child, depth + 1, (trail, key)))
        elif isinstance(item, list):
            stack.extend(
                (child, depth + 1, (trail, index))
                for index, child in reversed(list(enumerate(item)))
            )
        else:
            wrong = scalar_problem(item)
            if wrong is not None:
                problems.append((path_of(path, trail), *wrong))
    return problems


def path_of(prefix: str, trail: Trail) -> str:
    """``rules[0].response.metadata[200]``: text keys dotted, indexes and other keys bracketed."""
    keys = []
    while trail is not None:
        trail, key = trail
        keys.append(key)
    path = prefix
    for key in reversed(keys):
        path = (f"{path}.{key}" if path else key) if isinstance(key, str) else f"{path}[{key}]"
    return path


def scalar_problem(value: Any) -> tuple[str, str] | None:
    """What is wrong with one scalar (message, code), or None when JSON holds it as it is."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, HugeNumber):
        return f"integer of {len(value.lstrip('-'))} digits: beyond 64 bits", "out_of_range"
    if isinstance(value, str):
        return _text_problem(value)
    if isinstance(value, int):
        if INT_MIN <= value <= INT_MAX:
            return None
        return f"integer {_short(value)} is beyond 64 bits", "out_of_range"
    if isinstance(value, float):
        return None if math.isfinite(value) else (f"{value} is not a finite number", "not_finite")
    return _foreign_type(value), "type"


def _text_problem(text: str) -> tuple[str, str] | None:
    if NUL in text:
        return NUL_PROBLEM, "nul"
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code_point = ord(text[exc.start])
        return f"contains a lone surrogate (U+{code_point:04X}), which is not text", "surrogate"
    return None


def _key_problem(key: Any) -> str | None:
    if not isinstance(key, str):
        kind = "number" if isinstance(key, int | float) else type(key).__name__
        return f"the key {key!r} is a {kind}: a key must be text (quote it)"
    problem = _text_problem(key)
    return f"the key {problem[0]}" if problem else None


def _foreign_type(value: Any) -> str:
    if isinstance(value, datetime.date | datetime.datetime):
        return "is a date, which JSON cannot hold: quote it to keep it as text"
    if isinstance(value, bytes | bytearray):
        return "is binary data (!!binary), which JSON cannot hold"
    if isinstance(value, set | frozenset):
        return "is a set (!!set), which JSON cannot hold: write a list"
    return f"is a {type(value).__name__}, which JSON cannot hold"


def _short(number: int) -> str:
    # str() of an int over 4,300 digits raises: show its size instead.
    return str(number) if abs(number) < 10**30 else f"of {number.bit_length()} bits"


def too_deep_in_json(raw: str | bytes, payload: Any) -> str | None:
    """Where a value parsed from JSON ``raw`` nests deeper than ``MAX_DEPTH``, else None.

    Nesting needs an opening bracket per level, so a body with few of them (nearly
    every request) skips the walk.
    """
    if isinstance(raw, bytes):
        brackets = raw.count(b"[") + raw.count(b"{")
    else:
        brackets = raw.count("[") + raw.count("{")
    if brackets <= MAX_DEPTH:
        return None
    deep = [where for where, _, code in storable_problems(payload) if code == "too_deep"]
    return (deep[0] or "body") if deep else None
