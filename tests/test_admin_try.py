"""The admin's Try-it page: which rule answers, its reply, and why the earlier rules did not."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from staticagents.models import JournalEntry, Rule, SessionCounter

pytestmark = pytest.mark.django_db

TRY = "/admin/staticagents/rule/try/"
RULES = """
rules:
  - name: greet
    match: {agent_type: router, query: "(?i)^hello"}
    response: {content: "Hello **there**"}
  - name: for-gemini
    match: {dialect: gemini, contains: "#weather", system: "(?i)be terse"}
    response:
      tool_calls: [{name: forecast, arguments: {city: Paris}}]
  - name: on-page
    match: {agent_type: page_assistant, context: {page_id: "^p-17$"}}
    responses:
      - {content: "first step"}
      - {content: "second step"}
  - name: echo
    match: {contains: "#echo"}
    response: {template: true, content: "$query"}
fallback: {content: "Nothing matched."}
"""


@pytest.fixture(autouse=True)
def rules(load_rules: Callable[[Any], Any], settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    load_rules(RULES)


def tried(client: Client, **values: Any) -> Any:
    response = client.get(TRY, {"agent_type": "router", "dialect": "openai", "turn": 1, **values})
    assert response.status_code == 200
    return response


def test_the_answering_rule_its_rendered_reply_and_every_earlier_refusal_are_shown(
    admin_client: Client,
) -> None:
    response = tried(admin_client, query="#echo please", dialect="responses")
    trial = response.context["trial"]
    assert trial.rule == "echo"
    assert [(v.rule, v.predicate) for v in trial.refused] == [
        ("greet", "query"),
        ("for-gemini", "contains"),
        ("on-page", "agent_type"),
    ]
    page = response.content.decode()
    assert "query does not contain &#x27;#weather&#x27;" in page
    assert re.search(r'Answered by rule <a href="/admin/staticagents/rule/\d+/change/">echo', page)


def test_markdown_is_previewed_as_html(admin_client: Client) -> None:
    page = tried(admin_client, query="hello you").content.decode()
    assert '<div class="try-preview" id="try-preview"><p>Hello <strong>there</strong></p>' in page


def test_html_and_script_links_in_a_reply_are_shown_as_text(admin_client: Client) -> None:
    hostile = '#echo <script>alert("x")</script> [click](javascript:alert(1))'
    page = tried(admin_client, query=hostile).content.decode()
    preview = page.split('id="try-preview">', 1)[1].split("</div>", 1)[0]
    assert "&lt;script&gt;alert" in preview
    assert "<script>alert" not in page
    assert 'href="javascript' not in page


def test_every_dialect_is_offered_and_a_gemini_tool_call_is_shown(admin_client: Client) -> None:
    response = tried(admin_client, query="#weather now", dialect="gemini", system="Be terse.")
    choices = [value for value, _ in response.context["form"].fields["dialect"].choices]
    assert {"responses", "gemini", "embeddings", "openai", "anthropic"} <= set(choices)
    trial = response.context["trial"]
    assert trial.rule == "for-gemini"
    assert "&quot;city&quot;: &quot;Paris&quot;" in response.content.decode()


def test_no_rule_answering_shows_the_fallback(admin_client: Client) -> None:
    response = tried(admin_client, query="nothing here")
    assert response.context["trial"].rule is None
    page = response.content.decode()
    assert "No rule answers: the fallback replies." in page
    assert "Nothing matched." in page


def test_context_json_errors_name_line_and_column_and_nothing_is_tried(
    admin_client: Client,
) -> None:
    response = tried(admin_client, query="x", context='{"page_id":\n  p-17}')
    assert response.context["trial"] is None
    assert response.context["form"].errors["context"] == ["line 2, column 3: Expecting value"]
    response = tried(admin_client, query="x", context="[1]")
    assert response.context["form"].errors["context"] == ["must be a JSON object"]
    response = tried(admin_client, query="x", context="[" * 50_000 + "]" * 50_000)
    assert response.context["form"].errors["context"] == ["nested too deeply"]


def test_trying_moves_no_script_and_records_nothing(admin_client: Client) -> None:
    for _ in range(2):
        response = tried(
            admin_client, query="help", agent_type="page_assistant", context='{"page_id": "p-17"}'
        )
        assert response.context["trial"].reply.content == "first step"
    assert "It scripts 2 responses" in response.content.decode()
    assert not JournalEntry.objects.exists() and not SessionCounter.objects.exists()


def test_without_a_question_the_form_is_shown_empty(admin_client: Client) -> None:
    response = admin_client.get(TRY)
    assert response.status_code == 200
    assert response.context["trial"] is None and not response.context["form"].is_bound


def test_the_rule_list_links_the_page(admin_client: Client) -> None:
    page = admin_client.get("/admin/staticagents/rule/").content.decode()
    assert f'href="{TRY}" class="try-rule"' in page


@pytest.mark.parametrize("name", ["greet", "for-gemini", "on-page", "echo"])
def test_each_rules_page_links_a_question_that_it_answers(admin_client: Client, name: str) -> None:
    rule = Rule.objects.get(name=name)
    page = admin_client.get(f"/admin/staticagents/rule/{rule.pk}/change/").content.decode()
    [link] = re.findall(r'href="([^"]+)" class="try-rule"', page)
    assert link.startswith(TRY + "?")
    response = admin_client.get(link.replace("&amp;", "&"))
    assert response.context["trial"].rule == name


def test_a_user_without_view_permission_is_refused(client: Client) -> None:
    User.objects.create_user("clerk", password="pw", is_staff=True)
    client.login(username="clerk", password="pw")
    assert client.get(TRY, {"query": "hello"}).status_code == 403
