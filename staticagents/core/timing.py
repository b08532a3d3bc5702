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
# Texts up to this long are cut into words in one call (``findall``): most replies,
# at a fifth of the cost of matching word by word. Longer ones are cut as they go.
_CUT_AT_ONCE = 4096


def chunk_text(text: str, chunk: str | int = "word") -> list[str]:
    """Cut ``text`` into stream chunks that concatenate back to exactly ``text``.

    ``word`` keeps each word with the whitespace after it; ``char`` sends one
    character at a time; a number sends that many characters at a time.
    """
    return list(iter_chunks(text, chunk))


def iter_chunks(text: str, chunk: str | int = "word") -> Iterator[str]:
    """The chunks of ``chunk_text``, one at a time: a long text is never cut up all at once."""
    if chunk == "word":
        if len(text) <= _CUT_AT_ONCE:
            yield from _WORD.findall(text)
            return
        for word in _WORD.finditer(text):
            yield word.group()
        return
    size = 1 if chunk == "char" else int(chunk)
    for start in range(0, len(text), size):
        yield text[start : start + size]


class Slots:
    """A reply's schedule, handed out slot by slot as a stream is rendered.

    The n-th chunk taken (from 0) is due ``first_delay_ms + n * word_delay_ms``
    after the stream starts. Offsets are absolute, so a late chunk does not push
    every later one back: drift never accumulates over a long stream. A renderer
    takes its slots in the order it sends its chunks, so nothing is counted (or
    cut up) ahead of time.
    """

    __slots__ = ("chunk", "end", "first", "step", "taken")

    def __init__(self, timing: Timing) -> None:
        self.first = timing.first_delay_ms / 1000
        self.step = timing.word_delay_ms / 1000
        self.chunk = timing.chunk
        self.taken = 0
        self.end = self.first  # the last slot taken; the first delay before any

    def take(self) -> float:
        at = self.first + self.taken * self.step
        self.taken += 1
        self.end = at
        return at

    def pieces(self, text: str) -> Iterator[tuple[float, str]]:
        """``text`` in chunks, each with the next slot."""
        for piece in iter_chunks(text, self.chunk):
            yield self.take(), piece


@value_class
class Piece:
    """One timed chunk of a streamed reply: ``at`` seconds after the stream starts."""

    at: float
    kind: str  # "thinking" or "text"
    text: str


def plan_stream(reply: Reply, slots: Slots | None = None) -> Iterator[Piece]:
    """Thinking first, then the content, each cut into chunks on the reply's schedule
    (``slots``, when the caller goes on taking slots after these), as they are sent."""
    slots = slots or Slots(reply.timing)
    take = slots.take
    for kind, text in (("thinking", reply.thinking or ""), ("text", reply.content)):
        if text:
            for piece in iter_chunks(text, slots.chunk):
                yield Piece(take(), kind, piece)


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
