"""A relayed stream is whole once its dialect's end marker was read (then it is recorded,
even when the client leaves before the upstream closes its body)."""

from __future__ import annotations

from staticagents.proxying.wire import StreamReader


def test_an_openai_stream_is_complete_at_done() -> None:
    reader = StreamReader("openai")
    reader.feed(
        b'data: {"choices": [{"delta": {"content": "Hi"}, "finish_reason": "stop"}]}\n\n', 0.1
    )
    assert not reader.complete
    reader.feed(b"data: [DONE]\n\n", 0.2)
    assert reader.complete
    assert reader.relayed().chunks == ((0.1, "Hi"),)


def test_an_anthropic_stream_is_complete_at_message_stop() -> None:
    reader = StreamReader("anthropic")
    reader.feed(b'event: message_delta\ndata: {"type": "message_delta", "delta": {}}\n\n', 0.1)
    assert not reader.complete
    reader.feed(b'event: message_stop\ndata: {"type": "message_stop"}\n\n', 0.2)
    assert reader.complete
