"""Scripted stream timing: how a reply's text is cut into chunks, when each is due,
and the timed frame that every dialect's stream is made of."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson

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


@value_class
class TimedFrame:
    """One frame of a stream (an SSE event, a WebSocket message), due ``at`` seconds
    after the stream starts.

    ``data`` is the frame's JSON payload, rendered only when the frame is sent;
    or bytes, sent as they are: JSON the dialect rendered ahead (from a template,
    for the many chunks that differ in one string), or a marker such as
    OpenAI's ``[DONE]``. No payload is bytes, since JSON has none.
    ``event`` names the frame on an SSE ``event:`` line; None sends data only,
    as every WebSocket message does.
    """

    at: float
    data: Any
    event: str | None = None

    def json(self) -> bytes:
        """The frame's data as sent: rendered now, unless it already is."""
        data = self.data
        return data if type(data) is bytes else orjson.dumps(data)

    @property
    def payload(self) -> Any:
        """The frame's data as JSON values (for whoever inspects a planned stream)."""
        data = self.data
        return orjson.loads(data) if type(data) is bytes else data
