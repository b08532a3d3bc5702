"""Rules that never answer, at every edge: commands, uploads, the control API, new rules' places."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.test import Client

from staticagents.document.files import load_fixture
from staticagents.document.schema import RuleSpec, validate_part
from staticagents.document.terms import DocumentInvalid
from staticagents.models import Rule
from staticagents.services import create_rule, import_fixture, merged_order

SHADOWED = """
rules:
  - name: broad
    match: {contains: "#err"}
    response: {content: "broad"}
  - name: narrow
    match: {contains: "#error", turn: 1}
    response: {content: "never"}
  - name: echo
    response: {template: true, content: "$query"}
"""
WARNING = (
    "rule 'narrow' (#2) is shadowed by 'broad' (#1): that earlier rule matches every "
    "question this one matches, so this one never answers"
)
DEMO_LIKE = """
rules:
  - name: hash-error
    match: {contains: "#error"}
    response: {error: {status: 500}}
  - name: errors
    match: {agent_type: error_analysis}
    response: {content: "analysis"}
  - name: echo
    response: {template: true, content: "$query"}
"""


def names() -> list[str]:
    return list(Rule.objects.order_by("position").values_list("name", flat=True))


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=120,
    )


def test_check_fixture_warns_of_a_shadowed_rule_and_exits_0(tmp_path: Path) -> None:
    fixture = tmp_path / "rules.yml"
    fixture.write_text(SHADOWED)
    done = manage("check_fixture", str(fixture))
    assert done.returncode == 0, done.stderr
    assert f"{fixture}: valid, 3 rule(s)" in done.stdout
    assert done.stderr.strip() == f"{fixture}: warning: {WARNING}"


@pytest.mark.django_db
def test_a_dry_run_import_warns_the_same_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fixture = tmp_path / "rules.yml"
    fixture.write_text(SHADOWED)
    call_command("import_fixture", str(fixture), "--dry-run")
    assert capsys.readouterr().err.strip() == f"{fixture}: warning: {WARNING}"
    assert not Rule.objects.exists()


@pytest.mark.django_db
def test_a_merge_warns_of_rules_the_merged_ruleset_shadows() -> None:
    import_fixture(document=load_fixture(DEMO_LIKE))
    another_echo = "rules:\n  - name: catch-it-all\n    response: {content: x}\n"
    result = import_fixture(document=load_fixture(another_echo), merge=True, dry_run=True)
    # placed before the first catch-all ("errors", for its agent type), it shadows both
    assert [w.split(":")[0] for w in result.warnings] == [
        "rule 'errors' (#3) is shadowed by 'catch-it-all' (#2)",
        "rule 'echo' (#4) is shadowed by 'catch-it-all' (#2)",
    ]
    assert names() == ["hash-error", "errors", "echo"]  # a dry run


def test_merged_rules_keep_the_files_order_around_known_rules() -> None:
    existing = ["a", "b", "catch", "c"]
    assert merged_order(existing, ["x", "b", "y", "z"], 2) == [
        "a",
        "x",
        "b",
        "y",
        "z",
        "catch",
        "c",
    ]
    assert merged_order(existing, ["new1", "new2"], 2) == ["a", "b", "new1", "new2", "catch", "c"]
    assert merged_order(existing, ["c", "last"], 2) == ["a", "b", "catch", "c", "last"]


@pytest.mark.django_db
def test_a_merged_upload_sharing_no_rule_goes_before_the_first_catch_all() -> None:
    import_fixture(document=load_fixture(DEMO_LIKE))
    more = {"rules": [{"name": "weather", "match": {"contains": "weather"}, "response": {}}]}
    import_fixture(document=load_fixture(yaml.safe_dump(more)), merge=True)
    # "errors" answers every error_analysis question: a catch-all for its type
    assert names() == ["hash-error", "weather", "errors", "echo"]


def new(name: str, match: dict[str, Any] | None = None) -> dict[str, Any]:
    return validate_part(RuleSpec, {"name": name, "match": match or {}, "response": {}})


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("place", "order"),
    [
        ("auto", ["hash-error", "errors", "new", "echo"]),
        ("top", ["new", "hash-error", "errors", "echo"]),
        ("end", ["hash-error", "errors", "echo", "new"]),
        ("before:errors", ["hash-error", "new", "errors", "echo"]),
    ],
)
def test_a_new_rule_goes_where_the_curator_says(place: str, order: list[str]) -> None:
    import_fixture(document=load_fixture(DEMO_LIKE))
    create_rule(document=new("new", {"contains": "#new"}), place=place)
    assert names() == order


@pytest.mark.django_db
def test_by_default_a_new_rule_goes_before_the_first_rule_that_would_shadow_it() -> None:
    import_fixture(document=load_fixture(DEMO_LIKE))
    create_rule(document=new("analysis-detail", {"agent_type": "error_analysis", "turn": 2}))
    assert names() == ["hash-error", "analysis-detail", "errors", "echo"]
    create_rule(document=new("more-errors", {"contains": "#error now"}))
    assert names()[0] == "more-errors"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("place", "problem"), [("before:ghost", "no rule named 'ghost'"), ("middle", "unknown place")]
)
def test_an_unknown_place_is_refused_and_changes_nothing(place: str, problem: str) -> None:
    import_fixture(document=load_fixture(DEMO_LIKE))
    with pytest.raises(DocumentInvalid) as caught:
        create_rule(document=new("new"), place=place)
    [error] = caught.value.errors
    assert error.path == "place" and error.message.startswith(problem)
    assert names() == ["hash-error", "errors", "echo"]


def test_the_control_api_places_a_rule_and_dry_runs_warn(
    admin_client: Client, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(DEMO_LIKE)
    body = {"name": "first", "match": {"contains": "#first"}, "response": {"content": "1"}}
    added = admin_client.post("/control/rules?place=top", body, content_type="application/json")
    assert added.status_code == 201
    assert names()[0] == "first"
    wrong = admin_client.post(
        "/control/rules?place=before:ghost", {**body, "name": "x"}, content_type="application/json"
    )
    assert wrong.status_code == 400
    assert wrong.json()["errors"][0]["path"] == "place"
    dry = admin_client.put("/control/fixture?dry_run=1", SHADOWED, content_type="application/yaml")
    assert dry.status_code == 200
    assert dry.json()["warnings"] == [WARNING]
    assert names()[0] == "first"
