"""Fixtures: import and export of a 10,000-rule fixture, and the admin's rule list.

Runs in its own process on a scratch SQLite database:

    python -m bench.fixtures [--rules 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml


def timed(work: Any) -> tuple[Any, float]:
    started = time.perf_counter()
    result = work()
    return result, time.perf_counter() - started


def run(rules: int) -> list[dict[str, Any]]:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)

    from django.contrib.auth.models import User
    from django.test import Client

    from bench.matching import rule_documents
    from staticagents.document.files import dump_fixture, load_fixture
    from staticagents.selectors import export_document
    from staticagents.services import create_rule, import_fixture, set_rules_enabled

    text = yaml.safe_dump({"rules": rule_documents(rules)}, sort_keys=False)
    document, parse_s = timed(lambda: load_fixture(text, "bench.yml"))
    _, import_s = timed(lambda: import_fixture(document=document))
    exported, export_s = timed(lambda: dump_fixture(export_document()))
    admin = User.objects.create_superuser("bench", "bench@example.org", "bench")
    client = Client()
    client.force_login(admin)
    client.get("/admin/staticagents/rule/")  # warm up templates and the snapshot
    page, page_s = timed(lambda: client.get("/admin/staticagents/rule/"))
    assert page.status_code == 200
    _, search_s = timed(lambda: client.get("/admin/staticagents/rule/?q=topic+00004"))
    # A curator's edit, then the list again: its rules' status is worked out anew.
    set_rules_enabled(names=["rule-1"], enabled=False)
    _, edited_s = timed(lambda: client.get("/admin/staticagents/rule/"))
    # One rule added where it answers (the control API's and the admin's default place).
    one = {"rules": [{"name": "added", "match": {"contains": "new"}, "response": {"content": "x"}}]}
    added = load_fixture(yaml.safe_dump(one))["rules"][0]
    _, add_s = timed(lambda: create_rule(document=added, place="auto"))
    size = len(text.encode())
    return [
        {
            "step": f"parse + validate {rules:,} rules ({size / 1e6:.1f} MB YAML)",
            "seconds": round(parse_s, 3),
        },
        {"step": f"import {rules:,} rules into the database", "seconds": round(import_s, 3)},
        {
            "step": "import total (parse + validate + write)",
            "seconds": round(parse_s + import_s, 3),
        },
        {
            "step": f"export {rules:,} rules to YAML ({len(exported) / 1e6:.1f} MB)",
            "seconds": round(export_s, 3),
        },
        {"step": "admin rule list, first page", "seconds": round(page_s, 3)},
        {"step": "admin rule list, a search", "seconds": round(search_s, 3)},
        {"step": "admin rule list, after one rule changed", "seconds": round(edited_s, 3)},
        {"step": f"add one rule to {rules:,}, placed where it answers", "seconds": round(add_s, 3)},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rules", type=int, default=10_000)
    parser.add_argument("--json", action="store_true", help="print rows as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sa-bench-") as scratch:
        os.environ["DATABASE_URL"] = f"sqlite:///{Path(scratch) / 'db.sqlite3'}"
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
        rows = run(args.rules)
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            print(f"{row['step']:<55} {row['seconds']:>8.3f} s")


if __name__ == "__main__":
    main()
