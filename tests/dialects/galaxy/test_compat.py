"""Galaxy's own fixture and Galaxy's own API expectations, against Static Agents.

``static_agents.yml`` is the file Galaxy's test suite loads into its static
backend; Galaxy's ``lib/galaxy_test/api/test_agents.py`` then asserts the
answers below (its "static" branch). Here they run against the service the
pytest plugin runs, with Galaxy's fixture installed through its client; every
request carries the test's session, which keeps each test's chat history apart.

Galaxy's file is a third party's: its path comes from STATIC_AGENTS_GALAXY_FIXTURE
(``.ci/run`` sets it when the file is beside the checkout). Without it these
tests are skipped, and under ``CI=true`` they fail (``galaxy_fixture`` in conftest).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from staticagents.testing.client import StaticAgentsClient


@pytest.fixture
def static_agents_fixture(galaxy_fixture: Path) -> Path:
    """Every test here starts from Galaxy's own fixture (the plugin's fixture, overridden)."""
    return galaxy_fixture


@pytest.fixture
def galaxy(static_agents: StaticAgentsClient) -> Iterator[httpx.Client]:
    """Galaxy's API, as Galaxy's client calls it, on the test's session."""
    base_url = f"{static_agents.base_url}/api/"
    with httpx.Client(base_url=base_url, headers=static_agents.headers, timeout=10) as client:
        yield client


def query_agent(
    galaxy: httpx.Client, query: str, agent_type: str = "auto", **extra: Any
) -> dict[str, Any]:
    response = galaxy.post(
        "ai/agents/query", json={"query": query, "agent_type": agent_type, **extra}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def parse_sse(text: str) -> list[tuple[str, str]]:
    """SSE frames as ``(event, data)``, read the way Galaxy's test reads them."""
    events = []
    for frame in text.split("\n\n"):
        event, data = "message", []
        for line in frame.strip("\n").split("\n"):
            if line.startswith("event:"):
                event = line[len("event:") :].strip()
            elif line.startswith("data:"):
                data.append(line[len("data:") :].lstrip(" "))
        if data:
            events.append((event, "\n".join(data)))
    return events


def stream_chat(
    galaxy: httpx.Client, query: str, agent_type: str = "auto"
) -> list[tuple[str, str]]:
    response = galaxy.post(f"chat/stream?agent_type={agent_type}", json={"query": query})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)


# -- Galaxy's TestAgentsApi, static branch ---------------------------------------------------


def test_configuration_reports_agents(galaxy: httpx.Client) -> None:
    config = galaxy.get("configuration").json()
    assert config.get("llm_api_configured") is True
    assert config.get("llm_registry_type") == "static"


def test_list_agents(galaxy: httpx.Client) -> None:
    data = galaxy.get("ai/agents").json()
    agent_types = [a["agent_type"] for a in data["agents"]]
    assert "router" in agent_types
    assert "error_analysis" in agent_types
    assert "custom_tool" in agent_types


def test_chat_greeting(galaxy: httpx.Client) -> None:
    assert "Hello" in query_agent(galaxy, "Hello!")["response"]["content"]


def test_chat_domain_query(galaxy: httpx.Client) -> None:
    assert "HISAT2" in query_agent(galaxy, "How do I analyze RNA-seq data?")["response"]["content"]


def test_chat_fallback(galaxy: httpx.Client) -> None:
    assert "Galaxy" in query_agent(galaxy, "Tell me about Galaxy")["response"]["content"]


def test_response_metadata(galaxy: httpx.Client) -> None:
    assert query_agent(galaxy, "Hello!")["response"]["metadata"].get("static_backend") is True


def test_custom_tool_agent(galaxy: httpx.Client) -> None:
    resp = query_agent(galaxy, "Create a tool that counts lines", "custom_tool")["response"]
    assert resp["metadata"]["tool_id"] == "line-counter"
    assert "wc -l" in resp["metadata"]["tool_yaml"]
    save = [s for s in resp["suggestions"] if s["action_type"] == "save_tool"]
    assert len(save) == 1
    assert save[0]["parameters"]["tool_id"] == "line-counter"
    assert save[0]["parameters"]["tool_yaml"]


