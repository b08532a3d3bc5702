"""The snapshot: rebuilt only for what changed, with the sessions' scripts beside the rules."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

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


@pytest.fixture
def read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the rules the snapshot reads from now on."""
    names: list[str] = []
    rule_documents = selectors._rule_documents

    def reading(pks: list[int]) -> Iterator[tuple[int, dict[str, Any]]]:
        for pk, document in rule_documents(pks):
            names.append(document["name"])
            yield pk, document

    monkeypatch.setattr(selectors, "_rule_documents", reading)
    return names


def replace_rule_7() -> None:
    document = rules(*(f"rule-{i}" for i in range(10)))
    document["rules"][7] = rules("rule-7", content="new")["rules"][0]
    import_fixture(document=document)


def test_a_rebuild_after_another_process_replaced_reads_only_the_rules_that_changed(
    ten_rules: None, read: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    replace_rule_7()
    monkeypatch.setattr(selectors, "written_ruleset", selectors.WrittenRuleset())
    monkeypatch.setattr(snapshot, "written_ruleset", selectors.written_ruleset)
    assert match_inquiry(active_ruleset(), Inquiry(query="rule-7")).responses == (  # type: ignore[union-attr]
        {"content": "new rule-7"},
    )
    assert read == ["rule-7"]


def test_a_rebuild_after_this_process_replaced_reads_nothing_but_the_stamp(
    ten_rules: None, read: list[str], django_assert_max_num_queries: Any
) -> None:
    replace_rule_7()
    # The stamp, and the build's read of it: the rules, defaults, fallback, upstreams and
    # scripts are the ones this process wrote. PostgreSQL's jsonb gives documents back as it
    # orders them: there the build reads them (the rule that changed unless an earlier
    # snapshot read it, the extras).
    on_sqlite = connection.vendor == "sqlite"
    with django_assert_max_num_queries(2 if on_sqlite else 9):
        ruleset = active_ruleset()
    assert match_inquiry(ruleset, Inquiry(query="rule-7")).responses == (  # type: ignore[union-attr]
        {"content": "new rule-7"},
    )
    assert read == [] if on_sqlite else read in ([], ["rule-7"])


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


def test_a_new_script_compiles_alone_and_the_others_stay_as_they_were(db: None) -> None:
    def script(content: str) -> dict[str, Any]:
        return {"name": "replies", "responses": [{"content": content}], "on_exhausted": "error"}

    for key in ("first", "second", "third"):
        reset_session(session=key, script=script(key))
    before = active_ruleset().scripts
    reset_session(session="first")  # ends, moving no other script
    reset_session(session="second", script=script("second, again"))  # the same session anew
    reset_session(session="fourth", script=script("fourth"))

    after = active_ruleset().scripts
    assert set(after) == {"second", "third", "fourth"}
    assert after["third"] is before["third"]  # kept, not compiled again
    assert after["second"] is not before["second"]
    assert after["second"].responses == ({"content": "second, again"},)
    assert len({rule.position for rule in after.values()}) == 3
    assert all(rule.position < 0 for rule in after.values())
    answer = match_inquiry(active_ruleset(), Inquiry(query="x", session="fourth"))
    assert answer is not None and answer.responses == ({"content": "fourth"},)


def test_rules_that_come_back_are_not_compiled_again(ten_rules: None) -> None:
    before = compiled()
    import_fixture(document=rules("alone"))  # a test's own rules, between the demo's
    active_ruleset()
    import_fixture(document=rules(*(f"rule-{i}" for i in range(10))))
    assert [rule.name for rule in active_ruleset().rules][:2] == ["rule-0", "rule-1"]
    assert compiled() - before == 1  # only "alone"


# -- a build under way: replies on the loop answer from the previous snapshot meanwhile ----


@pytest.fixture
def committed_rules(transactional_db: None) -> None:
    """Rules committed, so the build's own thread (and connection) reads them."""
    import_fixture(document=rules("old"))
    active_ruleset()


def test_a_reply_answers_from_the_previous_snapshot_until_a_long_build_is_installed(
    committed_rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, builds = threading.Event(), []
    real = snapshot.build_ruleset

    def long_build(previous: Any = None, **options: Any) -> Any:
        builds.append(threading.current_thread().name)
        options["sizing"](snapshot.SMALL_BUILD_RULES + 1)  # a replace of many rules
        release.wait(30)
        return real(previous, **options)

    monkeypatch.setattr(snapshot, "build_ruleset", long_build)
    monkeypatch.setattr(snapshot, "WAIT_FOR_BUILD_SECONDS", 0)  # it is longer than the wait
    import_fixture(document=rules("new"))

    async def replies() -> tuple[list[list[str]], list[str]]:
        meanwhile = [[r.name for r in (await snapshot.current_ruleset()).rules] for _ in range(5)]
        release.set()
        for _ in range(3000):  # until the build's thread installs it
            names = [r.name for r in (await snapshot.current_ruleset()).rules]
            if names != ["old"]:
                return meanwhile, names
            await asyncio.sleep(0.01)
        return meanwhile, names

    meanwhile, after = asyncio.run(replies())
    assert meanwhile == [["old"]] * 5  # the previous snapshot, whole
    assert after == ["new"]
    assert builds == ["static-agents-snapshot"]  # one build, off the loop, for every reply


def test_a_reply_waits_for_a_build_of_a_few_rules_however_long_it_takes(
    committed_rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = snapshot.build_ruleset

    def slow_small_build(previous: Any = None, **options: Any) -> Any:
        options["sizing"](1)  # one rule to read anew: an edit
        time.sleep(0.2)  # longer than the wait
        return real(previous, **options)

    monkeypatch.setattr(snapshot, "build_ruleset", slow_small_build)
    monkeypatch.setattr(snapshot, "WAIT_FOR_BUILD_SECONDS", 0)
    import_fixture(document=rules("new"))
    ruleset = asyncio.run(snapshot.current_ruleset())
    assert [rule.name for rule in ruleset.rules] == ["new"]  # read your writes


def test_a_reply_reads_its_writes_when_the_builds_thread_is_slow_to_learn_its_size(
    committed_rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a busy machine the build's thread may not even have read which rules changed
    when the wait is over: the reply waits for that, then for the edit's small build."""
    real = snapshot.build_ruleset

    def slow_to_start(previous: Any = None, **options: Any) -> Any:
        time.sleep(0.2)  # longer than the wait, before the build knows its size
        return real(previous, **options)

    monkeypatch.setattr(snapshot, "build_ruleset", slow_to_start)
    monkeypatch.setattr(snapshot, "WAIT_FOR_BUILD_SECONDS", 0)
    import_fixture(document=rules("new"))
    ruleset = asyncio.run(snapshot.current_ruleset())
    assert [rule.name for rule in ruleset.rules] == ["new"]


def test_a_reply_that_leaves_while_a_build_runs_does_not_end_it_for_the_others(
    committed_rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    real = snapshot.build_ruleset

    def small_build(previous: Any = None, **options: Any) -> Any:
        options["sizing"](1)
        release.wait(30)
        return real(previous, **options)

    monkeypatch.setattr(snapshot, "build_ruleset", small_build)
    monkeypatch.setattr(snapshot, "WAIT_FOR_BUILD_SECONDS", 0)
    import_fixture(document=rules("new"))

    async def replies() -> list[str]:
        leaving = asyncio.ensure_future(snapshot.current_ruleset())
        staying = asyncio.ensure_future(snapshot.current_ruleset())
        await asyncio.sleep(0.05)  # both wait for the build
        leaving.cancel()  # its client left
        await asyncio.sleep(0.05)
        release.set()
        return [rule.name for rule in (await asyncio.wait_for(staying, 30)).rules]

    assert asyncio.run(replies()) == ["new"]
    assert [rule.name for rule in active_ruleset().rules] == ["new"]  # installed


def test_a_reply_waits_for_a_build_that_ends_within_the_wait(
    committed_rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot, "WAIT_FOR_BUILD_SECONDS", 60)
    import_fixture(document=rules("new"))
    ruleset = asyncio.run(snapshot.current_ruleset())
    assert [rule.name for rule in ruleset.rules] == ["new"]


def test_code_in_a_thread_waits_for_the_build_under_way(
    committed_rules: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, release = threading.Event(), threading.Event()
    real = snapshot.build_ruleset

    def long_build(previous: Any = None, **options: Any) -> Any:
        started.set()
        release.wait(30)
        return real(previous, **options)

    monkeypatch.setattr(snapshot, "build_ruleset", long_build)
    monkeypatch.setattr(snapshot, "WAIT_FOR_BUILD_SECONDS", 0)
    import_fixture(document=rules("new"))
    asyncio.run(snapshot.current_ruleset())  # starts the build on its thread
    assert started.wait(30)
    threading.Timer(0.05, release.set).start()
    assert [rule.name for rule in active_ruleset().rules] == ["new"]  # the control API's read
