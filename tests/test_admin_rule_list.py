"""The rule list says what each rule does; adding a rule puts it where it can answer."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from staticagents.conf import settings
from staticagents.models import JournalEntry, Rule
from staticagents.selectors import rule_shadows
from staticagents.services import reorder_rules, set_rules_enabled

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/staticagents/rule/"
ADD = "/admin/staticagents/rule/add/"
MORE = """
rules:
  - name: limited
    match: {agent_type: router, contains: "#limit", model: "^gpt", tool_result: true}
    response: {error: {status: 429, type: rate_limit, message: slow down}}
  - name: script
    match: {context: {page: "^p-"}, turn: 2}
    responses: [{content: a}, {content: b}, {content: c}]
  - name: flaky
    enabled: false
    match: {contains: ["#flaky", "now"]}
    response: {content: ok, fail_first: 2}
  - name: broad
    match: {contains: "#err"}
    response: {content: broad}
  - name: narrow
    match: {contains: "#error now"}
    response: {content: never}
"""


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def demo(load_rules: Callable[[Any], Any]) -> None:
    load_rules(settings.STATIC_AGENTS_DEFAULT_FIXTURE)


def cells(client: Client, column: str) -> dict[str, str]:
    """The rule list's ``column``, by rule name, as HTML."""
    html = client.get(CHANGELIST).content.decode()
    rows = re.findall(r"<tr>(.*?)</tr>", html, re.S)
    found = {}
    for row in rows:
        name = re.search(r'<th class="field-name"><a [^>]*>([^<]+)</a>', row)
        cell = re.search(rf'<td class="field-{column}">(.*?)</td>', row, re.S)
        if name and cell:
            found[name.group(1)] = cell.group(1)
    return found


def test_each_demo_rule_says_what_it_matches(admin_client: Client, demo: None) -> None:
    matches = cells(admin_client, "matches")
    assert matches["error"] == "contains &quot;#error&quot;"
    assert matches["tool-call"] == "contains &quot;#tool&quot; · tool_result=false"
    assert matches["tool-report"] == "contains &quot;#tool&quot; · tool_result=true"
    assert matches["router-greeting"] == r"agent_type=router · query /(?i)^(hello|hi)\b/"
    assert matches["error-analysis"] == "agent_type=error_analysis"
    assert matches["near-refunds"] == "contains &quot;#near&quot; · dialect=embeddings"
    assert matches["echo"] == "everything"


def test_each_demo_rule_says_what_kind_of_reply_it_sends(admin_client: Client, demo: None) -> None:
    replies = cells(admin_client, "replies")
    assert replies["error"] == "error 500"
    assert replies["tool-call"] == "tool call <code>lookup</code>"
    assert replies["tool-report"] == "template"
    assert replies["think"] == "thinking + text"
    assert replies["markdown"] == "text"
    assert replies["near-refunds"] == "embedding"


