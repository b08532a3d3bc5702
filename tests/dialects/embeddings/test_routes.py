"""The embeddings routes over HTTP: the single Gemini route, keys, scripts, journal, big input."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from staticagents.core.embeddings import embed_text
from staticagents.models import JournalEntry

KEY = "sk-embeddings-right-key"
RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "script",
            "match": {"dialect": "embeddings", "contains": "#next"},
            "responses": [{"embedding": [1, 0]}, {"embedding": [0, 1]}],
        },
        {"name": "down", "match": {"contains": "#down"}, "response": {"error": {"status": 529}}},
    ]
}
SINGLE = {"content": {"parts": [{"text": "hello"}]}, "outputDimensionality": 16}


@pytest.fixture
def url(live_url: str, load_rules: Callable[[Any], Any]) -> str:
    load_rules(RULES)
    return live_url


def test_embed_content_answers_one_embedding(url: str) -> None:
    response = httpx.post(f"{url}/v1beta/models/text-embedding-004:embedContent", json=SINGLE)
    assert response.status_code == 200
    assert response.json() == {
        "embedding": {"values": embed_text("hello", 16)},
        "usageMetadata": {"promptTokenCount": 1, "totalTokenCount": 1},
    }


def test_each_text_advances_its_rules_script_within_one_request(url: str) -> None:
    body = {"model": "m", "input": ["#next", "#next", "#next"], "dimensions": 2}
    data = httpx.post(f"{url}/v1/embeddings", json=body).json()["data"]
    assert [item["embedding"] for item in data] == [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]


def test_a_scripted_error_is_googles_error_on_the_gemini_routes(url: str) -> None:
    for path in ("/v1/models/m:embedContent", "/agents/coder/v1beta/models/m:embedContent"):
        response = httpx.post(f"{url}{path}", json={"content": {"parts": [{"text": "#down"}]}})
        assert response.status_code == 529
        assert response.json() == {
            "error": {"code": 529, "message": "Scripted error", "status": "UNAVAILABLE"}
        }


def test_a_request_no_rule_answers_is_journaled_with_why(url: str) -> None:
    httpx.post(f"{url}/v1/embeddings", json={"model": "m", "input": ["plain", "text"]})
    entry = JournalEntry.objects.get()
    assert (entry.rule, entry.outcome, entry.status) == (None, "answered", 200)
    assert entry.query == "plain\ntext"
    assert entry.diagnosis is not None
    assert [verdict["rule"] for verdict in entry.diagnosis] == ["script", "down"]


def test_a_large_request_is_answered_with_the_same_vectors(url: str) -> None:
    """Large enough to have its vectors computed off the event loop."""
    texts = [f"text number {n}" for n in range(300)]
    body = {"model": "m", "input": texts, "dimensions": 256}
    data = httpx.post(f"{url}/v1/embeddings", json=body, timeout=30).json()["data"]
    assert [item["embedding"] for item in data] == [embed_text(text, 256) for text in texts]


def test_a_large_request_leaves_the_event_loop_free_for_others(url: str) -> None:
    """Its vectors are computed in a thread: a small request is answered meanwhile.

    Long texts and short vectors: much to compute, little to send back.
    """
    texts = [f"document {n}: " + "lorem ipsum dolor sit amet " * 1200 for n in range(100)]
    body = {"model": "m", "input": texts, "dimensions": 8}
    finished = threading.Event()

    def large() -> None:
        assert httpx.post(f"{url}/v1/embeddings", json=body, timeout=120).status_code == 200
        finished.set()

    thread = threading.Thread(target=large)
    thread.start()
    try:
        wait_for(lambda: JournalEntry.objects.exists())  # journaled before its vectors are made
        small = httpx.post(f"{url}/v1/embeddings", json={"model": "m", "input": "small"})
        assert small.status_code == 200
        assert not finished.is_set()
    finally:
        thread.join()
    assert finished.is_set()


def wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.005)


# -- keys -----------------------------------------------------------------------------------


@pytest.fixture
def keyed_url(url: str, settings: Any) -> str:
    settings.STATIC_AGENTS_API_KEYS = [KEY]
    return url


@pytest.mark.parametrize(
    ("headers", "params"),
    [({"x-goog-api-key": KEY}, {}), ({}, {"key": KEY}), ({"Authorization": f"Bearer {KEY}"}, {})],
    ids=["x-goog-api-key", "?key=", "bearer"],
)
def test_gemini_routes_take_googles_key_where_its_clients_send_it(
    keyed_url: str, headers: dict[str, str], params: dict[str, str]
) -> None:
    path = "/v1beta/models/m:embedContent"
    response = httpx.post(f"{keyed_url}{path}", json=SINGLE, headers=headers, params=params)
    assert response.status_code == 200
    assert JournalEntry.objects.get().route == path  # the journal holds no query string


@pytest.mark.parametrize(
    ("headers", "code", "status"),
    [
        ({}, 403, "PERMISSION_DENIED"),
        ({"x-goog-api-key": "wrong"}, 400, "INVALID_ARGUMENT"),
        ({"Authorization": "Bearer wrong"}, 401, "UNAUTHENTICATED"),
    ],
    ids=["no key", "wrong key", "wrong bearer"],
)
def test_gemini_routes_refuse_a_key_as_google_does(
    keyed_url: str, headers: dict[str, str], code: int, status: str
) -> None:
    """As the Gemini dialect's routes refuse one (GeminiRoute)."""
    response = httpx.post(
        f"{keyed_url}/v1beta/models/m:batchEmbedContents",
        json={"requests": [SINGLE]},
        headers=headers,
    )
    assert response.status_code == code
    error = response.json()["error"]
    assert (error["code"], error["status"]) == (code, status)
    assert "wrong" not in error["message"]


def test_openai_embeddings_refuse_a_wrong_key_in_openais_shape(keyed_url: str) -> None:
    response = httpx.post(
        f"{keyed_url}/v1/embeddings",
        json={"model": "m", "input": "x"},
        headers={"Authorization": "Bearer wrong"},
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    answered = httpx.post(
        f"{keyed_url}/v1/embeddings",
        json={"model": "m", "input": "x"},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert answered.status_code == 200
