"""Writes to the ruleset: every service is one transaction bumping the version exactly once.

Workers rebuild their snapshot when the version changes, so a write that does
not bump it goes unseen, and one that bumps it per row makes every worker
rebuild over and over (and, through signal receivers, made replacing rules
slow). Statements are counted with Django's ``CaptureQueriesContext``.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.db import connection
from django.db.models import signals
from django.db.models.deletion import Collector
from django.test import Client
from django.test.utils import CaptureQueriesContext

from staticagents.document.files import load_fixture
from staticagents.document.schema import RuleSpec, validate_part
from staticagents.models import (
    Defaults,
    Fallback,
    JournalEntry,
    Rule,
    RuleResponse,
    RulesetState,
    RulesetVersion,
    SessionCounter,
    SessionScript,
)
from staticagents.replying.snapshot import active_ruleset, ruleset_stamp
from staticagents.selectors import WrittenRuleset, export_document
from staticagents.services import (
    create_rule,
    delete_rule,
    delete_rules,
    import_fixture,
    move_rule,
    record_rule,
    reorder_rules,
    reset_session,
    save_rule,
    set_defaults,
    set_fallback,
    set_rules_enabled,
    update_rule,
)
from tests.conftest import CONTROL_TOKEN

pytestmark = pytest.mark.django_db

VERSION_TABLE = RulesetState._meta.db_table
HISTORY_TABLE = RulesetVersion._meta.db_table
RULES = {
    "defaults": {"confidence": "high"},
    "rules": [
        {"name": "greet", "match": {"query": "(?i)hello"}, "response": {"content": "Hi"}},
        {
            "name": "script",
            "match": {"contains": "weather"},
            "responses": [{"content": "Looking"}, {"content": "Sunny"}],
        },
        {"name": "catch-all", "response": {"content": "Anything"}},
    ],
    "fallback": {"content": "No rule matched"},
}


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """admin_client's user gets a password; the default hasher takes most of a second."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def rules(load_rules: Callable[[Any], dict[str, Any]]) -> None:
    load_rules(RULES)


def version() -> int:
    return RulesetState.objects.get(pk=1).version


def sql_of(work: Callable[[], object]) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        work()
    return [query["sql"] for query in queries.captured_queries]


def without_history(sql: list[str]) -> list[str]:
    """The statements but the history's own (one insert, one prune: tests/test_versions.py)."""
    return [s for s in sql if HISTORY_TABLE not in s]


def version_updates(sql: list[str]) -> int:
    return sum(1 for s in sql if s.startswith("UPDATE") and VERSION_TABLE in s)


def rule_set(count: int, prefix: str) -> dict[str, Any]:
    """``count`` rules of two responses each, named ``prefix-0``, ``prefix-1``, ..."""
    return load_fixture(
        yaml.safe_dump(
            {
                "rules": [
                    {
                        "name": f"{prefix}-{i}",
                        "match": {"contains": f"{prefix} {i}"},
                        "responses": [{"content": "first"}, {"content": "then"}],
                    }
                    for i in range(count)
                ],
                "fallback": {"content": prefix},
            }
        )
    )


# -- each service bumps the version exactly once ----------------------------------


def edit_script_in_place() -> None:
    """What the admin's change form does: change one response, remove the other."""
    rule = Rule.objects.get(name="script")
    first, second = rule.responses.all()
    first.content = "Checking the forecast"
    rule.match_contains = "forecast"
    save_rule(rule=rule, responses=[first], removed_responses=[second])


def add_rule_as_the_admin_does() -> None:
    save_rule(
        rule=Rule(name="added", match_query="new"),
        responses=[RuleResponse(content="one"), RuleResponse(content="two", position=1)],
    )


