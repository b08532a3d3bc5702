"""``POST /api/chat/stream``: Galaxy's chat turn as server-sent events, through the real app."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from staticagents.models import ChatExchange, JournalEntry

Load = Callable[[Any], dict[str, Any]]
Event = tuple[str, dict[str, Any]]

RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "timed",
            "match": {"query": "#timed"},
            "response": {
                "content": "one two three four",
                "stream": {"first_delay_ms": 100, "word_delay_ms": 50},
            },
        },
        {
            "name": "slow",
            "match": {"query": "#slow"},
            "response": {"content": " ".join(["word"] * 60), "stream": {"word_delay_ms": 100}},
        },
        {
            "name": "broken",
            "match": {"query": "#error"},
            "response": {
                "error": {"status": 502, "type": "upstream", "message": "Upstream fell over"}
            },
        },
        {
            "name": "thinker",
            "match": {"query": "#think"},
            "response": {"thinking": "Let me see.", "content": "Forty-two.", "reasoning": "maths"},
        },
        {
            "name": "follow-up",
            "match": {"turn": 2},
            "response": {"content": "This is the second turn"},
        },
        {
            "name": "greeting",
            "match": {"agent_type": "router"},
            "response": {"content": "Hello, streamed world", "confidence": "high"},
        },
    ],
    "fallback": {"content": "Nothing matched"},
}


@pytest.fixture
def api(live_url: str, load_rules: Load) -> Iterator[httpx.Client]:
    load_rules(RULES)
    with httpx.Client(base_url=live_url, timeout=10) as client:
        yield client


def parse(text: str) -> list[Event]:
    events = []
    for frame in text.split("\n\n"):
        lines = [line for line in frame.split("\n") if line]
        if not lines:
            continue
        event = next(line[6:].strip() for line in lines if line.startswith("event:"))
        data = "\n".join(line[5:].lstrip() for line in lines if line.startswith("data:"))
        events.append((event, json.loads(data)))
    return events


def stream(api: httpx.Client, body: Any, agent_type: str = "auto", **kwargs: Any) -> list[Event]:
    response = api.post(f"/api/chat/stream?agent_type={agent_type}", json=body, **kwargs)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse(response.text)


def only(events: list[Event], name: str) -> list[dict[str, Any]]:
    return [data for event, data in events if event == name]


def test_a_stream_sends_progress_text_one_result_then_done(api: httpx.Client) -> None:
    events = stream(api, {"query": "Hi"})
    names = [event for event, _ in events]
    assert names[-2:] == ["result", "done"]
    assert names.count("result") == 1
    progress = only(events, "progress")
    assert progress[0] == {
        "step": "routing",
        "label": "Routed to the router agent",
        "status": "completed",
        "agent_type": "router",
    }
    assert [(p["step"], p["status"]) for p in progress[1:]] == [
        ("responding", "running"),
        ("responding", "completed"),
    ]
    text = "".join(d["content"] for d in only(events, "delta") if d["kind"] == "text")
    [result] = only(events, "result")
    assert text == result["response"] == "Hello, streamed world"


def test_the_result_is_the_chat_response_that_chat_answers(api: httpx.Client) -> None:
    [streamed] = only(stream(api, {"query": "Hi"}), "result")
    blocking = api.post("/api/chat?agent_type=auto", json={"query": "Hi"}).json()
    for varying in ("exchange_id", "processing_time"):
        assert isinstance(streamed.pop(varying), type(blocking.pop(varying)))
    assert streamed == blocking


def test_a_named_agent_type_skips_the_routing_step(api: httpx.Client) -> None:
    events = stream(api, {"query": "Hi"}, agent_type="router")
    assert all(p["step"] == "responding" for p in only(events, "progress"))


def test_the_text_arrives_on_the_rules_schedule(api: httpx.Client) -> None:
    arrivals = []
    started = time.perf_counter()
    with api.stream(
        "POST", "/api/chat/stream?agent_type=router", json={"query": "#timed"}
    ) as reply:
        for line in reply.iter_lines():
            if line.startswith("event: delta"):
                arrivals.append(time.perf_counter() - started)
    scripted = [0.1, 0.15, 0.2, 0.25]  # first_delay_ms, then word_delay_ms between words
    assert len(arrivals) == 4
    # Never before its time, counted from before the request: a busy machine only adds to it.
    assert all(arrived >= due for arrived, due in zip(arrivals, scripted, strict=True)), arrivals
    # Nor long after: the words keep the script's spacing, give or take what the same run
    # showed the machine can hold a word back (the first one's lateness), and at least 0.45 s.
    slack = max(0.45, arrivals[0] - scripted[0])
    assert arrivals[-1] - arrivals[0] < scripted[-1] - scripted[0] + slack, arrivals


def test_thinking_streams_before_the_answer_and_stays_out_of_the_response(
    api: httpx.Client,
) -> None:
    events = stream(api, {"query": "#think"})
    kinds = [d["kind"] for d in only(events, "delta")]
    assert kinds[0] == "thinking" and kinds[-1] == "text"
    [result] = only(events, "result")
    assert result["response"] == "Forty-two."
    assert result["agent_response"]["reasoning"] == "maths"


def test_the_streamed_exchange_is_saved_and_can_be_continued(api: httpx.Client) -> None:
    [first] = only(stream(api, {"query": "Hi"}), "result")
    [second] = only(stream(api, {"query": "And?", "exchange_id": first["exchange_id"]}), "result")
    assert second["response"] == "This is the second turn"
    assert second["exchange_id"] == first["exchange_id"]
    messages = api.get(f"/api/chat/exchange/{first['exchange_id']}/messages").json()
    assert [m["content"] for m in messages] == [
        "Hi",
        "Hello, streamed world",
        "And?",
        "This is the second turn",
    ]


def test_a_scripted_error_streams_a_failed_step_and_an_error_result(api: httpx.Client) -> None:
    events = stream(api, {"query": "#error"})
    assert only(events, "progress")[-1]["status"] == "failed"
    [result] = only(events, "result")
    assert (result["error_code"], result["error_message"]) == (502, "Upstream fell over")
    assert [event for event, _ in events][-1] == "done"
    assert ChatExchange.objects.count() == 0


def test_a_missing_query_streams_an_error_result(api: httpx.Client) -> None:
    events = stream(api, {"context": "tool_error"})
    [result] = only(events, "result")
    assert (result["error_code"], result["error_message"]) == (400, "No query provided")
    assert [event for event, _ in events] == ["progress", "result", "done"]


def test_continuing_an_unknown_exchange_streams_an_error_result(api: httpx.Client) -> None:
    [result] = only(stream(api, {"query": "Hi", "exchange_id": 98765}), "result")
    assert result["error_code"] == 404


@pytest.mark.parametrize(
    ("content", "named"),
    [(b"{nope", "not valid JSON"), (b'{"query": 7}', "'query'"), (b"[]", "JSON object")],
)
def test_a_malformed_body_is_a_400_with_galaxys_error_body(
    api: httpx.Client, content: bytes, named: str
) -> None:
    response = api.post("/api/chat/stream", content=content)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert named in response.json()["err_msg"]
    assert response.json()["err_code"] == 400008


def test_only_post_is_served(api: httpx.Client) -> None:
    response = api.get("/api/chat/stream")
    assert response.status_code == 405
    assert "POST" in response.json()["err_msg"]


def test_the_session_header_scopes_the_journal_entry(api: httpx.Client) -> None:
    stream(api, {"query": "Hi"}, headers={"X-Static-Session": "stream-run"})
    entry = JournalEntry.objects.get(session="stream-run")
    assert (entry.dialect, entry.route, entry.rule) == ("galaxy", "/api/chat/stream", "greeting")


def test_a_client_that_leaves_stops_the_stream_and_saves_nothing(api: httpx.Client) -> None:
    started = time.perf_counter()
    with api.stream("POST", "/api/chat/stream?agent_type=router", json={"query": "#slow"}) as reply:
        for line in reply.iter_lines():
            if line.startswith("event: delta"):
                break
    deadline = time.monotonic() + 3
    while JournalEntry.objects.filter(outcome="cancelled").count() == 0:
        assert time.monotonic() < deadline, "the stream was not marked cancelled"
        time.sleep(0.02)
    assert time.perf_counter() - started < 3  # long before the 6 s the script would take
    assert ChatExchange.objects.count() == 0


def test_a_stream_past_the_maximum_duration_is_cut_off_with_an_error_result(
    api: httpx.Client, settings: Any
) -> None:
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.3
    started = time.perf_counter()
    events = stream(api, {"query": "#slow"}, agent_type="router")
    assert time.perf_counter() - started < 3  # long before the 6 s the script would take
    [result] = only(events, "result")
    assert result["error_code"] == 504
    assert [event for event, _ in events][-1] == "done"
    assert JournalEntry.objects.get().outcome == "cut_off"
    assert ChatExchange.objects.count() == 0
