"""In Chromium: a tool call typed without JSON (JavaScript off), the error banner's link to
the first field in error (JavaScript off), and two curators saving the same rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page

from staticagents.document.files import load_fixture
from staticagents.models import RuleResponse
from staticagents.services import import_fixture
from tests.test_admin_browser import RULES, BrowserThread, screenshot
from tests.test_admin_browser import chromium as chromium  # the browser, as a fixture

PASSWORD = "correct horse"
# Where the page's target element is: its id, and whether the window shows it whole.
TARGET = """() => {
  const target = document.querySelector(':target');
  if (!target) return null;
  const box = target.getBoundingClientRect();
  return {id: target.id, visible: box.top >= 0 && box.bottom <= window.innerHeight};
}"""


@pytest.fixture
def curators(live_url: str, settings: Any) -> str:
    """The three rules of the admin browser tests, and two curators; the server's URL."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    import_fixture(document=load_fixture(RULES))
    User.objects.create_superuser("curator", "curator@example.org", PASSWORD)
    User.objects.create_superuser("second", "second@example.org", PASSWORD)
    return live_url


def log_in(page: Page, user: str, then: str) -> None:
    page.goto(f"/admin/login/?next={then}")
    page.fill("#id_username", user)
    page.fill("#id_password", PASSWORD)
    with page.expect_navigation():
        page.click("input[type=submit]")


def open_rule(page: Page, name: str) -> None:
    with page.expect_navigation():
        page.click(f"#result_list >> text={name}")


def save(page: Page, button: str = "_save") -> None:
    with page.expect_navigation():
        page.click(f"input[name={button}]")


def test_a_curator_gives_a_rule_a_tool_call_without_json_and_without_javascript(
    curators: str, chromium: BrowserThread, tmp_path: Path
) -> None:
    def steps(page: Page) -> dict[str, Any]:
        log_in(page, "curator", "/admin/staticagents/rule/")
        open_rule(page, "greet")
        screenshot(page, tmp_path, "edit-form-greet")
        page.fill("#id_responses-0-tool_calls-0-name", "lookup")
        page.fill("#id_responses-0-tool_calls-0-arguments", '{"city": "Paris", "days": 2}')
        save(page, "_continue")
        screenshot(page, tmp_path, "edit-form-tool-call-saved")
        row = "#id_responses-0-tool_calls-{}-{}"
        return {
            "saved": [
                page.locator(row.format(0, key)).input_value() for key in ("name", "arguments")
            ],
            "blank": [
                page.locator(row.format(1, key)).input_value() for key in ("name", "arguments")
            ],
            "json": page.locator("#id_responses-0-tool_calls-json").input_value(),
            "messages": page.locator("ul.messagelist li").all_inner_texts(),
        }

    seen = chromium.on_new_page(curators, steps, javascript=False)
    assert seen["saved"] == ["lookup", '{"city": "Paris", "days": 2}']
    assert seen["blank"] == ["", ""] and seen["json"] == ""
    assert any("was changed successfully" in text for text in seen["messages"])
    stored = RuleResponse.objects.get(rule__name="greet").tool_calls
    assert stored == [{"name": "lookup", "arguments": {"city": "Paris", "days": 2}}]

    client = openai.OpenAI(base_url=f"{curators}/agents/router/v1", api_key="any", max_retries=0)
    reply = client.chat.completions.create(
        model="demo", messages=[{"role": "user", "content": "Hello!"}]
    )
    (call,) = reply.choices[0].message.tool_calls or []
    assert call.function.name == "lookup"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 2}  # type: ignore[union-attr]


def test_a_response_added_with_javascript_takes_its_tool_call_from_the_rows(
    curators: str, chromium: BrowserThread, tmp_path: Path
) -> None:
    def steps(page: Page) -> None:
        log_in(page, "curator", "/admin/staticagents/rule/")
        open_rule(page, "farewell")
        page.click("#responses-group .add-row a")  # the admin's script copies the blank form
        page.fill("#id_responses-1-content", "Looking it up")
        page.fill("#id_responses-1-tool_calls-0-name", "lookup")
        page.fill("#id_responses-1-tool_calls-0-arguments", '{"topic": "trains"}')
        screenshot(page, tmp_path, "edit-form-response-added")
        save(page)
        screenshot(page, tmp_path, "rule-list-response-added")

    chromium.on_new_page(curators, steps)
    responses = RuleResponse.objects.filter(rule__name="farewell").order_by("position")
    assert [(r.content, r.tool_calls) for r in responses] == [
        ("Goodbye", None),
        ("Looking it up", [{"name": "lookup", "arguments": {"topic": "trains"}}]),
    ]


