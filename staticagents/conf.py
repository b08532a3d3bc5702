"""The settings the reply path reads on every request, held where a read is cheap.

``django.conf.settings`` is a lazy proxy: each attribute read runs Python code
in Django's ``LazyObject``, and the reply path reads a handful per request.
``hot`` copies a setting on its first read and forgets every copy when Django
announces a change (``setting_changed``: ``override_settings`` and
pytest-django's ``settings`` fixture both send it), so the next read takes the
new value.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.signals import setting_changed


class HotSettings:
    """``hot.NAME`` is ``settings.NAME``, copied on first read (see the module doc)."""

    def __getattr__(self, name: str) -> Any:  # only called for a name not copied yet
        if not name.isupper():
            raise AttributeError(name)
        value = getattr(settings, name)
        self.__dict__[name] = value
        return value

    def forget(self, **kwargs: Any) -> None:
        self.__dict__.clear()


hot = HotSettings()
setting_changed.connect(hot.forget, dispatch_uid="staticagents-hot-settings")
