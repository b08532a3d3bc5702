from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from staticagents.management.commands._fixture_io import read_fixture
from staticagents.services import COMMAND, import_fixture


class Command(BaseCommand):
    help = "Import a YAML or JSON fixture: replace the rules (default) or merge by rule name."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="the fixture file (YAML, JSON, or ADK test-agent JSON)")
        parser.add_argument(
            "--merge",
            action="store_true",
            help="upsert rules by name instead of replacing everything",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="validate and report what would change, change nothing",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        document = read_fixture(options["path"])
        result = import_fixture(
            document=document, merge=options["merge"], dry_run=options["dry_run"], by=COMMAND
        )
        self.stdout.write(f"{options['path']}: {result.summary()}")
        for warning in result.warnings:
            self.stderr.write(self.style.WARNING(f"{options['path']}: warning: {warning}"))
