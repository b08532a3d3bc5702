"""The kit's service process: a new one starts from a migrated template database."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from staticagents.management.commands._database_template import MIGRATIONS
from staticagents.testing import server as kit_server
from staticagents.testing.server import ServerFailed, StaticAgentsServer


def applied_migrations(database: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT app, name, applied FROM django_migrations ORDER BY id")
        return [tuple(row) for row in rows]


def test_a_new_service_starts_from_the_template_the_first_one_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templates = tmp_path / "templates"
    monkeypatch.setattr(kit_server, "TEMPLATE_DIR", templates)

    with StaticAgentsServer(tmp_path / "first") as first:
        assert first.client().counters(every_session=True).requests == 0
    [template] = templates.glob("migrated-*.sqlite3")
    made = applied_migrations(template)
    ours = {name for app, name, _ in made if app == "staticagents"}
    assert ours == {path.stem for path in MIGRATIONS.glob("0*.py")}
    with sqlite3.connect(template) as db:  # taken before the demo rules were loaded
        assert db.execute("SELECT COUNT(*) FROM staticagents_rule").fetchone() == (0,)

    with StaticAgentsServer(tmp_path / "second") as second:
        assert [r["name"] for r in second.client().export_fixture()["rules"]]  # the demo
    # The second service migrated nothing: its migrations are the template's, to the second.
    assert applied_migrations(tmp_path / "second" / "db.sqlite3") == made


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