def test_error_analysis_agent(galaxy: httpx.Client) -> None:
    content = query_agent(galaxy, "My job failed with exit code 1", "error_analysis")["response"]
    assert "error" in content["content"].lower() or "configuration" in content["content"].lower()


def test_chat_stream_emits_progress_then_result(galaxy: httpx.Client) -> None:
    events = stream_chat(galaxy, "Create a tool that counts lines", agent_type="custom_tool")
    progress = [data for event, data in events if event == "progress"]
    results = [data for event, data in events if event == "result"]
    assert progress
    assert len(results) == 1
    assert [event for event, _ in events][-1] == "done"
    steps = set()
    for raw in progress:
        event = json.loads(raw)
        assert {"step", "label", "status", "agent_type"} <= set(event)
        steps.add(event["step"])
    assert "responding" in steps
    chat_response = json.loads(results[0])
    assert chat_response["response"]
    assert chat_response.get("error_code") in (0, None)
    metadata = (chat_response.get("agent_response") or {}).get("metadata", {})
    assert metadata.get("tool_id") == "line-counter"
    assert "wc -l" in metadata.get("tool_yaml", "")


def test_chat_stream_persists_exchange(galaxy: httpx.Client) -> None:
    results = [data for event, data in stream_chat(galaxy, "Hello!") if event == "result"]
    exchange_id = json.loads(results[0]).get("exchange_id")
    assert exchange_id
    messages = galaxy.get(f"chat/exchange/{exchange_id}/messages")
    assert messages.status_code == 200
    user_messages = [m for m in messages.json() if m.get("role") == "user"]
    assert any(m.get("content") == "Hello!" for m in user_messages)


# -- what else the fixture implies ---------------------------------------------------------------


def test_the_registry_is_the_fixtures_four_agent_types(galaxy: httpx.Client) -> None:
    listing = galaxy.get("ai/agents").json()
    assert [a["agent_type"] for a in listing["agents"]] == [
        "custom_tool",
        "error_analysis",
        "page_assistant",
        "router",
    ]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("hey", "Hello! I'm your page assistant."),
        ("Please summarize", "Here is a summary of your history."),
        ("Add a figure", "I can help you write and edit pages for this history."),
    ],
)
def test_a_question_about_a_page_goes_to_the_page_assistant(
    galaxy: httpx.Client, query: str, expected: str
) -> None:
    answer = query_agent(galaxy, query, context={"page_id": "abc123"})["response"]
    assert answer["content"].startswith(expected)
    assert answer["agent_type"] == "page_assistant"


def test_the_page_assistants_catch_all_has_medium_confidence(galaxy: httpx.Client) -> None:
    answer = query_agent(galaxy, "Add a figure", "page_assistant")["response"]
    assert answer["confidence"] == "medium"


def test_an_agent_type_without_rules_gets_the_fixtures_fallback(galaxy: httpx.Client) -> None:
    answer = query_agent(galaxy, "Find a tutorial", "gtn_training")["response"]
    assert answer == {
        "content": "Static backend: no matching rule.",
        "confidence": "low",
        "agent_type": "unknown",
        "suggestions": [],
        "metadata": {"static_backend": True},
        "reasoning": None,
    }


def test_the_dedicated_routes_answer_as_their_agents(galaxy: httpx.Client) -> None:
    error = galaxy.post("ai/agents/error-analysis", json={"query": "Job 5 died", "job_id": 5})
    assert error.json()["content"] == "This error appears to be a tool configuration issue."
    tool = galaxy.post("ai/agents/custom-tool", json={"query": "Count lines"}).json()
    assert tool["metadata"]["tool_id"] == "line-counter"
    assert tool["suggestions"][0]["priority"] == 1


def test_a_chat_conversation_with_the_fixture(galaxy: httpx.Client) -> None:
    first = galaxy.post("chat?agent_type=auto", json={"query": "hi"}).json()
    assert first["response"] == "Hello! I'm Galaxy's AI assistant. How can I help?"
    second = galaxy.post(
        "chat?agent_type=auto",
        json={"query": "What about RNA-seq?", "exchange_id": first["exchange_id"]},
    ).json()
    assert "HISAT2" in second["response"]
    history = galaxy.get("chat/history").json()
    assert history[0]["id"] == first["exchange_id"]
    assert history[0]["message_count"] == 2
