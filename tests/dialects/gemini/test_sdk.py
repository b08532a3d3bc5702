"""The official google-genai SDK against the service the pytest plugin runs.

The installed major (2.x, the one google-adk pins) speaks ``/v1beta`` by
default; 3.x speaks ``/v1`` (tests/dialects/gemini/test_sdk_3.py runs it). Both
versions are served alike, so the tests here run on both ``api_version``s
where the path matters. Every client carries the test's session header.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from staticagents.testing.assertions import (
    assert_no_credentials,
    assert_system_prompt,
    assert_tool_result_sent,
)
from staticagents.testing.client import StaticAgentsClient

API_KEY = "AIzaSyStaticAgentsNotARealKey0123456789"
FAST = {"word_delay_ms": 1}
LOOKUP = types.FunctionDeclaration(
    name="lookup",
    description="Look a topic up.",
    parameters_json_schema={"type": "object", "properties": {"topic": {"type": "string"}}},
)
RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "flaky",
            "match": {"contains": "#flaky"},
            "response": {"fail_first": 2, "content": "made it"},
        },
        {
            "name": "think",
            "match": {"contains": "#think"},
            "response": {
                "thinking": "Let me weigh this.",
                "content": "Here it is.",
                "stream": FAST,
            },
        },
        {
            "name": "call",
            "match": {"contains": "#tool", "tool_result": False},
            "response": {
                "tool_calls": [
                    {"name": "lookup", "id": "call_weather", "arguments": {"topic": "weather"}}
                ]
            },
        },
        {
            "name": "report",
            "match": {"contains": "#tool", "tool_result": True},
            "response": {"template": True, "content": "lookup said: $tool_result"},
        },
        {
            "name": "long",
            "match": {"contains": "#long"},
            "response": {"content": "cut", "finish_reason": "length"},
        },
        {"name": "coder", "match": {"agent_type": "coder"}, "response": {"content": "coder here"}},
        {
            "name": "for-gemini",
            "match": {"dialect": "gemini", "contains": "#dialect", "system": "(?i)be terse"},
            "response": {"content": "gemini, tersely"},
        },
        {"name": "echo", "response": {"template": True, "content": "$query", "stream": FAST}},
    ]
}

pytestmark = pytest.mark.static_agents_fixture(RULES)


def gemini_client(
    static_agents: StaticAgentsClient,
    api_version: str | None = "v1beta",
    *,
    base_url: str | None = None,
    **options: Any,
) -> genai.Client:
    return genai.Client(
        api_key=API_KEY,
        http_options=types.HttpOptions(
            base_url=base_url or static_agents.gemini_base_url,
            api_version=api_version,
            headers=static_agents.headers,
            **options,
        ),
    )


@pytest.fixture
def client(static_agents: StaticAgentsClient) -> genai.Client:
    return gemini_client(static_agents)


# -- answers ----------------------------------------------------------------------------


@pytest.mark.parametrize("api_version", ["v1beta", "v1"])
def test_generate_content_returns_the_scripted_answer(
    static_agents: StaticAgentsClient, api_version: str
) -> None:
    client = gemini_client(static_agents, api_version)
    response = client.models.generate_content(model="gemini-2.5-flash", contents="hello there")
    assert response.text == "hello there"
    candidate = response.candidates[0]  # type: ignore[index]
    assert candidate.finish_reason == types.FinishReason.STOP
    assert candidate.content is not None and candidate.content.role == "model"
    assert response.model_version == "gemini-2.5-flash"
    usage = response.usage_metadata
    assert usage is not None
    assert (usage.prompt_token_count, usage.candidates_token_count) == (2, 2)
    assert usage.total_token_count == 4
    [entry] = static_agents.requests()
    assert response.response_id == f"static{entry.id}"  # the id names the journal entry
    assert (entry.dialect, entry.route, entry.model, entry.query, entry.rule) == (
        "gemini",
        f"/sessions/{static_agents.session}/{api_version}/models/gemini-2.5-flash:generateContent",
        "gemini-2.5-flash",
        "hello there",
        "echo",
    )


async def test_the_async_client_is_answered_too(static_agents: StaticAgentsClient) -> None:
    client = gemini_client(static_agents)
    response = await client.aio.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert response.text == "hi"
    chunks = [
        chunk.text
        async for chunk in await client.aio.models.generate_content_stream(
            model="gemini-2.5-flash", contents="one two"
        )
    ]
    assert chunks == ["one ", "two"]


def test_a_function_call_and_its_response_make_a_scripted_conversation(
    static_agents: StaticAgentsClient, client: genai.Client
) -> None:
    config = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[LOOKUP])])
    question = types.Content(role="user", parts=[types.Part.from_text(text="#tool weather?")])
    first = client.models.generate_content(
        model="gemini-2.5-flash", contents=[question], config=config
    )
    [call] = first.function_calls or []
    assert (call.id, call.name, call.args) == ("call_weather", "lookup", {"topic": "weather"})
    assert first.candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    answer = types.Part.from_function_response(name="lookup", response={"result": "sunny"})
    answer.function_response.id = call.id  # type: ignore[union-attr]
    history = [
        question,
        first.candidates[0].content,  # type: ignore[index]
        types.Content(role="user", parts=[answer]),
    ]
    second = client.models.generate_content(
        model="gemini-2.5-flash",
        contents=history,  # type: ignore[arg-type]
        config=config,
    )
    assert second.text == "lookup said: sunny"
    assert [entry.rule for entry in static_agents.requests()] == ["call", "report"]
    assert_tool_result_sent(static_agents, "call_weather", contains="sunny")
    first_entry = static_agents.requests()[0]
    assert first_entry.body["tools"][0]["functionDeclarations"][0]["name"] == "lookup"


@pytest.mark.parametrize("api_version", ["v1beta", "v1"])
def test_generate_content_stream_sends_the_answer_in_chunks(
    static_agents: StaticAgentsClient, api_version: str
) -> None:
    client = gemini_client(static_agents, api_version)
    chunks = list(
        client.models.generate_content_stream(
            model="gemini-2.5-flash", contents="one two three four"
        )
    )
    assert [chunk.text for chunk in chunks] == ["one ", "two ", "three ", "four"]
    finishes = [chunk.candidates[0].finish_reason for chunk in chunks]  # type: ignore[index]
    assert finishes == [None, None, None, types.FinishReason.STOP]
    assert chunks[-1].usage_metadata.candidates_token_count == 4  # type: ignore[union-attr]
    assert len({chunk.response_id for chunk in chunks}) == 1


def test_thoughts_come_first_when_asked_for_and_are_counted_always(
    client: genai.Client,
) -> None:
    asked = types.GenerateContentConfig(thinking_config=types.ThinkingConfig(include_thoughts=True))
    response = client.models.generate_content(
        model="gemini-2.5-flash", contents="#think", config=asked
    )
    parts = response.candidates[0].content.parts  # type: ignore[index, union-attr]
    assert [(p.text, bool(p.thought)) for p in parts] == [  # type: ignore[union-attr]
        ("Let me weigh this.", True),
        ("Here it is.", False),
    ]
    assert response.text == "Here it is."
    assert response.usage_metadata.thoughts_token_count == 4  # type: ignore[union-attr]
    plain = client.models.generate_content(model="gemini-2.5-flash", contents="#think")
    assert [p.text for p in plain.candidates[0].content.parts] == ["Here it is."]  # type: ignore[index, union-attr]
    assert plain.usage_metadata.thoughts_token_count == 4  # type: ignore[union-attr]
    streamed = list(
        client.models.generate_content_stream(
            model="gemini-2.5-flash", contents="#think", config=asked
        )
    )
    kinds = [bool(c.candidates[0].content.parts[0].thought) for c in streamed]  # type: ignore[index, union-attr]
    assert kinds == [True] * 4 + [False] * 3


def test_a_length_finish_is_max_tokens(client: genai.Client) -> None:
    response = client.models.generate_content(model="gemini-2.5-flash", contents="#long")
    assert response.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS  # type: ignore[index]


def test_count_tokens_counts_the_prompts_words(client: genai.Client) -> None:
    counted = client.models.count_tokens(model="gemini-2.5-flash", contents="a b c d")
    assert counted.total_tokens == 4


@pytest.mark.parametrize("api_version", ["v1beta", "v1"])
def test_the_models_are_the_default_and_one_per_agent_type(
    static_agents: StaticAgentsClient, api_version: str
) -> None:
    client = gemini_client(static_agents, api_version)
    assert [model.name for model in client.models.list()] == [
        "models/static-agents",
        "models/coder",
    ]
    model = client.models.get(model="gemini-2.5-flash")
    assert model.name == "models/gemini-2.5-flash"
    assert "generateContent" in (model.supported_actions or [])


# -- agent type, session, inquiry fields, journal ------------------------------------------


def test_an_agent_prefix_or_a_model_named_after_an_agent_type_selects_its_rules(
    static_agents: StaticAgentsClient, client: genai.Client
) -> None:
    prefixed = gemini_client(static_agents, base_url=f"{static_agents.base_url}/agents/coder")
    assert prefixed.models.generate_content(model="gemini-2.5-flash", contents="hi").text == (
        "coder here"
    )
    assert client.models.generate_content(model="coder", contents="hi").text == "coder here"
    assert client.models.generate_content(model="gemini-2.5-flash", contents="hi").text == "hi"
    assert [e.agent_type for e in static_agents.requests()] == ["coder", "coder", "router"]


def test_the_dialect_and_the_system_instruction_reach_the_rules(
    static_agents: StaticAgentsClient, client: genai.Client
) -> None:
    config = types.GenerateContentConfig(system_instruction="Be terse.")
    response = client.models.generate_content(
        model="gemini-2.5-flash", contents="#dialect", config=config
    )
    assert response.text == "gemini, tersely"
    assert_system_prompt(static_agents, equals="Be terse.")


def test_the_journal_masks_the_key_and_keeps_the_body(
    static_agents: StaticAgentsClient, client: genai.Client
) -> None:
    client.models.generate_content(model="gemini-2.5-flash", contents="remember me")
    [entry] = static_agents.requests()
    assert entry.session == static_agents.session
    assert entry.headers["x-goog-api-key"] == "***"
    assert API_KEY not in json.dumps(entry.headers)
    assert_no_credentials([entry], secrets=[API_KEY])
    assert entry.body["contents"][0]["parts"][0]["text"] == "remember me"


def test_a_key_in_the_query_is_never_journaled(static_agents: StaticAgentsClient) -> None:
    body = {"contents": [{"parts": [{"text": "by query"}]}]}
    url = f"{static_agents.base_url}/v1beta/models/gemini-2.5-flash:generateContent"
    response = httpx.post(url, params={"key": API_KEY}, json=body, headers=static_agents.headers)
    assert response.status_code == 200
    [entry] = static_agents.requests()
    assert entry.route == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert API_KEY not in json.dumps([entry.route, entry.headers, entry.raw_body])


# -- the JSON-array stream, unknown methods ------------------------------------------------


def test_without_alt_sse_the_stream_is_one_json_array(static_agents: StaticAgentsClient) -> None:
    url = f"{static_agents.base_url}/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "alpha beta"}]}]}
    with httpx.stream("POST", url, json=body, headers=static_agents.headers) as response:
        assert response.headers["content-type"].startswith("application/json")
        raw = response.read()
    elements = json.loads(raw)
    texts = [e["candidates"][0]["content"]["parts"][0]["text"] for e in elements]
    assert texts == ["alpha ", "beta"]
    assert elements[-1]["candidates"][0]["finishReason"] == "STOP"
    sse = httpx.post(url, params={"alt": "sse"}, json=body, headers=static_agents.headers)
    assert sse.headers["content-type"].startswith("text/event-stream")
    assert sse.text.count("data: ") == 2


@pytest.mark.parametrize("version", ["v1beta", "v1"])
def test_a_method_no_route_serves_gets_googles_404(
    static_agents: StaticAgentsClient, version: str
) -> None:
    url = f"{static_agents.base_url}/{version}/models/gemini-2.5-flash:summonDragons"
    response = httpx.post(url, json={}, headers={"x-goog-api-key": API_KEY})
    assert response.status_code == 404
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (404, "NOT_FOUND")
    assert ":summonDragons" in error["message"]


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "word", "kind"),
    [
        (400, "INVALID_ARGUMENT", errors.ClientError),
        (403, "PERMISSION_DENIED", errors.ClientError),
        (404, "NOT_FOUND", errors.ClientError),
        (429, "RESOURCE_EXHAUSTED", errors.ClientError),
        (500, "INTERNAL", errors.ServerError),
        (503, "UNAVAILABLE", errors.ServerError),
    ],
)
def test_a_scripted_error_raises_the_sdks_api_error_with_its_code(
    static_agents: StaticAgentsClient,
    client: genai.Client,
    status: int,
    word: str,
    kind: type[errors.APIError],
) -> None:
    error = {"status": status, "type": "scripted", "message": f"failing with {status}"}
    static_agents.install({"rules": [{"response": {"error": error, "retry_after": 3}}]})
    for stream in (False, True):
        with pytest.raises(kind) as raised:
            if stream:
                list(client.models.generate_content_stream(model="m", contents="hi"))
            else:
                client.models.generate_content(model="m", contents="hi")
        assert (raised.value.code, raised.value.status) == (status, word)
        assert raised.value.message == f"failing with {status}"
        assert raised.value.details["error"]["details"] == [
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "3s"}
        ]


def test_the_sdks_retries_get_past_fail_first(
    static_agents: StaticAgentsClient,
) -> None:
    retrying = types.HttpRetryOptions(attempts=3, initial_delay=0.01, max_delay=0.01, jitter=0)
    client = gemini_client(static_agents, retry_options=retrying)
    response = client.models.generate_content(model="m", contents="#flaky please")
    assert response.text == "made it"
    outcomes = [entry.outcome for entry in static_agents.requests()]
    assert outcomes == ["failed_first", "failed_first", "answered"]


def test_a_bad_request_is_googles_400_naming_the_field(static_agents: StaticAgentsClient) -> None:
    url = f"{static_agents.base_url}/v1beta/models/m:generateContent"
    response = httpx.post(url, json={"contents": [{"role": "boss", "parts": [{"text": "x"}]}]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["message"].startswith("contents[0].role: must be one of user, model, function")
