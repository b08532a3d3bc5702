"""Numbers as they arrive in paths, queries and headers."""

from __future__ import annotations


def is_ascii_number(text: str) -> bool:
    """Whether ``text`` is a non-empty run of ASCII digits.

    ``str.isdigit`` also accepts digits that ``int`` refuses (a superscript one,
    ``¹``), so checking with it and then converting fails on exactly the input
    a fuzzer sends.
    """
    return text.isascii() and text.isdigit()
