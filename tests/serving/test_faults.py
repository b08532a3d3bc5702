"""Scripted faults in the middle of a stream, as the real SDKs meet them."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest
import websockets.sync.client as ws_client
from websockets.exceptions import ConnectionClosed

from staticagents.core.replies import chaos_fault
from staticagents.models import JournalEntry
from staticagents.testing.client import StaticAgentsClient
from tests.conftest import seed_drawing_both

FAST = {"word_delay_ms": 1}
CONTENT = "one two three four five six seven eight"


def faulty(kind: str, after: int = 3) -> dict[str, Any]:
    return {
        "name": kind,
        "match": {"contains": f"#{kind}"},
        "response": {
            "content": CONTENT,
            "stream": FAST,
            "fault": {"after_chunks": after, "kind": kind},
        },
    }


RULES = {
    "rules": [
        faulty("disconnect"),
        faulty("malformed"),
        faulty("error_event"),
        faulty("stall"),
        {
            "name": "chaotic",
            "match": {"contains": "#chaos"},
            "response": {
                "content": CONTENT,
                "stream": FAST,
                "chaos": {"probability": 0.5, "kinds": ["error_event"], "seed": 11},
            },
        },
        {
            "name": "late",
            "match": {"contains": "#late"},
            "response": {"content": "short", "fault": {"after_chunks": 50, "kind": "error_event"}},
        },
    ]
}
pytestmark = pytest.mark.static_agents_fixture(RULES)


@pytest.fixture
def client(openai_base_url: str, static_agents_headers: dict[str, str]) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=openai_base_url,
        api_key="sk-test",
        max_retries=0,
        default_headers=static_agents_headers,
    )


@pytest.fixture
def claude(anthropic_base_url: str, static_agents_headers: dict[str, str]) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=anthropic_base_url,
        api_key="sk-ant-test",
        max_retries=0,
        default_headers=static_agents_headers,
    )


def chat_stream(client: openai.OpenAI, text: str) -> list[str]:
    """The content deltas the SDK yields before the stream ends (or raises)."""
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": text}], stream=True
    )
    received: list[str] = []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            received.append(chunk.choices[0].delta.content)
    return received


def only_outcome(static_agents: StaticAgentsClient) -> str:
    [entry] = static_agents.requests()
    return entry.outcome


def test_openai_disconnect_drops_the_connection_midway(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    received: list[str] = []
    with pytest.raises((httpx.HTTPError, openai.APIConnectionError)):
        stream = client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "#disconnect"}], stream=True
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
    assert "".join(received) != CONTENT
    assert only_outcome(static_agents) == "fault"
    assert static_agents.counters().outcomes == {"fault": 1}


def test_openai_malformed_chunk_makes_the_sdk_raise_on_decoding(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    with pytest.raises(json.JSONDecodeError):
        chat_stream(client, "#malformed")
    assert only_outcome(static_agents) == "fault"


def test_openai_error_event_raises_api_error_after_the_first_chunks(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    received: list[str] = []
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "#error_event"}], stream=True
    )
    with pytest.raises(openai.APIError) as raised:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
    assert "overloaded" in raised.value.message
    assert 0 < len(received) < len(CONTENT.split())
    assert only_outcome(static_agents) == "fault"


def test_a_fault_after_more_chunks_than_the_stream_has_replaces_its_ending(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    with pytest.raises(openai.APIError):
        chat_stream(client, "#late")
    assert only_outcome(static_agents) == "fault"


def test_a_stall_stops_sending_until_the_maximum_duration_cuts_it_off(
    live_url: str, load_rules: Callable[[Any], Any], settings: Any
) -> None:
    load_rules(RULES)
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.2
    client = openai.OpenAI(base_url=f"{live_url}/v1", api_key="sk-test", max_retries=0)
    received: list[str] = []
    stream = client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "#stall"}], stream=True
    )
    with pytest.raises(openai.APIError) as raised:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
    assert "maximum stream duration" in raised.value.message
    assert received == ["one ", "two "]  # the role chunk, then two words: three chunks
    assert JournalEntry.objects.get().outcome == "fault"


def test_gemini_galaxy_and_adk_streams_end_with_their_own_error(
    live_url: str, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(RULES)
    body = {"contents": [{"parts": [{"text": "#error_event"}]}]}
    gemini = httpx.post(f"{live_url}/v1beta/models/m:streamGenerateContent?alt=sse", json=body)
    last = json.loads(gemini.text.strip().split("data: ")[-1])
    assert last["error"] == {
        "code": 503,
        "message": "The model is overloaded: scripted stream fault",
        "status": "UNAVAILABLE",
    }
    array = httpx.post(f"{live_url}/v1beta/models/m:streamGenerateContent", json=body)
    assert not array.text.rstrip().endswith("]")  # the array is never closed
    galaxy = httpx.post(f"{live_url}/api/chat/stream", json={"query": "#error_event"})
    events = [block for block in galaxy.text.split("\n\n") if block.strip()]
    assert events[-1].startswith("event: result")
    assert json.loads(events[-1].split("data: ", 1)[1])["error_code"] == 503
    outcomes = set(JournalEntry.objects.values_list("outcome", flat=True))
    assert outcomes == {"fault"}


def test_chaos_faults_the_requests_its_seed_and_session_draw(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    chaos = {"probability": 0.5, "kinds": ["error_event"], "seed": 11}
    seed = seed_drawing_both(chaos, static_agents.session, "chaotic", 8)
    if seed != chaos["seed"]:
        chaos["seed"] = seed
        rules = copy.deepcopy(RULES)
        next(r for r in rules["rules"] if r["name"] == "chaotic")["response"]["chaos"] = chaos
        static_agents.install(rules)
    expected = [chaos_fault(chaos, static_agents.session, "chaotic", n) for n in range(1, 9)]
    faulted = []
    for _ in range(8):
        try:
            chat_stream(client, "#chaos")
            faulted.append(False)
        except openai.APIError:
            faulted.append(True)
    assert faulted == [fault is not None for fault in expected]
    assert True in faulted and False in faulted  # the seed draws some of each
    outcomes = [entry.outcome for entry in static_agents.requests()]
    assert outcomes == ["fault" if hit else "answered" for hit in faulted]


DEFAULT_CHAOS = {"probability": 0.5, "kinds": ["error_event"], "seed": 5}
CHAOS_IN_DEFAULTS = {
    "defaults": {"chaos": DEFAULT_CHAOS},
    "rules": [
        {"name": "flaky", "match": {"contains": "#flaky"}, "response": {"content": CONTENT}},
        {
            "name": "steady",
            "match": {"contains": "#steady"},
            "response": {"content": CONTENT, "chaos": {"probability": 0}},
        },
    ],
}


def faults_drawn(client: openai.OpenAI, text: str, times: int) -> list[bool]:
    faulted = []
    for _ in range(times):
        try:
            chat_stream(client, text)
            faulted.append(False)
        except openai.APIError:
            faulted.append(True)
    return faulted


def test_chaos_in_the_defaults_replays_the_same_faults_for_the_same_seed_and_session(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    chaos = {**DEFAULT_CHAOS}
    chaos["seed"] = seed_drawing_both(chaos, static_agents.session, "flaky", 8)
    static_agents.install({**CHAOS_IN_DEFAULTS, "defaults": {"chaos": chaos}})
    first = faults_drawn(client, "#flaky", 8)
    expected = [chaos_fault(chaos, static_agents.session, "flaky", n) for n in range(1, 9)]
    assert first == [fault is not None for fault in expected]
    assert True in first and False in first  # the seed draws some of each
    static_agents.reset()  # the same session, counted from its first request again
    assert faults_drawn(client, "#flaky", 8) == first


def test_a_rules_own_chaos_overrides_the_defaults(
    static_agents: StaticAgentsClient, client: openai.OpenAI
) -> None:
    static_agents.install(CHAOS_IN_DEFAULTS)
    assert faults_drawn(client, "#steady", 6) == [False] * 6
    assert {entry.outcome for entry in static_agents.requests()} == {"answered"}


def test_anthropic_error_event_raises_the_overloaded_error(
    static_agents: StaticAgentsClient, claude: anthropic.Anthropic
) -> None:
    with (
        pytest.raises(anthropic.APIStatusError) as raised,
        claude.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=100,
            messages=[{"role": "user", "content": "#error_event"}],
        ) as stream,
    ):
        for _ in stream.text_stream:
            pass
    body: Any = raised.value.body
    assert body["error"]["type"] == "overloaded_error"
    assert only_outcome(static_agents) == "fault"


def test_anthropic_malformed_event_raises_on_decoding(
    static_agents: StaticAgentsClient, claude: anthropic.Anthropic
) -> None:
    with (
        pytest.raises(json.JSONDecodeError),
        claude.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=100,
            messages=[{"role": "user", "content": "#malformed"}],
        ) as stream,
    ):
        for _ in stream.text_stream:
            pass


def test_a_websocket_error_event_ends_the_stream_and_a_disconnect_closes_the_socket(
    static_agents: StaticAgentsClient,
) -> None:
    url = static_agents.base_url.replace("http://", "ws://") + "/ws/chat/"
    with ws_client.connect(url, open_timeout=5, additional_headers=static_agents.headers) as ws:
        ws.send(json.dumps({"query": "#error_event"}))
        kinds = [json.loads(ws.recv(timeout=5))]
        while kinds[-1]["type"] != "error":
            kinds.append(json.loads(ws.recv(timeout=5)))
        assert kinds[-1]["error"]["status"] == 503
        ws.send(json.dumps({"query": "#disconnect"}))
        with pytest.raises(ConnectionClosed):
            while True:
                ws.recv(timeout=5)
        assert ws.close_code == 1011
    assert [e.outcome for e in static_agents.requests()] == ["fault", "fault"]


def test_anthropic_disconnect_raises_a_connection_error_midway(
    static_agents: StaticAgentsClient, claude: anthropic.Anthropic
) -> None:
    received: list[str] = []
    with (
        pytest.raises((httpx.HTTPError, anthropic.APIConnectionError)),
        claude.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=100,
            messages=[{"role": "user", "content": "#disconnect"}],
        ) as stream,
    ):
        for text in stream.text_stream:
            received.append(text)
    assert len(received) < len(CONTENT.split())  # its first events carry no text yet
    assert only_outcome(static_agents) == "fault"


def test_anthropic_stall_is_cut_off_with_an_error_event_at_the_maximum_duration(
    live_url: str, load_rules: Callable[[Any], Any], settings: Any
) -> None:
    load_rules(RULES)
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.2
    claude = anthropic.Anthropic(base_url=live_url, api_key="sk-ant-test", max_retries=0)
    received: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError) as raised,
        claude.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=100,
            messages=[{"role": "user", "content": "#stall"}],
        ) as stream,
    ):
        for text in stream.text_stream:
            received.append(text)
    assert "maximum stream duration" in str(raised.value)
    assert len(received) < len(CONTENT.split())
    assert JournalEntry.objects.get().outcome == "fault"
