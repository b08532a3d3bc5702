"""``python -m staticagents`` and the ``static-agents`` command: Django's management commands.

An installed wheel has no ``manage.py``; this is its stand-in, so
``static-agents serve --port 8000`` or ``python -m staticagents import_fixture rules.yml``
work from any directory. A setting that cannot be used (``DEBUG=tru``) is reported
in one line on stderr, and the command exits with status 1.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    """Run one management command (``serve``, ``import_fixture``, ``migrate``, ...)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "staticagents.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        execute_from_command_line(["static-agents", *arguments])
    except ImproperlyConfigured as error:
        sys.exit(f"static-agents: {error}")


if __name__ == "__main__":
    main()
