"""In Chromium: a request the fallback answered becomes a rule, from the journal in the admin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page

from staticagents.document.files import load_fixture
from staticagents.models import Rule
from staticagents.services import import_fixture
from tests.test_admin_browser import BrowserThread, screenshot
from tests.test_admin_browser import chromium as chromium  # the browser, as a fixture

RULES = """
rules:
  - name: greet
    match: {agent_type: router, query: "(?i)^hello"}
    response: {content: "Hello there"}
  - name: weather-for-gemini
    match: {dialect: gemini, contains: weather}
    response: {content: "Sunny, as always on Gemini"}
fallback: {content: "Nothing matched."}
"""
QUESTION = "What is the weather in Paris?"


def ask(live_url: str) -> str:
    client = openai.OpenAI(base_url=f"{live_url}/v1", api_key="sk-curator", max_retries=0)
    completion = client.chat.completions.create(
        model="static-agents", messages=[{"role": "user", "content": QUESTION}]
    )
    return completion.choices[0].message.content or ""


def test_a_curator_turns_a_fallback_from_the_journal_into_a_rule_that_answers_it(
    live_url: str, chromium: BrowserThread, settings: Any, tmp_path: Path
) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    import_fixture(document=load_fixture(RULES))
    User.objects.create_superuser("curator", "curator@example.org", "correct horse")
    assert ask(live_url) == "Nothing matched."

    def steps(page: Page) -> dict[str, Any]:
        seen: dict[str, Any] = {"elsewhere": []}
        page.on(
            "request",
            lambda request: (
                None if request.url.startswith(live_url) else seen["elsewhere"].append(request.url)
            ),
        )
        page.goto("/")
        seen["front"] = page.locator("h1").inner_text()
        screenshot(page, tmp_path, "front-door")
        with page.expect_navigation():
            page.click("#link-docs")
        page.wait_for_selector(".opblock")  # Swagger UI drew the operations from the schema
        seen["documented"] = page.locator(".opblock-summary-path").all_inner_texts()
        screenshot(page, tmp_path, "api-docs", full_page=False)
        page.go_back()
        with page.expect_navigation():
            page.click("#link-admin")
        page.fill("#id_username", "curator")
        page.fill("#id_password", "correct horse")
        with page.expect_navigation():
            page.click("input[type=submit]")
        page.goto("/admin/staticagents/journalentry/")
        with page.expect_navigation():
            page.click("#changelist-filter a:text-is('fallback')")
        seen["listed"] = page.locator("#result_list tbody td.field-query_preview").all_inner_texts()
        screenshot(page, tmp_path, "journal-fallbacks")
        with page.expect_navigation():
            page.click("#result_list tbody th.field-created_at a")
        seen["diagnosis"] = page.locator("table.journal-diagnosis tbody tr").all_inner_texts()
        screenshot(page, tmp_path, "journal-fallback-entry")
        with page.expect_navigation():
            page.click("a.create-rule")
        seen["prefilled"] = {
            field: page.locator(f"#id_{field}").input_value()
            for field in ("match_agent_type", "match_query", "match_dialect")
        }
        screenshot(page, tmp_path, "rule-from-journal-entry")
        page.fill("#id_responses-0-content", "Rain in Paris, for once.")
        with page.expect_navigation():
            page.click("input[name=_save]")
        seen["messages"] = page.locator("ul.messagelist li").all_inner_texts()
        return seen

    seen = chromium.on_new_page(live_url, steps)
    assert seen["front"] == "Static Agents"
    assert seen["elsewhere"] == []  # no CDN, no validator badge: every asset is the service's
    assert (
        "/api/ai/agents/query" in seen["documented"] and "/control/journal/" in seen["documented"]
    )
    assert seen["listed"] == [QUESTION]
    assert any("weather-for-gemini" in row and "dialect" in row for row in seen["diagnosis"])
    assert seen["prefilled"] == {
        "match_agent_type": "router",
        "match_query": r"^What is the weather in Paris\?$",
        "match_dialect": "openai",
    }
    assert any("was added successfully" in text for text in seen["messages"])
    assert Rule.objects.filter(match_query=r"^What is the weather in Paris\?$").exists()
    assert ask(live_url) == "Rain in Paris, for once."
    for name in ("front-door", "api-docs", "journal-fallbacks", "journal-fallback-entry"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK talks to the local server directly."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
