"""The curator's workbench on the demo rules at 1280 px, in Chromium: the pages the README
shows. With STATIC_AGENTS_SCREENSHOT_DIR=docs/images this flow writes the README's images."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page

from staticagents import conf
from staticagents.document.files import load_fixture
from staticagents.services import import_fixture
from tests.test_admin_browser import BrowserThread, listed_names, screenshot
from tests.test_admin_browser import chromium as chromium  # the browser, as a fixture

QUESTION = "#tool what is the weather?"


def test_the_workbench_pages_on_the_demo_rules(
    live_url: str, chromium: BrowserThread, settings: Any, tmp_path: Path
) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    demo = load_fixture(conf.settings.STATIC_AGENTS_DEFAULT_FIXTURE.read_bytes())
    import_fixture(document=demo)
    User.objects.create_superuser("curator", "curator@example.org", "correct horse")
    client = openai.OpenAI(base_url=f"{live_url}/agents/router/v1", api_key="any", max_retries=0)
    reply = client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": QUESTION}]
    )
    assert [call.function.name for call in reply.choices[0].message.tool_calls or []] == [  # type: ignore[union-attr]
        "lookup"
    ]

    def steps(page: Page) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        page.goto("/admin/login/?next=/admin/staticagents/rule/")
        page.fill("#id_username", "curator")
        page.fill("#id_password", "correct horse")
        with page.expect_navigation():
            page.click("input[type=submit]")
        seen["rules"] = listed_names(page)
        screenshot(page, tmp_path, "rule-list")
        with page.expect_navigation():
            page.click("a.try-rule")
        page.fill("#id_query", QUESTION)
        with page.expect_navigation():
            page.click("#try-form input[type=submit]")
        seen["answered"] = page.locator("#try-answered-by").inner_text().strip()
        screenshot(page, tmp_path, "try-it")
        page.goto("/admin/staticagents/journalentry/")
        with page.expect_navigation():
            page.click("#changelist-filter a:text-is('answered by a rule')")
        with page.expect_navigation():
            page.click("#result_list tbody th.field-created_at a")
        seen["entry"] = page.locator("#content-main").inner_text()
        screenshot(page, tmp_path, "journal-entry")
        page.goto("/admin/staticagents/rule/")
        with page.expect_navigation():
            page.click("#result_list >> text=tool-call")
        seen["row"] = [
            page.locator(f"#id_responses-0-tool_calls-0-{key}").input_value()
            for key in ("name", "arguments")
        ]
        seen["contains"] = page.locator("#id_match_contains").input_value()
        # The window at the response's suggestions and tool calls, typed in rows
        page.evaluate("document.querySelector('.field-suggestions').scrollIntoView()")
        screenshot(page, tmp_path, "edit-form", full_page=False)
        return seen

    seen = chromium.on_new_page(live_url, steps)
    assert seen["rules"] == [rule["name"] for rule in demo["rules"]]
    assert seen["answered"] == "Answered by rule tool-call."
    assert "tool-call" in seen["entry"] and QUESTION in seen["entry"]
    assert seen["row"] == ["lookup", json.dumps({"topic": "weather"})]
    assert seen["contains"] == "#tool"
    for name in ("rule-list", "try-it", "journal-entry", "edit-form"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK talks to the local server directly."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
