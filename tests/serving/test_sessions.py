"""``/sessions/{key}/...``: every surface served in the session its URL names, with no header.

The SDKs here are given only a base URL (the testing kit's session-bound ones)
and send no ``X-Static-Session``; ``requests()`` must still see each request,
recorded under the route the client used.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest
import websockets.sync.client as ws_client
from google import genai
from google.genai import types
from websockets.exceptions import ConnectionClosed

from staticagents.testing.client import StaticAgentsClient

ECHO: dict[str, Any] = {
    "rules": [{"name": "echo", "response": {"template": True, "content": "$query"}}]
}
pytestmark = pytest.mark.static_agents_fixture(ECHO)


def routes(client: StaticAgentsClient) -> list[tuple[str, str]]:
    prefix = f"/sessions/{client.session}"
    return [(e.dialect, e.route.removeprefix(prefix)) for e in client.requests()]


def test_the_openai_sdk_needs_only_the_base_url(
    static_agents: StaticAgentsClient, openai_base_url: str
) -> None:
    agent = openai.OpenAI(base_url=openai_base_url, api_key="x", max_retries=0)
    chat = agent.chat.completions.create(model="m", messages=[{"role": "user", "content": "a"}])
    streamed = agent.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "b"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "b"
    response = agent.responses.create(model="m", input="c")
    vectors = agent.embeddings.create(model="text-embedding-3-small", input="d")

    assert (chat.choices[0].message.content, response.output_text) == ("a", "c")
    assert len(vectors.data[0].embedding) > 0
    assert routes(static_agents) == [
        ("openai", "/v1/chat/completions"),
        ("openai", "/v1/chat/completions"),
        ("responses", "/v1/responses"),
        ("embeddings", "/v1/embeddings"),
    ]
    assert {e.session for e in static_agents.requests()} == {static_agents.session}
    assert static_agents.requests()[0].route.startswith(f"/sessions/{static_agents.session}/v1/")


def test_the_anthropic_sdk_needs_only_the_base_url(
    static_agents: StaticAgentsClient, anthropic_base_url: str
) -> None:
    agent = anthropic.Anthropic(base_url=anthropic_base_url, api_key="x", max_retries=0)
    message = [{"role": "user", "content": "ping"}]
    answer = agent.messages.create(model="m", max_tokens=20, messages=message)
    with agent.messages.stream(model="m", max_tokens=20, messages=message) as stream:
        streamed = stream.get_final_text()

    assert (answer.content[0].text, streamed) == ("ping", "ping")
    assert routes(static_agents) == [("anthropic", "/v1/messages")] * 2


@pytest.mark.parametrize("api_version", ["v1beta", "v1"])
def test_google_genai_needs_only_the_base_url(
    static_agents: StaticAgentsClient, gemini_base_url: str, api_version: str
) -> None:
    options = types.HttpOptions(base_url=gemini_base_url, api_version=api_version)
    client = genai.Client(api_key="x", http_options=options)
    answer = client.models.generate_content(model="gemini-2.5-flash", contents="hello")
    embedded = client.models.embed_content(model="gemini-embedding-001", contents="hi")

    assert answer.text == "hello"
    assert embedded.embeddings and embedded.embeddings[0].values
    assert routes(static_agents) == [
        ("gemini", f"/{api_version}/models/gemini-2.5-flash:generateContent"),
        ("embeddings", f"/{api_version}/models/gemini-embedding-001:batchEmbedContents"),
    ]


def test_galaxys_agent_api_needs_only_the_base_url(
    static_agents: StaticAgentsClient, galaxy_base_url: str
) -> None:
    with httpx.Client(base_url=galaxy_base_url, timeout=10) as galaxy:
        configuration = galaxy.get("/api/configuration").json()
        query = galaxy.post("/api/ai/agents/query", json={"query": "q", "agent_type": "router"})
        chat = galaxy.post("/api/chat", json={"query": "c"})
        stream = galaxy.post("/api/chat/stream", json={"query": "s"})

    assert configuration["llm_registry_type"] == "static"
    assert query.json()["response"]["content"] == "q"
    assert chat.json()["response"] == "c"
    assert stream.status_code == 200 and '"s"' in stream.text
    assert routes(static_agents) == [
        ("galaxy", "/api/ai/agents/query"),
        ("galaxy", "/api/chat"),
        ("galaxy", "/api/chat/stream"),
    ]


def test_the_adk_api_needs_only_the_base_url(
    static_agents: StaticAgentsClient, adk_base_url: str
) -> None:
    base = "/apps/router/users/u1/sessions"
    message = {"role": "user", "parts": [{"text": "hi"}]}
    run = {"appName": "router", "userId": "u1", "sessionId": "chat-1", "newMessage": message}
    with httpx.Client(base_url=adk_base_url, timeout=10) as adk:
        made = adk.post(base, json={"sessionId": "chat-1"})
        [event] = adk.post("/run", json=run).json()
        streamed = adk.post("/run_sse", json={**run, "streaming": False})
        listed = adk.get(base).json()
        deleted = adk.delete(f"{base}/chat-1")

    assert made.status_code == 200 and made.json()["id"] == "chat-1"
    assert event["content"]["parts"][0]["text"] == "hi"
    assert streamed.status_code == 200 and '"hi"' in streamed.text
    assert [s["id"] for s in listed] == ["chat-1"]
    assert deleted.status_code in (200, 204)
    # The URL's session wins over ADK's own session id, as the header does.
    assert routes(static_agents) == [("adk", "/run"), ("adk", "/run_sse")]


def test_the_websocket_needs_only_its_url(static_agents: StaticAgentsClient) -> None:
    with ws_client.connect(static_agents.websocket_url, open_timeout=10) as socket:
        socket.send(json.dumps({"query": "over the socket"}))
        events = []
        while not events or events[-1]["type"] != "done":
            events.append(json.loads(socket.recv(timeout=10)))

    assert "".join(e["text"] for e in events if e["type"] == "delta") == "over the socket"
    [result] = [e for e in events if e["type"] == "result"]
    assert result["session"] == static_agents.session
    assert routes(static_agents) == [("websocket", "/ws/chat/")]


def test_the_session_prefix_combines_with_the_agent_prefix(
    static_agents: StaticAgentsClient,
) -> None:
    base_url = f"{static_agents.session_url}/agents/coder/v1"
    agent = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
    agent.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])

    [entry] = static_agents.requests()
    assert (entry.agent_type, entry.session) == ("coder", static_agents.session)
    assert entry.route == f"/sessions/{static_agents.session}/agents/coder/v1/chat/completions"


def test_the_path_names_the_session_even_beside_a_header(
    static_agents: StaticAgentsClient, openai_base_url: str
) -> None:
    agent = openai.OpenAI(
        base_url=openai_base_url,
        api_key="x",
        max_retries=0,
        default_headers={"X-Static-Session": "another-session"},
    )
    agent.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])

    assert len(static_agents.requests()) == 1
    assert static_agents.requests(session="another-session") == []


def test_an_unknown_route_below_the_prefix_is_journaled_in_the_session(
    static_agents: StaticAgentsClient, anthropic_base_url: str
) -> None:
    agent = anthropic.Anthropic(base_url=anthropic_base_url, api_key="x", max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as raised:
        agent.beta.files.list()
    assert raised.value.body["error"]["type"] == "not_found_error"

    [entry] = static_agents.requests()
    assert (entry.dialect, entry.outcome, entry.method) == ("anthropic", "unknown_route", "GET")


def test_a_key_too_long_is_refused_in_the_dialects_own_error_shape(
    static_agents: StaticAgentsClient,
) -> None:
    base_url = f"{static_agents.base_url}/sessions/{'k' * 201}"
    agent = anthropic.Anthropic(base_url=base_url, api_key="x", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as raised:
        agent.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    message = raised.value.body["error"]["message"]
    assert "session key is 201 characters long: at most 200" in message

    openai_agent = openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        openai_agent.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert refused.value.type == "invalid_request_error"
    # Nothing was answered, in a cut-short session or the global one.
    assert static_agents.requests(session="k" * 200) == []
    # (other tests' late requests may reach the global session meanwhile: only ours count)
    strays = static_agents.requests(session="global")
    assert [entry for entry in strays if "/sessions/" in entry.route] == []


@pytest.mark.parametrize(
    ("key", "problem"),
    [("", "the session key is empty"), ("a%20b", "must be printable ASCII")],
)
def test_an_empty_or_spaced_key_is_a_galaxy_400(
    static_agents: StaticAgentsClient, key: str, problem: str
) -> None:
    response = httpx.post(
        f"{static_agents.base_url}/sessions/{key}/api/ai/agents/query", json={"query": "x"}
    )
    assert response.status_code == 400
    assert problem in response.json()["err_msg"]


def test_a_bad_key_on_the_websocket_gets_an_error_event_and_close_4400(
    static_agents: StaticAgentsClient,
) -> None:
    url = f"ws{static_agents.base_url.removeprefix('http')}/sessions/{'k' * 300}/ws/chat/"
    with ws_client.connect(url, open_timeout=10) as socket:
        event = json.loads(socket.recv(timeout=10))
        with pytest.raises(ConnectionClosed):
            socket.recv(timeout=10)
    assert event["error"]["status"] == 400 and "at most 200" in event["error"]["message"]
    assert socket.close_code == 4400


def test_urls_the_service_builds_keep_the_session_prefix(
    static_agents: StaticAgentsClient,
) -> None:
    response = httpx.get(f"{static_agents.session_url}/admin/")
    assert response.status_code == 302
    assert response.headers["location"].startswith(
        f"/sessions/{static_agents.session}/admin/login/"
    )


def test_the_routers_path_cache_holds_routes_not_sessions(live_url: str, load_rules: Any) -> None:
    from staticagents.asgi import application

    load_rules(ECHO)
    message = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    for n in range(5):
        answered = httpx.post(f"{live_url}/sessions/s{n}/v1/chat/completions", json=message)
        assert answered.json()["choices"][0]["message"]["content"] == "x"

    cached = application.app.resolved  # SessionPrefix(ReplyRouter)
    assert "/v1/chat/completions" in cached
    assert not [path for path in cached if path.startswith("/sessions/")]


async def test_below_a_mount_point_the_prefix_extends_the_root_path() -> None:
    from staticagents.serving.sessions import SessionPrefix

    seen: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope)

    scope = {
        "type": "http",
        "path": "/mount/sessions/ci-42/v1/chat/completions",
        "root_path": "/mount",
        "headers": [(b"x-static-session", b"other"), (b"accept", b"*/*")],
    }
    await SessionPrefix(app)(scope, None, None)

    [bound] = seen
    assert bound["root_path"] == "/mount/sessions/ci-42"
    assert bound["path"] == scope["path"]  # ASGI's path keeps its root_path
    assert bound["headers"] == [(b"accept", b"*/*"), (b"x-static-session", b"ci-42")]
