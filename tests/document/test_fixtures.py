"""YAML/JSON fixtures: strict validation with paths and lines, all-or-nothing import,
byte-stable export, and Galaxy's own fixture imported unchanged.

The import and export tests start from our own Galaxy-style fixture; the two that prove
compatibility with Galaxy's own file read it from STATIC_AGENTS_GALAXY_FIXTURE."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from staticagents.document.files import dump_fixture, load_fixture
from staticagents.document.terms import DocumentInvalid
from staticagents.models import Fallback, Rule, RulesetState
from staticagents.replying.snapshot import active_ruleset
from staticagents.selectors import export_document
from staticagents.services import set_rules_enabled
from tests.conftest import FIXTURES, GALAXY_STYLE_FIXTURE


def errors_of(text: str | bytes, source: str = "f.yml") -> list[str]:
    with pytest.raises(DocumentInvalid) as caught:
        load_fixture(text, source)
    return caught.value.lines()


def export_text() -> str:
    return dump_fixture(export_document())


def write(tmp_path: Path, text: str, name: str = "fixture.yml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- validation -----------------------------------------------------------------


def test_unknown_key_is_an_error_naming_file_line_and_path() -> None:
    text = "rules:\n  - match:\n      querry: hello\n    response:\n      content: hi\n"
    assert errors_of(text) == [
        "f.yml:3: rules[0].match.querry: unknown key (did you mean 'query'?)"
    ]


def test_an_unknown_key_far_from_every_known_one_gets_no_suggestion() -> None:
    text = "rules:\n  - response:\n      colour: blue\n"
    assert errors_of(text) == ["f.yml:3: rules[0].response.colour: unknown key"]


def test_every_problem_is_reported_not_just_the_first() -> None:
    text = """
version: 1
rules:
  - match: {query: "(unclosed"}
    response: {content: 5}
  - name: not a slug
    response: {}
    bogus: 1
"""
    lines = errors_of(text)
    assert any("rules[0].match.query: invalid regex" in line for line in lines)
    assert any(
        "rules[0].response.content: Input should be a valid string" in line for line in lines
    )
    assert any("rules[1].name: must be a slug" in line for line in lines)
    assert any("rules[1].bogus: unknown key" in line for line in lines)
    assert all(line.startswith("f.yml:") for line in lines)


def test_every_problem_comes_at_once_in_line_order_a_duplicate_name_too() -> None:
    text = """rules:
  - name: greeting
    match: {querry: hello}
    response: {content: hi}
  - name: greeting
    response: {content: 5}
    match: {turn: 1, turn: 2}
  - name: other
    response: {metadata: {when: 2024-01-01}}
"""
    lines = errors_of(text)
    assert [int(line.split(":")[1]) for line in lines] == [3, 5, 6, 7, 9]
    assert "rules[0].match.querry: unknown key (did you mean 'query'?)" in lines[0]
    assert "rules[1].name: duplicate name 'greeting' (also rules[0])" in lines[1]
    assert "rules[1].response.content: Input should be a valid string" in lines[2]
    assert "rules[1].match.turn: duplicate key 'turn'" in lines[3]
    assert "rules[2].response.metadata.when: is a date" in lines[4]


def test_yaml_syntax_error_names_the_line() -> None:
    [line] = errors_of("rules:\n  - match: {query: [unclosed\n  - response: {}\n")
    assert line.startswith("f.yml:")
    assert "invalid YAML" in line
    assert line.split(":")[1].isdigit()


def test_unsupported_version_is_an_error() -> None:
    assert errors_of("version: 2\nrules: []\n") == [
        "f.yml:1: version: unsupported version 2 (only 1 is supported)"
    ]


def test_duplicate_names_are_an_error_naming_both_places() -> None:
    text = "rules:\n  - name: a\n    response: {}\n  - name: a\n    response: {}\n"
    assert errors_of(text) == ["f.yml:4: rules[1].name: duplicate name 'a' (also rules[0])"]


def test_invalid_suggestion_is_an_error() -> None:
    text = """
rules:
  - response:
      suggestions:
        - action_type: save_tool
          description: Save it
          confidence: high
