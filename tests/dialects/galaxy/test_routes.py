"""The lean reply routes and the DRF views answer Galaxy's reply POSTs alike.

The live server answers the POSTs on its lean routes (``routes.py``); Django's
test client reaches the DRF views (``views.py``) that still describe those
paths and take their other methods. The same requests through both must give
the same status, body, Retry-After and journal entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.test import Client

from staticagents.models import ChatExchange, JournalEntry

RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "flaky",
            "match": {"query": "#flaky"},
            "response": {
                "error": {"status": 503, "type": "overloaded", "message": "Busy"},
                "retry_after": 2,
            },
        },
        {
            "name": "page",
            "match": {"agent_type": "page_assistant"},
            "response": {"content": "About your page", "reasoning": "a page"},
        },
        {
            "name": "job",
            "match": {"agent_type": "error_analysis", "context": {"job_id": "^job-"}},
            "response": {"content": "Out of memory", "confidence": "high"},
        },
        {
            "name": "tool",
            "match": {"agent_type": "custom_tool"},
            "response": {
                "content": "Run it",
                "suggestions": [
                    {
                        "action_type": "tool_run",
                        "description": "Run cat",
                        "confidence": "high",
                        "parameters": {"tool_id": "cat1"},
                    }
                ],
            },
        },
        {
            "name": "second",
            "match": {"turn": 2},
            "response": {"content": "Again: $query", "template": True},
        },
        {"name": "hello", "match": {"query": "(?i)hello"}, "response": {"content": "Hi"}},
    ],
    "fallback": {"content": "No rule"},
}

# (path, body as sent): every kind of answer and refusal of the reply POSTs.
REQUESTS: list[tuple[str, bytes]] = [
    ("/api/ai/agents/query", b'{"query": "hello", "agent_type": "router"}'),
    ("/api/ai/agents/query", b'{"query": "x", "context": {"page_id": "p1"}}'),
    ("/api/ai/agents/query", b'{"query": "#flaky"}'),
    ("/api/ai/agents/query", b'{"agent_type": "router"}'),
    ("/api/ai/agents/query", b'{"query": 5}'),
    ("/api/ai/agents/query", b"{not json"),
    ("/api/ai/agents/query", b"[1, 2]"),
    ("/api/ai/agents/query", b'{"query": "a\\u0000b"}'),
    ("/api/ai/agents/error-analysis", b'{"query": "why", "job_id": "job-7"}'),
    ("/api/ai/agents/error-analysis", b'{"query": "why", "job_id": 1.5}'),
    ("/api/ai/agents/custom-tool", b'{"query": "make a tool", "save_exchange": true}'),
    ("/api/ai/agents/custom-tool", b'{"query": "#flaky", "save_exchange": true}'),
    ("/api/chat?agent_type=router", b'{"query": "hello"}'),
    ("/api/chat?agent_type=auto", b'{"query": "x", "page_id": 4}'),
    ("/api/chat?agent_type=router", b'{"query": "#flaky"}'),
    ("/api/chat?agent_type=router", b"{}"),
    ("/api/chat?agent_type=router", b'{"query": "x", "exchange_id": 99999}'),
    ("/api/chat?agent_type=router", b'{"query": "x", "exchange_id": "abc"}'),
    ("/api/chat?agent_type=router&query=from+the+url", b""),
]
JOURNALED = ("dialect", "route", "session", "agent_type", "query", "body", "rule", "outcome")
Answer = tuple[int, Any, str | None, list[tuple[Any, ...]]]


def comparable(body: Any, exchange_ids: dict[int, int]) -> Any:
    """The body without what differs between two answers by design: the time taken, and
    exchange ids (numbered in the order they appear)."""
    if isinstance(body, dict):
        found = {}
        for key, value in body.items():
            if key == "processing_time":
                found[key] = isinstance(value, float)
            elif key == "exchange_id" and isinstance(value, int):
                found[key] = exchange_ids.setdefault(value, len(exchange_ids))
            else:
                found[key] = comparable(value, exchange_ids)
        return found
    if isinstance(body, list):
        return [comparable(item, exchange_ids) for item in body]
    return body


def answers(post: Callable[[str, bytes], tuple[int, Any, str | None]]) -> list[Answer]:
    """Each request's status, body, Retry-After and journal entries, through ``post``."""
    exchange_ids: dict[int, int] = {}
    results = []
    for path, body in REQUESTS:
        seen = JournalEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0
        status, payload, retry_after = post(path, body)
        entries = JournalEntry.objects.filter(id__gt=seen).order_by("id")
        journaled = [tuple(entry) for entry in entries.values_list(*JOURNALED)]
        results.append((status, comparable(payload, exchange_ids), retry_after, journaled))
    return results


def test_the_lean_routes_and_the_drf_views_answer_alike(
    live_url: str, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(RULES)
    with httpx.Client(base_url=live_url, timeout=10) as client:

        def lean(path: str, body: bytes) -> tuple[int, Any, str | None]:
            response = client.post(path, content=body, headers={"content-type": "application/json"})
            return response.status_code, response.json(), response.headers.get("retry-after")

        through_routes = answers(lean)
    django = Client()

    def view(path: str, body: bytes) -> tuple[int, Any, str | None]:
        response = django.post(path, data=body, content_type="application/json")
        return response.status_code, response.json(), response.headers.get("Retry-After")

    through_views = answers(view)
    for request, route, drf in zip(REQUESTS, through_routes, through_views, strict=True):
        assert route == drf, request
    assert [status for status, *_ in through_routes].count(200) >= 8  # not all refusals
    # Saved through each edge: the custom tool's and three chats.
    assert ChatExchange.objects.count() == 2 * 4


def test_a_follow_up_continues_an_exchange_begun_through_the_other_edge(
    live_url: str, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(RULES)
    first = httpx.post(f"{live_url}/api/chat?agent_type=router", json={"query": "one"}).json()
    follow_up = {"query": "two", "exchange_id": first["exchange_id"]}
    second = Client().post(
        "/api/chat?agent_type=router", data=follow_up, content_type="application/json"
    )
    assert second.json()["response"] == "Again: two"
    third = httpx.post(
        f"{live_url}/api/chat?agent_type=router",
        json={"query": "three", "exchange_id": first["exchange_id"]},
    ).json()
    assert (third["response"], third["exchange_id"]) == ("No rule", first["exchange_id"])
    messages = httpx.get(f"{live_url}/api/chat/exchange/{first['exchange_id']}/messages").json()
    contents = [m["content"] for m in messages]
    assert contents == ["one", "No rule", "two", "Again: two", "three", "No rule"]


@pytest.mark.parametrize(
    "path", ["/api/ai/agents/query", "/api/ai/agents/error-analysis", "/api/chat"]
)
def test_reply_posts_skip_django_and_other_methods_reach_the_drf_view(
    live_url: str, load_rules: Callable[[Any], Any], path: str
) -> None:
    """Django's middleware marks what it serves (X-Frame-Options); the lean routes do not
    pass through it. DRF still takes the other methods, in Galaxy's error shape."""
    load_rules(RULES)
    posted = httpx.post(f"{live_url}{path}", json={"query": "hello"})
    assert posted.status_code == 200
    assert "x-frame-options" not in posted.headers
    got = httpx.get(f"{live_url}{path}")
    assert got.status_code == 405
    assert "x-frame-options" in got.headers
    assert got.json() == {"err_msg": 'Method "GET" not allowed.', "err_code": 405000}
    assert "POST" in httpx.options(f"{live_url}{path}").headers["allow"]
