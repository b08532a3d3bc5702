"""Installing a fixture with one rule changed: that rule written and compiled, nothing else
read, rewritten or rebuilt (the testing kit does it before every test)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.test import Client

from staticagents.models import (
    AgentMode,
    Defaults,
    Fallback,
    JournalEntry,
    Rule,
    RuleResponse,
    RulesetState,
    RulesetVersion,
    SessionScript,
    Upstream,
)
from staticagents.replying import snapshot
from staticagents.selectors import export_document
from tests.conftest import CONTROL_TOKEN

READ_BACK = [
    f'"{model._meta.db_table}"'
    for model in (Rule, RuleResponse, Defaults, Fallback, Upstream, AgentMode, SessionScript)
]


def rules(greeting: str) -> dict[str, Any]:
    return {
        "defaults": {"confidence": "high"},
        "rules": [
            {"name": "greet", "match": {"contains": "hello"}, "response": {"content": greeting}},
            {"name": "other", "match": {"contains": "bye"}, "response": {"content": "Bye"}},
        ],
        "fallback": {"content": "Nothing"},
    }


@pytest.fixture
def control(db: None, settings: Any) -> Client:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    return Client(HTTP_AUTHORIZATION=f"Bearer {CONTROL_TOKEN}")


def put(control: Client, fixture: Any, session: str = "kit") -> dict[str, Any]:
    body = json.dumps(fixture)
    response = control.put(f"/control/fixture?session={session}", body, "application/json")
    assert response.status_code == 200, response.content
    answer: dict[str, Any] = response.json()
    return answer


def statements(queries: Any, verb: str, model: Any) -> list[str]:
    """The statements ``verb`` on ``model``'s table (an executemany's read "N times: ...")."""
    target = {"UPDATE": "UPDATE", "INSERT": "INSERT INTO", "DELETE": "DELETE FROM"}[verb]
    sql = [q["sql"].split(" times: ", 1)[-1] for q in queries.captured_queries]
    return [s for s in sql if s.startswith(f'{target} "{model._meta.db_table}" ')]


def test_one_rule_changed_writes_that_rule_and_one_version_and_reads_nothing_back(
    control: Client, django_assert_max_num_queries: Any
) -> None:
    put(control, rules("Hi"))
    snapshot.active_ruleset()
    ids = dict(Rule.objects.values_list("name", "id"))
    version = RulesetState.objects.get().version
    JournalEntry.objects.create(session="kit", dialect="openai", route="/v1/chat/completions")
    compiled = snapshot.compiler.compiled
    greeting = f"Hi {uuid.uuid4().hex}"  # never compiled before

    # The stamp; the rule, its responses (three); the stamp written, the version kept and
    # pruned; the stamp remembered; the session's fresh start; the snapshot's stamp, twice (and
    # on PostgreSQL the build's reads: jsonb orders the keys of what it gives back).
    with django_assert_max_num_queries(40) as queries:
        answer = put(control, rules(greeting))

    assert (answer["updated_names"], answer["unchanged"]) == (["greet"], 1)
    assert len(statements(queries, "UPDATE", RulesetState)) == 1
    assert len(statements(queries, "INSERT", RulesetVersion)) == 1
    assert len(statements(queries, "UPDATE", Rule)) == 1  # "greet", rewritten in place
    assert not statements(queries, "INSERT", Rule)
    assert not statements(queries, "DELETE", Defaults) and not statements(
        queries, "DELETE", Fallback
    )
    work = [sql for sql in (q["sql"] for q in queries.captured_queries) if "SAVEPOINT" not in sql]
    reads = [sql for sql in work if sql.startswith("SELECT")]
    read_back = [sql for sql in reads if any(table in sql for table in READ_BACK)]
    if queries.connection.vendor == "sqlite":
        assert not read_back, reads
        assert len(work) <= 14, work  # as listed above, the session's fresh start four
    else:  # the stamp's row locked once more (LastReplace), the build's reads
        assert len(work) <= 15 + len(read_back), work
    assert snapshot.compiler.compiled - compiled == 1
    assert dict(Rule.objects.values_list("name", "id")) == ids
    assert RulesetState.objects.get().version == version + 1
    kept = RulesetVersion.objects.get(number=version + 1)
    assert (kept.by, kept.what) == ("control API", "imported 2 rules (replace)")
    assert kept.document() == export_document()
    assert export_document()["rules"][0]["response"] == {"content": greeting}
    assert not JournalEntry.objects.filter(session="kit").exists()  # the session started afresh
