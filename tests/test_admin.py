"""The admin as a curating tool: list, reorder, edit with validation, upload and download."""

from __future__ import annotations

import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from staticagents.document.files import dump_fixture
from staticagents.models import (
    Defaults,
    Fallback,
    Rule,
    RuleResponse,
    RulesetState,
    SessionCounter,
)
from staticagents.replying.snapshot import active_ruleset
from staticagents.selectors import export_document
from tests.conftest import GALAXY_STYLE_FIXTURE

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/staticagents/rule/"
UPLOAD = "/admin/staticagents/rule/upload/"
DOWNLOAD = "/admin/staticagents/rule/download/"
HOSTILE = '<script>alert("owned")</script>'

RULES = """
rules:
  - name: greet
    match: {agent_type: router, query: "(?i)hello"}
    response: {content: "Hello there"}
  - name: rnaseq
    match: {agent_type: router, query: "rna.?seq"}
    response: {content: "Galaxy has several RNA-seq tools. %s"}
  - name: catch-all
    response: {content: "I answer everything"}
  - name: page-help
    enabled: false
    match: {agent_type: page_assistant, contains: "P-17"}
    responses:
      - {content: "first step"}
      - {content: "second step"}
""" % ("Lorem ipsum " * 20)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """admin_client's user gets a password; the default hasher takes most of a second."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def rules(load_rules: Callable[[Any], dict[str, Any]]) -> None:
    load_rules(RULES)


def version() -> int:
    return RulesetState.objects.filter(pk=1).values_list("version", flat=True).first() or 0


def listed(client: Client, query: str = "") -> list[str]:
    response = client.get(f"{CHANGELIST}{query}")
    assert response.status_code == 200
    return [rule.name for rule in response.context["cl"].result_list]


def names_in_order() -> list[str]:
    return list(Rule.objects.order_by("position", "id").values_list("name", flat=True))


def messages_on(client: Client, url: str) -> list[str]:
    return [str(message) for message in client.get(url).context["messages"]]


def change_url(name: str) -> str:
    return reverse("admin:staticagents_rule_change", args=[Rule.objects.get(name=name).pk])


class PostedFields(HTMLParser):
    """The fields a browser posts for the rule form of a page, as the page renders them."""

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, str] = {}
        self.in_form = False
        self.textarea: str | None = None
        self.select: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {key: value or "" for key, value in attrs}
        if tag == "form":
            self.in_form = attr.get("id", "").endswith("_form")
        name = attr.get("name", "")
        if not self.in_form or (not name and tag != "option") or "__prefix__" in name:
            return
        if tag == "input" and attr.get("type") not in ("submit", "button", "file"):
            if attr.get("type") not in ("checkbox", "radio"):
                self.data[name] = attr.get("value", "")
            elif "checked" in attr:
                self.data[name] = attr.get("value", "on")
        elif tag == "textarea":
            self.textarea, self.data[name] = name, ""
        elif tag == "select":
            self.select = name
        elif tag == "option" and self.select and "selected" in attr:
            self.data[self.select] = attr.get("value", "")

    def handle_data(self, data: str) -> None:
        if self.textarea is not None:
            text = self.data[self.textarea] + data
            # A browser drops the one newline that follows <textarea>.
            self.data[self.textarea] = (
                text.removeprefix("\n") if not self.data[self.textarea] else text
            )

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self.textarea = None
        elif tag == "select":
            self.select = None
        elif tag == "form":
            self.in_form = False


def posted_fields(page: Any) -> dict[str, str]:
    parser = PostedFields()
    parser.feed(page.content.decode())
    parser.data.pop("csrfmiddlewaretoken", None)  # the test client skips the check
    return parser.data


def change_form_data(client: Client, url: str) -> dict[str, str]:
    """The change (or add) page's rule form and responses inline, as the browser posts them."""
    page = client.get(url)
    assert page.status_code == 200
    return posted_fields(page)


# -- the list -----------------------------------------------------------------


def test_rules_are_listed_in_their_order_with_what_they_match_preview_and_status(
    admin_client: Client, rules: None
) -> None:
    assert listed(admin_client) == ["greet", "rnaseq", "catch-all", "page-help"]
    html = admin_client.get(CHANGELIST).content.decode()
    assert '<td class="field-matches">agent_type=router · query /(?i)hello/</td>' in html
    assert '<td class="field-matches">everything</td>' in html  # catch-all
    assert "Galaxy has several RNA-seq tools. Lorem ipsum" in html
    assert "Lorem ipsum " * 20 not in html  # the preview is cut short
    assert "first step" in html and "second step" not in html  # the first response only
    assert '<span class="rule-disabled">disabled</span>' in html  # page-help is disabled


