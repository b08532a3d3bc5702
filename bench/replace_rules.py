"""Replacing rules: 5,000 rules into an empty database, over 5,000 others, over themselves,
and with one of them changed; after each, the snapshot brought up to date.

The testing kit replaces the rules before every test, so replacing must cost
about what importing into an empty database costs (target: at most 1.5 times),
and rules that did not change are neither rewritten nor compiled again.
Runs in its own process on a scratch SQLite database, or on the empty scratch
database given (its rules are replaced):

    python -m bench.replace_rules [--rules 5000] [--rounds 5] [--database-url URL]

Each round imports one set into the emptied database, then replaces it with
the other, then with the same again, then with one rule changed; the best
time of each step over the rounds is kept.
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


def timed_snapshot() -> tuple[float, int]:
    """Seconds to bring the snapshot up to date, and how many rules it compiled."""
    from staticagents.replying import snapshot

    before = snapshot.compiler.compiled
    started = time.perf_counter()
    snapshot.active_ruleset()
    return time.perf_counter() - started, snapshot.compiler.compiled - before


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
    changed = json.loads(json.dumps(second))
    changed["rules"][rules // 2]["responses"][0]["content"] = "changed"
    empty = load_fixture("rules: []", "empty.yml")
    steps = {
        "import into empty": first,
        "replace by 5,000 others": second,
        "replace by the same": second,
        "replace, one rule changed": changed,
    }
    best: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        import_fixture(document=empty)
        timed_snapshot()
        for step, document in steps.items():
            statements = Statements()
            seconds = timed_import(document, statements)
            rebuild, compiled = timed_snapshot()
            row = {
                "step": step.replace("5,000", f"{rules:,}"),
                "import s": round(seconds, 3),
                "statements": statements.total,
                "version updates": statements.version_updates,
                "snapshot s": round(rebuild, 3),
                "rules compiled": compiled,
            }
            if step not in best or seconds < best[step]["import s"]:
                best[step] = row
        assert Rule.objects.filter(name__startswith="b-").count() == rules == Rule.objects.count()
    into_empty = best["import into empty"]["import s"]
    for row in best.values():
        row["÷ import into empty"] = round(row["import s"] / into_empty, 2)
    return list(best.values())


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
        for row in rows:
            print(row)


if __name__ == "__main__":
    main()
