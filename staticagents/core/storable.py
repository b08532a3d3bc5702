"""Text the service can store: no NUL characters.

PostgreSQL's ``text`` and ``jsonb`` cannot hold U+0000, so a request carrying
one in any string would fail when it is journaled. Every parser refuses such a
request up front, naming where the character is, instead of a 500 later.
"""

from __future__ import annotations

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
    escaped = b"\\u0000" in raw if isinstance(raw, bytes) else "\\u0000" in raw
    return first_nul(payload) if escaped else None
