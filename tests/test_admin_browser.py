"""The admin in a real browser against the real ASGI server: log in, reorder, edit, upload."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, Page, Playwright, sync_playwright

from staticagents.document.files import load_fixture
from staticagents.models import Rule
from staticagents.services import import_fixture

T = TypeVar("T")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
RULES = """
rules:
  - name: greet
    match: {agent_type: router, query: "(?i)hello"}
    response: {content: "Hello there"}
  - name: farewell
    match: {agent_type: router, query: "(?i)bye"}
    response: {content: "Goodbye"}
  - name: catch-all
    response: {content: "I answer everything"}
"""


class BrowserThread:
    """Chromium driven from a thread of its own.

    Playwright's sync API runs an event loop in the thread that uses it, and the
    ORM refuses to run in a thread with a running loop, so the browser steps run
    in this thread and the database checks in the test's.
    """

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chromium")
        self.playwright, self.browser = self.run(self._launch)

    @staticmethod
    def _launch() -> tuple[Playwright, Browser]:
        playwright = sync_playwright().start()
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
        )
        return playwright, browser

    def run(self, steps: Callable[[], T]) -> T:
        return self.pool.submit(steps).result(timeout=60)

    def on_new_page(
        self,
        base_url: str,
        steps: Callable[[Page], T],
        *,
        width: int = 1280,
        height: int = 900,
        javascript: bool = True,
    ) -> T:
        """Run ``steps`` on a page of a fresh browser context (no cookies), in this thread."""

        def session() -> T:
            context = self.browser.new_context(
                base_url=base_url,
                viewport={"width": width, "height": height},
                java_script_enabled=javascript,
            )
            try:
                page = context.new_page()
                page.set_default_timeout(10_000)
                return steps(page)
            finally:
                context.close()

        return self.run(session)

    def close(self) -> None:
        self.run(self.browser.close)
        self.run(self.playwright.stop)
        self.pool.shutdown()


@pytest.fixture(scope="module")
def chromium() -> Iterator[BrowserThread]:
    thread = BrowserThread()
    yield thread
    thread.close()


@pytest.fixture
def as_curator(
    live_url: str, chromium: BrowserThread, settings: Any
) -> Callable[[Callable[[Page], T]], T]:
    """Run browser steps on a page logged in to the admin as a fresh superuser (3 rules loaded)."""
    # The default hasher spends most of a second per password, on purpose; not needed here.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    import_fixture(document=load_fixture(RULES))
    User.objects.create_superuser("curator", "curator@example.org", "correct horse")

    def browse(steps: Callable[[Page], T]) -> T:
        def logged_in(page: Page) -> T:
            page.goto("/admin/login/")
            page.fill("#id_username", "curator")
            page.fill("#id_password", "correct horse")
            with page.expect_navigation():
                page.click("input[type=submit]")
            return steps(page)

        return chromium.on_new_page(live_url, logged_in)

    return browse


def screenshot(page: Page, directory: Path, name: str, *, full_page: bool = True) -> Path:
    """Save the page as ``name``.png in ``directory`` (the test's temporary directory, kept
    by CI), and as well in $STATIC_AGENTS_SCREENSHOT_DIR when set (the README's images)."""
    path = directory / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    also = os.environ.get("STATIC_AGENTS_SCREENSHOT_DIR")
    if also:
        Path(also).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(also) / path.name)
    return path


def listed_names(page: Page) -> list[str]:
    return page.locator("#result_list tbody th.field-name a").all_inner_texts()


def messages(page: Page) -> list[str]:
    return [text.strip() for text in page.locator("ul.messagelist li").all_text_contents()]


Browse = Callable[[Callable[[Page], object]], object]


def test_a_curator_logs_in_and_moves_a_rule_down(as_curator: Browse, tmp_path: Path) -> None:
    def steps(page: Page) -> None:
        assert page.locator("#site-name").inner_text() == "Static Agents"
        screenshot(page, tmp_path, "admin-index")
        with page.expect_navigation():
            page.click("#content-main a[href='/admin/staticagents/rule/']")
        assert listed_names(page) == ["greet", "farewell", "catch-all"]
        with page.expect_navigation():
            page.click('button[aria-label="Move down one place: greet"]')
        screenshot(page, tmp_path, "rule-moved-down")
        assert listed_names(page) == ["farewell", "greet", "catch-all"]
        assert messages(page) == ["“greet” is now rule #2."]

    as_curator(steps)
    names = list(Rule.objects.order_by("position").values_list("name", flat=True))
    assert names == ["farewell", "greet", "catch-all"]


