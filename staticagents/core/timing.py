"""Scripted stream timing: how a reply's text is cut into chunks, and when each is due."""

from __future__ import annotations

import re
from collections.abc import Iterator

from staticagents.core.replies import Reply, Timing
from staticagents.core.values import value_class

_WORD = re.compile(r"\S+\s*|\s+")


def chunk_text(text: str, chunk: str | int = "word") -> list[str]:
    """Cut ``text`` into stream chunks that concatenate back to exactly ``text``.

    ``word`` keeps each word with the whitespace after it; ``char`` sends one
    character at a time; a number sends that many characters at a time.
    """
    if not text:
        return []
    if chunk == "word":
        return _WORD.findall(text)
    size = 1 if chunk == "char" else int(chunk)
    return [text[i : i + size] for i in range(0, len(text), size)]


def schedule(count: int, timing: Timing) -> Iterator[float]:
    """Seconds after the stream starts at which each of ``count`` chunks is due.

    Offsets are absolute, so a late chunk does not push every later one back:
    drift never accumulates over a long stream.
    """
    first = timing.first_delay_ms / 1000
    step = timing.word_delay_ms / 1000
    for index in range(count):
        yield first + index * step


@value_class
class Piece:
    """One timed chunk of a streamed reply: ``at`` seconds after the stream starts."""

    at: float
    kind: str  # "thinking" or "text"
    text: str


def plan_stream(reply: Reply) -> list[Piece]:
    """Thinking first, then the content, each cut into chunks on the reply's schedule."""
    chunks = [("thinking", c) for c in chunk_text(reply.thinking or "", reply.timing.chunk)]
    chunks += [("text", c) for c in chunk_text(reply.content, reply.timing.chunk)]
    offsets = schedule(len(chunks), reply.timing)
    return [Piece(at, kind, text) for at, (kind, text) in zip(offsets, chunks, strict=True)]
