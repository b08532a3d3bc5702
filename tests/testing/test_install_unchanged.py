"""Installing the fixture the service holds already: nothing read, written or rebuilt."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from staticagents.models import JournalEntry, Rule, RulesetState
from tests.conftest import CONTROL_TOKEN

RULES = {
    "rules": [
        {"name": "greet", "match": {"contains": "hello"}, "response": {"content": "Hi"}},
        {"name": "other", "match": {"contains": "bye"}, "response": {"content": "Bye"}},
    ]
}


@pytest.fixture
def control(db: None, settings: Any) -> Client:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    return Client(HTTP_AUTHORIZATION=f"Bearer {CONTROL_TOKEN}")


def put(control: Client, fixture: Any, session: str = "") -> dict[str, Any]:
    query = f"?session={session}" if session else ""
    response = control.put(f"/control/fixture{query}", json.dumps(fixture), "application/json")
    assert response.status_code == 200, response.content
    answer: dict[str, Any] = response.json()
    return answer


def test_the_same_fixture_again_changes_nothing_and_says_so(
    control: Client, django_assert_max_num_queries: Any
) -> None:
    first = put(control, RULES)
    assert (first["created"], first["unchanged"]) == (2, 0)
    rows = list(Rule.objects.values_list("id", "name", "digest", "position"))
    state = RulesetState.objects.values_list("version", "stamp").get()
    JournalEntry.objects.create(session="kit", dialect="openai", route="/v1/chat/completions")

    # The stamp read, the session's fresh start, the snapshot's stamp: no rule read.
    with django_assert_max_num_queries(9) as queries:
        again = put(control, RULES, session="kit")
    assert not any('"staticagents_rule"' in query["sql"] for query in queries.captured_queries)

    counts = (again["created"], again["updated"], again["deleted"], again["unchanged"])
    assert counts == (0, 0, 0, 2)
    assert again["created_names"] == again["updated_names"] == again["deleted_names"] == []
    assert list(Rule.objects.values_list("id", "name", "digest", "position")) == rows
    assert RulesetState.objects.values_list("version", "stamp").get() == state
    assert not JournalEntry.objects.filter(session="kit").exists()  # the session started afresh


def test_the_same_fixture_after_another_change_is_replaced_again(control: Client) -> None:
    put(control, RULES)
    changed = {"rules": [{"name": "greet", "response": {"content": "Changed"}}]}
    assert put(control, changed)["deleted"] == 1

    again = put(control, RULES)

    assert (again["created"], again["updated"], again["unchanged"]) == (1, 1, 0)
    assert list(Rule.objects.order_by("position").values_list("name", flat=True)) == [
        "greet",
        "other",
    ]
