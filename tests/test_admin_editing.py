"""Editing that fits the data: literals per line, JSON errors with their position, tool
calls and suggestions typed in rows, and an error banner that links the first field in error."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from staticagents.fields import LiteralsField, parse_json, suggestions_field, tool_calls_field
from staticagents.models import Rule, RuleResponse
from staticagents.selectors import export_document
from tests.test_admin import change_form_data, change_url, posted_fields

RULES = """
rules:
  - name: greet
    match: {agent_type: router, contains: "hello"}
    response: {content: "Hello there"}
  - name: two-words
    match: {contains: ["disk", "full"]}
    response:
      tool_calls: [{name: lookup, arguments: {topic: disk}}, {name: notify}]
  - name: one-in-a-list
    match: {contains: ["alone"]}
    response:
      tool_calls: [{name: lookup, id: call-7}]
"""
SUGGESTIONS = [
    {
        "action_type": "tool_run",
        "description": "Run the aligner",
        "confidence": "high",
        "priority": 2,
        "parameters": {"tool_id": "bowtie2"},
    },
    {"action_type": "documentation", "description": "Read the guide", "confidence": "low"},
]


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def rules(load_rules: Callable[[Any], dict[str, Any]]) -> None:
    load_rules(RULES)


def read_literals(text: str) -> Any:
    return LiteralsField(required=False).clean(text)


# -- contains ---------------------------------------------------------------------------


def test_contains_reads_a_plain_string_as_one_literal() -> None:
    assert read_literals("segfault") == "segfault"
    assert read_literals("  [ERROR] disk  ") == "[ERROR] disk"


def test_contains_reads_one_literal_per_line_ignoring_blank_lines_and_spaces() -> None:
    assert read_literals("disk\r\n  full \r\n\r\n") == ["disk", "full"]


def test_contains_still_reads_a_json_list_or_string() -> None:
    assert read_literals('["disk", "full"]') == ["disk", "full"]
    assert read_literals('["alone"]') == ["alone"]
    assert read_literals('"weather"') == "weather"


def test_contains_nested_too_deeply_as_a_json_list_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        read_literals('["' + "[" * 100_000)
    assert caught.value.messages[0].startswith("line 1, column ")
    with pytest.raises(ValidationError, match="nested too deeply"):
        read_literals('["a", ' + "[" * 100_000 + "]" * 100_000 + "]")


def test_contains_blank_is_absent() -> None:
    assert read_literals(" \n ") is None


def test_contains_that_starts_as_a_json_list_reports_where_it_breaks() -> None:
    with pytest.raises(ValidationError) as caught:
        read_literals('["disk",\n "full"')
    assert caught.value.messages == ["line 2, column 8: Expecting ',' delimiter"]


def test_contains_is_shown_so_that_saving_it_unchanged_keeps_the_same_value() -> None:
    field = LiteralsField(required=False)
    for stored in ("segfault", ["disk", "full"], ["alone"], '"quoted"', "two\nlines", " pad"):
        shown = field.prepare_value(stored)
        assert field.clean(shown) == stored, (stored, shown)
    assert field.prepare_value(["disk", "full"]) == "disk\nfull"
    assert field.prepare_value(["alone"]) == '["alone"]'


def test_a_plain_contains_typed_in_the_admin_is_saved_as_a_literal(
    admin_client: Client, rules: None
) -> None:
    url = change_url("greet")
    data = change_form_data(admin_client, url)
    data["match_contains"] = "segfault"
    assert admin_client.post(url, data).status_code == 302
    assert Rule.objects.get(name="greet").match_contains == "segfault"
    data = change_form_data(admin_client, url) | {"match_contains": "disk\r\nfull"}
    assert admin_client.post(url, data).status_code == 302
    assert Rule.objects.get(name="greet").match_contains == ["disk", "full"]
    assert change_form_data(admin_client, url)["match_contains"] == "disk\nfull"


def test_an_empty_json_list_in_contains_is_refused_by_the_schema(
    admin_client: Client, rules: None
) -> None:
    url = change_url("greet")
    response = admin_client.post(
        url, change_form_data(admin_client, url) | {"match_contains": "[]"}
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["match_contains"]
    assert "non-empty string or a list of non-empty strings" in errors[0]


# -- JSON fields ------------------------------------------------------------------------


def test_a_json_syntax_error_names_its_line_and_column() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_json('[\n  {"name": "x",\n   "arguments": {}}\n  {"name": "y"}\n]')
    assert caught.value.messages == ["line 4, column 3: Expecting ',' delimiter"]


def test_a_json_field_in_the_admin_shows_the_syntax_error_position_and_keeps_the_input(
    admin_client: Client, rules: None
) -> None:
    url = change_url("greet")
    typed = '{\n  "page": ".",\n  "user" "x"\n}'
    response = admin_client.post(
        url, change_form_data(admin_client, url) | {"match_context": typed}
    )
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["match_context"] == ["line 3, column 10: Expecting ':' delimiter"]
    assert form["match_context"].value() == typed
    assert Rule.objects.get(name="greet").match_context is None


def test_json_fields_and_contains_use_a_monospace_textarea(
    admin_client: Client, rules: None
) -> None:
    page = admin_client.get(change_url("greet")).content.decode()
    for field in ("match_contains", "match_context", "match_tool_result", "responses-0-metadata"):
        tag = re.search(rf'<textarea[^>]*id="id_{field}"[^>]*>', page)
        assert tag is not None and 'class="vLargeTextField code"' in tag[0], field
    assert '<link href="/static/staticagents/edit.css"' in page


# -- tool calls and suggestions in rows -------------------------------------------------


def tool_call_rows(rows: list[tuple[str, str]]) -> dict[str, str]:
    data = {"responses-0-tool_calls": ""}
    for index, (name, arguments) in enumerate(rows):
        data[f"responses-0-tool_calls-{index}-name"] = name
        data[f"responses-0-tool_calls-{index}-arguments"] = arguments
    return data


def saved_tool_calls(client: Client, name: str, typed: dict[str, str]) -> Any:
    url = change_url(name)
    data = {
        key: value
        for key, value in change_form_data(client, url).items()
        if not key.startswith("responses-0-tool_calls")
    }
    response = client.post(url, data | typed)
    assert response.status_code == 302, response.context["inline_admin_formsets"][0].formset.errors
    return RuleResponse.objects.get(rule__name=name).tool_calls


def test_tool_calls_typed_in_rows_are_stored_as_the_same_json_would_be(
    admin_client: Client, rules: None
) -> None:
    as_json = '[{"name": "lookup", "arguments": {"topic": "rain", "days": 3}}, {"name": "notify"}]'
    from_json = saved_tool_calls(admin_client, "greet", {"responses-0-tool_calls": as_json})
    from_rows = saved_tool_calls(
        admin_client,
        "greet",
        tool_call_rows([("lookup", '{"topic": "rain", "days": 3}'), ("notify", ""), ("", "")]),
    )
    assert (
        from_rows
        == from_json
        == [
            {"name": "lookup", "arguments": {"topic": "rain", "days": 3}},
            {"name": "notify"},
        ]
    )
    assert export_document()["rules"][0]["response"]["tool_calls"] == from_json


def test_stored_tool_calls_are_shown_in_rows_and_saved_unchanged(
    admin_client: Client, rules: None
) -> None:
    before = export_document()
    data = change_form_data(admin_client, change_url("two-words"))
    assert data["responses-0-tool_calls-0-name"] == "lookup"
    assert data["responses-0-tool_calls-0-arguments"] == '{"topic": "disk"}'
    assert data["responses-0-tool_calls-1-name"] == "notify"
    assert data["responses-0-tool_calls-1-arguments"] == ""
    assert data["responses-0-tool_calls-2-name"] == ""  # the blank row that adds one
    assert data["responses-0-tool_calls"] == ""
    assert data["match_contains"] == "disk\nfull"
    assert admin_client.post(change_url("two-words"), data).status_code == 302
    assert export_document() == before


def test_a_tool_call_the_rows_cannot_hold_is_shown_and_kept_as_json(
    admin_client: Client, rules: None
) -> None:
    data = change_form_data(admin_client, change_url("one-in-a-list"))
    assert data["responses-0-tool_calls-0-name"] == ""
    assert data["responses-0-tool_calls"].replace(" ", "").replace("\n", "") == (
        '[{"name":"lookup","id":"call-7"}]'
    )
    before = export_document()
    assert admin_client.post(change_url("one-in-a-list"), data).status_code == 302
    assert export_document() == before


def test_rows_and_json_together_are_refused(admin_client: Client, rules: None) -> None:
    url = change_url("greet")
    typed = tool_call_rows([("lookup", "")])
    typed["responses-0-tool_calls"] = '[{"name": "other"}]'
    response = admin_client.post(url, change_form_data(admin_client, url) | typed)
    errors = response.context["inline_admin_formsets"][0].formset.forms[0].errors
    assert errors["tool_calls"] == ["Give the tool calls in the rows or as JSON, not both."]


def test_a_rows_arguments_syntax_error_names_the_row_and_position(
    admin_client: Client, rules: None
) -> None:
    url = change_url("greet")
    typed = tool_call_rows([("lookup", '{"topic": "rain"}'), ("notify", '{"to" "ops"}')])
    response = admin_client.post(url, change_form_data(admin_client, url) | typed)
    assert response.status_code == 200
    form = response.context["inline_admin_formsets"][0].formset.forms[0]
    assert form.errors["tool_calls"] == [
        "tool call 2, arguments: line 1, column 7: Expecting ':' delimiter"
    ]
    # what was typed is on the page again
    again = posted_fields(response)
    assert again["responses-0-tool_calls-1-arguments"] == '{"to" "ops"}'
    assert RuleResponse.objects.get(rule__name="greet").tool_calls is None


def test_rows_go_through_the_fixture_schema(admin_client: Client, rules: None) -> None:
    url = change_url("greet")
    typed = tool_call_rows([("", '{"topic": "rain"}')])  # arguments without a name
    response = admin_client.post(url, change_form_data(admin_client, url) | typed)
    form = response.context["inline_admin_formsets"][0].formset.forms[0]
    assert form.errors["tool_calls"][0].startswith("[0].name: ")


def suggestion_rows(suggestions: list[dict[str, Any]]) -> dict[str, str]:
    data = {"responses-0-suggestions": ""}
    for index, suggestion in enumerate(suggestions):
        for key in ("action_type", "description", "confidence", "priority", "parameters"):
            value = suggestion.get(key, "")
            text = value if isinstance(value, str) else str(value)
            if key == "parameters" and value:
                text = json.dumps(value)
            data[f"responses-0-suggestions-{index}-{key}"] = text
    return data


def test_suggestions_typed_in_rows_are_stored_as_the_same_json_would_be(
    admin_client: Client, rules: None
) -> None:
    url = change_url("greet")

    def page() -> dict[str, str]:  # read again after each save: it carries the edit stamp
        return {
            key: value
            for key, value in change_form_data(admin_client, url).items()
            if not key.startswith("responses-0-suggestions")
        }

    as_json = {"responses-0-suggestions": json.dumps(SUGGESTIONS)}
    assert admin_client.post(url, page() | as_json).status_code == 302
    from_json = RuleResponse.objects.get(rule__name="greet").suggestions
    assert admin_client.post(url, page() | suggestion_rows(SUGGESTIONS)).status_code == 302
    from_rows = RuleResponse.objects.get(rule__name="greet").suggestions
    assert from_rows == from_json == SUGGESTIONS
    shown = change_form_data(admin_client, url)
    assert shown["responses-0-suggestions-0-action_type"] == "tool_run"
    assert shown["responses-0-suggestions-0-priority"] == "2"
    assert shown["responses-0-suggestions-1-confidence"] == "low"


def test_a_suggestion_missing_its_parameter_is_refused_by_the_schema(
    admin_client: Client, rules: None
) -> None:
    url = change_url("greet")
    typed = suggestion_rows([{**SUGGESTIONS[0], "parameters": {}}])
    response = admin_client.post(url, change_form_data(admin_client, url) | typed)
    form = response.context["inline_admin_formsets"][0].formset.forms[0]
    assert "tool_run needs parameters.tool_id" in form.errors["suggestions"][0]


def test_items_fields_read_blank_as_absent_and_report_a_bad_priority() -> None:
    calls = tool_calls_field()
    assert calls.clean(calls.widget.value_from_datadict({}, {}, "tool_calls")) is None
    suggestions = suggestions_field()
    typed = suggestions.widget.value_from_datadict(
        {"s-0-action_type": "documentation", "s-0-priority": "high"}, {}, "s"
    )
    with pytest.raises(ValidationError) as caught:
        suggestions.clean(typed)
    assert caught.value.messages == ["suggestion 1, priority: enter a whole number"]


# -- the error banner -------------------------------------------------------------------


def banner(response: Any) -> str:
    found = re.search(r'<p class="errornote">(.*?)</p>', response.content.decode(), re.S)
    assert found is not None
    return found[1].strip()


def test_the_error_banner_links_the_first_field_in_error(admin_client: Client, rules: None) -> None:
    url = change_url("greet")
    data = change_form_data(admin_client, url)
    data |= {"match_context": "{", "match_query": "(", "responses-0-metadata": "["}
    response = admin_client.post(url, data)
    assert banner(response) == (
        "Please correct the errors below; the first is in "
        '<a href="#id_match_query" class="first-error">Query regex</a>.'
    )
    assert response.content.decode().count('class="errornote"') == 1
    assert 'id="id_match_query"' in response.content.decode()


def test_the_error_banner_links_a_field_of_a_response(admin_client: Client, rules: None) -> None:
    url = change_url("greet")
    typed = tool_call_rows([("lookup", "{")])
    response = admin_client.post(url, change_form_data(admin_client, url) | typed)
    assert banner(response) == (
        "Please correct the error below; the first is in "
        '<a href="#id_responses-0-tool_calls" class="first-error">Tool calls of response 1</a>.'
    )
    assert '<div class="items-editor" id="id_responses-0-tool_calls">' in (
        response.content.decode()
    )


def test_an_error_of_no_field_is_shown_under_the_banner(admin_client: Client, rules: None) -> None:
    url = change_url("greet")
    data = change_form_data(admin_client, url)
    data["responses-0-DELETE"] = "on"
    response = admin_client.post(url, data)
    assert banner(response) == (
        "Please correct the error below; the first is in "
        '<a href="#responses-group" class="first-error">'
        "Responses (sent in position order, one per match)</a>."
    )


def test_json_nested_too_deeply_is_a_clear_error_not_a_crash(
    admin_client: Client, rules: None
) -> None:
    url = change_url("greet")
    deep = "[" * 100_000 + "]" * 100_000
    data = change_form_data(admin_client, url)
    data |= {"match_context": deep, "responses-0-tool_calls": deep}
    response = admin_client.post(url, data)
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert form.errors["match_context"] == ["nested too deeply"]
    inline = response.context["inline_admin_formsets"][0].formset.forms[0]
    assert inline.errors["tool_calls"] == ["nested too deeply"]
