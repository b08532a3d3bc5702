"""``python -m staticagents`` and the ``static-agents`` command: the service's management commands.

An installed wheel has no ``manage.py``; this is its stand-in, so
``static-agents serve --port 8000`` or ``python -m staticagents import_fixture rules.yml``
work from any directory. ``--help`` (or no command) lists Static Agents' own
commands and ``--version`` gives its version; every Django command works too
(``static-agents help --commands`` lists them all). A setting that cannot be used
(``DEBUG=tru``) is reported in one line on stderr, and the command exits with status 1.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence

# Static Agents' own commands, in the order a new user meets them.
COMMANDS = ("serve", "token", "import_fixture", "export_fixture", "check_fixture")
HELP_FLAGS = ("-h", "--help", "help")


def main(argv: Sequence[str] | None = None) -> None:
    """Run one management command (``serve``, ``import_fixture``, ``migrate``, ...)."""
    # Importing Django and the service makes a few hundred thousand objects that live as
    # long as the process; with the default thresholds the collector walked them over and
    # over (a tenth of serve's CPU to its first reply; bench/README.md, the testing kit,
    # step 22). ``asgi.served_application`` keeps this threshold for serving.
    gc.set_threshold(1_000_000, 20, 100)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "staticagents.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--version" in arguments:
        print(f"static-agents {service_version()}")
        return
    try:
        if not arguments or (len(arguments) == 1 and arguments[0] in HELP_FLAGS):
            print(overview())
            return
        execute_from_command_line(["static-agents", *arguments])
    except ImproperlyConfigured as error:
        sys.exit(f"static-agents: {error}")


def service_version() -> str:
    # Imported here: reading package metadata costs serve's start-up 20 ms (step 22).
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("static-agents")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def overview() -> str:
    """What ``static-agents --help`` prints: the commands, each with its own one-line help."""
    import django
    from django.core.management import load_command_class

    django.setup()
    lines = [
        "usage: static-agents <command> [options]",
        "",
        f"Static Agents {service_version()}: a deterministic stand-in for the language model",
        "behind an AI agent.",
        "",
        "Commands:",
    ]
    for name in COMMANDS:
        lines.append(f"  {name:<16} {load_command_class('staticagents', name).help}")
    lines += [
        "",
        "static-agents <command> --help describes a command's options;",
        "static-agents help --commands lists every command, Django's own included (migrate, ...).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
