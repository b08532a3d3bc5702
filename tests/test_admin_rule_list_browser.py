"""The rule list in Chromium at 1280 px, on the demo rules: a curator adds a rule that answers."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
from django.contrib.auth.models import User
from playwright.sync_api import Page

from staticagents import conf
from staticagents.document.files import load_fixture
from staticagents.models import Rule
from staticagents.services import import_fixture
from tests import test_admin_browser
from tests.test_admin_browser import BrowserThread, listed_names, screenshot
from tests.test_admin_rule_list import journal

chromium = test_admin_browser.chromium  # the module's browser, shared fixture

# Cells cut off: wider than their content allows, or past the right edge of the list's
# scrolling box (what the window shows of it); and the page's overflow past the window.
CUT_OFF = """() => {
  const box = document.querySelector('#changelist .results').getBoundingClientRect();
  const cut = [...document.querySelectorAll('#result_list th, #result_list td')]
    .filter(cell => cell.scrollWidth > cell.clientWidth + 1
      || cell.getBoundingClientRect().right > Math.min(box.right, window.innerWidth) + 1)
    .map(cell => cell.className);
  return {cut, overflow: document.documentElement.scrollWidth - window.innerWidth};
}"""


def test_a_curator_adds_a_rule_on_the_demo_that_lands_before_the_catch_all_and_answers(
    live_url: str, chromium: BrowserThread, settings: Any, tmp_path: Path
) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    import_fixture(document=load_fixture(conf.settings.STATIC_AGENTS_DEFAULT_FIXTURE.read_bytes()))
    User.objects.create_superuser("curator", "curator@example.org", "correct horse")
    for _ in range(1234):  # a wide count and date in the list
        journal("tool-report", datetime(2026, 12, 24, 23, 59, tzinfo=UTC))

    def steps(page: Page) -> tuple[list[dict[str, Any]], list[str], str]:
        page.goto("/admin/login/?next=/admin/staticagents/rule/")
        page.fill("#id_username", "curator")
        page.fill("#id_password", "correct horse")
        with page.expect_navigation():
            page.click("input[type=submit]")
        layout = page.evaluate(CUT_OFF)
        screenshot(page, tmp_path, "rule-list-busy")
        with page.expect_navigation():
            page.click(".object-tools a.addlink")
        screenshot(page, tmp_path, "rule-add-form")
        page.fill("#id_name", "weather")
        page.fill("#id_match_contains", "weather")
        page.fill("#id_responses-0-content", "Sunny all week.")
        with page.expect_navigation():
            page.click("input[name=_save]")
        screenshot(page, tmp_path, "rule-added")
        row = page.locator("#result_list tr", has=page.locator("th.field-name >> text=weather"))
        return [layout, page.evaluate(CUT_OFF)], listed_names(page), row.inner_text()

    layout, names, row = chromium.on_new_page(live_url, steps)
    assert layout == [{"cut": [], "overflow": 0}] * 2
    assert names[-2:] == ["weather", "echo"]
    assert 'contains "weather"' in row and "text" in row and "never" in row
    assert (tmp_path / "rule-list-busy.png").stat().st_size > 0
    assert (tmp_path / "rule-added.png").stat().st_size > 0

    client = openai.OpenAI(base_url=f"{live_url}/v1", api_key="any", max_retries=0)
    reply = client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "What is the weather like?"}]
    )
    assert reply.choices[0].message.content == "Sunny all week."
    assert Rule.objects.get(name="weather").position == Rule.objects.get(name="echo").position - 1
