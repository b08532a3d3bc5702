"""``serve``: migrate, load a fixture, then serve HTTP and WebSocket with uvicorn.

Like every command, it runs Django's system checks first (``staticagents.checks``),
so a setting out of its limits stops it before anything is served.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from staticagents.checks import check_served_host
from staticagents.conf import settings
from staticagents.management.commands._fixture_io import read_fixture
from staticagents.models import Rule
from staticagents.services import ensure_control_token, import_fixture

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def port_number(text: str) -> int:
    if not (text.isascii() and text.isdigit() and int(text) <= 65535):
        message = f"{text!r} is not a port number, 0 to 65535 (--port, else $PORT)"
        raise argparse.ArgumentTypeError(message)
    return int(text)


def worker_count(text: str) -> int:
    if not (text.isascii() and text.isdigit() and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of workers (1 or more)")
    return int(text)


class Command(BaseCommand):
    help = "Migrate, load a fixture and serve HTTP and WebSocket with uvicorn."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--host",
            default=os.environ.get("HOST", "127.0.0.1"),
            help="default: $HOST, else 127.0.0.1",
        )
        # A string default goes through `type` too, so a bad $PORT is refused like a bad --port.
        parser.add_argument(
            "--port",
            type=port_number,
            default=os.environ.get("PORT", "8000"),
            help="default: $PORT, else 8000",
        )
        parser.add_argument("--workers", type=worker_count, default=1, help="worker processes")
        parser.add_argument(
            "--fixture",
            default=None,
            help="fixture to load (replacing the rules); default: "
            "$STATIC_AGENTS_FIXTURE, else the bundled demo when no rules",
        )
        parser.add_argument("--log-level", default="warning", choices=LOG_LEVELS)
        parser.add_argument(
            "--proxy-headers",
            action="store_true",
            help="trust X-Forwarded-For/-Proto from the proxy in front",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        for warning in check_served_host(options["host"]):
            self.stderr.write(self.style.WARNING(str(warning)))
        call_command("migrate", interactive=False, verbosity=0)
        self.load_fixture(options["fixture"] or settings.STATIC_AGENTS_FIXTURE or None)
        self.announce_control_token()
        self.stdout.write(
            f"Static Agents serving on http://{options['host']}:{options['port']}/ "
            f"({options['workers']} worker(s))"
        )
        self.stdout.flush()
        import uvicorn

        uvicorn.run(
            "staticagents.asgi:served_application",
            factory=True,
            host=options["host"],
            port=options["port"],
            workers=options["workers"],
            log_level=options["log_level"],
            access_log=False,
            lifespan="off",
            # X-Forwarded-* rewriting costs every request a middleware layer; a
            # deployment behind a proxy turns it on with --proxy-headers.
            proxy_headers=options["proxy_headers"],
            # A WebSocket message over the body limit is refused from its frame's header,
            # before it is read (close code 1009, "message too big"); uncompressed, since a
            # compressed frame is only known too big once inflated that far.
            ws_max_size=settings.STATIC_AGENTS_MAX_BODY_BYTES,
            ws_per_message_deflate=False,
        )

    def announce_control_token(self) -> None:
        """Print the control API's token the first time serve creates it (shown only then)."""
        token = ensure_control_token(settings.STATIC_AGENTS_CONTROL_TOKEN)
        if token is not None:
            self.stdout.write(f"Control API token (created now, shown once): {token}")

    def load_fixture(self, path: str | None) -> None:
        if path is None:
            if Rule.objects.exists():
                return
            path = str(settings.STATIC_AGENTS_DEFAULT_FIXTURE)
        result = import_fixture(document=read_fixture(path))
        self.stdout.write(f"{path}: {result.summary()}")
