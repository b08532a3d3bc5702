"""Proxied agent types, end to end: a second Static Agents server plays the real model.

The service under test runs in this process (``live_url``); the "real model" is a
``serve`` subprocess that takes only the upstream's key (``STATIC_AGENTS_API_KEYS``),
so every answer it gives proves the key was read from the environment and the
client's own key was not sent on. The clients are the official SDKs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect

from staticagents.models import JournalEntry, Upstream
from staticagents.selectors import journal_counters
from staticagents.testing.server import StaticAgentsServer, free_port
from tests.conftest import galaxy_query

UPSTREAM_KEY = f"sk-upstream-{secrets.token_hex(16)}"
CLIENT_KEY = "sk-client-own-key"
KEY_VARIABLE = "PROXY_TEST_UPSTREAM_KEY"
MODEL_RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "slow",
            "match": {"contains": "#slow"},
            # The second word comes after ten minutes: only a relay that forwards each
            # chunk as it arrives shows the first one before the test times out.
            "response": {"content": "first second", "stream": {"word_delay_ms": 600_000}},
        },
        {
            "name": "tool",
            "match": {"contains": "#tool"},
            "response": {
                "thinking": "A lookup will tell.",
                "tool_calls": [{"name": "lookup", "arguments": {"topic": "weather", "days": 3}}],
            },
        },
        {
            "name": "busy",
            "match": {"contains": "#busy"},
            "response": {
                "error": {"status": 429, "type": "rate_limit_error", "message": "slow down"},
                "retry_after": 7,
            },
        },
        {
            "name": "echo",
            "response": {
                "template": True,
                "content": "model says: $query",
                "usage": {"input_tokens": 11, "output_tokens": 4},
            },
        },
    ]
}


@pytest.fixture(scope="module")
def real_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StaticAgentsServer]:
    server = StaticAgentsServer(
        tmp_path_factory.mktemp("real-model"),
        environment={"STATIC_AGENTS_API_KEYS": UPSTREAM_KEY},
    )
    with server:
        with server.client() as client:
            client.install(MODEL_RULES)
        yield server


def service_fixture(real_model: StaticAgentsServer) -> dict[str, Any]:
    gone = f"http://127.0.0.1:{free_port()}"
    key = {"api_key_env": KEY_VARIABLE}
    return {
        "rules": [
            {
                "name": "local",
                "match": {"contains": "#local"},
                "response": {"content": "from the rules"},
            },
            {"name": "static-echo", "response": {"template": True, "content": "static: $query"}},
        ],
        "upstreams": [
            {"name": "real-openai", "dialect": "openai", "base_url": f"{real_model.url}/v1", **key},
            {"name": "real-anthropic", "dialect": "anthropic", "base_url": real_model.url, **key},
            {"name": "gone", "dialect": "openai", "base_url": f"{gone}/v1", **key},
        ],
        "modes": {
            "agent_types": {
                "oa": {"mode": "proxy", "upstream": "real-openai"},
                "an": {"mode": "proxy", "upstream": "real-anthropic"},
                "gone": {"mode": "proxy", "upstream": "gone"},
                "rec": {"mode": "record", "upstream": "real-openai"},
                "rec-an": {"mode": "record", "upstream": "real-anthropic"},
                "miss": {"mode": "record_on_miss", "upstream": "real-anthropic"},
            }
        },
    }


@pytest.fixture
def service(
    live_url: str,
    load_rules: Callable[[Any], Any],
    real_model: StaticAgentsServer,
    monkeypatch: pytest.MonkeyPatch,
) -> str:
    monkeypatch.setenv(KEY_VARIABLE, UPSTREAM_KEY)
    load_rules(service_fixture(real_model))
    return live_url


def openai_client(service: str, agent_type: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{service}/agents/{agent_type}/v1", api_key=CLIENT_KEY, max_retries=0
    )


def anthropic_client(service: str, agent_type: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=f"{service}/agents/{agent_type}", api_key=CLIENT_KEY, max_retries=0
    )


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def entries() -> list[JournalEntry]:
    return list(JournalEntry.objects.order_by("id"))


def wait_for(condition: Callable[[], Any], what: str) -> Any:
    for _ in range(500):
        found = condition()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"never happened: {what}")


# -- forwarded in the upstream's own dialect ---------------------------------------------------


def test_an_openai_request_is_forwarded_with_the_upstreams_key(service: str) -> None:
    completion = openai_client(service, "oa").chat.completions.create(
        model="gpt-4o", messages=ask("hello there")
    )
    assert completion.choices[0].message.content == "model says: hello there"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens == 11
    [entry] = entries()
    assert (entry.outcome, entry.upstream, entry.status) == ("proxied", "real-openai", 200)
    counters = journal_counters()
    assert (counters["requests"], counters["fallbacks"]) == (1, 0)
    assert counters["outcomes"] == {"proxied": 1}
    assert entry.upstream_ms is not None and entry.upstream_ms > 0
    assert entry.rule is None and entry.agent_type == "oa"


def test_an_agent_type_without_a_mode_still_answers_from_its_rules(service: str) -> None:
    completion = openai_client(service, "router").chat.completions.create(
        model="gpt-4o", messages=ask("hello")
    )
    assert completion.choices[0].message.content == "static: hello"
    assert entries()[0].outcome == "answered"


def test_an_anthropic_stream_is_relayed_with_its_events(service: str) -> None:
    client = anthropic_client(service, "an")
    with client.messages.stream(
        model="claude-x", max_tokens=100, messages=ask("stream it to me")
    ) as stream:
        texts = list(stream.text_stream)
        message = stream.get_final_message()
    assert texts == ["model ", "says: ", "stream ", "it ", "to ", "me"]
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 4
    assert entries()[0].outcome == "proxied"


def test_a_stream_is_relayed_chunk_by_chunk_and_a_client_leaving_cancels_upstream(
    service: str, real_model: StaticAgentsServer
) -> None:
    stream = openai_client(service, "oa").chat.completions.create(
        model="gpt-4o", messages=ask("#slow please"), stream=True
    )
    first = next(chunk for chunk in stream if chunk.choices and chunk.choices[0].delta.content)
    assert first.choices[0].delta.content == "first "
    stream.close()
    wait_for(lambda: entries() and entries()[0].outcome == "cancelled", "the entry cancelled")
    with real_model.client() as model:
        wait_for(
            lambda: [
                r for r in model.requests("global", outcome="cancelled") if "#slow" in r.query
            ],
            "the upstream's own request cancelled",
        )


def test_tool_calls_and_thinking_pass_through_untouched(service: str) -> None:
    tools: Any = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    completion = openai_client(service, "oa").chat.completions.create(
        model="gpt-4o", messages=ask("#tool now"), tools=tools
    )
    call = completion.choices[0].message.tool_calls[0]
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"topic": "weather", "days": 3}
    assert completion.choices[0].finish_reason == "tool_calls"

    message = anthropic_client(service, "an").messages.create(
        model="claude-x", max_tokens=100, messages=ask("#tool now")
    )
    kinds = [block.type for block in message.content]
    assert kinds == ["thinking", "tool_use"]
    assert message.content[1].input == {"topic": "weather", "days": 3}
    assert message.stop_reason == "tool_use"


def test_an_upstream_429_reaches_the_client_with_its_retry_after(service: str) -> None:
    with pytest.raises(openai.RateLimitError) as raised:
        openai_client(service, "oa").chat.completions.create(model="gpt-4o", messages=ask("#busy"))
    assert raised.value.response.headers["retry-after"] == "7"
    assert "slow down" in raised.value.message
    with pytest.raises(anthropic.RateLimitError) as anthropic_raised:
        anthropic_client(service, "an").messages.create(
            model="claude-x", max_tokens=10, messages=ask("#busy")
        )
    assert anthropic_raised.value.response.headers["retry-after"] == "7"
    # Translated: an Anthropic client of the OpenAI upstream gets the 429 in its own shape.
    with pytest.raises(anthropic.RateLimitError) as translated:
        anthropic_client(service, "oa").messages.create(
            model="claude-x", max_tokens=10, messages=ask("#busy")
        )
    assert translated.value.response.headers["retry-after"] == "7"
    assert "slow down" in translated.value.message
    assert [(e.outcome, e.status) for e in entries()] == [("upstream_error", 429)] * 3


def test_an_unreachable_upstream_is_a_502_naming_it_in_the_clients_dialect(service: str) -> None:
    with pytest.raises(openai.APIStatusError) as raised:
        openai_client(service, "gone").chat.completions.create(
            model="gpt-4o", messages=ask("anyone?")
        )
    assert raised.value.status_code == 502
    assert "upstream 'gone' could not be reached" in raised.value.message
    # An Anthropic client of an OpenAI upstream: translated, and failing in Anthropic's shape.
    with pytest.raises(anthropic.APIStatusError) as anthropic_raised:
        anthropic_client(service, "gone").messages.create(
            model="claude-x", max_tokens=10, messages=ask("anyone?")
        )
    assert anthropic_raised.value.status_code == 502
    body: Any = anthropic_raised.value.body
    assert body["type"] == "error" and "'gone'" in body["error"]["message"]
    assert [e.outcome for e in entries()] == ["upstream_error"] * 2


def test_a_missing_key_variable_is_a_502_naming_the_variable(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEY_VARIABLE)
    with pytest.raises(openai.APIStatusError) as raised:
        openai_client(service, "oa").chat.completions.create(model="gpt-4o", messages=ask("hi"))
    assert raised.value.status_code == 502
    assert KEY_VARIABLE in raised.value.message


# -- translated into the upstream's dialect ----------------------------------------------------


def test_an_anthropic_client_of_an_openai_upstream_is_translated(service: str) -> None:
    message = anthropic_client(service, "oa").messages.create(
        model="claude-x", max_tokens=100, system="Be brief.", messages=ask("translate me")
    )
    assert message.content[0].text == "model says: translate me"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens == 11
    [entry] = entries()
    assert (entry.dialect, entry.outcome, entry.upstream) == ("anthropic", "proxied", "real-openai")


def test_a_responses_api_request_is_translated_too(service: str) -> None:
    response = openai_client(service, "an").responses.create(
        model="gpt-4o", input="through responses", instructions="Be brief."
    )
    assert response.output_text == "model says: through responses"
    [entry] = entries()
    assert (entry.dialect, entry.outcome, entry.upstream) == (
        "responses",
        "proxied",
        "real-anthropic",
    )


def test_a_galaxy_inquiry_is_translated_and_answered_by_the_upstream(service: str) -> None:
    response = galaxy_query(service, "what is BWA?", agent_type="an")
    assert response.status_code == 200, response.text
    answer = response.json()["response"]
    assert answer["content"] == "model says: what is BWA?"
    assert answer["metadata"]["upstream"] == "real-anthropic"
    assert answer["metadata"]["static_backend"] is False
    assert entries()[0].outcome == "proxied"


async def test_a_websocket_inquiry_is_translated_and_streamed_back(service: str) -> None:
    async with connect(service.replace("http://", "ws://") + "/ws/chat/") as socket:
        await socket.send(json.dumps({"query": "over the socket", "agent_type": "oa"}))
        events = []
        while not events or events[-1]["type"] not in ("done", "error"):
            events.append(json.loads(await asyncio.wait_for(socket.recv(), 10)))
    text = "".join(e["text"] for e in events if e["type"] == "delta")
    assert text == "model says: over the socket"
    outcomes = await sync_to_async(lambda: [e.outcome for e in entries()])()
    assert outcomes == ["proxied"]


def test_an_adk_run_is_translated_for_the_app_an_upstream_answers(service: str) -> None:
    message = {"role": "user", "parts": [{"text": "from an agent"}]}
    body = {"appName": "an", "userId": "u", "sessionId": "s", "newMessage": message}
    response = httpx.post(f"{service}/run", json=body)
    assert response.status_code == 200, response.text
    [event] = response.json()
    assert event["content"]["parts"] == [{"text": "model says: from an agent"}]
    assert [(e.dialect, e.outcome) for e in entries()] == [("adk", "proxied")]


def test_galaxy_sees_which_agents_are_proxied(service: str) -> None:
    configuration = httpx.get(f"{service}/api/configuration").json()
    assert configuration["llm_registry_type"] == "mixed"
    agents = {a["agent_type"]: a for a in httpx.get(f"{service}/api/ai/agents").json()["agents"]}
    assert (agents["oa"]["backend"], agents["oa"]["upstream"]) == ("proxy", "real-openai")
    assert (agents["miss"]["backend"], agents["miss"]["upstream"]) == (
        "record_on_miss",
        "real-anthropic",
    )


def test_a_proxied_agent_type_without_rules_is_listed_as_a_model(service: str) -> None:
    models = openai_client(service, "x").models.list()
    assert {"oa", "an", "gone", "rec", "rec-an", "miss"} <= {model.id for model in models}
    # So naming it as the model, without a prefix, selects it.
    client = openai.OpenAI(base_url=f"{service}/v1", api_key=CLIENT_KEY, max_retries=0)
    completion = client.chat.completions.create(model="an", messages=ask("by model name"))
    assert completion.choices[0].message.content == "model says: by model name"
    assert entries()[0].upstream == "real-anthropic"


def test_galaxy_sees_a_static_registry_without_modes(
    live_url: str, load_rules: Callable[[Any], Any]
) -> None:
    load_rules({"rules": [{"name": "a", "match": {"agent_type": "router"}, "response": {}}]})
    configuration = httpx.get(f"{live_url}/api/configuration").json()
    assert configuration["llm_registry_type"] == "static"
    [agent] = httpx.get(f"{live_url}/api/ai/agents").json()["agents"]
    assert (agent["backend"], agent["upstream"]) == ("static", None)


# -- recording (the recorder itself is staticagents.recording's) -------------------------------


@dataclass(frozen=True)
class RecordedReply:
    content: str
    tool_calls: tuple[dict[str, Any], ...] = ()
    thinking: str | None = None
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    chunks: tuple[tuple[float, str], ...] | None = None


@dataclass(frozen=True)
class Exchange:
    upstream: str
    inquiry: Any
    reply: RecordedReply


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Exchange, dict[str, Any]]]:
    """What reaches ``staticagents.recording.record_exchange``, with its options."""
    calls: list[tuple[Exchange, dict[str, Any]]] = []
    module = types.ModuleType("staticagents.recording")

    def record_exchange(exchange: Exchange, **options: Any) -> str:
        calls.append((exchange, options))
        return "recorded-rule"

    module.__dict__.update(
        RecordedReply=RecordedReply, Exchange=Exchange, record_exchange=record_exchange
    )
    monkeypatch.setitem(sys.modules, "staticagents.recording", module)
    return calls


def test_record_mode_hands_each_relayed_stream_to_the_recorder(
    service: str, recorded: list[tuple[Exchange, dict[str, Any]]]
) -> None:
    for _ in range(3):  # the stream's end is held back until the exchange is recorded
        stream = openai_client(service, "rec").chat.completions.create(
            model="gpt-4o", messages=ask("record this"), stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == "model says: record this"
        assert recorded
        exchange, options = recorded.pop()
    assert options == {"match_model": False, "keep_timing": False}
    assert exchange.upstream == "real-openai"
    assert exchange.inquiry.query == "record this"
    assert exchange.inquiry.headers["authorization"] == "Bearer ***"
    reply = exchange.reply
    assert (reply.content, reply.finish_reason) == ("model says: record this", "stop")
    assert reply.chunks is not None
    assert [chunk for _, chunk in reply.chunks] == ["model ", "says: ", "record ", "this"]
    offsets = [at for at, _ in reply.chunks]
    assert offsets == sorted(offsets) and offsets[0] > 0


def test_a_recorded_anthropic_stream_is_recorded_before_it_ends(
    service: str, recorded: list[tuple[Exchange, dict[str, Any]]]
) -> None:
    client = anthropic_client(service, "rec-an")
    for n in range(3):  # the stream's end is held back until the exchange is recorded
        with client.messages.stream(model="c", max_tokens=50, messages=ask(f"#tool {n}")) as stream:
            message = stream.get_final_message()
        assert message.stop_reason == "tool_use"
        assert len(recorded) == n + 1
    reply = recorded[-1][0].reply
    assert reply.thinking == "A lookup will tell."
    assert reply.tool_calls == ({"name": "lookup", "arguments": {"topic": "weather", "days": 3}},)
    usage = {
        "input_tokens": message.usage.input_tokens,
        "output_tokens": message.usage.output_tokens,
    }
    assert (reply.finish_reason, reply.usage) == ("tool_use", usage)


def test_record_mode_parses_tool_call_arguments(
    service: str, recorded: list[tuple[Exchange, dict[str, Any]]]
) -> None:
    openai_client(service, "rec").chat.completions.create(model="m", messages=ask("#tool"))
    [(exchange, _)] = recorded
    assert exchange.reply.tool_calls == (
        {"name": "lookup", "arguments": {"topic": "weather", "days": 3}},
    )
    assert exchange.reply.finish_reason == "tool_calls"


def test_record_on_miss_records_only_what_the_rules_leave_to_the_fallback(
    service: str, recorded: list[tuple[Exchange, dict[str, Any]]]
) -> None:
    client = anthropic_client(service, "miss")
    local = client.messages.create(model="c", max_tokens=10, messages=ask("#local one"))
    assert local.content[0].text == "from the rules"
    assert recorded == []
    galaxy = galaxy_query(service, "#local two", agent_type="miss").json()["response"]
    assert galaxy["content"] == "from the rules"
    assert recorded == []
    # static-echo answers every other question: it is a rule, so nothing falls through.
    assert [e.outcome for e in entries()] == ["answered", "answered"]


def test_record_on_miss_proxies_and_records_a_miss(
    live_url: str,
    load_rules: Callable[[Any], Any],
    real_model: StaticAgentsServer,
    monkeypatch: pytest.MonkeyPatch,
    recorded: list[tuple[Exchange, dict[str, Any]]],
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, UPSTREAM_KEY)
    fixture = service_fixture(real_model)
    fixture["rules"] = fixture["rules"][:1]  # no catch-all: a miss reaches the fallback
    fixture["upstreams"][1]["record_timing"] = True
    load_rules(fixture)
    galaxy = galaxy_query(live_url, "unknown question", agent_type="miss").json()["response"]
    assert galaxy["content"] == "model says: unknown question"
    [(exchange, options)] = recorded
    assert options == {"match_model": False, "keep_timing": True}
    assert exchange.inquiry.dialect == "galaxy"
    assert exchange.reply.content == "model says: unknown question"
    assert exchange.reply.usage == {"input_tokens": 11, "output_tokens": 4}


# -- the key never leaks ----------------------------------------------------------------


def test_the_upstream_key_appears_in_no_response_journal_export_log_or_admin_page(
    service: str,
    control: httpx.Client,
    admin_client: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []
    for agent_type in ("oa", "an", "gone"):
        for path, body in (
            (f"/agents/{agent_type}/v1/chat/completions", {"model": "m", "messages": ask("#busy")}),
            (
                f"/agents/{agent_type}/v1/messages",
                {"model": "m", "max_tokens": 5, "messages": ask("x")},
            ),
        ):
            response = httpx.post(
                f"{service}{path}", json=body, headers={"Authorization": f"Bearer {CLIENT_KEY}"}
            )
            seen.append(str(response.headers) + response.text)
    seen.append(galaxy_query(service, "x", agent_type="gone").text)
    pages = [
        control.get("/journal", params={"page_size": 100}),
        control.get("/fixture"),
        control.get("/upstreams"),
        control.post("/explain", json={"agent_type": "oa", "query": "x"}),
    ]
    upstream = Upstream.objects.get(name="real-openai")
    for url in (
        "/admin/staticagents/upstream/",
        f"/admin/staticagents/upstream/{upstream.pk}/change/",
    ):
        pages.append(admin_client.get(url))
    assert [page.status_code for page in pages] == [200] * len(pages)
    seen.extend(page.content.decode() for page in pages)
    for entry in entries():
        seen.append(repr({f.name: getattr(entry, f.name) for f in entry._meta.fields}))
    seen.append(caplog.text)
    leaks = [text for text in seen if UPSTREAM_KEY in text or CLIENT_KEY in text]
    assert leaks == []
    assert any(KEY_VARIABLE in text for text in seen)  # the variable's name is no secret
