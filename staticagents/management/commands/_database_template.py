"""Migrated, empty SQLite databases to start from, so a new database needs no migrations.

``serve --template-dir DIR`` (the testing kit's service passes one) starts a
database file that does not exist yet from a copy of ``DIR/<key>.sqlite3``,
where the key names the migrations that made it; when there is none, the
database is migrated as usual and a copy of it, taken before anything is
loaded, becomes the template for the next start.
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


def template_path(directory: Path) -> Path:
    """Where the template for these migrations (ours, and this Django's) lives."""
    digest = hashlib.sha256(django.get_version().encode())
    for migration in sorted(MIGRATIONS.glob("*.py")):
        digest.update(migration.name.encode())
        digest.update(migration.read_bytes())
    return directory / f"migrated-{digest.hexdigest()[:16]}.sqlite3"


def database_file() -> Path | None:
    """The default database's file, when it is SQLite on a file."""
    name = str(connection.settings_dict.get("NAME") or "")
    if connection.vendor != "sqlite" or not name or name == ":memory:" or "mode=memory" in name:
        return None
    return Path(name)


def start_from_template(directory: Path) -> bool:
    """Copy the template to a database file that does not exist yet; whether it did."""
    database, template = database_file(), template_path(directory)
    if database is None or database.exists() or not template.exists():
        return False
    connection.close()
    shutil.copyfile(template, database)
    return True


def save_template(directory: Path) -> None:
    """Keep a copy of the (just migrated) database as the template, unless there is one.

    Written beside it and renamed into place, so concurrent starts never see half a file.
    """
    database, template = database_file(), template_path(directory)
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
