"""Ready-made SQLite databases to start from, so a new database needs no migrations.

``serve --template-dir DIR`` (the testing kit's service passes one) starts a
database file that does not exist yet from a copy of a template in ``DIR``: one
that also holds the bundled demo's rules when the demo is what it would load
(``loaded-<key>``, the key naming the migrations and the demo file's bytes), else
one just migrated (``migrated-<key>``). When there is none, the database is made
as usual and a copy of it, taken at that point, becomes the template for the next
start.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import django
from django.db import connection

import staticagents

MIGRATIONS = Path(staticagents.__file__).resolve().parent / "migrations"


def template_path(directory: Path, fixture: Path | None = None) -> Path:
    """Where the template for these migrations (ours, and this Django's) lives; with
    ``fixture``, the one that also holds that fixture's rules, as the file is now."""
    digest = hashlib.sha256(django.get_version().encode())
    for migration in sorted(MIGRATIONS.glob("*.py")):
        digest.update(migration.name.encode())
        digest.update(migration.read_bytes())
    if fixture is not None:
        digest.update(b"\0" + fixture.read_bytes())
    kind = "migrated" if fixture is None else "loaded"
    return directory / f"{kind}-{digest.hexdigest()[:16]}.sqlite3"


def database_file() -> Path | None:
    """The default database's file, when it is SQLite on a file."""
    name = str(connection.settings_dict.get("NAME") or "")
    if connection.vendor != "sqlite" or not name or name == ":memory:" or "mode=memory" in name:
        return None
    return Path(name)


def new_database() -> bool:
    """Whether the default database is an SQLite file that does not exist yet."""
    database = database_file()
    return database is not None and not database.exists()


def start_from_template(directory: Path, fixture: Path | None = None) -> bool:
    """Copy the template (with ``fixture``'s rules, if given) to a database file that does
    not exist yet; whether it did."""
    database, template = database_file(), template_path(directory, fixture)
    if database is None or database.exists() or not template.exists():
        return False
    connection.close()
    shutil.copyfile(template, database)
    return True


def save_template(directory: Path, fixture: Path | None = None) -> None:
    """Keep a copy of the (just migrated, or just given ``fixture``'s rules) database as
    the template, unless there is one.

    Written beside it and renamed into place, so concurrent starts never see half a file.
    """
    database, template = database_file(), template_path(directory, fixture)
    if database is None or template.exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(dir=directory, suffix=".partial")
    os.close(handle)
    try:
        with sqlite3.connect(database) as source, sqlite3.connect(partial) as copy:
            source.backup(copy)
        source.close()
        copy.close()
        os.replace(partial, template)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