def test_an_invalid_query_regex_is_shown_on_the_query_field(
    as_curator: Browse, tmp_path: Path
) -> None:
    def steps(page: Page) -> None:
        page.goto("/admin/staticagents/rule/")
        with page.expect_navigation():
            page.click("#result_list >> text=farewell")
        page.fill("#id_match_query", "(?i)bye(")
        with page.expect_navigation():
            page.click("input[name=_save]")
        screenshot(page, tmp_path, "invalid-query-regex")
        error = page.locator(".form-row.field-match_query .errorlist")
        assert "invalid regex" in error.inner_text()
        assert page.locator("#id_match_query").input_value() == "(?i)bye("

    as_curator(steps)
    assert Rule.objects.get(name="farewell").match_query == "(?i)bye"


def upload(page: Page, name: str, text: str, mode: str = "merge", dry_run: bool = False) -> None:
    page.set_input_files(
        "#id_fixture",
        files=[{"name": name, "mimeType": "application/yaml", "buffer": text.encode()}],
    )
    page.check(f"input[name=mode][value={mode}]")
    if dry_run:
        page.check("#id_dry_run")
    with page.expect_navigation():
        page.click("input[name=_upload]")


def test_a_curator_uploads_a_fixture_after_fixing_the_errors_shown(
    as_curator: Browse, tmp_path: Path
) -> None:
    def steps(page: Page) -> None:
        page.goto("/admin/staticagents/rule/")
        with page.expect_navigation():
            page.click("text=Upload fixture")
        upload(
            page, "broken.yml", "rules:\n  - name: x\n    match: {query: '('}\n    response: {}\n"
        )
        screenshot(page, tmp_path, "upload-errors")
        errors = page.locator(".field-fixture .errorlist li").all_inner_texts()
        assert len(errors) == 1
        assert errors[0].startswith("broken.yml:3: rules[0].match.query: invalid regex")
        upload(
            page,
            "more.yml",
            "rules:\n  - name: thanks\n    match: {query: thank}\n"
            "    response: {content: Welcome}\n",
            dry_run=True,
        )
        screenshot(page, tmp_path, "upload-dry-run")
        assert page.locator("#upload-created li").all_inner_texts() == ["thanks"]
        with page.expect_navigation():  # the dry run kept the file and the mode
            page.click("#upload-run-form input[name=_run]")
        assert page.url.endswith("/admin/staticagents/rule/")
        assert messages(page) == [
            "Uploaded more.yml (merge): imported: 1 rule(s) created, 0 updated, 0 deleted."
        ]
        # a new rule goes before the catch-all, where it can answer
        assert listed_names(page) == ["greet", "farewell", "thanks", "catch-all"]

    as_curator(steps)
    assert Rule.objects.get(name="thanks").responses.get().content == "Welcome"


def test_a_curator_tries_a_question_from_the_list_and_from_a_rules_page(
    as_curator: Browse, tmp_path: Path
) -> None:
    def steps(page: Page) -> tuple[str, list[str], str]:
        page.goto("/admin/staticagents/rule/")
        with page.expect_navigation():
            page.click("a.try-rule")
        page.fill("#id_query", "bye for **now**")
        page.select_option("#id_dialect", "gemini")
        with page.expect_navigation():
            page.click("#try-form input[type=submit]")
        answered = page.locator("#try-answered-by").inner_text()
        refused = page.locator("#try-refused tbody tr").all_inner_texts()
        screenshot(page, tmp_path, "try-it-bye")
        # A rule's page links the same form, filled in with a question that rule answers.
        with page.expect_navigation():
            page.click("#try-refused tbody a")
        with page.expect_navigation():
            page.click("a.try-rule")
        screenshot(page, tmp_path, "try-it-from-a-rule")
        return answered, refused, page.locator("#try-preview").inner_text()

    answered, refused, preview = as_curator(steps)  # type: ignore[misc]
    assert answered.strip() == "Answered by rule farewell."
    assert len(refused) == 1 and refused[0].startswith("greet\tquery\t")
    assert preview.strip() == "Hello there"  # greet's page asks "hello"
    assert (tmp_path / "try-it-bye.png").stat().st_size > 0
