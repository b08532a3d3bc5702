"""In Chromium: a curator edits a rule, finds the edit in the history, reads its diff and
restores the version before it; the rule answers as it did."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.sync_api import Page

from staticagents.models import RulesetVersion
from tests.conftest import galaxy_query
from tests.test_admin_browser import as_curator as as_curator  # logged in, 3 rules loaded
from tests.test_admin_browser import chromium as chromium  # the browser, as a fixture

Browse = Callable[[Callable[[Page], Any]], Any]


def test_a_curator_undoes_an_edit_from_the_history(
    as_curator: Browse, live_url: str, tmp_path: Path
) -> None:
    before_edit = RulesetVersion.objects.order_by("-number")[0].number

    def steps(page: Page) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        page.goto("/admin/staticagents/rule/")
        with page.expect_navigation():
            page.click("#result_list th.field-name a:text-is('greet')")
        page.fill("#id_responses-0-content", "Howdy, partner")
        with page.expect_navigation():
            page.click("input[name=_save]")
        with page.expect_navigation():
            page.click("a.rule-history")
        seen["listed"] = page.locator("#result_list tbody tr").all_inner_texts()
        page.screenshot(path=str(tmp_path / "history-list.png"), full_page=True)
        with page.expect_navigation():
            page.click("#result_list tbody tr:first-child th a")
        seen["diff"] = page.locator("table.version-diff tbody tr").all_inner_texts()
        page.screenshot(path=str(tmp_path / "history-version.png"), full_page=True)
        with page.expect_navigation():
            page.click("p.version-against a")
        with page.expect_navigation():
            page.click("a.restore-version")
        seen["confirm"] = page.locator("table.version-diff tbody tr").all_inner_texts()
        page.screenshot(path=str(tmp_path / "history-restore.png"), full_page=True)
        with page.expect_navigation():
            page.click("#restore-form input[type=submit]")
        seen["messages"] = page.locator("ul.messagelist li").all_inner_texts()
        seen["newest"] = page.locator("#result_list tbody tr:first-child").inner_text()
        page.goto("/admin/staticagents/rule/")
        seen["contents"] = page.locator("#result_list td.field-content_preview").all_inner_texts()
        return seen

    seen = as_curator(steps)
    edit, restore = before_edit + 1, before_edit + 2
    assert 'changed rule "greet"' in seen["listed"][0]
    assert "curator" in seen["listed"][0]
    assert seen["diff"][1].split("\t") == ["response.content", "Hello there", "Howdy, partner"]
    assert seen["confirm"][1].split("\t") == ["response.content", "Howdy, partner", "Hello there"]
    assert seen["messages"] == [f"Restored version {before_edit}: the rules are version {restore}."]
    assert f"restored version {before_edit}" in seen["newest"]
    assert seen["contents"][0] == "Hello there"
    assert galaxy_query(live_url, "hello").json()["response"]["content"] == "Hello there"
    kept = RulesetVersion.objects.order_by("number")
    assert [(v.number, v.by) for v in kept if v.number > before_edit] == [
        (edit, "curator"),
        (restore, "curator"),
    ]
    for name in ("history-list", "history-version", "history-restore"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0
