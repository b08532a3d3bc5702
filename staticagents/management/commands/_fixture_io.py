"""Shared by the fixture commands: read a file and turn document errors into CommandError."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from staticagents.document.files import load_fixture
from staticagents.document.terms import MAX_FIXTURE_BYTES, DocumentInvalid


def read_fixture(path: str) -> dict[str, Any]:
    """Load and validate the fixture at ``path``; every problem becomes one line of the error."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_FIXTURE_BYTES:  # refuse before reading it into memory
            raise CommandError(
                f"{path}: fixture is {size:,} bytes; the limit is {MAX_FIXTURE_BYTES:,} bytes"
            )
        data = file.read_bytes()
    except OSError as exc:
        raise CommandError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return load_fixture(data, source=str(path))
    except DocumentInvalid as exc:
        raise CommandError("\n".join(exc.lines())) from None
