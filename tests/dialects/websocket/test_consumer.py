"""The WebSocket chat route: a real client against the live server, and the consumer itself."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import channels.consumer
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from websockets.asyncio.client import ClientConnection, connect

from staticagents.dialects.websocket.consumer import QUEUE_LIMIT, ChatConsumer
from staticagents.models import JournalEntry

RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "boom",
            "match": {"contains": "#boom"},
            "response": {"error": {"status": 502, "type": "bad_gateway", "message": "upstream"}},
        },
        {
            "name": "think",
            "match": {"contains": "#think"},
            "response": {
                "thinking": "Let me see.",
                "content": "Here it is.",
                "stream": {"word_delay_ms": 2},
            },
        },
        {
            "name": "call",
            "match": {"contains": "#tool", "tool_result": False},
            "response": {"tool_calls": [{"name": "lookup", "arguments": {"topic": "weather"}}]},
        },
        {
            "name": "report",
            "match": {"contains": "#tool", "tool_result": True},
            "response": {"template": True, "content": "lookup said: $tool_result"},
        },
        {
            "name": "page",
            "match": {"context": {"page_id": "."}},
            "response": {"template": True, "content": "page turn $turn"},
        },
        {
            "name": "slow",
            "match": {"contains": "#slow"},
            "response": {
                "content": "one two three four five six",
                "stream": {"word_delay_ms": 100},
            },
        },
        {
            "name": "echo",
            "response": {"template": True, "content": "$query", "stream": {"word_delay_ms": 1}},
        },
    ]
}


@pytest.fixture
def ws_url(live_url: str, load_rules: Callable[[Any], Any]) -> str:
    load_rules(RULES)
    return live_url.replace("http://", "ws://") + "/ws/chat/"


@pytest.fixture
async def socket(ws_url: str) -> AsyncIterator[ClientConnection]:
    async with connect(ws_url) as connection:
        yield connection


async def receive_reply(socket: ClientConnection) -> list[dict[str, Any]]:
    """Events up to and including the terminal one (done or error)."""
    events = []
    while True:
        event = json.loads(await asyncio.wait_for(socket.recv(), 5))
        events.append(event)
        if event["type"] in ("done", "error"):
            return events


async def ask(socket: ClientConnection, **message: Any) -> list[dict[str, Any]]:
    await socket.send(json.dumps(message))
    return await receive_reply(socket)


def outcomes() -> list[str]:
    return list(JournalEntry.objects.order_by("id").values_list("outcome", flat=True))


async def wait_for_outcome(outcome: str) -> None:
    for _ in range(150):
        if outcome in await sync_to_async(outcomes)():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no journal entry became {outcome!r}: {await sync_to_async(outcomes)()}")


# -- a real client against the live server ---------------------------------------------------


async def test_a_reply_streams_thinking_deltas_result_and_done_in_order(
    socket: ClientConnection,
) -> None:
    events = await ask(socket, query="#think please")
    kinds = [e["type"] for e in events]
    assert kinds == ["thinking"] * kinds.count("thinking") + ["delta"] * kinds.count("delta") + [
        "result",
        "done",
    ]
    assert "".join(e["text"] for e in events if e["type"] == "thinking") == "Let me see."
    assert "".join(e["text"] for e in events if e["type"] == "delta") == "Here it is."
    result = events[-2]
    assert result["response"]["content"] == "Here it is."
    assert result["response"]["metadata"] == {"static_backend": True}
    assert result["session"] == "global"


async def test_several_inquiries_share_one_connection(socket: ClientConnection) -> None:
    for query in ("first", "second", "third"):
        events = await ask(socket, query=query)
        assert events[-2]["response"]["content"] == query
    assert await sync_to_async(outcomes)() == ["answered"] * 3


async def test_messages_sent_while_a_reply_streams_are_answered_in_order(
    socket: ClientConnection,
) -> None:
    for index in range(3):
        await socket.send(
            json.dumps({"query": f"many words in query {index}", "request_id": index})
        )
    replies = [await receive_reply(socket) for _ in range(3)]
    for index, events in enumerate(replies):
        assert {e["request_id"] for e in events} == {index}
        assert events[-2]["response"]["content"] == f"many words in query {index}"


async def test_a_bad_message_gets_an_error_and_the_connection_stays_open(
    socket: ClientConnection,
) -> None:
    await socket.send("{not json")
    [invalid] = await receive_reply(socket)
    assert invalid["error"]["status"] == 400
    assert "not valid JSON" in invalid["error"]["message"]
    [missing] = await ask(socket, agent_type="router")
    assert missing["error"]["message"] == "query: required key is missing"
    [wrong] = await ask(socket, query="q", context=["page"])
    assert wrong["error"]["message"].startswith("context: Input should be a valid dictionary")
    events = await ask(socket, query="still here")
    assert events[-1] == {"type": "done"}


async def test_a_scripted_error_is_an_error_event_without_done(socket: ClientConnection) -> None:
    events = await ask(socket, query="#boom")
    assert events == [
        {"type": "error", "error": {"status": 502, "type": "bad_gateway", "message": "upstream"}}
    ]


async def test_a_tool_call_event_and_then_the_tool_result(socket: ClientConnection) -> None:
    events = await ask(socket, query="#tool weather?")
    assert [e["type"] for e in events] == ["tool_call", "result", "done"]
    call = events[0]
    assert (call["name"], call["arguments"]) == ("lookup", {"topic": "weather"})
    assert call["id"].startswith("call_")
    assert events[1]["finish_reason"] == "tool_calls"
    reported = await ask(socket, query="#tool weather?", tool_result="sunny")
    assert reported[-2]["response"]["content"] == "lookup said: sunny"


async def test_context_session_and_turn_reach_the_rules(ws_url: str) -> None:
    async with connect(ws_url, additional_headers={"Authorization": "Bearer secret"}) as socket:
        first = await ask(socket, query="q", context={"page_id": "p1"}, session="tab-1")
        second = await ask(socket, query="q", context={"page_id": "p1"}, session="tab-1")
        other = await ask(socket, query="q", context={"page_id": "p1"}, session="tab-2")
    assert [r[-2]["response"]["content"] for r in (first, second, other)] == [
        "page turn 1",
        "page turn 2",
        "page turn 1",
    ]
    entry = await sync_to_async(JournalEntry.objects.order_by("id").first)()
    assert entry is not None
    assert (entry.dialect, entry.session, entry.route) == ("websocket", "tab-1", "/ws/chat/")
    assert entry.headers["authorization"] == "Bearer ***"


async def test_the_session_header_of_the_handshake_wins(ws_url: str) -> None:
    async with connect(ws_url, additional_headers={"X-Static-Session": "pinned"}) as socket:
        events = await ask(socket, query="q", session="ignored")
    assert events[-2]["session"] == "pinned"


async def test_closing_mid_stream_marks_the_journal_entry_cancelled(ws_url: str) -> None:
    async with connect(ws_url) as socket:
        await socket.send(json.dumps({"query": "#slow"}))
        first = json.loads(await socket.recv())
        assert first == {"type": "delta", "text": "one "}
    await wait_for_outcome("cancelled")


# -- the consumer itself, through Channels' communicator ---------------------------------------


@pytest.fixture
async def communicator(
    transactional_db: None, load_rules: Callable[[Any], Any]
) -> AsyncIterator[WebsocketCommunicator]:
    await sync_to_async(load_rules)(RULES)
    comm = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/")
    connected, _ = await comm.connect()
    assert connected
    yield comm
    await comm.disconnect()


async def collect(comm: WebsocketCommunicator) -> list[dict[str, Any]]:
    events = []
    while not events or events[-1]["type"] not in ("done", "error"):
        events.append(await comm.receive_json_from(timeout=5))
    return events


async def test_the_consumer_streams_every_word_then_result_and_done(
    communicator: WebsocketCommunicator,
) -> None:
    await communicator.send_json_to({"query": "three little words", "request_id": "a"})
    events = await collect(communicator)
    assert [e.get("text") for e in events] == ["three ", "little ", "words", None, None]
    assert [e["type"] for e in events[-2:]] == ["result", "done"]
    assert {e["request_id"] for e in events} == {"a"}


async def test_messages_reach_the_consumer_without_a_hop_to_the_sync_thread(
    transactional_db: None, load_rules: Callable[[Any], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    await sync_to_async(load_rules)(RULES)
    hops: list[str] = []

    async def closing_old_connections() -> None:
        hops.append("hop")

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", closing_old_connections)
    comm = WebsocketCommunicator(ChatConsumer.as_asgi(), "/ws/chat/")
    connected, _ = await comm.connect()
    assert connected
    for n in range(3):
        await comm.send_json_to({"query": f"inquiry {n}"})
        assert (await collect(comm))[-1]["type"] == "done"
    await comm.disconnect()
    assert hops == []  # Channels' own dispatch would hop for the connect, each message, the end


async def test_the_consumer_answers_malformed_frames_and_keeps_going(
    communicator: WebsocketCommunicator,
) -> None:
    await communicator.send_to(bytes_data=b"\xff\xfe")
    [binary] = await collect(communicator)
    assert "not valid JSON" in binary["error"]["message"]
    await communicator.send_json_to({"query": "q", "agent_typ": "router"})
    [typo] = await collect(communicator)
    assert typo["error"]["message"] == "agent_typ: unknown key"
    await communicator.send_json_to({"query": "fine"})
    assert (await collect(communicator))[-1]["type"] == "done"


async def test_the_consumer_cancels_a_stream_when_the_client_leaves(
    communicator: WebsocketCommunicator,
) -> None:
    await communicator.send_json_to({"query": "#slow"})
    assert (await communicator.receive_json_from(timeout=5))["text"] == "one "
    await communicator.disconnect()
    await wait_for_outcome("cancelled")


async def test_the_consumer_cuts_off_a_stream_at_the_maximum(
    communicator: WebsocketCommunicator, settings: Any
) -> None:
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.15
    await communicator.send_json_to({"query": "#slow"})
    events = await collect(communicator)
    assert [e.get("text") for e in events[:-1]] == ["one ", "two "]
    assert events[-1]["error"]["type"] == "stream_cut_off"
    assert await sync_to_async(outcomes)() == ["cut_off"]
    await communicator.send_json_to({"query": "after the cut"})
    assert (await collect(communicator))[-1]["type"] == "done"


async def test_the_consumer_refuses_inquiries_beyond_its_queue(
    communicator: WebsocketCommunicator,
) -> None:
    await communicator.send_json_to({"query": "#slow"})
    assert (await communicator.receive_json_from(timeout=5))["text"] == "one "
    for index in range(QUEUE_LIMIT + 1):
        await communicator.send_json_to({"query": f"waiting {index}"})
    event = await communicator.receive_json_from(timeout=5)
    while event["type"] == "delta":  # the slow reply keeps streaming meanwhile
        event = await communicator.receive_json_from(timeout=5)
    assert event["type"] == "error"
    assert event["error"]["type"] == "busy"
    assert event["error"]["status"] == 429
