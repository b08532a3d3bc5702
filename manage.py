#!/usr/bin/env python
"""Django's command-line utility for Static Agents."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as error:  # a setting that cannot be used: one line, no traceback
        sys.exit(f"{os.path.basename(sys.argv[0])}: {error}")


if __name__ == "__main__":
    main()
