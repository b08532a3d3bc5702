"""record_exchange: a rule where it answers, one per exchange, nothing secret; reviewed in
the admin and the control API."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import yaml
from django.test import Client

from staticagents.core.inquiry import Inquiry
from staticagents.document.files import dump_fixture, load_fixture
from staticagents.document.terms import DocumentInvalid
from staticagents.models import Rule, RulesetState
from staticagents.recording import Exchange, RecordedReply, record_exchange
from staticagents.selectors import export_document, stored_rule
from staticagents.services import accept_recorded_rules, import_fixture

CHANGELIST = "/admin/staticagents/rule/"
RULES = {
    "rules": [
        {"name": "weather", "match": {"contains": "weather"}, "response": {"content": "Sunny"}},
        {"name": "echo", "response": {"template": True, "content": "$query"}},
    ]
}
KEY = "sk-proj-" + "Zq9" * 10


def version() -> int:
    return RulesetState.objects.get(pk=1).version


def order() -> list[str]:
    return list(Rule.objects.order_by("position").values_list("name", flat=True))


def exchange(
    query: str = "Capital of France?", content: str = "Paris.", **inquiry: Any
) -> Exchange:
    return Exchange(
        upstream="real",
        inquiry=Inquiry(query=query, **inquiry),
        reply=RecordedReply(content, finish_reason="stop"),
    )


@pytest.fixture
def rules(load_rules: Callable[[Any], Any]) -> None:
    load_rules(RULES)


@pytest.mark.django_db
def test_a_recorded_exchange_becomes_one_rule_before_the_catch_all(rules: None) -> None:
    before = version()
    name = record_exchange(exchange())

    assert name is not None and name.startswith("real-")
    assert order() == ["weather", name, "echo"]
    assert version() == before + 1
    rule = stored_rule(name)
    assert rule is not None
    assert rule["response"] == {"content": "Paris.", "finish_reason": "stop"}
    assert rule["recorded"]["upstream"] == "real" and rule["recorded"]["reviewed"] is False


@pytest.mark.django_db
def test_the_same_exchange_recorded_again_updates_its_rule(rules: None) -> None:
    name = record_exchange(exchange())
    assert accept_recorded_rules(names=[name]) == 1
    before = version()

    assert record_exchange(exchange()) == name
    assert version() == before  # the same reply: nothing to write, and it stays reviewed
    assert stored_rule(name)["recorded"]["reviewed"] is True  # type: ignore[index]

    assert record_exchange(exchange(content="Paris, France.")) == name
    assert version() == before + 1
    assert order().count(name) == 1
    rule = stored_rule(name)
    assert rule is not None and rule["response"]["content"] == "Paris, France."
    assert rule["recorded"]["reviewed"] is False  # a new reply is reviewed again


@pytest.mark.django_db
def test_turns_and_tool_results_record_one_rule_each(rules: None) -> None:
    names = {
        record_exchange(exchange()),
        record_exchange(exchange(turn=2)),
        record_exchange(exchange(tool_result='{"temp": 21}')),
    }
    assert None not in names and len(names) == 3


@pytest.mark.django_db
def test_the_request_credentials_and_secrets_in_the_reply_are_never_stored(
    rules: None, settings: Any
) -> None:
    settings.STATIC_AGENTS_REDACT_PATTERNS = [r"PROJ-[0-9]+"]
    inquiry = Inquiry(
        query="Deploy PROJ-42?",
        headers={"authorization": f"Bearer {KEY}", "x-api-key": KEY},
    )
    reply = RecordedReply(
        f"Deploying PROJ-42 with {KEY}.",
        thinking=f"Key {KEY}",
        tool_calls=({"name": "deploy", "arguments": {"ticket": "PROJ-42", "key": KEY}},),
    )
    name = record_exchange(Exchange(upstream="real", inquiry=inquiry, reply=reply))
    exported = dump_fixture(export_document())

    assert name is not None
    assert KEY not in exported and "PROJ-42" not in exported
    response = stored_rule(name)["response"]  # type: ignore[index]
    assert response["content"] == "Deploying [redacted] with [redacted]."
    assert response["tool_calls"][0]["arguments"] == {"ticket": "[redacted]", "key": "[redacted]"}


@pytest.mark.django_db
def test_recording_never_raises_it_logs_and_returns_none(
    rules: None, caplog: pytest.LogCaptureFixture
) -> None:
    bad = Exchange(
        upstream="real",
        inquiry=Inquiry(query="q"),
        reply=RecordedReply("", tool_calls=({"name": "", "arguments": {}},)),
    )
    with caplog.at_level(logging.ERROR, logger="staticagents.recording"):
        assert record_exchange(bad) is None
    assert "could not record an exchange with upstream 'real'" in caplog.text
    assert order() == ["weather", "echo"]


@pytest.mark.django_db
def test_the_recorded_tag_is_exported_and_imported_unchanged(rules: None) -> None:
    name = record_exchange(exchange())
    text = dump_fixture(export_document())
    document = load_fixture(text)
    import_fixture(document=document)

    assert dump_fixture(export_document()) == text
    assert stored_rule(name)["recorded"]["at"].endswith("Z")  # type: ignore[index]


@pytest.mark.parametrize(
    ("recorded", "path", "message"),
    [
        ({"upstream": "real", "at": "yesterday"}, "rules[0].recorded.at", "ISO 8601"),
        ({"upstream": "real", "at": "2026-01-01T10:00:00"}, "rules[0].recorded.at", "time zone"),
        ({"at": "2026-01-01T10:00:00Z"}, "rules[0].recorded.upstream", "required"),
        (
            {"upstream": "real", "at": "2026-01-01T10:00:00Z", "reviewd": True},
            "rules[0].recorded.reviewd",
            "unknown key",
        ),
        ({"upstream": "real", "at": "2026-01-01T10:00:00Z", "reviewed": "yes"}, "", "boolean"),
    ],
)
def test_the_recorded_tag_is_strictly_validated(
    recorded: dict[str, Any], path: str, message: str
) -> None:
    rule = {"name": "r", "response": {"content": "x"}, "recorded": recorded}
    with pytest.raises(DocumentInvalid) as raised:
        load_fixture(yaml.safe_dump({"rules": [rule]}))
    assert any(path in line and message in line for line in raised.value.lines()), raised.value


def test_an_unquoted_yaml_timestamp_is_refused_and_a_quoted_one_normalized_to_utc() -> None:
    rule = "rules:\n- name: r\n  response: {content: x}\n  recorded: {upstream: u, at: %s}\n"
    with pytest.raises(DocumentInvalid, match=r"recorded.at: is a date.*quote it"):
        load_fixture(rule % "2026-01-01 10:00:00+01:00")
    document = load_fixture(rule % '"2026-01-01T10:00:00+01:00"')
    assert document["rules"][0]["recorded"] == {"upstream": "u", "at": "2026-01-01T09:00:00Z"}


# -- review ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_filters_unreviewed_recorded_rules_and_accepts_them(
    rules: None, admin_client: Client
) -> None:
    first, second = record_exchange(exchange()), record_exchange(exchange("Capital of Peru?"))
    listed = admin_client.get(CHANGELIST, {"recorded": "unreviewed"}).content.decode()
    assert "recorded, not yet reviewed" in listed
    assert first in listed and second in listed and ">weather<" not in listed  # type: ignore[operator]
    assert "recorded · to review" in listed

    ids = list(Rule.objects.filter(name=first).values_list("pk", flat=True))
    before = version()
    response = admin_client.post(
        CHANGELIST, {"action": "accept_recorded", "_selected_action": ids}, follow=True
    )
    assert "1 recorded rule(s) accepted." in response.content.decode()
    assert version() == before + 1
    listed = admin_client.get(CHANGELIST, {"recorded": "unreviewed"}).content.decode()
    assert second in listed and first not in listed  # type: ignore[operator]
    assert first in admin_client.get(CHANGELIST, {"recorded": "reviewed"}).content.decode()  # type: ignore[operator]


@pytest.mark.django_db
def test_the_change_form_shows_where_a_recorded_rule_came_from(
    rules: None, admin_client: Client
) -> None:
    name = record_exchange(exchange())
    pk = Rule.objects.get(name=name).pk
    page = admin_client.get(f"{CHANGELIST}{pk}/change/").content.decode()
    assert "Recorded from a real model" in page and "recorded_reviewed" in page
    plain = Rule.objects.get(name="weather").pk
    assert (
        "Recorded from a real model"
        not in admin_client.get(f"{CHANGELIST}{plain}/change/").content.decode()
    )


def test_the_control_api_lists_recorded_rules_by_review_and_a_patch_accepts_one(
    control: httpx.Client, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(RULES)
    first, second = record_exchange(exchange()), record_exchange(exchange("Capital of Peru?"))

    def names(recorded: str) -> list[str]:
        response = control.get("/rules", params={"recorded": recorded})
        assert response.status_code == 200, response.text
        return [rule["name"] for rule in response.json()["rules"]]

    assert names("unreviewed") == [first, second]
    patched = control.patch(f"/rules/{first}", json={"recorded": {"reviewed": True}})
    assert patched.status_code == 200 and patched.json()["recorded"]["reviewed"] is True
    assert names("unreviewed") == [second]
    assert names("reviewed") == [first]
    assert names("all") == [first, second]
    assert len(control.get("/rules").json()["rules"]) == 4

    wrong = control.get("/rules", params={"recorded": "maybe"})
    assert wrong.status_code == 400
    assert wrong.json()["errors"][0]["path"] == "recorded"
