"""A request to a path no route serves is journaled (outcome ``unknown_route``) and counted."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import websockets.sync.client as ws_client
from websockets.exceptions import ConnectionClosed

from staticagents.testing.client import StaticAgentsClient

API_KEY = "sk-unknown-route-secret"


def test_an_sdk_call_to_a_route_the_service_lacks_is_journaled_with_method_and_path(
    static_agents: StaticAgentsClient, openai_base_url: str, static_agents_headers: dict[str, str]
) -> None:
    client = openai.OpenAI(
        base_url=openai_base_url,
        api_key=API_KEY,
        max_retries=0,
        default_headers=static_agents_headers,
    )
    with pytest.raises(openai.NotFoundError) as raised:
        client.batches.list(limit=3)
    assert raised.value.code == "unknown_url"  # the 404 body is OpenAI's, as before

    [entry] = static_agents.requests(outcome="unknown_route")
    route = f"/sessions/{static_agents.session}/v1/batches"
    assert (entry.method, entry.route, entry.status) == ("GET", route, 404)
    assert entry.dialect == "openai" and entry.rule is None
    assert entry.headers["authorization"] == "Bearer ***"
    assert API_KEY not in json.dumps(dict(entry.headers))
    counters = static_agents.counters()
    assert counters.outcomes["unknown_route"] == 1


def test_the_dialect_is_guessed_from_the_path_and_the_agent_prefix_names_the_agent_type(
    static_agents: StaticAgentsClient,
) -> None:
    headers = static_agents.headers
    base = static_agents.base_url
    httpx.post(f"{base}/v1/messages/batches", headers=headers, json={"requests": []})
    httpx.get(f"{base}/v1beta/cachedContents", headers=headers)
    httpx.delete(f"{base}/agents/coder/v1/files/f1?purpose=x", headers=headers)
    httpx.get(f"{static_agents.session_url}/agents/tutor/v1/files")
    entries = static_agents.requests(outcome="unknown_route")
    seen = [(e.method, e.route, e.dialect, e.agent_type) for e in entries]
    assert seen == [
        ("POST", "/v1/messages/batches", "anthropic", ""),
        ("GET", "/v1beta/cachedContents", "gemini", ""),
        ("DELETE", "/agents/coder/v1/files/f1", "openai", "coder"),
        ("GET", f"/sessions/{static_agents.session}/agents/tutor/v1/files", "openai", "tutor"),
    ]
    assert entries[0].body == {"requests": []}


def test_misses_on_the_control_api_and_the_admin_are_not_agent_traffic(
    static_agents: StaticAgentsClient,
) -> None:
    headers = static_agents.headers
    assert httpx.get(f"{static_agents.base_url}/control/nothing", headers=headers).status_code
    httpx.get(f"{static_agents.base_url}/admin/nothing/", headers=headers)
    assert static_agents.requests(outcome="unknown_route") == []


def test_an_unknown_websocket_path_is_journaled(static_agents: StaticAgentsClient) -> None:
    url = static_agents.base_url.replace("http://", "ws://") + "/ws/nothing-here/"
    with ws_client.connect(url, open_timeout=5, additional_headers=static_agents.headers) as ws:
        assert json.loads(ws.recv(timeout=5))["error"]["status"] == 404
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=5)
    [entry] = static_agents.requests(outcome="unknown_route")
    assert (entry.method, entry.route, entry.dialect) == ("GET", "/ws/nothing-here/", "websocket")
