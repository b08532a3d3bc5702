"""The Google ADK REST routes through the real ASGI app, with a real HTTP client."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from staticagents.dialects.adk import sessions as adk_sessions
from staticagents.dialects.adk.wire import UserTurns
from staticagents.models import AdkEvent, AdkSession, JournalEntry
from staticagents.replying.journal import journal

FAST = {"word_delay_ms": 1}
RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "boom",
            "match": {"contains": "#boom"},
            "response": {"error": {"status": 503, "type": "overloaded", "message": "try later"}},
        },
        {
            "name": "think",
            "match": {"contains": "#think"},
            "response": {"thinking": "Let me see.", "content": "Here it is.", "stream": FAST},
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
            "name": "second-turn",
            "match": {"contains": "#count", "turn": 2},
            "response": {"content": "second"},
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
            "name": "typed",
            "match": {"agent_type": "error_analysis"},
            "response": {"content": "analysis"},
        },
        {
            "name": "stateful",
            "match": {"context": {"plan": "^gold$"}},
            "response": {"content": "gold plan"},
        },
        {
            "name": "echo",
            "response": {"template": True, "content": "$query", "stream": {"word_delay_ms": 2}},
        },
    ]
}


@pytest.fixture
def adk(live_url: str, load_rules: Callable[[Any], Any]) -> httpx.Client:
    load_rules(RULES)
    with httpx.Client(base_url=live_url, timeout=10) as client:
        yield client


def run_body(text: str | None = None, session: str = "s1", **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"appName": "router", "userId": "u1", "sessionId": session}
    if text is not None:
        body["newMessage"] = {"role": "user", "parts": [{"text": text}]}
    return {**body, **extra}


def sse_events(response: httpx.Response) -> list[dict[str, Any]]:
    frames = [f for f in response.text.split("\n\n") if f.strip()]
    assert all(frame.startswith("data: ") for frame in frames)
    return [orjson.loads(frame.removeprefix("data: ")) for frame in frames]


def texts(event: dict[str, Any], *, thought: bool = False) -> str:
    parts = event["content"]["parts"]
    return "".join(p["text"] for p in parts if "text" in p and bool(p.get("thought")) == thought)


# -- apps and sessions -------------------------------------------------------------------


def test_list_apps_names_an_app_per_agent_type_and_the_default(adk: httpx.Client) -> None:
    assert adk.get("/list-apps").json() == ["error_analysis", "router"]
    detailed = adk.get("/list-apps", params={"detailed": "true"}).json()
    assert [app["name"] for app in detailed["apps"]] == ["error_analysis", "router"]
    assert detailed["apps"][0]["rootAgentName"] == "error_analysis"


def test_sessions_can_be_created_listed_read_updated_and_deleted(adk: httpx.Client) -> None:
    base = "/apps/router/users/u1/sessions"
    made = adk.post(base, json={"sessionId": "chat-1", "state": {"plan": "gold"}})
    assert made.status_code == 200
    assert made.json() == {
        "id": "chat-1",
        "appName": "router",
        "userId": "u1",
        "state": {"plan": "gold"},
        "events": [],
        "lastUpdateTime": made.json()["lastUpdateTime"],
    }
    anonymous = adk.post(base).json()
    assert len(anonymous["id"]) == 36  # a UUID, as ADK makes them
    assert adk.post(base, json={"session_id": "chat-1"}).status_code == 409

    listed = adk.get(base).json()
    assert [s["id"] for s in listed] == ["chat-1", anonymous["id"]]
    assert adk.get("/apps/router/users/someone-else/sessions").json() == []

    patched = adk.patch(f"{base}/chat-1", json={"stateDelta": {"seen": 1}}).json()
    assert patched["state"] == {"plan": "gold", "seen": 1}
    assert patched["events"][0]["actions"]["stateDelta"] == {"seen": 1}

    assert adk.get(f"{base}/chat-1").json()["state"] == {"plan": "gold", "seen": 1}
    assert adk.delete(f"{base}/chat-1").status_code == 200
    missing = adk.get(f"{base}/chat-1")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "Session not found"}


def test_the_older_create_with_id_route_takes_the_state_as_its_body(adk: httpx.Client) -> None:
    made = adk.post("/apps/router/users/u1/sessions/legacy", json={"plan": "gold"})
    assert made.json()["id"] == "legacy"
    assert made.json()["state"] == {"plan": "gold"}


# -- runs --------------------------------------------------------------------------------


def test_run_answers_with_a_list_holding_the_model_event(adk: httpx.Client) -> None:
    response = adk.post("/run", json=run_body("hello there"))
    assert response.status_code == 200
    [event] = response.json()
    assert event["content"] == {"parts": [{"text": "hello there"}], "role": "model"}
    assert event["author"] == "router"
    assert event["turnComplete"] is True
    assert event["finishReason"] == "STOP"
    assert event["usageMetadata"] == {
        "candidatesTokenCount": 2,
        "promptTokenCount": 2,
        "totalTokenCount": 4,
    }
    assert event["invocationId"].startswith("e-")
    assert event["actions"]["stateDelta"] == {}
    assert "partial" not in event and "errorCode" not in event


def test_a_run_records_the_user_message_and_the_reply_in_the_session(adk: httpx.Client) -> None:
    adk.post("/run", json=run_body("remember me", session="kept"))
    session = adk.get("/apps/router/users/u1/sessions/kept").json()
    user, model = session["events"]
    assert user["author"] == "user"
    assert user["content"] == {"parts": [{"text": "remember me"}], "role": "user"}
    assert model["content"]["parts"] == [{"text": "remember me"}]
    assert user["invocationId"] == model["invocationId"]


@pytest.mark.parametrize("route", ["/run", "/run_sse"])
def test_the_final_event_sent_is_the_one_the_session_keeps_beside_its_journal_entry(
    adk: httpx.Client, route: str
) -> None:
    # "second" (a's second turn) has no delays: /run_sse sends it at once, saved with
    # its journal entry first; b's echo is paced, its final event saved at the end.
    for session in ("b", "a", "a"):
        response = adk.post(route, json=run_body("#count", session=session))
        sent = response.json() if route == "/run" else sse_events(response)
    assert [e["content"]["parts"] for e in sent] == [[{"text": "second"}]]
    for session, replies in (("b", 1), ("a", 2)):
        events = adk.get(f"/apps/router/users/u1/sessions/{session}").json()["events"]
        assert [e["author"] for e in events] == ["user", "router"] * replies
    assert events[-1] == sent[-1]  # session "a": the very event sent
    entries = JournalEntry.objects.filter(route=route).order_by("id")
    assert [entry.session for entry in entries] == ["b", "a", "a"]


def test_run_accepts_snake_case_keys(adk: httpx.Client) -> None:
    body = {
        "app_name": "error_analysis",
        "user_id": "u1",
        "session_id": "snake",
        "new_message": {"role": "user", "parts": [{"text": "why?"}]},
    }
    [event] = adk.post("/run", json=body).json()
    assert texts(event) == "analysis"
    assert event["author"] == "error_analysis"


def test_session_state_and_state_delta_are_the_inquiry_context(adk: httpx.Client) -> None:
    [plain] = adk.post("/run", json=run_body("which plan?", session="st")).json()
    assert texts(plain) == "which plan?"
    body = run_body("which plan?", session="st", stateDelta={"plan": "gold"})
    [gold] = adk.post("/run", json=body).json()
    assert texts(gold) == "gold plan"
    assert adk.get("/apps/router/users/u1/sessions/st").json()["state"] == {"plan": "gold"}


def test_turn_counts_the_user_messages_of_the_session(adk: httpx.Client) -> None:
    [first] = adk.post("/run", json=run_body("#count", session="turns")).json()
    [second] = adk.post("/run", json=run_body("#count", session="turns")).json()
    assert texts(first) == "#count"
    assert texts(second) == "second"


def user_text_event(text: str) -> dict[str, Any]:
    return {"author": "user", "content": {"role": "user", "parts": [{"text": text}]}}


def test_a_session_created_with_events_continues_their_turns(adk: httpx.Client) -> None:
    events = [user_text_event("#tool first"), {"author": "router"}, user_text_event("#count")]
    adk.post("/apps/router/users/u1/sessions", json={"sessionId": "made", "events": events})
    # A tool result alone continues the last user text of the events the session was made with.
    answer = {"functionResponse": {"name": "lookup", "response": {"result": "rain"}}}
    body = run_body(session="made", newMessage={"role": "user", "parts": [answer]})
    [final] = adk.post("/run", json=body).json()
    assert texts(final) == "second"  # "#count" on turn 2
    [third] = adk.post("/run", json=run_body("#count", session="made")).json()
    assert texts(third) == "#count"  # turn 3
    assert JournalEntry.objects.order_by("pk").values_list("query", flat=True)[1] == "#count"


def test_a_run_reads_its_session_row_and_none_of_its_events(adk: httpx.Client) -> None:
    events = [user_text_event(f"message {n}") for n in range(50)]
    adk.post("/apps/router/users/u1/sessions", json={"sessionId": "long", "events": events})
    job = adk_sessions.OpenRun(
        app="router",
        user="u1",
        session_id="long",
        state_delta=None,
        first=user_text_event("hi"),
        text="hi",
    )
    with CaptureQueriesContext(connection) as queries:
        opened = journal.run_now(job)
    assert opened.earlier == UserTurns(50, "message 49")
    read = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().startswith("SELECT")]
    assert read and not any("adkevent" in sql for sql in read)
    session = AdkSession.objects.get(session_id="long")
    assert (session.user_turns, session.last_user_text) == (51, "hi")
    assert session.events.count() == 51


def test_the_oldest_sessions_go_with_their_events_past_the_journals_cap(
    adk: httpx.Client, settings: Any
) -> None:
    settings.STATIC_AGENTS_JOURNAL_MAX = 3  # a prune every third new session
    for n in range(4):
        adk.post("/run", json=run_body("hello", session=f"run-{n}")).raise_for_status()
    adk.post("/apps/router/users/u1/sessions", json={"sessionId": "made"}).raise_for_status()
    for n in range(4, 6):
        adk.post("/run", json=run_body("hello", session=f"run-{n}")).raise_for_status()
    kept = list(AdkSession.objects.order_by("pk").values_list("session_id", flat=True))
    assert kept[-3:] == ["made", "run-4", "run-5"]
    assert 3 <= len(kept) < 6  # about the cap: pruned a batch at a time
    assert AdkEvent.objects.exclude(session__session_id__in=kept).count() == 0
    assert adk.get("/apps/router/users/u1/sessions/run-0").status_code == 404


def test_a_scripted_error_is_an_error_event(adk: httpx.Client) -> None:
    response = adk.post("/run", json=run_body("#boom"))
    assert response.status_code == 200
    [event] = response.json()
    assert event["errorCode"] == "overloaded"
    assert event["errorMessage"] == "try later"
    assert event["customMetadata"]["error_status"] == 503
    assert "content" not in event

    streamed = sse_events(adk.post("/run_sse", json=run_body("#boom", streaming=True)))
    assert [e.get("errorCode") for e in streamed] == ["overloaded"]


def test_a_tool_call_and_its_function_response_make_a_tool_loop(adk: httpx.Client) -> None:
    [call_event] = adk.post("/run", json=run_body("#tool weather?", session="loop")).json()
    [part] = call_event["content"]["parts"]
    call = part["functionCall"]
    assert call["name"] == "lookup"
    assert call["args"] == {"topic": "weather"}
    assert call_event["longRunningToolIds"] == [call["id"]]

    answer = {
        "functionResponse": {"id": call["id"], "name": "lookup", "response": {"result": "sunny"}}
    }
    body = run_body(session="loop", newMessage={"role": "user", "parts": [answer]})
    [final] = adk.post("/run", json=body).json()
    assert texts(final) == "lookup said: sunny"

    entry = JournalEntry.objects.filter(rule="report").get()
    assert entry.query == "#tool weather?"  # the last user text of the session


def test_run_sse_without_streaming_sends_one_final_event(adk: httpx.Client) -> None:
    response = adk.post("/run_sse", json=run_body("just once"))
    assert response.headers["content-type"].startswith("text/event-stream")
    [event] = sse_events(response)
    assert texts(event) == "just once"
    assert event["turnComplete"] is True


def test_run_sse_streams_partial_deltas_then_the_aggregated_event(adk: httpx.Client) -> None:
    events = sse_events(adk.post("/run_sse", json=run_body("#think now", streaming=True)))
    *partials, final = events
    assert all(e["partial"] is True for e in partials)
    thought_partials = [e for e in partials if e["content"]["parts"][0].get("thought")]
    assert partials[: len(thought_partials)] == thought_partials  # thinking streams first
    assert "".join(texts(e, thought=True) for e in partials) == "Let me see."
    assert "".join(texts(e) for e in partials) == "Here it is."

    assert "partial" not in final
    assert final["content"]["parts"] == [
        {"text": "Let me see.", "thought": True},
        {"text": "Here it is."},
    ]
    assert final["turnComplete"] is True
    assert final["finishReason"] == "STOP"
    assert final["usageMetadata"]["thoughtsTokenCount"] == 3
    assert {e["id"] for e in events} == {final["id"]}  # one model response, one event id


def test_a_stream_due_at_once_is_one_response_of_known_length(adk: httpx.Client) -> None:
    whole = adk.post("/run_sse", json=run_body("#tool weather?", streaming=True))  # no delays
    assert whole.headers["content-length"] == str(len(whole.content))
    assert "transfer-encoding" not in whole.headers
    [event] = sse_events(whole)
    assert event["content"]["parts"][0]["functionCall"]["name"] == "lookup"
    with adk.stream("POST", "/run_sse", json=run_body("#slow", streaming=True)) as paced:
        assert "content-length" not in paced.headers  # its events are yet to come


def test_only_the_final_event_is_appended_to_the_session(adk: httpx.Client) -> None:
    adk.post("/run_sse", json=run_body("a few words here", session="sse", streaming=True))
    events = adk.get("/apps/router/users/u1/sessions/sse").json()["events"]
    assert [e["author"] for e in events] == ["user", "router"]
    assert texts(events[1]) == "a few words here"


def test_the_session_id_is_the_session_key_unless_a_header_names_one(adk: httpx.Client) -> None:
    adk.post("/run", json=run_body("hi", session="by-id"))
    adk.post("/run", json=run_body("hi", session="by-id"), headers={"X-Static-Session": "pinned"})
    assert list(JournalEntry.objects.order_by("id").values_list("session", "dialect")) == [
        ("by-id", "adk"),
        ("pinned", "adk"),
    ]


def test_a_client_that_leaves_mid_stream_is_journaled_as_cancelled(adk: httpx.Client) -> None:
    body = run_body("#slow", streaming=True)
    with adk.stream("POST", "/run_sse", json=body) as response:
        first = next(response.iter_lines())
        assert first.startswith("data: ")
    deadline = time.monotonic() + 3
    while JournalEntry.objects.get().outcome != "cancelled":
        assert time.monotonic() < deadline, "the stream was not marked cancelled"
        time.sleep(0.02)


def test_a_stream_longer_than_the_maximum_is_cut_off(adk: httpx.Client, settings: Any) -> None:
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.15
    events = sse_events(adk.post("/run_sse", json=run_body("#slow", streaming=True)))
    assert [texts(e) for e in events[:-1]] == ["one ", "two "]
    assert events[-1]["errorCode"] == "STREAM_CUT_OFF"
    assert JournalEntry.objects.get().outcome == "cut_off"


# -- bad requests --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "loc", "kind"),
    [
        (b"{not json", ["body", 1], "json_invalid"),
        (b"", ["body"], "missing"),
        (b"[1, 2]", ["body"], "model_type"),
        (
            b'{"userId": "u", "newMessage": {"parts": [{"text": "x"}]}}',
            ["body", "sessionId"],
            "missing",
        ),
        (b'{"userId": 7, "sessionId": "s"}', ["body", "userId"], "string_type"),
        (
            b'{"userId": "u", "sessionId": "s", "newMessage": {"parts": "hi"}}',
            ["body", "newMessage", "parts"],
            "list_type",
        ),
        (
            b'{"userId": "u", "sessionId": "s", "streaming": {"on": 1}}',
            ["body", "streaming"],
            "bool_type",
        ),
        (
            b'{"appName": "router", "userId": "u", "sessionId": "s"}',
            ["body", "newMessage"],
            "missing",
        ),
        (
            b'{"appName": "router", "userId": "u", "sessionId": "s", "newMessage": {"parts": []}}',
            ["body", "newMessage", "parts"],
            "value_error",
        ),
    ],
)
@pytest.mark.parametrize("route", ["/run", "/run_sse"])
def test_a_malformed_run_request_gets_a_422_naming_the_field(
    adk: httpx.Client, route: str, body: bytes, loc: list[Any], kind: str
) -> None:
    response = adk.post(route, content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == loc
    assert problem["type"] == kind
    assert problem["msg"]
    assert not AdkSession.objects.exists()  # nothing was written for a refused request


def test_a_run_without_an_app_name_is_refused(adk: httpx.Client) -> None:
    body = run_body("hi")
    del body["appName"]
    response = adk.post("/run", json=body)
    assert response.status_code == 400
    assert "app_name is required" in response.json()["detail"]
    headed = adk.post("/run", json=body, headers={"X-Agent-Type": "error_analysis"})
    assert texts(headed.json()[0]) == "analysis"


def test_a_wrong_method_gets_a_405(adk: httpx.Client) -> None:
    response = adk.get("/run")
    assert response.status_code == 405
    assert response.json() == {"detail": "Method Not Allowed"}
    assert adk.put("/apps/router/users/u1/sessions").status_code == 405


def test_malformed_session_requests_get_a_422(adk: httpx.Client) -> None:
    base = "/apps/router/users/u1/sessions"
    bad_state = adk.post(base, json={"state": "gold"})
    assert bad_state.status_code == 422
    assert bad_state.json()["detail"][0]["loc"] == ["body", "state"]
    assert (
        adk.post(base, content=b"{", headers={"content-type": "application/json"}).status_code
        == 422
    )
    assert adk.post(f"{base}/x", json=["not", "a", "dict"]).status_code == 422
    adk.post(base, json={"sessionId": "p"})
    no_delta = adk.patch(f"{base}/p", json={})
    assert no_delta.status_code == 422
    assert no_delta.json()["detail"][0]["loc"] == ["body", "stateDelta"]
    assert adk.patch(f"{base}/absent", json={"stateDelta": {}}).status_code == 404
