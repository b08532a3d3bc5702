"""The Responses, Gemini and embeddings routes share what every surface has: sessions by
``X-Static-Session``, the ``dialect`` predicate in explain, keys kept out of the journal."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from staticagents.testing.client import StaticAgentsClient

API_KEY = "AIzaSyStaticAgentsNotARealKey0123456789"
RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "vectors",
            "match": {"dialect": "embeddings", "contains": "#step"},
            "responses": [{"embedding": [1, 0]}, {"embedding": [0, 1]}],
        },
        {
            "name": "responses-only",
            "match": {"dialect": "responses", "contains": "#step"},
            "responses": [{"content": "first"}, {"content": "second"}],
        },
        {
            "name": "gemini-only",
            "match": {"dialect": "gemini", "contains": "#step"},
            "responses": [{"content": "first"}, {"content": "second"}],
        },
    ]
}
pytestmark = pytest.mark.static_agents_fixture(RULES)


def responses_text(base: str, headers: dict[str, str]) -> str:
    body = {"model": "gpt-5", "input": "#step"}
    answer = httpx.post(f"{base}/v1/responses", json=body, headers=headers).json()
    return str(answer["output"][0]["content"][0]["text"])


def gemini_text(base: str, headers: dict[str, str]) -> str:
    body = {"contents": [{"parts": [{"text": "#step"}]}]}
    url = f"{base}/v1beta/models/gemini-2.5-flash:generateContent"
    answer = httpx.post(url, json=body, headers=headers).json()
    return str(answer["candidates"][0]["content"]["parts"][0]["text"])


def embedding(base: str, headers: dict[str, str]) -> str:
    body = {"model": "m", "input": "#step", "dimensions": 2, "encoding_format": "float"}
    answer = httpx.post(f"{base}/v1/embeddings", json=body, headers=headers).json()
    return "first" if answer["data"][0]["embedding"][0] > 0.5 else "second"


@pytest.mark.parametrize("ask", [responses_text, gemini_text, embedding])
def test_each_session_header_keeps_its_own_place_in_a_script(
    static_agents: StaticAgentsClient, ask: Callable[[str, dict[str, str]], str]
) -> None:
    one = static_agents.headers
    other = {"X-Static-Session": static_agents.session + "-other"}
    base = static_agents.base_url
    assert [ask(base, one), ask(base, other), ask(base, one)] == ["first", "first", "second"]
    assert len(static_agents.requests()) == 2
    assert len(static_agents.requests(static_agents.session + "-other")) == 1


@pytest.mark.parametrize(
    ("dialect", "rule"), [("responses", "responses-only"), ("gemini", "gemini-only")]
)
def test_explain_takes_the_new_dialect_names(
    static_agents: StaticAgentsClient, dialect: str, rule: str
) -> None:
    explained = static_agents.explain("#step", dialect=dialect)
    assert explained.rule == rule
    refused = [v for v in explained.verdicts if not v.matched]
    assert {v.predicate for v in refused} == {"dialect"}
    assert all(f"{dialect!r}" in (v.reason or "") for v in refused)


@pytest.mark.parametrize(
    ("method", "body"),
    [
        ("embedContent", {"content": {"parts": [{"text": "#step"}]}}),
        (
            "batchEmbedContents",
            {"requests": [{"model": "models/m", "content": {"parts": [{"text": "#step"}]}}]},
        ),
        ("streamGenerateContent", {"contents": [{"parts": [{"text": "#step"}]}]}),
    ],
)
def test_a_key_in_the_query_of_any_gemini_route_is_never_journaled(
    static_agents: StaticAgentsClient, method: str, body: dict[str, Any]
) -> None:
    url = f"{static_agents.base_url}/v1beta/models/m:{method}"
    params = {"key": API_KEY, "alt": "sse"}
    response = httpx.post(url, params=params, json=body, headers=static_agents.headers)
    assert response.status_code == 200, response.text
    [entry] = static_agents.requests()
    assert entry.route == f"/v1beta/models/m:{method}"
    assert API_KEY not in json.dumps([entry.route, entry.headers, entry.raw_body])


def test_the_agent_prefix_chooses_the_agent_type_on_gemini_embeddings_too(
    static_agents: StaticAgentsClient,
) -> None:
    url = f"{static_agents.base_url}/agents/coder/v1beta/models/m:embedContent"
    body = {"content": {"parts": [{"text": "what is this"}]}}
    response = httpx.post(url, json=body, headers=static_agents.headers)
    assert response.status_code == 200, response.text
    [entry] = static_agents.requests()
    assert (entry.agent_type, entry.dialect) == ("coder", "embeddings")


def test_routes_the_new_surfaces_lack_are_journaled_without_their_keys(
    static_agents: StaticAgentsClient,
) -> None:
    base, headers = static_agents.base_url, static_agents.headers
    cancel = httpx.post(f"{base}/v1/responses/resp_1/cancel", headers=headers)
    cached = httpx.get(f"{base}/v1beta/cachedContents", params={"key": API_KEY}, headers=headers)
    assert cancel.status_code == cached.status_code == 404
    assert cached.json()["error"]["status"] == "NOT_FOUND"
    entries = static_agents.requests(outcome="unknown_route")
    seen = [(e.method, e.route, e.dialect) for e in entries]
    assert seen == [
        ("POST", "/v1/responses/resp_1/cancel", "openai"),
        ("GET", "/v1beta/cachedContents", "gemini"),
    ]
    assert API_KEY not in json.dumps([(e.route, dict(e.headers), e.raw_body) for e in entries])