WRITES: dict[str, Callable[[], object]] = {
    "import (replace)": lambda: import_fixture(document=rule_set(3, "other")),
    "import (merge)": lambda: import_fixture(document=rule_set(3, "other"), merge=True),
    "create a rule": lambda: create_rule(
        document=validate_part(RuleSpec, {"name": "new", "response": {"content": "New"}})
    ),
    "update a rule": lambda: update_rule(
        name="script",
        document=validate_part(RuleSpec, {"responses": [{"content": "a"}, {"content": "b"}]}),
    ),
    "record a rule": lambda: record_rule(
        document=validate_part(
            RuleSpec,
            {
                "name": "real-0123456789ab",
                "match": {"agent_type": "router", "query": "^hi$", "turn": 1, "tool_result": False},
                "response": {"content": "Hello"},
                "recorded": {"upstream": "real", "at": "2026-01-01T10:00:00Z", "reviewed": False},
            },
        )
    ),
    "save a new rule with responses": add_rule_as_the_admin_does,
    "save an edited rule with responses": edit_script_in_place,
    "delete a rule": lambda: delete_rule(name="greet"),
    "delete rules": lambda: delete_rules(names=["greet", "script"]),
    "disable rules": lambda: set_rules_enabled(names=["greet", "script"], enabled=False),
    "reorder rules": lambda: reorder_rules(names=["catch-all", "script"]),
    "move a rule": lambda: move_rule(name="catch-all", direction="top"),
    "set the defaults": lambda: set_defaults(document={"confidence": "low"}),
    "remove the defaults": lambda: set_defaults(document=None),
    "set the fallback": lambda: set_fallback(document={"content": "Nothing"}),
    "remove the fallback": lambda: set_fallback(document=None),
}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_each_service_bumps_the_version_exactly_once(
    rules: None, write: Callable[[], object]
) -> None:
    before, stamp = version(), ruleset_stamp()
    assert version_updates(sql_of(write)) == 1
    assert version() == before + 1
    assert ruleset_stamp() != stamp


def test_the_snapshot_follows_a_service_write(rules: None) -> None:
    snapshot = active_ruleset()
    set_rules_enabled(names=["greet"], enabled=False)
    rebuilt = active_ruleset()
    assert rebuilt is not snapshot
    assert [rule.name for rule in rebuilt.rules] == ["script", "catch-all"]


def test_a_dry_run_and_a_move_to_the_same_place_keep_the_version(rules: None) -> None:
    before = version()
    import_fixture(document=rule_set(3, "other"), dry_run=True)
    assert version() == before
    sql = sql_of(lambda: move_rule(name="greet", direction="up"))
    assert not [s for s in sql if s.startswith(("UPDATE", "INSERT", "DELETE"))]
    assert version() == before
    assert [r.name for r in Rule.objects.all()] == ["greet", "script", "catch-all"]


def test_the_first_write_creates_the_version(db: None) -> None:
    assert not RulesetState.objects.exists()
    set_defaults(document={"confidence": "low"})
    assert version() == 1


# -- replacing: constant cost in version bumps and deletes --------------------------


@pytest.mark.parametrize("count", [3, 300])
def test_replacing_rules_bumps_once_and_deletes_in_a_constant_number_of_statements(
    db: None, count: int
) -> None:
    import_fixture(document=rule_set(count, "old"))
    sql = without_history(sql_of(lambda: import_fixture(document=rule_set(count, "new"))))
    assert version_updates(sql) == 1
    deletes = [s for s in sql if s.startswith("DELETE")]
    assert len(deletes) == 3  # the responses, the rules, the fallback: never one per row
    # The rules the last replace left are known (their stamp is still the stored one), and the
    # rules just written are the history's: nothing is read back.
    tables = [f'"{model._meta.db_table}"' for model in (Rule, RuleResponse)]
    assert not [s for s in sql if s.startswith("SELECT") and any(t in s for t in tables)]
    assert Rule.objects.count() == count
    assert RuleResponse.objects.count() == 2 * count
    assert set(Rule.objects.values_list("name", flat=True)) == {f"new-{i}" for i in range(count)}


def test_a_rule_edited_field_by_field_is_rewritten_by_the_next_replace(rules: None) -> None:
    document = load_fixture(yaml.safe_dump(RULES))
    set_rules_enabled(names=["greet"], enabled=False)
    again = import_fixture(document=document)
    assert (again.updated, again.unchanged) == (1, len(document["rules"]) - 1)
    assert Rule.objects.get(name="greet").enabled
    assert import_fixture(document=document).unchanged == len(document["rules"])


