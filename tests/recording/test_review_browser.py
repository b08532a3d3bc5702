"""A curator reviews recorded rules in Chromium: the filter, the tag, the bulk accept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from playwright.sync_api import Page

from staticagents.core.inquiry import Inquiry
from staticagents.models import Rule
from staticagents.recording import Exchange, RecordedReply, record_exchange
from staticagents.services import create_rule
from tests import test_admin_browser
from tests.test_admin_browser import BrowserThread, listed_names

chromium = test_admin_browser.chromium  # the module's browser, shared fixture


def test_a_curator_filters_the_recorded_rules_to_review_and_accepts_them(
    live_url: str, chromium: BrowserThread, settings: Any, tmp_path: Path
) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    create_rule(document={"name": "hand-written", "response": {"content": "ours"}})
    recorded = [
        record_exchange(
            Exchange(upstream="real", inquiry=Inquiry(query=q), reply=RecordedReply(f"A: {q}"))
        )
        for q in ("first question", "second question")
    ]
    User.objects.create_superuser("curator", "curator@example.org", "correct horse")

    def steps(page: Page) -> tuple[list[str], str, str, list[str]]:
        page.goto("/admin/login/?next=/admin/staticagents/rule/")
        page.fill("#id_username", "curator")
        page.fill("#id_password", "correct horse")
        with page.expect_navigation():
            page.click("input[type=submit]")
        with page.expect_navigation():
            page.click("#changelist-filter >> text=recorded, not yet reviewed")
        to_review = listed_names(page)
        status = page.locator("#result_list td.field-status").first.inner_text()
        page.screenshot(path=str(tmp_path / "recorded-to-review.png"), full_page=True)
        page.check("#action-toggle")
        page.select_option("select[name=action]", "accept_recorded")
        with page.expect_navigation():
            page.click("button[name=index]")
        message = page.locator(".messagelist").inner_text()
        return to_review, status, message, listed_names(page)

    to_review, status, message, after = chromium.on_new_page(live_url, steps)
    assert to_review == recorded
    assert status == "recorded · to review"
    assert "2 recorded rule(s) accepted." in message
    assert after == []  # the filter is kept: nothing is left to review
    assert set(Rule.objects.filter(recorded_reviewed=True).values_list("name", flat=True)) == set(
        recorded
    )
