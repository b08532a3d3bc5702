"""The snapshot: rebuilt only for what changed, with the sessions' scripts beside the rules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from staticagents import selectors
from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import match_inquiry
from staticagents.document.schema import validate_document
from staticagents.replying import snapshot
from staticagents.replying.snapshot import active_ruleset
from staticagents.services import import_fixture, reset_session


def rules(*names: str, content: str = "same") -> dict[str, Any]:
    documents = [
        {"name": name, "match": {"contains": name}, "response": {"content": f"{content} {name}"}}
        for name in names
    ]
    return validate_document({"rules": documents})


def compiled() -> int:
    return snapshot.compiler.compiled


@pytest.fixture
def ten_rules(db: None) -> None:
    import_fixture(document=rules(*(f"rule-{i}" for i in range(10))))
    active_ruleset()


def test_replacing_rules_recompiles_only_the_rules_that_changed(ten_rules: None) -> None:
    before = compiled()
    names = [f"rule-{i}" for i in range(10)]
    document = rules(*names)
    document["rules"][3] = rules("rule-3", content="new")["rules"][0]
    document["rules"].reverse()  # moved rules keep their compiled form, at their new place
    import_fixture(document=document)

    ruleset = active_ruleset()
    assert compiled() - before == 1
    assert [rule.name for rule in ruleset.rules] == names[::-1]
    assert [rule.position for rule in ruleset.rules] == list(range(10))
    answer = match_inquiry(ruleset, Inquiry(query="rule-3"))
    assert answer is not None and answer.responses == ({"content": "new rule-3"},)
    assert match_inquiry(ruleset, Inquiry(query="rule-0")) is ruleset.rules[-1]


def test_a_rebuild_reads_only_the_rules_that_changed(
    ten_rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[str] = []
    rule_documents = selectors._rule_documents

    def reading(pks: list[int]) -> Iterator[tuple[int, dict[str, Any]]]:
        for pk, document in rule_documents(pks):
            read.append(document["name"])
            yield pk, document

    monkeypatch.setattr(selectors, "_rule_documents", reading)
    document = rules(*(f"rule-{i}" for i in range(10)))
    document["rules"][7] = rules("rule-7", content="new")["rules"][0]
    import_fixture(document=document)
    assert match_inquiry(active_ruleset(), Inquiry(query="rule-7")).responses == (  # type: ignore[union-attr]
        {"content": "new rule-7"},
    )
    assert read == ["rule-7"]


def test_the_same_rules_again_keep_the_snapshot(ten_rules: None) -> None:
    ruleset = active_ruleset()
    import_fixture(document=rules(*(f"rule-{i}" for i in range(10))))
    assert active_ruleset() is ruleset


def test_a_session_script_compiles_no_rule_and_answers_only_its_session(ten_rules: None) -> None:
    ruleset, before = active_ruleset(), compiled()
    script = {"name": "replies", "responses": [{"content": "scripted"}], "on_exhausted": "error"}
    reset_session(session="mine", script=script)

    scripted = active_ruleset()
    assert compiled() == before
    assert scripted.rules == ruleset.rules  # the very compiled rules, not a rebuild
    mine = match_inquiry(scripted, Inquiry(query="rule-1", session="mine"))
    assert mine is not None and mine.name == "replies" and mine.position < 0
    other = match_inquiry(scripted, Inquiry(query="rule-1", session="other"))
    assert other is not None and other.name == "rule-1"

    reset_session(session="mine")  # the script ends with the session
    ended = match_inquiry(active_ruleset(), Inquiry(query="rule-1", session="mine"))
    assert ended is not None and ended.name == "rule-1"
    assert compiled() == before


def test_rules_that_come_back_are_not_compiled_again(ten_rules: None) -> None:
    before = compiled()
    import_fixture(document=rules("alone"))  # a test's own rules, between the demo's
    active_ruleset()
    import_fixture(document=rules(*(f"rule-{i}" for i in range(10))))
    assert [rule.name for rule in active_ruleset().rules][:2] == ["rule-0", "rule-1"]
    assert compiled() - before == 1  # only "alone"
