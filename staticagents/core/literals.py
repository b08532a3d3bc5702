"""Required literals of a regex: text every match must contain.

The matcher indexes rules by such a literal, so a rule whose literal is absent
from the query is never tried. Extraction is conservative: when in doubt it
finds nothing, and the rule is simply always tried.
"""

from __future__ import annotations

import re
import re._constants as sre  # the parser's opcodes, stable since 3.11
from dataclasses import dataclass
from typing import Any

from staticagents.core.charclasses import parsed_pattern

MIN_LENGTH = 3  # shorter literals occur in too many queries to be worth indexing


@dataclass(frozen=True, slots=True)
class Gate:
    """A literal the query must contain; ``folded``: compare case-insensitively."""

    literal: str
    folded: bool = False


def required_literal(pattern: str) -> Gate | None:
    """The longest literal that every match of ``pattern`` contains, if one is certain."""
    parsed = parsed_pattern(pattern)
    if parsed is None:
        return None
    folded = bool(parsed.state.flags & re.IGNORECASE)
    runs = list(_runs(parsed.data))
    best = max(runs, key=len, default="")
    if len(best) < MIN_LENGTH or (folded and not best.isascii()):
        return None
    return Gate(best.lower() if folded else best, folded)


def literal_runs_of(parsed: Any) -> tuple[str, ...]:
    """Every run of literal text that each match of the parsed pattern contains, as written
    (not folded, whatever its flags)."""
    return tuple(_runs(parsed.data))


def _runs(items: Any) -> Any:
    """Runs of consecutive literal characters in a sequence every match goes through."""
    run: list[str] = []
    for op, arg in items:
        if op is sre.LITERAL:
            run.append(chr(arg))
            continue
        if run:
            yield "".join(run)
            run = []
        if op is sre.SUBPATTERN and not arg[1] and not arg[2]:
            # A plain group (no local flags) must match as a whole: look inside.
            yield from _runs(arg[3])
        elif op is sre.MAX_REPEAT or op is sre.MIN_REPEAT:
            low, _high, body = arg
            if low >= 1:
                yield from _runs(body)
    if run:
        yield "".join(run)


def escaped(text: str) -> str:
    """``text`` as a regex that matches it literally."""
    # re.escape escapes spaces too (for verbose patterns); the rules' regexes are not.
    return re.escape(text).replace("\\ ", " ")


def anchored_literal(text: str) -> str:
    """A regex that ``re.search`` finds in ``text`` (give or take a final newline) alone."""
    return f"^{escaped(text)}$"
