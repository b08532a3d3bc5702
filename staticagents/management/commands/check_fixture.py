from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from staticagents.core.reach import shadowed_rules
from staticagents.management.commands._fixture_io import read_fixture


class Command(BaseCommand):
    help = "Validate a fixture without touching the database."

    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path")

    def handle(self, *args: Any, **options: Any) -> None:
        document = read_fixture(options["path"])
        path = options["path"]
        self.stdout.write(f"{path}: valid, {len(document['rules'])} rule(s)")
        for shadow in shadowed_rules(document["rules"]).values():
            self.stderr.write(self.style.WARNING(f"{path}: warning: {shadow.message()}"))
