"""What the journal keeps of an entry's body and query: at most a number of bytes of
each, cut between characters, and their whole lengths (``journal`` stores entries so,
``live`` sends them so)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def bounded(entry: Mapping[str, Any], limit: int) -> dict[str, Any]:
    """``entry`` with at most ``limit`` bytes of its body and of its query (UTF-8, cut
    between characters), its body's whole length (``body_bytes``) and the bytes the two
    take (``size``). The body may be given as bytes: only what is kept is decoded."""
    body, body_bytes = cut(entry.get("body", ""), limit)
    query, query_bytes = cut(entry.get("query", ""), limit)
    kept = min(body_bytes, limit) + min(query_bytes, limit)
    return {**entry, "body": body, "query": query, "body_bytes": body_bytes, "size": kept}


def cut(value: Any, limit: int) -> tuple[Any, int]:
    """At most ``limit`` bytes of ``value`` as text, and its whole length in bytes
    (anything but text or bytes goes as it is, for the database to judge)."""
    if type(value) is str and value.isascii():  # a query, mostly: first, as cheaply as can be
        length = len(value)
        return (value, length) if length <= limit else (value[:limit], length)
    if isinstance(value, bytes):
        length = len(value)
        if length <= limit:
            return value.decode("utf-8", "replace"), length
        return value[:limit].decode("utf-8", "ignore"), length  # no half character at the cut
    if not isinstance(value, str):
        return value, 0
    is_ascii = value.isascii()
    length = len(value) if is_ascii else len(value.encode())
    if length <= limit:
        return value, length
    if is_ascii:
        return value[:limit], length
    return value.encode()[:limit].decode("utf-8", "ignore"), length
