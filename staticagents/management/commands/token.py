"""``token``: whether a control token exists (and how it begins); ``--rotate`` makes a new one.

Only the token's SHA-256 digest and its first characters are stored, so the
token itself cannot be shown again: a lost token is replaced (``--rotate``),
and the old one stops working at once, in every worker.
"""

from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from staticagents.conf import settings
from staticagents.models import ControlToken
from staticagents.selectors import stored_control_token
from staticagents.services import rotate_control_token


class Command(BaseCommand):
    help = "Show whether a control token exists; --rotate replaces it (the new one shown once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rotate",
            action="store_true",
            help="make a new token, print it once; the old one stops working",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        configured = settings.STATIC_AGENTS_CONTROL_TOKEN
        if configured:
            if options["rotate"]:
                raise CommandError(
                    "the control token is set by STATIC_AGENTS_CONTROL_TOKEN: change it there"
                )
            # Not even its first characters: a token chosen by hand may be short.
            self.stdout.write("The control token is set by STATIC_AGENTS_CONTROL_TOKEN.")
            return
        call_command("migrate", interactive=False, verbosity=0)
        if options["rotate"]:
            token = rotate_control_token()
            self.stdout.write(f"Control API token (created now, shown once): {token}")
            return
        self.stdout.write(describe(stored_control_token()))


def describe(token: ControlToken | None) -> str:
    if token is None:
        return (
            "No control token yet: serve creates one on its first start "
            "(or make one now with static-agents token --rotate)."
        )
    begins = f", it begins {token.hint!r}" if token.hint else ""
    return (
        f"A control token exists (created {token.created_at:%Y-%m-%d %H:%M} UTC{begins}). "
        "Only its digest is stored: static-agents token --rotate replaces it."
    )
