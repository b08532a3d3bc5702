"""Replacing rules: import 5,000 rules into an empty database, then replace them with 5,000 others.

The testing kit replaces the rules before every test, so replacing must cost
about what importing into an empty database costs (target: at most 1.5 times).
Runs in its own process on a scratch SQLite database, or on the empty scratch
database given (its rules are replaced):

    python -m bench.replace_rules [--rules 5000] [--rounds 5] [--database-url URL]

Each round imports one set into the emptied database, then replaces it with
the other; the best time of each step over the rounds is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Statements:
    """What one step sent to the database: every statement, and the version bumps among them."""

    total: int = 0
    version_updates: int = 0


def rule_set(count: int, prefix: str) -> list[dict[str, Any]]:
    """``count`` rules of the matching bench's mix, each answering with two scripted responses."""
    from bench.matching import rule_documents

    return [
        {
            "name": f"{prefix}-{rule['name']}",
            "match": rule["match"],
            "responses": [{"content": f"first {prefix}"}, {"content": f"then {prefix}"}],
        }
        for rule in rule_documents(count)
    ]


@contextmanager
def counting(statements: Statements) -> Iterator[None]:
    """Count the statements sent meanwhile (an execute wrapper: no query log to slow it)."""
    from django.db import connection

    from staticagents.models import RulesetState

    version_table = RulesetState._meta.db_table

    def count(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        statements.total += 1
        if sql.startswith("UPDATE") and version_table in sql:
            statements.version_updates += 1
        return execute(sql, *args)

    with connection.execute_wrapper(count):
        yield


def timed_import(document: dict[str, Any], statements: Statements) -> float:
    from staticagents.services import import_fixture

    started = time.perf_counter()
    with counting(statements):
        import_fixture(document=document)
    return time.perf_counter() - started


def run(rules: int, rounds: int) -> list[dict[str, Any]]:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)

    from staticagents.document.files import load_fixture
    from staticagents.models import Rule
    from staticagents.services import import_fixture

    first, second = (
        load_fixture(json.dumps({"rules": rule_set(rules, prefix)}), f"{prefix}.json")
        for prefix in ("a", "b")
    )
    empty = load_fixture("rules: []", "empty.yml")
    import_s, replace_s = [], []
    for _ in range(rounds):
        import_fixture(document=empty)
        into_empty, replacing = Statements(), Statements()
        import_s.append(timed_import(first, into_empty))
        replace_s.append(timed_import(second, replacing))
        assert Rule.objects.filter(name__startswith="b-").count() == rules == Rule.objects.count()
    best_import, best_replace = min(import_s), min(replace_s)
    return [
        {
            "rules": rules,
            "import into empty s": round(best_import, 3),
            "replace s": round(best_replace, 3),
            "replace ÷ import": round(best_replace / best_import, 2),
            "statements (import, replace)": f"{into_empty.total}, {replacing.total}",
            "version updates (import, replace)": (
                f"{into_empty.version_updates}, {replacing.version_updates}"
            ),
        }
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rules", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=5, help="best of this many rounds")
    parser.add_argument("--database-url", help="an empty scratch database (default: SQLite)")
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sa-bench-") as scratch:
        sqlite = f"sqlite:///{Path(scratch) / 'db.sqlite3'}"
        os.environ["DATABASE_URL"] = args.database_url or sqlite
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
        rows = run(args.rules, args.rounds)
    if args.json:
        print(json.dumps(rows))
    else:
        for key, value in rows[0].items():
            print(f"{key:<36} {value}")


if __name__ == "__main__":
    main()