def test_the_error_banner_links_the_first_field_in_error_without_javascript(
    curators: str, chromium: BrowserThread, tmp_path: Path
) -> None:
    def steps(page: Page) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        log_in(page, "curator", "/admin/staticagents/rule/")
        open_rule(page, "farewell")
        page.fill("#id_match_context", '{\n  "page" ".*"\n}')
        page.fill("#id_responses-0-metadata", "[")
        save(page)
        seen["banner"] = page.locator("p.errornote").inner_text()
        seen["context error"] = page.locator(".field-match_context .errorlist").inner_text()
        screenshot(page, tmp_path, "edit-form-errors")
        page.click("p.errornote a.first-error")
        page.wait_for_url("**#id_match_context")
        seen["target"] = page.evaluate(TARGET)
        screenshot(page, tmp_path, "edit-form-first-error", full_page=False)
        # Fixed; now the first error is in the response's tool calls
        page.fill("#id_match_context", '{"page": ".*"}')
        page.fill("#id_responses-0-metadata", "")
        page.fill("#id_responses-0-tool_calls-0-name", "lookup")
        page.fill("#id_responses-0-tool_calls-0-arguments", '{"city": Paris}')
        save(page)
        seen["second banner"] = page.locator("p.errornote").inner_text()
        page.click("p.errornote a.first-error")
        page.wait_for_url("**#id_responses-0-tool_calls")
        seen["second target"] = page.evaluate(TARGET)
        seen["kept"] = page.locator("#id_responses-0-tool_calls-0-arguments").input_value()
        screenshot(page, tmp_path, "edit-form-tool-call-error", full_page=False)
        return seen

    seen = chromium.on_new_page(curators, steps, javascript=False)
    assert seen["banner"] == "Please correct the errors below; the first is in Context."
    assert seen["context error"] == "line 2, column 10: Expecting ':' delimiter"
    assert seen["target"] == {"id": "id_match_context", "visible": True}
    assert seen["second banner"] == (
        "Please correct the error below; the first is in Tool calls of response 1."
    )
    assert seen["second target"] == {"id": "id_responses-0-tool_calls", "visible": True}
    assert seen["kept"] == '{"city": Paris}'
    assert RuleResponse.objects.get(rule__name="farewell").tool_calls is None


def test_the_second_of_two_curators_saving_a_rule_is_refused_and_keeps_the_input(
    curators: str, chromium: BrowserThread, tmp_path: Path
) -> None:
    def steps(first: Page) -> dict[str, Any]:
        browser: Browser = first.context.browser  # type: ignore[assignment]
        other = browser.new_context(base_url=curators, viewport={"width": 1280, "height": 900})
        try:
            second = other.new_page()
            second.set_default_timeout(10_000)
            for page, user in ((first, "curator"), (second, "second")):
                log_in(page, user, "/admin/staticagents/rule/")
                open_rule(page, "greet")
            first.fill("#id_responses-0-content", "Hello from the first curator")
            save(first)
            second.fill("#id_match_query", "(?i)good morning")
            second.fill("#id_responses-0-content", "Hello from the second curator")
            save(second)
            screenshot(second, tmp_path, "edit-refused")
            return {
                "first": first.locator("ul.messagelist li").all_inner_texts(),
                "refused": second.locator("ul.errorlist.nonfield li").all_inner_texts(),
                "query": second.locator("#id_match_query").input_value(),
                "content": second.locator("#id_responses-0-content").input_value(),
            }
        finally:
            other.close()

    seen = chromium.on_new_page(curators, steps)
    assert any("was changed successfully" in text for text in seen["first"])
    (refused,) = seen["refused"]
    assert refused.startswith("This was changed by curator at ")
    assert "UTC since you opened this page; your changes are not saved." in refused
    assert seen["query"] == "(?i)good morning"
    assert seen["content"] == "Hello from the second curator"
    stored = RuleResponse.objects.get(rule__name="greet").content
    assert stored == "Hello from the first curator"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK talks to the local server directly."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
