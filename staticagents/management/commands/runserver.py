"""``runserver`` refuses, and points to ``serve``.

Django's development server speaks WSGI: it would serve the Django routes (the
Galaxy API, the control API, the admin) without the reply routes (``/v1/…``,
ADK, the streams) or the WebSocket, which are ASGI (``staticagents.asgi``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Refused: Static Agents is served by serve (runserver would serve half the API)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", help="ignored")
        parser.add_argument("rest", nargs="*", help="ignored")

    def handle(self, *args: Any, **options: Any) -> None:
        raise CommandError(
            "runserver would serve only the Django routes, without /v1/*, the ADK and the "
            "WebSocket; run `python manage.py serve` (or `static-agents serve`) instead, "
            "with --port and --log-level debug as you need"
        )