"""
    [line] = errors_of(text)
    assert "rules[0].response.suggestions[0]: save_tool needs parameters.tool_yaml" in line


def test_a_rule_needs_exactly_one_of_response_and_responses() -> None:
    [line] = errors_of("rules:\n  - match: {query: x}\n")
    assert "exactly one of 'response' or 'responses'" in line


def test_wrong_types_are_errors_not_coerced() -> None:
    lines = errors_of("rules:\n  - enabled: 'yes'\n    response: {fail_first: '2'}\n")
    assert any("rules[0].enabled" in line for line in lines)
    assert any("rules[0].response.fail_first" in line for line in lines)


def test_a_pinned_embedding_is_finite_float32_numbers_at_most_4096_of_them() -> None:
    def pinned(values: str) -> list[str]:
        return errors_of(f"rules:\n  - response:\n      embedding: {values}\n")

    [line] = pinned("[" + ", ".join(["0.5"] * 4097) + "]")
    assert "rules[0].response.embedding: List should have at most 4096 items" in line
    [line] = pinned("[1, .inf]")
    assert "rules[0].response.embedding[1]: inf is not a finite number" in line
    [line] = pinned("[1.0e+39]")
    assert "rules[0].response.embedding[0]: must fit a 32-bit float" in line
    [line] = pinned("[]")
    assert "rules[0].response.embedding: List should have at least 1 item" in line
    [line] = pinned("[true]")
    assert "rules[0].response.embedding[0]: Input should be a valid number" in line
    document = load_fixture("rules:\n  - response: {embedding: [1, 0.5], template: true}\n")
    assert document["rules"][0]["response"]["embedding"] == [1.0, 0.5]


def test_embedding_like_is_a_non_empty_text() -> None:
    [line] = errors_of("rules:\n  - response: {embedding_like: ''}\n")
    assert "rules[0].response.embedding_like: String should have at least 1 character" in line
    [line] = errors_of("rules:\n  - response: {embedding_like: 5}\n")
    assert "rules[0].response.embedding_like: Input should be a valid string" in line


def test_a_fault_names_a_known_kind_after_a_whole_number_of_chunks() -> None:
    def fault(value: str) -> list[str]:
        return errors_of(f"rules:\n  - response:\n      fault: {value}\n")

    [line] = fault("{after_chunks: 2, kind: explode}")
    assert "rules[0].response.fault.kind: Input should be 'disconnect'" in line
    [line] = fault("{after_chunks: -1, kind: stall}")
    assert (
        "rules[0].response.fault.after_chunks: Input should be greater than or equal to 0" in line
    )
    [line] = fault("{after_chunks: '2', kind: stall}")
    assert "rules[0].response.fault.after_chunks: Input should be a valid integer" in line
    [line] = fault("{kind: stall}")
    assert "rules[0].response.fault.after_chunks: required key is missing" in line
    [line] = fault("{after_chunks: 1, kind: stall, seconds: 3}")
    assert "rules[0].response.fault.seconds: unknown key" in line
    for kind in ("disconnect", "malformed", "error_event", "stall"):
        document = load_fixture(
            f"rules:\n  - response: {{fault: {{after_chunks: 0, kind: {kind}}}}}\n"
        )
        assert document["rules"][0]["response"]["fault"] == {"after_chunks": 0, "kind": kind}


def test_chaos_is_a_probability_of_known_kinds_in_a_rules_response_only() -> None:
    def chaos(value: str) -> list[str]:
        return errors_of(f"rules:\n  - response:\n      chaos: {value}\n")

    [line] = chaos("{probability: 1.5}")
    assert "rules[0].response.chaos.probability: Input should be less than or equal to 1" in line
    [line] = chaos("{probability: 0.5, kinds: []}")
    assert "rules[0].response.chaos.kinds: List should have at least 1 item" in line
    [line] = chaos("{probability: 0.5, kinds: [boom]}")
    assert "rules[0].response.chaos.kinds[0]: Input should be 'disconnect'" in line
    [line] = chaos("{probability: 0.5, fault_rate: 1}")
    assert "rules[0].response.chaos.fault_rate: unknown key" in line
    [line] = errors_of(
        "rules:\n  - response: {fault: {after_chunks: 1, kind: stall}, chaos: {probability: 1}}\n"
    )
    assert "at most one of 'fault' and 'chaos'" in line
    [line] = errors_of("fallback: {chaos: {probability: 1}}\n")
    assert "'chaos' belongs in a rule's response" in line
    document = load_fixture("rules:\n  - response: {chaos: {probability: 1, seed: 3}}\n")
    assert document["rules"][0]["response"]["chaos"]["probability"] == 1.0


@pytest.mark.django_db
def test_a_fault_survives_import_and_export(tmp_path: Path) -> None:
    text = (
        "rules:\n"
        "  - name: cut\n"
        "    response: {content: hi, fault: {after_chunks: 2, kind: error_event}}\n"
        "fallback: {content: none, fault: {after_chunks: 0, kind: stall}}\n"
    )
    call_command("import_fixture", write(tmp_path, text))
    exported = export_document()
    assert exported["rules"][0]["response"]["fault"] == {"after_chunks": 2, "kind": "error_event"}
    assert exported["fallback"]["fault"] == {"after_chunks": 0, "kind": "stall"}
    assert_export_is_a_fixpoint(Path(write(tmp_path, text, "again.yml")), tmp_path)


def test_chaos_in_the_defaults_is_checked_with_its_path() -> None:
    [line] = errors_of("defaults:\n  chaos: {probability: 2}\n")
    assert "defaults.chaos.probability: Input should be less than or equal to 1" in line
    [line] = errors_of("defaults:\n  chaos: {probability: 0.1, kinds: [reset]}\n")
    assert "defaults.chaos.kinds[0]: Input should be 'disconnect'" in line
    [line] = errors_of("defaults:\n  chaos: {seed: 4}\n")
    assert "defaults.chaos.probability: required key is missing" in line
    document = load_fixture("defaults:\n  chaos: {probability: 1, seed: 3}\n")
    assert document["defaults"]["chaos"]["probability"] == 1.0


@pytest.mark.django_db
def test_chaos_in_the_defaults_survives_import_and_export(tmp_path: Path) -> None:
    text = (
        "defaults:\n"
        "  chaos: {probability: 0.25, kinds: [stall, malformed], seed: 9, after_chunks: 2}\n"
        "rules:\n"
        "  - name: calm\n"
        "    response: {content: hi, chaos: {probability: 0}}\n"
    )
    call_command("import_fixture", write(tmp_path, text))
    exported = export_document()
    assert exported["defaults"]["chaos"] == {
        "probability": 0.25,
        "kinds": ["stall", "malformed"],
        "seed": 9,
        "after_chunks": 2,
    }
    assert_export_is_a_fixpoint(Path(write(tmp_path, text, "again.yml")), tmp_path)


def test_non_utf8_bytes_are_rejected_with_the_offset() -> None:
    [line] = errors_of(b"rules: []\n# \xff\xfe\n")
    assert "not UTF-8" in line and "offset 12" in line


def test_json_fixtures_are_accepted() -> None:
    document = load_fixture(json.dumps({"rules": [{"name": "j", "response": {"content": "x"}}]}))
    assert document["rules"][0]["name"] == "j"


# Each backtracks super-linearly on a near-miss (issue 19's list).
SLOW_REGEXES = [
    r"(a|a)*$",
    r"(a|aa)+$",
    r"(\w+\s?)+$",
    r"(a+){20}$",
    r"(.*a){20}",
    r"((a+))+$",
    r"(?:(?:a)+)+$",
    r"(a+?)+$",
]
# Possessive and atomic forms are never re-entered: safe.
SAFE_REGEXES = [r"(a+)++$", r"(?>a+)+$", r"^(a+)$", r"(\d+\.)+$", r"(?i)^topic \d+\b"]


@pytest.mark.parametrize("pattern", SLOW_REGEXES)
@pytest.mark.parametrize("key", ["query", "system", "model", "tool_result", "context"])
def test_a_regex_that_backtracks_super_linearly_is_refused_with_path_and_code(
    pattern: str, key: str
) -> None:
    match = {"context": {"page": pattern}} if key == "context" else {key: pattern}
    with pytest.raises(DocumentInvalid) as caught:
        load_fixture(json.dumps({"rules": [{"match": match, "response": {}}]}))
    [error] = caught.value.errors
    path = "rules[0].match.context.page" if key == "context" else f"rules[0].match.{key}"
    assert (error.path, error.code) == (path, "slow_regex")
    assert "backtrack" in error.message


def test_a_regex_whose_counted_repeats_expand_too_far_is_refused() -> None:
    pattern = "((a{1000}){1000}){1000}"  # re compiles it; RE2 and regex would not fit it
    with pytest.raises(DocumentInvalid) as caught:
        load_fixture(json.dumps({"rules": [{"match": {"query": pattern}, "response": {}}]}))
    [error] = caught.value.errors
    assert (error.path, error.code) == ("rules[0].match.query", "slow_regex")
    assert "too large" in error.message


@pytest.mark.parametrize("pattern", SAFE_REGEXES)
def test_possessive_atomic_and_unambiguous_regexes_are_accepted(pattern: str) -> None:
    document = load_fixture(json.dumps({"rules": [{"match": {"query": pattern}, "response": {}}]}))
    assert document["rules"][0]["match"]["query"] == pattern


def test_check_fixture_refuses_a_slow_regex_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "slow.yml"
    path.write_text("rules:\n  - name: slow\n    match: {query: '(a|aa)+$'}\n    response: {}\n")
    with pytest.raises(CommandError) as caught:
        call_command("check_fixture", str(path))
    assert f"{path}:3: rules[0].match.query: regex can backtrack exponentially" in str(caught.value)


# -- import / export -------------------------------------------------------------


def assert_export_is_a_fixpoint(fixture: Path, tmp_path: Path) -> None:
    call_command("import_fixture", str(fixture))
    first = write(tmp_path, export_text(), "first.yml")
    call_command("import_fixture", first)
    assert export_text() == Path(first).read_text()


@pytest.mark.django_db
def test_galaxy_fixture_imports_unchanged(galaxy_fixture: Path) -> None:
    call_command("import_fixture", str(galaxy_fixture))
    assert Rule.objects.count() == 8
    assert Fallback.objects.get().content == "Static backend: no matching rule."
    assert active_ruleset().agent_types == [
        "custom_tool",
        "error_analysis",
        "page_assistant",
        "router",
    ]


@pytest.mark.django_db
def test_galaxys_own_fixture_exports_as_a_byte_stable_fixpoint(
    galaxy_fixture: Path, tmp_path: Path
) -> None:
    assert_export_is_a_fixpoint(galaxy_fixture, tmp_path)


@pytest.mark.django_db
def test_a_galaxy_style_fixture_imports_unchanged() -> None:
    call_command("import_fixture", str(GALAXY_STYLE_FIXTURE))
    assert Rule.objects.count() == 8
    assert Fallback.objects.get().content == "No rule of this fixture answers that."
    assert active_ruleset().agent_types == [
        "custom_tool",
        "dataset_analyzer",
        "error_analysis",
        "gtn_training",
        "router",
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("fixture", [GALAXY_STYLE_FIXTURE, FIXTURES / "demo.yml"])
def test_export_of_import_is_a_byte_stable_fixpoint(fixture: Path, tmp_path: Path) -> None:
    assert_export_is_a_fixpoint(fixture, tmp_path)


@pytest.mark.django_db
def test_failed_import_changes_nothing(tmp_path: Path) -> None:
    call_command("import_fixture", str(GALAXY_STYLE_FIXTURE))
    before, version = export_text(), RulesetState.objects.get().version
    bad = "rules:\n  - name: ok\n    response: {}\n  - match: {query: '('}\n    response: {}\n"
    with pytest.raises(CommandError) as caught:
        call_command("import_fixture", write(tmp_path, bad))
    assert "rules[1].match.query: invalid regex" in str(caught.value)
    assert export_text() == before
    assert RulesetState.objects.get().version == version


@pytest.mark.django_db
def test_dry_run_reports_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("import_fixture", str(GALAXY_STYLE_FIXTURE))
    before = export_text()
    call_command("import_fixture", str(FIXTURES / "demo.yml"), "--dry-run")
    assert "would import: 11 rule(s) created, 0 updated, 8 deleted" in capsys.readouterr().out
    assert export_text() == before


@pytest.mark.django_db
def test_reimporting_a_fixture_counts_its_rules_as_they_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    demo = str(FIXTURES / "demo.yml")
    call_command("import_fixture", demo)
    rules = len(export_document()["rules"])
    capsys.readouterr()
    call_command("import_fixture", demo)
    summary = f"imported: 0 rule(s) created, 0 updated, 0 deleted, {rules} unchanged"
    assert summary in capsys.readouterr().out


@pytest.mark.django_db
def test_merge_upserts_by_name_and_places_new_rules_after_their_predecessor(
    tmp_path: Path,
) -> None:
    call_command("import_fixture", str(GALAXY_STYLE_FIXTURE))
    merge = """
