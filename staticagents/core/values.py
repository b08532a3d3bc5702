"""Value classes: dataclasses that are read-only to the type checker and cheap to build.

A frozen dataclass sets each field through ``object.__setattr__`` when it is
built, which is four times the cost of a plain one: for ``Reply`` (15 fields)
1.5 µs instead of 0.4, on every request. The values built on the reply path
are declared with ``value_class`` instead: mypy (strict, in CI) refuses any
assignment to their fields, as it would for a frozen class, and at run time
they are plain slotted dataclasses. Unlike frozen ones, they are not hashable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def value_class(cls: type[T]) -> type[T]:
    """A slotted dataclass whose fields the type checker treats as read-only."""
    return dataclass(slots=True)(cls)
