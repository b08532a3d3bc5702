"""Scripted faults in the middle of a Gemini stream, as google-genai and an ADK agent meet them.

Neither retries a stream that fails once it has begun: each fault is one request in the
journal, even with the SDK's retries on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from google import genai
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.genai import errors, types

from staticagents.core.replies import chaos_fault
from staticagents.models import JournalEntry
from staticagents.testing.client import StaticAgentsClient
from tests.conftest import seed_drawing_both
from tests.dialects.gemini.test_adk_agent import run, weather_agent

API_KEY = "AIzaSyStaticAgentsNotARealKey0123456789"
CONTENT = "one two three four five six seven eight"
RETRYING = types.HttpRetryOptions(attempts=3, initial_delay=0.01, max_delay=0.01, jitter=0)


def faulty(kind: str) -> dict[str, Any]:
    return {
        "name": kind,
        "match": {"contains": f"#{kind}"},
        "response": {
            "content": CONTENT,
            "stream": {"word_delay_ms": 1},
            "fault": {"after_chunks": 3, "kind": kind},
        },
    }


RULES = {"rules": [faulty(kind) for kind in ("disconnect", "malformed", "error_event", "stall")]}
pytestmark = pytest.mark.static_agents_fixture(RULES)


def client_for(base_url: str, headers: dict[str, str], **options: Any) -> genai.Client:
    http = types.HttpOptions(base_url=base_url, headers=headers, retry_options=RETRYING, **options)
    return genai.Client(api_key=API_KEY, http_options=http)


def stream_into(client: genai.Client, text: str, received: list[str]) -> None:
    for chunk in client.models.generate_content_stream(model="gemini-2.5-flash", contents=text):
        received.append(chunk.text or "")


@pytest.fixture
def client(static_agents: StaticAgentsClient) -> genai.Client:
    return client_for(static_agents.gemini_base_url, static_agents.headers)


def outcomes(static_agents: StaticAgentsClient) -> list[str]:
    return [entry.outcome for entry in static_agents.requests()]


def test_a_disconnect_raises_httpxs_protocol_error_after_the_first_chunks(
    static_agents: StaticAgentsClient, client: genai.Client
) -> None:
    received: list[str] = []
    with pytest.raises(httpx.RemoteProtocolError):
        stream_into(client, "#disconnect", received)
    assert received == ["one ", "two ", "three "]
    assert outcomes(static_agents) == ["fault"]  # not retried


def test_a_malformed_chunk_raises_unknown_api_response_error(
    static_agents: StaticAgentsClient, client: genai.Client
) -> None:
    received: list[str] = []
    with pytest.raises(errors.UnknownApiResponseError, match="Failed to parse response as JSON"):
        stream_into(client, "#malformed", received)
    assert received == ["one ", "two ", "three "]
    assert outcomes(static_agents) == ["fault"]


def test_an_error_event_raises_server_error_503_unavailable(
    static_agents: StaticAgentsClient, client: genai.Client
) -> None:
    received: list[str] = []
    with pytest.raises(errors.ServerError) as raised:
        stream_into(client, "#error_event", received)
    assert (raised.value.code, raised.value.status) == (503, "UNAVAILABLE")
    assert "overloaded" in (raised.value.message or "")
    assert received == ["one ", "two ", "three "]
    assert outcomes(static_agents) == ["fault"]


def test_a_stall_is_cut_off_as_504_deadline_exceeded_at_the_maximum_duration(
    live_url: str, load_rules: Callable[[Any], Any], settings: Any
) -> None:
    load_rules(RULES)
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.2
    received: list[str] = []
    with pytest.raises(errors.ServerError) as raised:
        stream_into(client_for(live_url, {}), "#stall", received)
    assert (raised.value.code, raised.value.status) == (504, "DEADLINE_EXCEEDED")
    assert "maximum stream duration" in (raised.value.message or "")
    assert received == ["one ", "two ", "three "]
    assert list(JournalEntry.objects.values_list("outcome", flat=True)) == ["fault"]


def test_a_stall_meets_the_clients_own_read_timeout_first(
    static_agents: StaticAgentsClient,
) -> None:
    timing_out = client_for(static_agents.gemini_base_url, static_agents.headers, timeout=300)
    received: list[str] = []
    with pytest.raises(httpx.ReadTimeout):
        stream_into(timing_out, "#stall", received)
    assert received == ["one ", "two ", "three "]


@pytest.mark.parametrize(
    ("kind", "raised"),
    [("disconnect", httpx.RemoteProtocolError), ("error_event", errors.ServerError)],
)
async def test_an_adk_agents_streamed_run_raises_what_the_sdk_raises(
    static_agents: StaticAgentsClient, kind: str, raised: type[Exception]
) -> None:
    with pytest.raises(raised):
        await run(
            weather_agent(static_agents),
            f"#{kind}",
            RunConfig(streaming_mode=StreamingMode.SSE),
        )
    assert outcomes(static_agents) == ["fault"]


def test_chaos_in_the_defaults_faults_the_gemini_streams_its_seed_and_session_draw(
    static_agents: StaticAgentsClient, client: genai.Client
) -> None:
    chaos = {"probability": 0.5, "kinds": ["error_event"], "seed": 21}
    chaos["seed"] = seed_drawing_both(chaos, static_agents.session, "any", 8)
    static_agents.install(
        {"defaults": {"chaos": chaos}, "rules": [{"name": "any", "response": {"content": CONTENT}}]}
    )
    faulted = []
    for _ in range(8):
        try:
            stream_into(client, "hello", [])
            faulted.append(False)
        except errors.ServerError:
            faulted.append(True)
    expected = [chaos_fault(chaos, static_agents.session, "any", n) for n in range(1, 9)]
    assert faulted == [fault is not None for fault in expected]
    assert True in faulted and False in faulted