rules:
  - name: router-2
    match: {agent_type: router, query: "(?i)chip.?seq"}
    response: {content: "ChIP-seq it is."}
  - name: brand-new
    response: {content: "new"}
"""
    call_command("import_fixture", write(tmp_path, merge), "--merge")
    names = list(Rule.objects.values_list("name", flat=True))
    assert len(names) == 9 and names[1] == "router-2" and names[2] == "brand-new"
    updated = Rule.objects.get(name="router-2")
    assert updated.match_query == "(?i)chip.?seq"
    assert updated.responses.get().content == "ChIP-seq it is."
    assert Fallback.objects.exists()  # a merge without a fallback keeps the old one


@pytest.mark.django_db
def test_replace_is_the_default(tmp_path: Path) -> None:
    call_command("import_fixture", str(GALAXY_STYLE_FIXTURE))
    call_command("import_fixture", write(tmp_path, "rules:\n  - name: only\n    response: {}\n"))
    assert list(Rule.objects.values_list("name", flat=True)) == ["only"]
    assert not Fallback.objects.exists()


@pytest.mark.django_db
def test_export_to_a_file_or_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    call_command("import_fixture", str(GALAXY_STYLE_FIXTURE))
    capsys.readouterr()
    call_command("export_fixture")
    stdout = capsys.readouterr().out
    target = tmp_path / "out.json"
    call_command("export_fixture", str(target))
    assert load_fixture(stdout)["rules"] == load_fixture(target.read_text())["rules"]
    assert json.loads(target.read_text())["version"] == 1


def test_check_fixture_validates_without_a_database(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("check_fixture", str(GALAXY_STYLE_FIXTURE))
    assert "valid, 8 rule(s)" in capsys.readouterr().out


def test_check_fixture_prints_one_error_per_line(tmp_path: Path) -> None:
    bad = "rules:\n  - match: {querry: x}\n    response: {conten: y}\n"
    with pytest.raises(CommandError) as caught:
        call_command("check_fixture", write(tmp_path, bad))
    lines = str(caught.value).splitlines()
    assert len(lines) == 2
    assert all(line.startswith(str(tmp_path)) for line in lines)


def test_check_fixture_reports_a_duplicate_name_a_repeated_key_and_a_typo_together(
    tmp_path: Path,
) -> None:
    bad = (
        "rules:\n"
        "  - name: same\n"
        "    response: {contnet: y}\n"
        "  - name: same\n"
        "    response: {content: a}\n"
        "    response: {content: b}\n"
    )
    path = write(tmp_path, bad)
    with pytest.raises(CommandError) as caught:
        call_command("check_fixture", path)
    assert str(caught.value).splitlines() == [
        f"{path}:3: rules[0].response.contnet: unknown key (did you mean 'content'?)",
        f"{path}:4: rules[1].name: duplicate name 'same' (also rules[0])",
        f"{path}:6: rules[1].response: duplicate key 'response' (first at line 5): "
        "the last one would silently win",
    ]


@pytest.mark.django_db
def test_any_change_bumps_the_version_and_the_snapshot_follows() -> None:
    call_command("import_fixture", str(GALAXY_STYLE_FIXTURE))
    snapshot = active_ruleset()
    assert active_ruleset() is snapshot  # no rebuild without a change
    set_rules_enabled(names=["router-1"], enabled=False)
    rebuilt = active_ruleset()
    assert rebuilt is not snapshot
    assert "router-1" not in [r.name for r in rebuilt.rules]


@pytest.mark.django_db
def test_regexes_see_only_the_configured_window_of_a_query(settings: Any) -> None:
    from staticagents.core.inquiry import Inquiry
    from staticagents.core.matching import match_inquiry
    from staticagents.services import import_fixture

    settings.STATIC_AGENTS_MATCH_WINDOW = 50
    tail = "rules:\n  - name: tail\n    match: {query: 'END$'}\n    response: {}\n"
    import_fixture(document=load_fixture(tail))
    ruleset = active_ruleset()
    assert match_inquiry(ruleset, Inquiry("x" * 40 + "END")) is not None
    assert match_inquiry(ruleset, Inquiry("x" * 100 + "END")) is None