@pytest.mark.parametrize("count", [3, 300])
def test_changed_rules_are_rewritten_in_place_in_a_constant_number_of_statements(
    db: None, count: int
) -> None:
    import_fixture(document=rule_set(count, "same"))
    ids = dict(Rule.objects.values_list("name", "id"))
    document = rule_set(count, "same")
    for i, doc in enumerate(document["rules"]):
        if i % 2 == 0:  # every other rule changes: a new match and one response less
            doc["match"]["contains"] = f"changed {i}"
            doc["responses"] = [{"content": f"now {i}"}]
    sql = without_history(sql_of(lambda: import_fixture(document=document)))
    statements = [s.split(" times: ", 1)[-1] for s in sql]  # executemany: "N times: ..."
    writes = [s.split()[0] for s in statements if s.startswith(("UPDATE", "DELETE", "INSERT"))]
    # The rules, their old responses, their new ones, and the version: never one per row.
    assert sorted(writes) == ["DELETE", "INSERT", "UPDATE", "UPDATE"], writes
    changed = (count + 1) // 2
    assert dict(Rule.objects.values_list("name", "id")) == ids  # rewritten where they were
    stored = {r.name: r for r in Rule.objects.prefetch_related("responses")}
    for i in range(count):
        rule, contents = stored[f"same-{i}"], [f"now {i}"] if i % 2 == 0 else ["first", "then"]
        assert [r.content for r in rule.responses.order_by("position")] == contents
        assert rule.match_contains == (f"changed {i}" if i % 2 == 0 else f"same {i}")
        assert rule.position == i
    assert import_fixture(document=document).unchanged == count
    assert RuleResponse.objects.count() == changed + 2 * (count - changed)


UPSTREAM = {"name": "u", "dialect": "anthropic", "base_url": "http://h", "api_key_env": "K"}
REPLACES: list[dict[str, Any]] = [
    RULES,
    {  # reordered, one changed, one new, the defaults and fallback gone
        "rules": [
            {"name": "catch-all", "response": {"content": "Anything"}},
            {"name": "new", "match": {"contains": "new"}, "response": {"content": "New"}},
            {"name": "greet", "match": {"query": "(?i)hello"}, "response": {"content": "Hey"}},
        ],
    },
    {  # the upstreams and modes set, a rule gone, the defaults back
        "defaults": {"confidence": "low"},
        "rules": [{"name": "greet", "response": {"content": "Hey"}}],
        "upstreams": [UPSTREAM],
        "modes": {"upstream": "u"},
    },
    {"rules": [{"name": "greet", "response": {"content": "Hey"}}]},  # the upstreams stay
    {"rules": [{"name": "greet", "response": {"content": "Hey"}}]},  # nothing changes
    {"rules": [], "upstreams": [], "modes": {}, "fallback": {"content": "None"}},
]


