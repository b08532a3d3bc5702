"""Settings of this repository's Django project: the service's own, on the checkout's database.

``manage.py`` and the test suite run with these; an installed package runs with
``staticagents.settings`` alone. The only difference: without ``DATABASE_URL``, a
checkout keeps its SQLite file beside ``manage.py`` (``db.sqlite3``).
"""

from __future__ import annotations

from pathlib import Path

from staticagents.settings import *  # noqa: F403
from staticagents.settings import database_config, database_url

BASE_DIR = Path(__file__).resolve().parent.parent

DATABASES = {"default": database_config(database_url(f"sqlite:///{BASE_DIR / 'db.sqlite3'}"))}
