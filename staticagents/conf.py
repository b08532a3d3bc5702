"""The service's own settings, read one way: ``from staticagents.conf import settings``.

``settings.STATIC_AGENTS_X`` is ``django.conf.settings.STATIC_AGENTS_X``, typed. It
is what every module of the package reads, the reply path included, where a read
must be cheap: Django's lazy settings object runs Python code on each attribute
read, so each setting is copied here on its first read, and every copy is
forgotten when Django announces a change (``setting_changed``: ``override_settings``
and pytest-django's ``settings`` fixture both send it), so the next read takes the
new value. Nothing is read at import time. Their limits: ``staticagents.checks``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from django.conf import settings as django_settings
from django.core.signals import setting_changed

T = TypeVar("T")


class Setting(Generic[T]):
    """One Django setting, copied onto the instance on its first read."""

    def __set_name__(self, owner: type[ServiceSettings], name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type[ServiceSettings]) -> Setting[T]: ...

    @overload
    def __get__(self, instance: ServiceSettings, owner: type[ServiceSettings]) -> T: ...

    def __get__(
        self, instance: ServiceSettings | None, owner: type[ServiceSettings]
    ) -> T | Setting[T]:
        if instance is None:
            return self
        value: T = getattr(django_settings, self.name)
        # No __set__, so the instance's copy shadows this descriptor from now on.
        instance.__dict__[self.name] = value
        return value


class ServiceSettings:
    """Every ``STATIC_AGENTS_*`` setting (``staticagents.settings`` documents each)."""

    STATIC_AGENTS_FIXTURE = Setting[str]()
    STATIC_AGENTS_DEFAULT_FIXTURE = Setting[Path]()
    STATIC_AGENTS_CONTROL_TOKEN = Setting[str]()
    STATIC_AGENTS_JOURNAL = Setting[bool]()
    STATIC_AGENTS_JOURNAL_MAX = Setting[int]()
    STATIC_AGENTS_JOURNAL_MAX_BYTES = Setting[int]()
    STATIC_AGENTS_JOURNAL_BODY_BYTES = Setting[int]()
    STATIC_AGENTS_JOURNAL_BACKLOG = Setting[int]()
    STATIC_AGENTS_LIVE_PREFIX = Setting[str]()
    STATIC_AGENTS_MATCH_WINDOW = Setting[int]()
    STATIC_AGENTS_MATCH_BUDGET_MS = Setting[int]()
    STATIC_AGENTS_VERSIONS_KEEP = Setting[int]()
    STATIC_AGENTS_MAX_BODY_BYTES = Setting[int]()
    STATIC_AGENTS_API_KEYS = Setting[Sequence[str]]()
    STATIC_AGENTS_METRICS = Setting[str]()
    STATIC_AGENTS_REDACT_PATTERNS = Setting[Sequence[str]]()
    STATIC_AGENTS_MAX_STREAM_SECONDS = Setting[float]()
    STATIC_AGENTS_WORD_DELAY_MS = Setting[int]()
    STATIC_AGENTS_FIRST_DELAY_MS = Setting[int]()

    def forget(self, **kwargs: Any) -> None:
        """Drop every copy; the next read of each setting takes Django's value."""
        self.__dict__.clear()


settings = ServiceSettings()
setting_changed.connect(settings.forget, dispatch_uid="staticagents-service-settings")