def replaced_in_turn(documents: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What each replace said and left: its counts, the rules' rows, the export, the version."""
    seen = []
    for document in documents:
        result = import_fixture(document=load_fixture(yaml.safe_dump(document)))
        rows = list(Rule.objects.order_by("position").values_list("name", "position", "digest"))
        version = RulesetState.objects.get(pk=1).version
        kept = RulesetVersion.objects.get(number=version).document()
        seen.append((result, rows, version, kept, export_document()))
        assert kept == export_document()
    return seen


def test_a_replace_after_this_process_replaced_does_what_one_reading_the_rules_does(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ruleset the last replace left is known, not read; each step must end the same."""
    set_defaults(document=None)  # a write that is not a replace: the first step reads
    known = replaced_in_turn(REPLACES)
    import_fixture(document=load_fixture(yaml.safe_dump(REPLACES[-1])))
    monkeypatch.setattr(WrittenRuleset, "at", lambda self, stamp: None)
    read = replaced_in_turn(REPLACES)
    offset = read[0][2] - known[0][2]
    assert [(*step[:2], step[2] - offset, *step[3:]) for step in read] == known
    assert [step[0].unchanged for step in known] == [0, 1, 0, 1, 1, 0]


def test_no_receiver_defeats_djangos_fast_delete() -> None:
    for model in (Rule, RuleResponse, Defaults, Fallback):
        for signal in (
            signals.pre_save,
            signals.post_save,
            signals.pre_delete,
            signals.post_delete,
        ):
            assert not signal.has_listeners(model), (signal, model)
    assert Collector(using="default").can_fast_delete(RuleResponse.objects.all())


# -- what the services keep true ----------------------------------------------------


def test_deleting_rules_closes_the_gap_and_forgets_their_counters(rules: None) -> None:
    SessionCounter.objects.create(session="s1", rule="greet", key="seq", count=1)
    SessionCounter.objects.create(session="s1", rule="catch-all", key="seq", count=1)
    assert delete_rules(names=["greet", "nowhere"]) == 1
    assert list(Rule.objects.values_list("name", "position")) == [("script", 0), ("catch-all", 1)]
    assert list(SessionCounter.objects.values_list("rule", flat=True)) == ["catch-all"]
    assert not RuleResponse.objects.filter(rule__name="greet").exists()


def test_a_rule_saved_with_its_responses_goes_before_the_catch_all_with_them_numbered(
    rules: None,
) -> None:
    add_rule_as_the_admin_does()
    added = Rule.objects.get(name="added")
    assert added.position == 2
    assert Rule.objects.get(name="catch-all").position == 3
    assert [(r.position, r.content) for r in added.responses.all()] == [(0, "one"), (1, "two")]
    edit_script_in_place()
    script = Rule.objects.get(name="script")
    assert script.match_contains == "forecast"
    assert [(r.position, r.content) for r in script.responses.all()] == [
        (0, "Checking the forecast")
    ]


def test_defaults_and_fallback_are_set_and_removed(rules: None) -> None:
    set_defaults(document={"stream": {"word_delay_ms": 5}})
    set_fallback(document={"content": "Nothing", "metadata": {"a": 1}})
    assert Defaults.objects.get(pk=1).document() == {"stream": {"word_delay_ms": 5}}
    assert Fallback.objects.get(pk=1).document() == {"content": "Nothing", "metadata": {"a": 1}}
    set_defaults(document=None)
    set_fallback(document=None)
    assert not Defaults.objects.exists() and not Fallback.objects.exists()


def test_moving_an_unknown_rule_or_in_an_unknown_direction_is_refused(rules: None) -> None:
    with pytest.raises(Rule.DoesNotExist):
        move_rule(name="nowhere", direction="up")
    with pytest.raises(ValueError, match="sideways"):
        move_rule(name="greet", direction="sideways")


# -- every edge's write reaches the workers ---------------------------------------------


def test_an_admin_edit_changes_the_version_once(admin_client: Client, rules: None) -> None:
    from tests.test_admin import change_form_data

    url = f"/admin/staticagents/rule/{Rule.objects.get(name='script').pk}/change/"
    data = change_form_data(admin_client, url)
    data["match_contains"] = '"forecast"'
    data["responses-0-content"] = "Checking"
    data["responses-1-DELETE"] = "on"
    snapshot, before = active_ruleset(), version()
    with CaptureQueriesContext(connection) as queries:
        assert admin_client.post(url, data).status_code == 302
    assert version_updates([q["sql"] for q in queries.captured_queries]) == 1
    assert version() == before + 1
    rebuilt = active_ruleset()
    assert rebuilt is not snapshot
    assert [r.content for r in Rule.objects.get(name="script").responses.all()] == ["Checking"]


CONTROL_WRITES = {
    "PUT /fixture": ("put", "/control/fixture", "rules: [{name: only, response: {content: x}}]"),
    "POST /fixture": ("post", "/control/fixture", "rules: [{name: more, response: {}}]"),
    "POST /rules": ("post", "/control/rules", '{"name": "new", "response": {"content": "x"}}'),
    "PUT /rules/greet": ("put", "/control/rules/greet", '{"response": {"content": "Hey"}}'),
    "PATCH /rules/greet": ("patch", "/control/rules/greet", '{"enabled": false}'),
    "DELETE /rules/greet": ("delete", "/control/rules/greet", ""),
    "POST /rules/reorder": ("post", "/control/rules/reorder", '["catch-all"]'),
}


@pytest.mark.parametrize("method, path, body", CONTROL_WRITES.values(), ids=CONTROL_WRITES.keys())
def test_a_control_api_write_changes_the_version_once(
    client: Client, rules: None, settings: Any, method: str, path: str, body: str
) -> None:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    snapshot, before = active_ruleset(), version()
    send = getattr(client, method)
    with CaptureQueriesContext(connection) as queries:
        response = send(
            path,
            body,
            content_type="application/json",
            headers={"Authorization": f"Bearer {CONTROL_TOKEN}"},
        )
    assert response.status_code < 300, response.content
    assert version_updates([q["sql"] for q in queries.captured_queries]) == 1
    assert version() == before + 1
    assert active_ruleset() is not snapshot


def test_a_command_import_changes_the_version_once_and_a_dry_run_not_at_all(
    rules: None, tmp_path: Path
) -> None:
    path = tmp_path / "rules.yml"
    path.write_text("rules:\n  - name: only\n    response: {content: x}\n")
    snapshot, before = active_ruleset(), version()
    call_command("import_fixture", str(path), "--dry-run", stdout=io.StringIO())
    assert version() == before
    with CaptureQueriesContext(connection) as queries:
        call_command("import_fixture", str(path), stdout=io.StringIO())
    assert version_updates([q["sql"] for q in queries.captured_queries]) == 1
    assert version() == before + 1
    assert [rule.name for rule in active_ruleset().rules] == ["only"]
    assert active_ruleset() is not snapshot


@pytest.mark.django_db(transaction=True)
def test_a_replace_makes_its_rows_before_taking_the_write_lock(monkeypatch: Any) -> None:
    """On SQLite every reply's journal row waits for the write lock that the import's
    transaction holds: the rows of a big import are made before it, not under it."""
    made_in_transaction: list[bool] = []
    fields_from = Rule.fields_from

    def watched(doc: dict[str, Any]) -> dict[str, Any]:
        made_in_transaction.append(connection.in_atomic_block)
        return fields_from(doc)

    monkeypatch.setattr(Rule, "fields_from", watched)
    rules = [{"name": f"r{n}", "response": {"content": f"answer {n}"}} for n in range(50)]
    import_fixture(document=load_fixture(yaml.safe_dump({"rules": rules})))
    assert made_in_transaction == [False] * 50
    stored = Rule.objects.order_by("position").values_list("name", "responses__content")
    assert list(stored) == [(f"r{n}", f"answer {n}") for n in range(50)]


# -- a session's fresh start ----------------------------------------------------------


def statements(work: Callable[[], object]) -> list[str]:
    """The statements ``work`` runs, without the transaction's own."""
    return [s for s in sql_of(work) if "SAVEPOINT" not in s]


def session_rows(session: str) -> tuple[int, int, int]:
    return (
        SessionCounter.objects.filter(session=session).count(),
        JournalEntry.objects.filter(session=session).count(),
        SessionScript.objects.filter(session=session).count(),
    )


def test_a_session_reset_takes_one_statement_per_table_and_leaves_other_sessions(
    db: None,
) -> None:
    script = {"name": "replies", "responses": [{"content": "one"}], "on_exhausted": "error"}
    for session in ("mine", "other"):
        reset_session(session=session, script=script)  # a script of its own
        SessionCounter.objects.create(session=session, rule="greet", key="sequence", count=2)
        JournalEntry.objects.create(session=session, dialect="openai", route="/v1/messages")
    old = SessionScript.objects.get(session="mine").pk
    active_ruleset()  # this process's snapshot is current: the stamp moves in one update

    fresh = statements(lambda: reset_session(session="new", script=script))
    assert [s.split()[0] for s in fresh] == ["DELETE", "DELETE", "INSERT", "UPDATE"]
    assert session_rows("new") == (0, 0, 1)
    active_ruleset()
    again = statements(lambda: reset_session(session="mine", script=script))
    assert [s.split()[0] for s in again] == [
        "DELETE",
        "DELETE",
        "INSERT",
        "DELETE",
        "INSERT",
        "UPDATE",
    ]
    assert session_rows("mine") == (0, 0, 1) and session_rows("other") == (1, 1, 1)
    assert SessionScript.objects.get(session="mine").pk > old  # a new row: a new position

    assert reset_session(session="mine") == {"counters": 0, "journal": 0}
    assert session_rows("mine") == (0, 0, 0) and session_rows("other") == (1, 1, 1)
    nothing = statements(lambda: reset_session(session="mine"))
    assert [s.split()[0] for s in nothing] == ["DELETE", "DELETE", "DELETE"]  # the stamp stays
    assert "mine" not in active_ruleset().scripts and "other" in active_ruleset().scripts