def test_rule_list_filters_by_agent_type_and_enabled(admin_client: Client, rules: None) -> None:
    assert listed(admin_client, "?match_agent_type=router") == ["greet", "rnaseq"]
    assert listed(admin_client, "?match_agent_type=page_assistant") == ["page-help"]
    assert listed(admin_client, "?match_agent_type__isnull=True") == ["catch-all"]
    assert listed(admin_client, "?enabled__exact=0") == ["page-help"]
    assert listed(admin_client, "?enabled__exact=1&match_agent_type=router") == ["greet", "rnaseq"]


def test_rule_list_searches_names_patterns_and_content(admin_client: Client, rules: None) -> None:
    assert listed(admin_client, "?q=catch") == ["catch-all"]
    assert listed(admin_client, "?q=rna.%3Fseq") == ["rnaseq"]  # a pattern, as written
    assert listed(admin_client, "?q=P-17") == ["page-help"]  # contains
    assert listed(admin_client, "?q=second+step") == ["page-help"]  # any response's content
    assert listed(admin_client, "?q=answer+everything") == ["catch-all"]
    assert listed(admin_client, "?q=nowhere-at-all") == []


# -- reordering ---------------------------------------------------------------


def test_moving_a_rule_down_swaps_it_with_the_next_and_bumps_the_version(
    admin_client: Client, rules: None
) -> None:
    before = version()
    pk = Rule.objects.get(name="greet").pk
    response = admin_client.post(f"{CHANGELIST}{pk}/move/down/")
    assert response.status_code == 302
    assert response["Location"] == CHANGELIST
    assert names_in_order() == ["rnaseq", "greet", "catch-all", "page-help"]
    assert [r["name"] for r in export_document()["rules"]] == names_in_order()
    assert version() == before + 1


def test_moving_to_the_top_and_bottom_renumbers_every_rule(
    admin_client: Client, rules: None
) -> None:
    admin_client.post(f"{CHANGELIST}{Rule.objects.get(name='page-help').pk}/move/top/")
    admin_client.post(f"{CHANGELIST}{Rule.objects.get(name='greet').pk}/move/bottom/")
    assert names_in_order() == ["page-help", "rnaseq", "catch-all", "greet"]
    positions = list(Rule.objects.order_by("position").values_list("position", flat=True))
    assert positions == [0, 1, 2, 3]


def test_moving_the_first_rule_up_changes_nothing(admin_client: Client, rules: None) -> None:
    before = version()
    admin_client.post(f"{CHANGELIST}{Rule.objects.get(name='greet').pk}/move/up/")
    assert names_in_order() == ["greet", "rnaseq", "catch-all", "page-help"]
    assert version() == before


def test_move_buttons_post_the_list_form_and_return_to_the_same_filtered_list(
    admin_client: Client, rules: None
) -> None:
    html = admin_client.get(f"{CHANGELIST}?match_agent_type=router").content.decode()
    pk = Rule.objects.get(name="rnaseq").pk
    expected = (
        f'formaction="{CHANGELIST}{pk}/move/up/?_changelist_filters=match_agent_type%3Drouter"'
    )
    assert expected in html
    response = admin_client.post(
        f"{CHANGELIST}{pk}/move/up/?_changelist_filters=match_agent_type%3Drouter"
    )
    assert response["Location"] == f"{CHANGELIST}?match_agent_type=router"
    assert names_in_order()[:2] == ["rnaseq", "greet"]
    assert messages_on(admin_client, response["Location"]) == ["“rnaseq” is now rule #1."]


def test_the_first_rule_cannot_move_up_nor_the_last_down(admin_client: Client, rules: None) -> None:
    html = admin_client.get(CHANGELIST).content.decode()
    first, last = (Rule.objects.get(name=n).pk for n in ("greet", "page-help"))
    for pk, direction in [(first, "top"), (first, "up"), (last, "down"), (last, "bottom")]:
        assert re.search(rf'formaction="{CHANGELIST}{pk}/move/{direction}/"[^>]* disabled>', html)
    assert len(re.findall(r" disabled>", html)) == 4


def test_moving_needs_a_post_and_a_known_direction(admin_client: Client, rules: None) -> None:
    pk = Rule.objects.get(name="greet").pk
    assert admin_client.get(f"{CHANGELIST}{pk}/move/down/").status_code == 405
    assert admin_client.post(f"{CHANGELIST}{pk}/move/sideways/").status_code == 404
    assert admin_client.post(f"{CHANGELIST}999999/move/down/").status_code == 404
    assert names_in_order() == ["greet", "rnaseq", "catch-all", "page-help"]


def test_anonymous_users_cannot_move_upload_or_download(client: Client, rules: None) -> None:
    pk = Rule.objects.get(name="greet").pk
    for response in (
        client.post(f"{CHANGELIST}{pk}/move/down/"),
        client.get(UPLOAD),
        client.get(DOWNLOAD),
    ):
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")
    assert names_in_order()[0] == "greet"


# -- editing ------------------------------------------------------------------


