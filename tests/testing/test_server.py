"""The kit's service process: a new one starts from a migrated template database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from staticagents.conf import settings
from staticagents.management.commands._database_template import MIGRATIONS, template_path
from staticagents.testing import server as kit_server
from staticagents.testing.server import ServerFailed, StaticAgentsServer


def applied_migrations(database: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT app, name, applied FROM django_migrations ORDER BY id")
        return [tuple(row) for row in rows]


def rule_names(database: Path) -> list[str]:
    with sqlite3.connect(database) as db:
        return [
            name for (name,) in db.execute("SELECT name FROM staticagents_rule ORDER BY position")
        ]


def test_a_new_service_starts_from_the_template_the_first_one_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templates = tmp_path / "templates"
    monkeypatch.setattr(kit_server, "TEMPLATE_DIR", templates)

    with StaticAgentsServer(tmp_path / "first") as first:
        assert first.client().counters(every_session=True).requests == 0
        demo = [r["name"] for r in first.client().export_fixture()["rules"]]
    [migrated] = templates.glob("migrated-*.sqlite3")
    made = applied_migrations(migrated)
    ours = {name for app, name, _ in made if app == "staticagents"}
    assert ours == {path.stem for path in MIGRATIONS.glob("0*.py")}
    with sqlite3.connect(migrated) as db:  # taken before the demo rules were loaded
        assert db.execute("SELECT COUNT(*) FROM staticagents_rule").fetchone() == (0,)
    [loaded] = templates.glob("loaded-*.sqlite3")  # and this one after
    assert loaded == template_path(templates, settings.STATIC_AGENTS_DEFAULT_FIXTURE)
    assert rule_names(loaded) == demo and demo

    # The second service migrated nothing and loaded nothing: its database is the template's.
    with StaticAgentsServer(tmp_path / "second") as second:
        assert [r["name"] for r in second.client().export_fixture()["rules"]] == demo
        assert "its rules were in the template" in second.log()
    assert applied_migrations(tmp_path / "second" / "db.sqlite3") == made
    assert rule_names(tmp_path / "second" / "db.sqlite3") == demo

    # Given a fixture, a service starts from the migrated template and loads it.
    fixture = tmp_path / "one.yml"
    fixture.write_text("rules:\n  - name: only\n    response: {content: x}\n")
    environment = {"STATIC_AGENTS_FIXTURE": str(fixture)}
    with StaticAgentsServer(tmp_path / "third", environment=environment) as third:
        assert [r["name"] for r in third.client().export_fixture()["rules"]] == ["only"]
    assert applied_migrations(tmp_path / "third" / "db.sqlite3") == made
    assert sorted(templates.glob("*.sqlite3")) == sorted([migrated, loaded])


def test_a_changed_demo_fixture_has_a_template_of_its_own(tmp_path: Path) -> None:
    demo = tmp_path / "demo.yml"
    demo.write_text("rules: []\n")
    before = template_path(tmp_path, demo)
    demo.write_text("rules: []\n# changed\n")
    assert template_path(tmp_path, demo) != before
    assert template_path(tmp_path) != before  # and neither is the migrated one


def test_the_service_skips_djangos_checks_but_not_its_own(tmp_path: Path) -> None:
    server = StaticAgentsServer(tmp_path, environment={"STATIC_AGENTS_FIXTURE": "missing.yml"})
    assert "--skip-checks" in server.command()

    with pytest.raises(ServerFailed) as failed:
        server.start()

    assert "(staticagents.E006) STATIC_AGENTS_FIXTURE must name a fixture file" in str(failed.value)
    assert not (tmp_path / "db.sqlite3").exists()  # stopped before the database was touched


def test_bytecode_the_environment_keeps_out_of_the_source_goes_to_a_cache_of_the_kit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.setattr(kit_server, "BYTECODE_DIR", tmp_path / "bytecode")

    with StaticAgentsServer(tmp_path / "service") as server:
        environment = server.child_environment()
    assert "PYTHONDONTWRITEBYTECODE" not in environment
    assert environment["PYTHONPYCACHEPREFIX"] == str(tmp_path / "bytecode")
    # The service's modules were compiled there, so the next start reads them.
    assert list((tmp_path / "bytecode").rglob("staticagents/asgi.*.pyc"))
