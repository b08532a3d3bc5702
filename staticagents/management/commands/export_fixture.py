from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from staticagents.document.files import dump_fixture
from staticagents.selectors import export_document


class Command(BaseCommand):
    help = "Export the rules, defaults and fallback as a fixture (stdout when no path is given)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", nargs="?", help="file to write; stdout when absent")
        parser.add_argument(
            "--format",
            choices=["yaml", "json"],
            default=None,
            help="default: from the file extension, else yaml",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path = options["path"]
        fmt = options["format"] or ("json" if path and path.endswith(".json") else "yaml")
        text = dump_fixture(export_document(), fmt)
        if path:
            Path(path).write_text(text, encoding="utf-8")
        else:
            self.stdout.write(text, ending="")
