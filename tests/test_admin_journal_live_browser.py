"""In Chromium: the admin's journal list shows new requests as they arrive, without a reload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page

from tests.conftest import CONTROL_TOKEN
from tests.test_admin_browser import as_curator
from tests.test_admin_browser import chromium as chromium  # the browser, as a fixture

__all__ = ["as_curator"]  # the fixture, for pytest


def galaxy(live_url: str, query: str) -> None:
    response = httpx.post(
        f"{live_url}/api/ai/agents/query", json={"query": query, "agent_type": "router"}
    )
    assert response.status_code == 200, response.text


def test_the_journal_list_shows_a_new_request_at_the_top_without_a_reload(
    live_url: str, as_curator: Callable[[Callable[[Page], Any]], Any]
) -> None:
    galaxy(live_url, "hello before")

    def steps(page: Page) -> dict[str, Any]:
        page.goto("/admin/staticagents/journalentry/")
        page.wait_for_selector("#journal-live .state:text('(live)')")
        page.evaluate("window.notReloaded = true")
        galaxy(live_url, "hello while watching")
        # (Chromium's request for /favicon.ico is journaled too, as an unknown route.)
        new = page.locator("#result_list tr.live-new:has-text('hello while watching')")
        new.wait_for()
        top = new.first
        seen = {
            "query": top.locator("td.field-query_preview").inner_text(),
            "outcome": top.locator("td.field-outcome_label").inner_text(),
            "rule": top.locator("td.field-rule").inner_text(),
            "rows": page.locator("#result_list tbody td.field-query_preview").all_inner_texts(),
            "not_reloaded": page.evaluate("window.notReloaded === true"),
        }
        with page.expect_navigation():
            top.locator("th a").click()
        seen["entry_page"] = page.locator("div.field-query_text pre").inner_text()
        return seen

    seen = as_curator(steps)
    assert seen["not_reloaded"] is True
    assert (seen["query"], seen["outcome"], seen["rule"]) == (
        "hello while watching",
        "answered",
        "greet",
    )
    rows = seen["rows"]
    assert rows.index("hello while watching") < rows.index("hello before")
    assert seen["entry_page"] == "hello while watching"


def test_the_followed_list_keeps_to_its_filters(
    live_url: str, as_curator: Callable[[Callable[[Page], Any]], Any]
) -> None:
    galaxy(live_url, "bye for now")

    def steps(page: Page) -> list[str]:
        page.goto("/admin/staticagents/journalentry/?rule=farewell")
        page.wait_for_selector("#journal-live .state:text('(live)')")
        galaxy(live_url, "hello, not listed here")
        galaxy(live_url, "bye again")
        page.wait_for_selector("#result_list tr.live-new:has-text('bye again')")
        return page.locator("#result_list tbody td.field-query_preview").all_inner_texts()

    assert as_curator(steps) == ["bye again", "bye for now"]


def test_a_listed_entry_shows_its_outcome_changed_later(
    live_url: str, as_curator: Callable[[Callable[[Page], Any]], Any], settings: Any
) -> None:
    settings.STATIC_AGENTS_WORD_DELAY_MS = 2_000  # the stream lasts until the client leaves

    def steps(page: Page) -> list[str]:
        page.goto("/admin/staticagents/journalentry/")
        page.wait_for_selector("#journal-live .state:text('(live)')")
        body = {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": "hello, then gone"}],
        }
        with httpx.stream("POST", f"{live_url}/v1/chat/completions", json=body) as response:
            lines = response.iter_lines()  # kept: a dropped iterator closes the stream
            next(lines)
            row = page.locator("#result_list tr.live-new:has-text('hello, then gone')")
            row.wait_for()
            before = row.locator("td.field-outcome_label").inner_text()
        page.wait_for_selector(
            "#result_list tr.live-new:has-text('hello, then gone') "
            "td.field-outcome_label:text('cancelled')"
        )
        return [before, row.locator("td.field-outcome_label").inner_text()]

    assert as_curator(steps) == ["answered", "cancelled"]


def test_the_rule_list_tells_of_a_change_made_elsewhere_without_a_reload(
    live_url: str, as_curator: Callable[[Callable[[Page], Any]], Any], settings: Any
) -> None:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    control = {"Authorization": f"Bearer {CONTROL_TOKEN}"}

    def steps(page: Page) -> dict[str, Any]:
        page.goto("/admin/staticagents/rule/")
        hidden_at_first = page.locator("#rules-changed").is_hidden()
        shown = int(page.locator("#rules-changed").get_attribute("data-version") or "0")
        page.evaluate("window.notReloaded = true")
        # Announcements before the script subscribes are not replayed: wait for it.
        page.wait_for_selector("#rules-changed[data-following]", state="attached")
        patched = httpx.patch(
            f"{live_url}/control/rules/greet",
            headers=control,
            json={"response": {"content": "hello again"}},
        )
        assert patched.status_code == 200, patched.text
        notice = page.locator("#rules-changed")
        notice.wait_for(state="visible")
        return {
            "hidden_at_first": hidden_at_first,
            "shown": shown,
            "notice": notice.inner_text(),
            "not_reloaded": page.evaluate("window.notReloaded === true"),
        }

    seen = as_curator(steps)
    assert seen["hidden_at_first"] and seen["not_reloaded"]
    assert seen["notice"] == f"The rules changed (version {seen['shown'] + 1}): reload"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
