"""Every request is counted and logged once: a reply route observes its own request
(``ReplyRoute.run``), ``Observed`` every other, and a request refused or failed before
any route took it is observed all the same."""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import pytest

from staticagents.dialects.openai.routes import ChatCompletionsRoute

RULES = {
    "rules": [
        {"name": "boom", "match": {"contains": "#boom"}, "response": {"error": {"status": 503}}},
        {"name": "hello", "response": {"content": "hello from the rules"}},
    ]
}
CHAT = "/v1/chat/completions"


def chat(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


def requests_counted(text: str, dialect: str, outcome: str, status: int) -> float:
    """``static_agents_requests_total`` for these labels in a scrape (0: no such series)."""
    labels = f'dialect="{dialect}",outcome="{outcome}",status="{status}"'
    found = re.search(rf"^static_agents_requests_total\{{{labels}\}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def scrape(live_url: str, settings: Any) -> Any:
    settings.STATIC_AGENTS_METRICS = "open"
    return lambda: httpx.get(f"{live_url}/metrics").text


@pytest.fixture
def access_lines(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.INFO, logger="staticagents.access")

    def lines(path: str) -> list[str]:
        return [
            record.getMessage()
            for record in caplog.records
            if record.name == "staticagents.access" and f" {path} " in record.getMessage()
        ]

    return lines


def test_each_reply_is_counted_and_logged_once_with_its_rule_and_outcome(
    live_url: str, load_rules: Any, scrape: Any, access_lines: Any
) -> None:
    load_rules(RULES)
    before = scrape()

    answered = [httpx.post(live_url + CHAT, json=chat("hi")) for _ in range(3)]
    failed = httpx.post(live_url + CHAT, json=chat("#boom"))
    after = scrape()

    assert [r.status_code for r in answered] == [200, 200, 200] and failed.status_code == 503
    gained = requests_counted(after, "openai", "answered", 200) - requests_counted(
        before, "openai", "answered", 200
    )
    assert gained == 3
    assert (
        requests_counted(after, "openai", "error", 503)
        - requests_counted(before, "openai", "error", 503)
        == 1
    )
    lines = access_lines(CHAT)
    assert len(lines) == 4, lines
    assert sum("200 dialect=openai rule=hello outcome=answered" in line for line in lines) == 3
    assert "503 dialect=openai rule=boom outcome=error" in lines[-1]


def test_a_request_the_session_prefix_refuses_is_counted_and_logged(
    live_url: str, scrape: Any, access_lines: Any
) -> None:
    before = scrape()

    refused = httpx.post(f"{live_url}/sessions/{'k' * 201}{CHAT}", json=chat("hi"))
    after = scrape()

    assert refused.status_code == 400
    assert refused.json()["error"]["type"] == "invalid_request_error"  # OpenAI's shape
    gained = requests_counted(after, "openai", "none", 400) - requests_counted(
        before, "openai", "none", 400
    )
    assert gained == 1
    [line] = access_lines(f"/sessions/{'k' * 201}{CHAT}")
    assert "POST" in line and " 400 dialect=openai rule=- outcome=-" in line


def test_a_reply_route_that_fails_before_it_answers_gets_its_dialects_500_counted(
    live_url: str,
    scrape: Any,
    access_lines: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: ChatCompletionsRoute) -> None:
        raise LookupError("admission broke")

    monkeypatch.setattr(ChatCompletionsRoute, "admission", broken)
    before = scrape()

    response = httpx.post(live_url + CHAT, json=chat("hi"))
    after = scrape()

    assert response.status_code == 500
    assert response.json()["error"]["type"] == "api_error"  # the route's own 500
    [failure] = [r for r in caplog.records if r.name == "staticagents.serving.route"]
    assert failure.exc_info is not None and "admission broke" in str(failure.exc_info[1])
    gained = requests_counted(after, "openai", "none", 500) - requests_counted(
        before, "openai", "none", 500
    )
    assert gained == 1
    [line] = access_lines(CHAT)
    assert " 500 dialect=openai rule=- outcome=-" in line