def test_an_invalid_query_regex_is_shown_on_the_query_field(
    admin_client: Client, rules: None
) -> None:
    before = version()
    url = change_url("greet")
    data = change_form_data(admin_client, url)
    data["match_query"] = "(unclosed"
    response = admin_client.post(url, data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["match_query"]
    assert "invalid regex" in errors["match_query"][0]
    assert Rule.objects.get(name="greet").match_query == "(?i)hello"
    assert version() == before


def test_a_regex_that_backtracks_exponentially_is_refused_on_its_field(
    admin_client: Client, rules: None
) -> None:
    before = version()
    url = change_url("greet")
    data = change_form_data(admin_client, url)
    data["match_query"] = "(a|a)*$"
    response = admin_client.post(url, data)
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["match_query"]
    assert "backtrack exponentially" in errors["match_query"][0]
    assert errors.as_data()["match_query"][0].code == "schema_slow_regex"
    assert Rule.objects.get(name="greet").match_query == "(?i)hello"
    assert version() == before


def test_an_invalid_context_regex_names_the_context_field(
    admin_client: Client, rules: None
) -> None:
    url = change_url("greet")
    data = change_form_data(admin_client, url)
    data["match_context"] = '{"page_id": "[a-"}'
    errors = admin_client.post(url, data).context["adminform"].form.errors
    assert list(errors) == ["match_context"]
    assert errors["match_context"][0].startswith("page_id: invalid regex")


def test_a_bad_name_and_a_taken_name_are_shown_on_the_name_field(
    admin_client: Client, rules: None
) -> None:
    url = change_url("greet")
    data = change_form_data(admin_client, url)
    data["name"] = "not a slug"
    assert "name" in admin_client.post(url, data).context["adminform"].form.errors
    data["name"] = "rnaseq"
    errors = admin_client.post(url, data).context["adminform"].form.errors
    assert "already exists" in errors["name"][0]


def test_an_invalid_suggestion_is_shown_on_the_responses_suggestions_field(
    admin_client: Client, rules: None
) -> None:
    url = change_url("greet")
    data = change_form_data(admin_client, url)
    data["responses-0-suggestions"] = (
        '[{"action_type": "save_tool", "description": "Save it", "confidence": "high"}]'
    )
    response = admin_client.post(url, data)
    assert response.status_code == 200
    formset = response.context["inline_admin_formsets"][0].formset
    assert list(formset.forms[0].errors) == ["suggestions"]
    assert "save_tool needs parameters.tool_yaml" in formset.forms[0].errors["suggestions"][0]
    assert RuleResponse.objects.get(rule__name="greet").suggestions is None


def test_a_rule_without_any_response_is_refused_with_a_clear_message(
    admin_client: Client, rules: None
) -> None:
    count, before = Rule.objects.count(), version()
    data = change_form_data(admin_client, "/admin/staticagents/rule/add/")
    data["name"] = "silent"
    response = admin_client.post("/admin/staticagents/rule/add/", data)
    assert response.status_code == 200
    errors = response.context["inline_admin_formsets"][0].formset.non_form_errors()
    assert errors == [
        "A rule needs at least one response: fill in at least one field of a response "
        "(its content, for example)."
    ]
    assert "A rule needs at least one response" in response.content.decode()
    assert (Rule.objects.count(), version()) == (count, before)


def test_deleting_a_rules_last_response_is_refused(admin_client: Client, rules: None) -> None:
    url = change_url("greet")
    data = change_form_data(admin_client, url)
    data["responses-0-DELETE"] = "on"
    response = admin_client.post(url, data)
    assert response.status_code == 200
    assert response.context["inline_admin_formsets"][0].formset.non_form_errors()
    assert RuleResponse.objects.filter(rule__name="greet").count() == 1


def test_a_new_rule_goes_before_the_catch_all_with_its_responses_in_order_and_blanks_absent(
    admin_client: Client, rules: None
) -> None:
    before = version()
    data = change_form_data(admin_client, "/admin/staticagents/rule/add/")
    data.update(
        {
            "name": "scripted",
            "match_agent_type": "router",
            "on_exhausted": "error",
            "responses-0-content": "Calling the tool",
            "responses-0-tool_calls": '[{"name": "lookup", "arguments": {"id": 7}}]',
            "responses-TOTAL_FORMS": "2",
            "responses-1-position": "1",
            "responses-1-content": "Done",
        }
    )
    response = admin_client.post("/admin/staticagents/rule/add/", data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert names_in_order() == ["greet", "rnaseq", "scripted", "catch-all", "page-help"]
    exported = export_document()["rules"][2]
    assert exported == {
        "name": "scripted",
        "match": {"agent_type": "router"},
        "responses": [
            {
                "content": "Calling the tool",
                "tool_calls": [{"name": "lookup", "arguments": {"id": 7}}],
            },
            {"content": "Done"},
        ],
        "on_exhausted": "error",
    }
    assert version() == before + 1


def test_removing_a_response_renumbers_the_rest_and_bumps_the_version_once(
    admin_client: Client, rules: None
) -> None:
    before = version()
    url = change_url("page-help")
    data = change_form_data(admin_client, url)
    data["responses-0-DELETE"] = "on"
    assert admin_client.post(url, data).status_code == 302
    rule = Rule.objects.get(name="page-help")
    assert [(r.position, r.content) for r in rule.responses.all()] == [(0, "second step")]
    assert version() == before + 1


def test_response_order_follows_the_order_fields(admin_client: Client, rules: None) -> None:
    url = change_url("page-help")
    data = change_form_data(admin_client, url)
    data["responses-0-position"], data["responses-1-position"] = "5", "0"
    assert admin_client.post(url, data).status_code == 302
    rule = Rule.objects.get(name="page-help")
    assert [(r.position, r.content) for r in rule.responses.all()] == [
        (0, "second step"),
        (1, "first step"),
    ]


def test_responses_added_to_an_existing_rule_go_after_its_responses_in_form_order(
    admin_client: Client, rules: None
) -> None:
    url = change_url("page-help")
    page = admin_client.get(url)
    formset = page.context["inline_admin_formsets"][0].formset
    assert len(formset.forms) == 2  # no blank form: "Add another" copies the empty form
    assert formset.empty_form["position"].value() == 2
    data = change_form_data(admin_client, url)
    data["responses-TOTAL_FORMS"] = "4"
    for index, content in [(2, "third step"), (3, "fourth step")]:
        data[f"responses-{index}-position"] = "2"  # as "Add another" renders it
        data[f"responses-{index}-content"] = content
    assert admin_client.post(url, data).status_code == 302
    rule = Rule.objects.get(name="page-help")
    assert [(r.position, r.content) for r in rule.responses.all()] == [
        (0, "first step"),
        (1, "second step"),
        (2, "third step"),
        (3, "fourth step"),
    ]


def test_editing_a_rule_bumps_the_version_and_changes_the_export(
    admin_client: Client, rules: None
) -> None:
    before = version()
    url = change_url("greet")
    data = change_form_data(admin_client, url)
    data["match_query"] = "(?i)good morning"
    data["responses-0-content"] = "Morning!"
    assert admin_client.post(url, data).status_code == 302
    greet = export_document()["rules"][0]
    assert greet["match"]["query"] == "(?i)good morning"
    assert greet["response"] == {"content": "Morning!"}
    assert version() == before + 1


# -- no lost edits ------------------------------------------------------------


@pytest.fixture
def other_curator(django_user_model: Any) -> Client:
    user = django_user_model.objects.create_superuser("second", "second@example.org", "pw")
    client = Client()
    client.force_login(user)
    return client


def test_a_rule_saved_by_someone_else_since_the_form_opened_is_not_overwritten(
    admin_client: Client, other_curator: Client, rules: None
) -> None:
    url = change_url("greet")
    mine = change_form_data(admin_client, url)
    theirs = change_form_data(other_curator, url)
    theirs["responses-0-content"] = "Theirs"
    assert other_curator.post(url, theirs).status_code == 302
    mine["match_query"] = "(?i)good morning"
    mine["responses-0-content"] = "Mine"
    refused = admin_client.post(url, mine)
    assert refused.status_code == 200
    form = refused.context["adminform"].form
    (error,) = form.non_field_errors()
    assert error.startswith("This was changed by second at ") and "UTC since you opened" in error
    assert escape(error) in refused.content.decode()
    # the curator's input is still on the page; the stored rule is the other one's
    assert form["match_query"].value() == "(?i)good morning"
    formset = refused.context["inline_admin_formsets"][0].formset
    assert formset.forms[0]["content"].value() == "Mine"
    assert export_document()["rules"][0]["response"] == {"content": "Theirs"}
    # saving again, now knowing, overwrites
    assert admin_client.post(url, posted_fields(refused)).status_code == 302
    assert export_document()["rules"][0]["response"] == {"content": "Mine"}


def test_a_rule_saved_twice_by_the_same_curator_in_turn_is_not_refused(
    admin_client: Client, rules: None
) -> None:
    url = change_url("greet")
    first = change_form_data(admin_client, url)
    first["responses-0-content"] = "One"
    assert admin_client.post(url, first).status_code == 302
    second = change_form_data(admin_client, url)
    second["responses-0-content"] = "Two"
    assert admin_client.post(url, second).status_code == 302
    assert export_document()["rules"][0]["response"] == {"content": "Two"}


def test_defaults_changed_by_someone_else_are_not_overwritten(
    admin_client: Client, other_curator: Client
) -> None:
    Defaults.objects.create(pk=1, confidence="low")
    url = "/admin/staticagents/defaults/1/change/"
    mine = change_form_data(admin_client, url)
    theirs = change_form_data(other_curator, url)
    assert other_curator.post(url, {**theirs, "confidence": "high"}).status_code == 302
    refused = admin_client.post(url, {**mine, "confidence": "medium"})
    form = refused.context["adminform"].form
    assert form.non_field_errors()[0].startswith("This was changed by second at ")
    assert form["confidence"].value() == "medium"
    assert Defaults.objects.get(pk=1).confidence == "high"


def test_a_fallback_changed_outside_the_admin_is_not_overwritten(admin_client: Client) -> None:
    from staticagents.services import set_fallback

    Fallback.objects.create(pk=1, content="Sorry")
    url = "/admin/staticagents/fallback/1/change/"
    mine = change_form_data(admin_client, url)
    set_fallback(document={"content": "From a script"})
    refused = admin_client.post(url, {**mine, "content": "Mine"})
    form = refused.context["adminform"].form
    assert form.non_field_errors()[0].startswith("This was changed outside this form")
    assert form["content"].value() == "Mine"
    assert export_document()["fallback"] == {"content": "From a script"}


# -- deleting and bulk actions ------------------------------------------------


def test_deleting_a_rule_bumps_the_version_and_forgets_its_counters(
    admin_client: Client, rules: None
) -> None:
    SessionCounter.objects.create(session="s1", rule="greet", key="seq", count=2)
    SessionCounter.objects.create(session="s1", rule="rnaseq", key="seq", count=1)
    before = version()
    url = change_url("greet").replace("/change/", "/delete/")
    assert admin_client.post(url, {"post": "yes"}).status_code == 302
    assert "greet" not in names_in_order()
    assert version() == before + 1
    assert [rule.position for rule in Rule.objects.all()] == [0, 1, 2]  # no gap left
    assert list(SessionCounter.objects.values_list("rule", flat=True)) == ["rnaseq"]


def test_bulk_delete_removes_rules_responses_and_counters_and_bumps_the_version(
    admin_client: Client, rules: None
) -> None:
    for rule in ("greet", "rnaseq", "catch-all"):
        SessionCounter.objects.create(session="s1", rule=rule, key="seq", count=1)
    before = version()
    ids = [
        str(pk)
        for pk in Rule.objects.filter(match_agent_type="router").values_list("pk", flat=True)
    ]
    response = admin_client.post(
        CHANGELIST, {"action": "delete_selected", "_selected_action": ids, "post": "yes"}
    )
    assert response.status_code == 302
    assert names_in_order() == ["catch-all", "page-help"]
    assert [rule.position for rule in Rule.objects.all()] == [0, 1]
    assert list(SessionCounter.objects.values_list("rule", flat=True)) == ["catch-all"]
    assert not RuleResponse.objects.filter(rule__isnull=True).exists()
    assert RuleResponse.objects.count() == 3
    assert version() == before + 1


def test_bulk_enable_and_disable_bump_the_version(admin_client: Client, rules: None) -> None:
    before = version()
    ids = [str(Rule.objects.get(name="page-help").pk)]
    admin_client.post(CHANGELIST, {"action": "enable_rules", "_selected_action": ids})
    assert Rule.objects.get(name="page-help").enabled
    assert version() == before + 1
    admin_client.post(CHANGELIST, {"action": "disable_rules", "_selected_action": ids})
    assert not Rule.objects.get(name="page-help").enabled
    assert version() == before + 2


# -- defaults and fallback ----------------------------------------------------


@pytest.mark.parametrize("model", ["defaults", "fallback"])
def test_a_singleton_list_leads_to_adding_it_when_absent_and_to_it_when_present(
    admin_client: Client, model: str
) -> None:
    base = f"/admin/staticagents/{model}/"
    response = admin_client.get(base)
    assert response.status_code == 302 and response["Location"] == f"{base}add/"
    field = {"defaults": "confidence", "fallback": "content"}[model]
    data = {field: "high" if model == "defaults" else "No rule matched."}
    response = admin_client.post(f"{base}add/", data)
    assert response.status_code == 302
    assert admin_client.get(base)["Location"] == f"{base}1/change/"
    assert admin_client.get(f"{base}add/").status_code == 403  # at most one row
    document = export_document()
    assert (
        document["defaults"]["confidence"] == "high"
        if model == "defaults"
        else document["fallback"] == {"content": "No rule matched."}
    )


def test_editing_defaults_shows_schema_errors_on_the_stream_field(admin_client: Client) -> None:
    Defaults.objects.create(pk=1, confidence="low")
    before = version()
    response = admin_client.post(
        "/admin/staticagents/defaults/1/change/",
        {"confidence": "high", "stream": '{"word_delay_ms": -5}'},
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["stream"]
    assert errors["stream"][0].startswith("word_delay_ms:")
    assert Defaults.objects.get(pk=1).confidence == "low"
    assert version() == before


def test_chaos_in_the_defaults_is_edited_in_the_admin_and_checked(
    admin_client: Client,
) -> None:
    Defaults.objects.create(pk=1, confidence="low")
    url = "/admin/staticagents/defaults/1/change/"
    response = admin_client.post(url, {"confidence": "low", "chaos": '{"probability": 3}'})
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["chaos"] and errors["chaos"][0].startswith("probability:")
    chaos = '{"probability": 0.2, "kinds": ["disconnect"], "seed": 8}'
    response = admin_client.post(url, {"confidence": "low", "chaos": chaos})
    assert response.status_code == 302
    assert export_document()["defaults"]["chaos"] == {
        "probability": 0.2,
        "kinds": ["disconnect"],
        "seed": 8,
    }
    assert active_ruleset().defaults["chaos"]["seed"] == 8


def test_editing_the_fallback_bumps_the_version_and_checks_its_fields(
    admin_client: Client,
) -> None:
    Fallback.objects.create(pk=1, content="Sorry")
    before = version()
    url = "/admin/staticagents/fallback/1/change/"
    response = admin_client.post(url, {"content": "Sorry", "error": '{"status": 200}'})
    assert list(response.context["adminform"].form.errors) == ["error"]
    response = admin_client.post(url, {"content": "Nothing matched", "metadata": '{"a": 1}'})
    assert response.status_code == 302
    assert export_document()["fallback"] == {"content": "Nothing matched", "metadata": {"a": 1}}
    assert version() == before + 1


@pytest.mark.parametrize("model", ["defaults", "fallback"])
def test_deleting_a_singleton_removes_it_and_bumps_the_version(
    admin_client: Client, model: str
) -> None:
    Defaults.objects.create(pk=1, confidence="low")
    Fallback.objects.create(pk=1, content="Sorry")
    before = version()
    response = admin_client.post(f"/admin/staticagents/{model}/1/delete/", {"post": "yes"})
    assert response.status_code == 302
    rows = Defaults.objects.all() if model == "defaults" else Fallback.objects.all()
    assert not rows.exists()
    assert version() == before + 1


# -- upload and download ------------------------------------------------------


def upload(client: Client, text: str | bytes, name: str = "rules.yml", **options: str) -> Any:
    content = text.encode() if isinstance(text, str) else text
    data = {"fixture": SimpleUploadedFile(name, content), "mode": "merge", **options}
    return client.post(UPLOAD, data)


def run_kept(client: Client, page: Any) -> Any:
    """Submit the form of a dry run or confirmation page, as the browser would."""
    context = page.context
    data = {"mode": context["mode"], "staged": context["staged"]}
    if context["mode"] == "replace":
        data["confirm"] = "True"
    return client.post(UPLOAD, data)


def replace(client: Client, text: str | bytes, name: str = "rules.yml") -> Any:
    """Upload in Replace mode and confirm on the page that lists the deletions."""
    page = upload(client, text, name=name, mode="replace")
    assert page.status_code == 200 and page.context["confirming"], page
    return run_kept(client, page)


NEW_RULES = """
defaults: {confidence: low}
rules:
  - name: greet
    match: {query: "(?i)hey"}
    response: {content: "Hey!"}
  - name: brand-new
    response: {content: "New"}
fallback: {content: "Nothing matched"}
"""


def test_the_rule_list_links_to_upload_and_download(admin_client: Client) -> None:
    html = admin_client.get(CHANGELIST).content.decode()
    assert f'href="{UPLOAD}"' in html and f'href="{DOWNLOAD}"' in html
    page = admin_client.get(UPLOAD).content.decode()
    assert 'enctype="multipart/form-data"' in page
    assert 'value="merge"' in page and 'name="dry_run"' in page


def test_uploading_a_fixture_replaces_the_rules(admin_client: Client, rules: None) -> None:
    before = version()
    response = replace(admin_client, NEW_RULES)
    assert response.status_code == 302 and response["Location"] == CHANGELIST
    assert names_in_order() == ["greet", "brand-new"]
    assert export_document()["fallback"] == {"content": "Nothing matched"}
    assert Defaults.objects.get(pk=1).confidence == "low"
    assert version() == before + 1
    assert messages_on(admin_client, CHANGELIST) == [
        "Uploaded rules.yml (replace): imported: 1 rule(s) created, 1 updated, 3 deleted."
    ]


def test_uploading_with_merge_updates_by_name_and_places_new_rules_as_the_file_does(
    admin_client: Client, rules: None
) -> None:
    assert upload(admin_client, NEW_RULES, mode="merge").status_code == 302
    # brand-new follows greet in the file, so it follows greet here too
    assert names_in_order() == ["greet", "brand-new", "rnaseq", "catch-all", "page-help"]
    assert export_document()["rules"][0] == {
        "name": "greet",
        "match": {"query": "(?i)hey"},
        "response": {"content": "Hey!"},
    }


def test_the_upload_form_defaults_to_merge(admin_client: Client) -> None:
    form = admin_client.get(UPLOAD).context["form"]
    assert form["mode"].value() == "merge"
    html = admin_client.get(UPLOAD).content.decode()
    assert re.search(r'<input type="radio" name="mode" value="merge"[^>]* checked>', html)
    assert not re.search(r'<input type="radio" name="mode" value="replace"[^>]* checked>', html)


def test_replace_asks_for_confirmation_naming_the_rules_it_deletes(
    admin_client: Client, rules: None
) -> None:
    before_doc, before_version = export_document(), version()
    page = upload(admin_client, NEW_RULES, mode="replace")
    assert page.status_code == 200 and page.context["confirming"]
    assert export_document() == before_doc and version() == before_version
    html = page.content.decode()
    assert "Replace the rules with rules.yml?" in html
    deleted = page.context["result"].deleted_names
    assert deleted == ("rnaseq", "catch-all", "page-help")
    for name in deleted:
        assert f"<li>{name}</li>" in html
    assert 'name="staged"' in html and 'name="confirm" value="True"' in html
    # Without the confirmation the page is shown again and nothing changes.
    again = admin_client.post(UPLOAD, {"mode": "replace", "staged": page.context["staged"]})
    assert again.status_code == 200 and export_document() == before_doc
    assert run_kept(admin_client, page).status_code == 302
    assert names_in_order() == ["greet", "brand-new"]


def test_a_dry_run_lists_rules_by_name_changes_nothing_and_keeps_the_file_and_mode(
    admin_client: Client, rules: None
) -> None:
    before_doc, before_version = export_document(), version()
    page = upload(admin_client, NEW_RULES, mode="replace", dry_run="on")
    assert page.status_code == 200 and not page.context["confirming"]
    assert export_document() == before_doc
    assert version() == before_version
    html = page.content.decode()
    assert (
        "rules.yml (replace): would import: 1 rule(s) created, 1 updated, 3 deleted. "
        "Nothing changed." in html
    )
    result = page.context["result"]
    assert result.created_names == ("brand-new",)
    assert result.updated_names == ("greet",)
    assert result.deleted_names == ("rnaseq", "catch-all", "page-help")
    assert '<input type="hidden" name="mode" value="replace">' in html
    # The real run needs no file: the page kept it.
    response = run_kept(admin_client, page)
    assert response.status_code == 302 and response["Location"] == CHANGELIST
    assert names_in_order() == ["greet", "brand-new"]
    assert version() == before_version + 1


def test_a_merge_dry_run_lists_added_and_changed_rules_and_shadowing_warnings(
    admin_client: Client, rules: None
) -> None:
    text = """
rules:
  - name: greet
    match: {query: "(?i)hey"}
    response: {content: "Hey!"}
  - name: catch-all
    response: {content: "Anything"}
  - name: late
    match: {query: "late"}
    response: {content: "Never"}
"""
    page = upload(admin_client, text, dry_run="on")
    result = page.context["result"]
    assert result.created_names == ("late",)
    assert result.updated_names == ("greet", "catch-all")
    assert result.deleted_names == ()
    html = page.content.decode()
    assert result.warnings and any("late" in w for w in result.warnings)
    assert all(escape(w) in html for w in result.warnings)
    assert "Rules deleted" not in html
    assert run_kept(admin_client, page).status_code == 302
    assert "late" in names_in_order()


def test_an_altered_kept_file_is_refused_and_changes_nothing(
    admin_client: Client, rules: None
) -> None:
    page = upload(admin_client, NEW_RULES, mode="replace", dry_run="on")
    token = page.context["staged"]
    before_doc = export_document()
    forged = admin_client.post(
        UPLOAD, {"mode": "replace", "confirm": "True", "staged": token[:-3] + "abc"}
    )
    assert forged.status_code == 200
    assert forged.context["form"].errors["fixture"] == [
        "The kept file has expired or was altered: choose the file again."
    ]
    assert export_document() == before_doc


def test_a_file_too_large_to_keep_is_asked_for_again(
    admin_client: Client, rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from staticagents import forms as admin_forms

    monkeypatch.setattr(admin_forms, "MAX_STAGED_BYTES", 10)
    page = upload(admin_client, NEW_RULES, dry_run="on")
    html = page.content.decode()
    assert page.context["staged"] == "" and 'name="staged"' not in html
    assert '<input type="file" name="fixture" required>' in html


BROKEN = """rules:
  - name: ok
    response: {content: fine}
  - name: bad
    match:
      query: "(unclosed"
      querry: typo
    response: {confidence: certain}
"""


def test_an_invalid_fixture_lists_every_error_with_path_and_line_and_changes_nothing(
    admin_client: Client, rules: None
) -> None:
    before_doc, before_version = export_document(), version()
    response = upload(admin_client, BROKEN, name="broken.yml")
    assert response.status_code == 200
    errors = response.context["form"].errors["fixture"]
    assert len(errors) == 3
    assert any(e.startswith("broken.yml:6: rules[1].match.query: invalid regex") for e in errors)
    assert "broken.yml:7: rules[1].match.querry: unknown key (did you mean 'query'?)" in errors
    assert any(e.startswith("broken.yml:8: rules[1].response.confidence:") for e in errors)
    html = response.content.decode()
    assert "broken.yml:7: rules[1].match.querry: unknown key" in html
    assert export_document() == before_doc and version() == before_version


def test_an_upload_with_a_repeated_key_or_a_date_is_refused_with_their_lines(
    admin_client: Client, rules: None
) -> None:
    before_doc = export_document()
    text = (
        "rules:\n"
        "  - name: twice\n"
        "    match: {query: hello}\n"
        "    match: {query: bye}\n"
        "    response: {metadata: {released: 2024-05-01}}\n"
    )
    response = upload(admin_client, text, name="twice.yml")
    errors = response.context["form"].errors["fixture"]
    assert [e.split(": ")[0] for e in errors] == ["twice.yml:4", "twice.yml:5"], errors
    assert "rules[0].match: duplicate key 'match' (first at line 3)" in errors[0]
    assert "rules[0].response.metadata.released: is a date" in errors[1]
    assert export_document() == before_doc


def test_upload_errors_match_the_import_command(
    admin_client: Client, rules: None, tmp_path: Any
) -> None:
    from django.core.management import CommandError, call_command

    path = tmp_path / "broken.yml"
    path.write_text(BROKEN)
    with pytest.raises(CommandError) as raised:
        call_command("import_fixture", str(path))
    command_lines = str(raised.value).replace(str(path), "broken.yml").split("\n")
    errors = upload(admin_client, BROKEN, name="broken.yml").context["form"].errors["fixture"]
    assert list(errors) == command_lines


def test_yaml_syntax_errors_and_non_utf8_files_are_reported(
    admin_client: Client, rules: None
) -> None:
    errors = upload(admin_client, "rules:\n  - name: [x\n", name="s.yml").context["form"].errors
    assert errors["fixture"][0].startswith("s.yml:3: invalid YAML")
    errors = upload(admin_client, b"\xff\xfe", name="b.yml").context["form"].errors
    assert errors["fixture"] == ["b.yml: not UTF-8: byte 0xff at offset 0"]
    errors = upload(admin_client, b"", name="e.yml").context["form"].errors
    assert errors["fixture"] == ["The submitted file is empty."]
    assert names_in_order() == ["greet", "rnaseq", "catch-all", "page-help"]


def assert_uploads_unchanged(admin_client: Client, fixture: Path) -> None:
    response = replace(admin_client, fixture.read_bytes(), name="static_agents.yml")
    assert response.status_code == 302
    assert Rule.objects.count() == len(yaml.safe_load(fixture.read_text())["rules"])


def test_a_galaxy_style_fixture_uploads_unchanged(admin_client: Client) -> None:
    assert_uploads_unchanged(admin_client, GALAXY_STYLE_FIXTURE)


def test_galaxys_own_fixture_uploads_unchanged(admin_client: Client, galaxy_fixture: Path) -> None:
    assert_uploads_unchanged(admin_client, galaxy_fixture)


def test_download_is_the_current_fixture_and_round_trips(admin_client: Client, rules: None) -> None:
    response = admin_client.get(DOWNLOAD)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/yaml; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="static_agents.yml"'
    first = response.content
    assert first.decode() == dump_fixture(export_document())
    assert replace(admin_client, first, name="static_agents.yml").status_code == 302
    assert admin_client.get(DOWNLOAD).content == first


# -- hostile HTML -------------------------------------------------------------


def test_hostile_html_in_rules_is_shown_escaped(
    admin_client: Client, load_rules: Callable[[Any], dict[str, Any]]
) -> None:
    load_rules(
        {
            "rules": [
                {
                    "name": "hostile",
                    "match": {"agent_type": HOSTILE, "query": HOSTILE},
                    "response": {
                        "content": HOSTILE,
                        "metadata": {HOSTILE: HOSTILE},
                        "reasoning": HOSTILE,
                    },
                }
            ],
            "fallback": {"content": HOSTILE},
        }
    )
    escaped = "&lt;script&gt;alert("
    pages = [
        CHANGELIST,
        f"{CHANGELIST}?q=script",
        change_url("hostile"),
        "/admin/staticagents/fallback/1/change/",
    ]
    for url in pages:
        html = admin_client.get(url).content.decode()
        assert "<script>alert(" not in html, url
        assert escaped in html, url
    response = upload(admin_client, f"rules:\n  - name: x\n    {HOSTILE}: 1\n", name="h.yml")
    html = response.content.decode()
    assert "<script>alert(" not in html and escaped in html


def test_hostile_html_in_the_uploaded_file_name_is_escaped(
    admin_client: Client, rules: None
) -> None:
    response = upload(
        admin_client, NEW_RULES, name="<img src=x onerror=alert(1)>.yml", dry_run="on"
    )
    html = response.content.decode()
    assert "<img src=x" not in html and "&lt;img src=x" in html