def test_errors_sequences_contexts_and_retries_are_summarized(
    admin_client: Client, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(MORE)
    matches, replies = cells(admin_client, "matches"), cells(admin_client, "replies")
    assert matches["limited"] == (
        "agent_type=router · contains &quot;#limit&quot; · model /^gpt/ · tool_result=true"
    )
    assert replies["limited"] == "error 429"
    assert matches["script"] == "context.page /^p-/ · turn=2"
    assert replies["script"] == "sequence of 3"
    assert matches["flaky"] == "contains &quot;#flaky&quot;, &quot;now&quot;"
    assert replies["flaky"] == "text (fails first 2)"


def test_a_shadowed_rule_is_marked_with_the_rule_that_shadows_it_and_disabled_ones_dimmed(
    admin_client: Client, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(MORE)
    status = cells(admin_client, "status")
    assert "shadowed by broad" in status["narrow"]
    assert status["flaky"] == '<span class="rule-disabled">disabled</span>'
    assert status["broad"] == status["script"] == ""


@pytest.mark.django_db(transaction=True)  # the page's own transactions, as when served
def test_the_status_column_follows_every_change_to_the_rules(
    admin_client: Client, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(MORE)
    assert "shadowed by broad" in cells(admin_client, "status")["narrow"]
    set_rules_enabled(names=["broad"], enabled=False)
    assert "shadowed" not in cells(admin_client, "status")["narrow"]
    broad = Rule.objects.get(name="broad").pk
    admin_client.post(CHANGELIST, {"action": "enable_rules", "_selected_action": [broad]})
    assert "shadowed by broad" in cells(admin_client, "status")["narrow"]
    reorder_rules(names=["narrow", "broad"])
    assert "shadowed" not in cells(admin_client, "status")["narrow"]


@pytest.mark.django_db(transaction=True)
def test_the_shadows_of_unchanged_rules_are_worked_out_once(
    load_rules: Callable[[Any], Any],
) -> None:
    load_rules(MORE)
    assert set(rule_shadows()) == {"narrow"}
    with CaptureQueriesContext(connection) as queries:
        assert set(rule_shadows()) == {"narrow"}
    assert not [q for q in queries.captured_queries if '"staticagents_rule"' in q["sql"]]
    with transaction.atomic():
        # A change this transaction made, before any new stamp: seen all the same.
        Rule.objects.filter(name="broad").update(enabled=False)
        assert set(rule_shadows()) == set()
        transaction.set_rollback(True)
    assert set(rule_shadows()) == {"narrow"}


def test_demo_rules_shadow_nothing(admin_client: Client, demo: None) -> None:
    assert "shadowed by" not in admin_client.get(CHANGELIST).content.decode()


def journal(rule: str | None, at: datetime, outcome: str = "answered") -> None:
    entry = JournalEntry.objects.create(
        dialect="openai", route="/v1/chat/completions", session="s", agent_type="router",
        rule=rule, outcome=outcome,
    )  # fmt: skip
    JournalEntry.objects.filter(pk=entry.pk).update(created_at=at)


def test_how_often_and_when_each_rule_last_answered_comes_from_the_journal(
    admin_client: Client, demo: None
) -> None:
    journal("echo", datetime(2026, 3, 1, 9, 0, tzinfo=UTC))
    journal("echo", datetime(2026, 3, 2, 17, 45, tzinfo=UTC))
    journal("error", datetime(2026, 3, 1, 8, 0, tzinfo=UTC), outcome="error")
    journal(None, datetime(2026, 3, 3, 8, 0, tzinfo=UTC))  # the fallback's
    answered, last = cells(admin_client, "answered"), cells(admin_client, "last_answered")
    assert (answered["echo"], last["echo"]) == ("2", "Mar 2, 17:45")
    assert (answered["error"], last["error"]) == ("1", "Mar 1, 08:00")
    assert (answered["think"], last["think"]) == ("0", "never")


def test_the_list_reads_the_journal_and_responses_in_as_many_queries_for_many_rules(
    admin_client: Client, load_rules: Callable[[Any], Any]
) -> None:
    def queries_for(count: int) -> int:
        rules = [
            {"name": f"r{i}", "match": {"contains": f"#{i}"}, "response": {"content": "x"}}
            for i in range(count)
        ]
        load_rules({"rules": rules})
        for i in range(count):
            journal(f"r{i}", datetime(2026, 3, 1, tzinfo=UTC))
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(CHANGELIST).status_code == 200
        return len(captured.captured_queries)

    assert queries_for(3) == queries_for(40)


# -- adding a rule ----------------------------------------------------------------------


def added(client: Client, name: str, place: str | None = None, **fields: str) -> Any:
    data = {
        "name": name,
        "enabled": "on",
        "responses-TOTAL_FORMS": "1",
        "responses-INITIAL_FORMS": "0",
        "responses-0-position": "0",
        "responses-0-content": f"{name} answers",
        **{f"match_{key}": value for key, value in fields.items()},
    }
    if place is not None:
        data["place"] = place
    response = client.post(ADD, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    return response


def order() -> list[str]:
    return list(Rule.objects.order_by("position").values_list("name", flat=True))


def test_the_add_form_offers_every_place(admin_client: Client, demo: None) -> None:
    form = admin_client.get(ADD).context["adminform"].form
    choices = [value for value, _ in form.fields["place"].choices]
    assert choices[:3] == ["auto", "top", "end"]
    assert choices[3:] == [f"before:{name}" for name in order()]
    assert form.fields["place"].initial == "auto"


def test_a_new_rule_goes_before_the_catch_all_by_default(admin_client: Client, demo: None) -> None:
    response = added(admin_client, "weather", match_contains='"weather"')
    assert order()[-2:] == ["weather", "echo"]
    assert not [m for m in get_messages(response.wsgi_request) if m.level_tag == "warning"]


def test_saving_a_rule_that_would_be_shadowed_warns_naming_the_shadowing_rule(
    admin_client: Client, demo: None
) -> None:
    response = added(admin_client, "weather", place="end", match_contains='"weather"')
    assert order()[-2:] == ["echo", "weather"]
    warnings = [str(m) for m in get_messages(response.wsgi_request) if m.level_tag == "warning"]
    assert warnings == [
        "rule 'weather' (#12) is shadowed by 'echo' (#11): that earlier rule matches every "
        "question this one matches, so this one never answers."
    ]
    assert "shadowed by echo" in cells(admin_client, "status")["weather"]


def test_a_new_rule_can_go_first_or_before_a_named_rule(admin_client: Client, demo: None) -> None:
    added(admin_client, "first", place="top", match_contains='"#first"')
    added(admin_client, "mid", place="before:think", match_contains='"#mid"')
    names = order()
    assert names[0] == "first"
    assert names[names.index("think") - 1] == "mid"


def test_an_upload_dry_run_warns_of_shadowed_rules(admin_client: Client, demo: None) -> None:
    text = MORE.encode()
    upload = {"fixture": SimpleUploadedFile("more.yml", text), "mode": "merge", "dry_run": "on"}
    response = admin_client.post("/admin/staticagents/rule/upload/", upload)
    warnings = response.context["result"].warnings
    # the demo's "error" rule (contains "#error") comes before, and before "broad" too
    assert any(w.startswith("rule 'narrow'") and "by 'error' (#1)" in w for w in warnings)
    assert "narrow" not in order()
