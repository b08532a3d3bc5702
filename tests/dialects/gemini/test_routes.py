"""The Gemini routes on the in-process server: API keys, stream cut-offs and disconnects,
and the ``GET /v1/models`` listing it shares with OpenAI and Anthropic."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from staticagents.models import JournalEntry

KEY = "AIzaSyStaticAgentsRightKey000000000001"
WRONG = "AIzaSyStaticAgentsWrongKey00000000000X"
WORDS = " ".join(f"w{i}" for i in range(1, 21))
RULES = {
    "rules": [
        {
            "name": "slow",
            "match": {"contains": "#slow"},
            "response": {"content": WORDS, "stream": {"word_delay_ms": 50}},
        },
        {
            "name": "late",
            "match": {"contains": "#late"},
            "response": {"content": "too late", "stream": {"first_delay_ms": 500}},
        },
        {"name": "hello", "response": {"content": "hello from the rules"}},
    ]
}
BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"


@pytest.fixture
def url(live_url: str, load_rules: Callable[[Any], Any]) -> str:
    load_rules(RULES)
    return live_url


@pytest.fixture
def keyed_url(url: str, settings: Any) -> str:
    settings.STATIC_AGENTS_API_KEYS = [KEY]
    return url


def client(base_url: str, api_key: str = KEY, **options: Any) -> genai.Client:
    return genai.Client(
        api_key=api_key, http_options=types.HttpOptions(base_url=base_url, **options)
    )


def wait_for_outcome(outcome: str, timeout: float = 3.0) -> JournalEntry:
    deadline = time.monotonic() + timeout
    entry = None
    while time.monotonic() < deadline:
        entry = JournalEntry.objects.order_by("-id").first()
        if entry is not None and entry.outcome == outcome:
            return entry
        time.sleep(0.02)
    raise AssertionError(f"no journal entry became {outcome!r}: {entry and entry.outcome}")


# -- keys ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "params"),
    [({"x-goog-api-key": KEY}, {}), ({}, {"key": KEY}), ({"Authorization": f"Bearer {KEY}"}, {})],
    ids=["x-goog-api-key", "key-parameter", "bearer"],
)
def test_a_configured_key_is_taken_where_googles_clients_send_it(
    keyed_url: str, headers: dict[str, str], params: dict[str, str]
) -> None:
    for method, path, body in [
        ("POST", GENERATE, BODY),
        ("POST", "/v1/models/m:countTokens", BODY),
        ("GET", "/v1beta/models", None),
    ]:
        response = httpx.request(
            method, f"{keyed_url}{path}", json=body, headers=headers, params=params
        )
        assert response.status_code == 200, (path, response.text)


def test_the_sdk_with_the_right_key_is_answered(keyed_url: str) -> None:
    sdk = client(keyed_url)  # kept: a dropped genai.Client closes its connections
    response = sdk.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert response.text == "hello from the rules"


def test_a_wrong_api_key_is_googles_400_api_key_invalid(keyed_url: str) -> None:
    sdk = client(keyed_url, WRONG)
    with pytest.raises(errors.ClientError) as raised:
        sdk.models.generate_content(model="gemini-2.5-flash", contents="hi")
    assert (raised.value.code, raised.value.status) == (400, "INVALID_ARGUMENT")
    assert raised.value.message is not None
    assert raised.value.message.startswith("API key not valid.")
    assert raised.value.details["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    assert WRONG not in json.dumps(raised.value.details)
    by_query = httpx.post(f"{keyed_url}{GENERATE}", json=BODY, params={"key": WRONG})
    assert by_query.status_code == 400 and WRONG not in by_query.text


def test_a_missing_key_is_a_403_and_a_wrong_bearer_token_a_401(keyed_url: str) -> None:
    missing = httpx.post(f"{keyed_url}{GENERATE}", json=BODY)
    assert missing.status_code == 403
    error = missing.json()["error"]
    assert error["status"] == "PERMISSION_DENIED"
    assert "x-goog-api-key header" in error["message"] and "key query parameter" in error["message"]
    bearer = httpx.post(
        f"{keyed_url}{STREAM}", json=BODY, headers={"Authorization": f"Bearer {WRONG}"}
    )
    assert bearer.status_code == 401
    assert bearer.json()["error"]["status"] == "UNAUTHENTICATED"
    assert not JournalEntry.objects.exists()  # refused requests are never answered


# -- the models listing shared with OpenAI and Anthropic ------------------------------------------


def test_get_v1_models_answers_each_sdk_in_its_own_shape(url: str) -> None:
    google = httpx.get(f"{url}/v1/models", headers={"x-goog-api-key": "k"})
    assert [m["name"] for m in google.json()["models"]] == ["models/static-agents"]
    assert httpx.get(f"{url}/v1/models", params={"key": "k"}).json()["models"]
    assert httpx.get(f"{url}/v1/models").json()["object"] == "list"  # OpenAI's
    anthropic = httpx.get(f"{url}/v1/models", headers={"anthropic-version": "2023-06-01"})
    assert anthropic.json()["data"][0]["type"] == "model"
    prefixed = httpx.get(f"{url}/agents/coder/v1/models", headers={"x-goog-api-client": "x"})
    assert prefixed.json()["models"]


# -- streams: the maximum duration, a client that leaves --------------------------------------


def test_the_maximum_duration_cuts_an_sse_stream_off_with_googles_error(
    url: str, settings: Any
) -> None:
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.12
    received = []
    sdk = client(url)
    stream = sdk.models.generate_content_stream(model="m", contents="#slow")
    with pytest.raises(errors.ServerError) as raised:
        for chunk in stream:
            received.append(chunk.text)
    assert received == ["w1 ", "w2 ", "w3 "]  # due at 0, 50 and 100 ms
    assert (raised.value.code, raised.value.status) == (504, "DEADLINE_EXCEEDED")
    assert "maximum stream duration of 0.12 s" in (raised.value.message or "")
    assert wait_for_outcome("cut_off").dialect == "gemini"


def test_a_cut_off_json_array_stream_stays_one_json_array(url: str, settings: Any) -> None:
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.12
    body = {"contents": [{"parts": [{"text": "#slow"}]}]}
    elements = json.loads(httpx.post(f"{url}{STREAM}", json=body).text)
    texts = [e["candidates"][0]["content"]["parts"][0]["text"] for e in elements[:-1]]
    assert texts == ["w1 ", "w2 ", "w3 "]
    assert elements[-1]["error"]["status"] == "DEADLINE_EXCEEDED"
    late = {"contents": [{"parts": [{"text": "#late"}]}]}  # nothing is due before the cut
    assert json.loads(httpx.post(f"{url}{STREAM}", json=late).text) == [
        {
            "error": {
                "code": 504,
                "message": elements[-1]["error"]["message"],
                "status": "DEADLINE_EXCEEDED",
            }
        }
    ]


def test_a_client_that_leaves_mid_stream_is_journaled_as_cancelled(url: str) -> None:
    body = {"contents": [{"parts": [{"text": "#slow"}]}]}
    with (
        httpx.Client(base_url=url, timeout=5) as http,
        http.stream("POST", STREAM, json=body, params={"alt": "sse"}) as response,
    ):
        first = next(line for line in response.iter_lines() if "w1" in line)
    assert first.startswith("data: ")
    assert wait_for_outcome("cancelled").dialect == "gemini"
