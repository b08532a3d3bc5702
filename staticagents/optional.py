"""Importing a library without the optional modules it would load for features unused here.

A library that imports an optional dependency when it is installed (and does
without it when it is not) can be imported with that dependency hidden: the
service's DRF and uvicorn's reloader (``serve``).
Only what is not imported yet is hidden, and only during the import.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def hidden_modules(*names: str) -> Iterator[None]:
    """Within the block, importing one of ``names`` (not imported yet) raises ImportError."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # Python's "import blocked" mark
    try:
        yield
    finally:
        for name in hidden:
            del sys.modules[name]
