"""System checks of the service's settings: ``manage.py check``, and every command before it runs.

The environment is parsed strictly at start-up (``staticagents.settings``); these
checks hold every ``STATIC_AGENTS_*`` setting to the same limits however it was
set (a settings module of one's own, ``override_settings``), so ``serve`` stops
with the message instead of failing on the first request.

Registered by the app config with the tag ``staticagents`` (``check --tag staticagents``):

* ``staticagents.E001``: ``STATIC_AGENTS_MAX_BODY_BYTES``, a whole number, at least 1
* ``staticagents.E002``: ``STATIC_AGENTS_JOURNAL_MAX``, ``..._MAX_BYTES``, a whole number, at
  least 1; ``..._BODY_BYTES``, at least 0
* ``staticagents.E003``: ``STATIC_AGENTS_MAX_STREAM_SECONDS``, a number above 0
* ``staticagents.E004``: ``STATIC_AGENTS_MATCH_WINDOW``, a whole number, at least 1
* ``staticagents.E005``: ``STATIC_AGENTS_WORD_DELAY_MS``, ``..._FIRST_DELAY_MS``, 0 to 600000
* ``staticagents.E006``: ``STATIC_AGENTS_FIXTURE``, ``..._DEFAULT_FIXTURE``, an existing file
* ``staticagents.E007``: ``STATIC_AGENTS_JOURNAL``, True or False
* ``staticagents.E008``: ``STATIC_AGENTS_API_KEYS``, a list of non-empty strings
* ``staticagents.E009``: ``STATIC_AGENTS_CONTROL_TOKEN``, a string
* ``staticagents.E010``: ``STATIC_AGENTS_MATCH_BUDGET_MS``, a whole number, 1 to 60000
* ``staticagents.E011``: ``STATIC_AGENTS_REDACT_PATTERNS``, a list of regexes that compile
* ``staticagents.E012``: ``STATIC_AGENTS_VERSIONS_KEEP``, a whole number, at least 1
* ``staticagents.E013``: ``STATIC_AGENTS_JOURNAL_BACKLOG``, a whole number, at least 0
* ``staticagents.E014``: ``STATIC_AGENTS_LIVE_PREFIX``, at most 40 of ``A-Za-z0-9._-``
* ``staticagents.E020``: ``STATIC_AGENTS_METRICS``, ``"token"`` or ``"open"``
* ``staticagents.W001`` (``serve`` alone): a weak ``SECRET_KEY``, DEBUG off, a reachable host
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from django.apps import AppConfig
from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error
from django.core.checks import Warning as CheckWarning
from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX,
    SECRET_KEY_MIN_LENGTH,
    SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)

from staticagents.conf import settings


class Limit(NamedTuple):
    """What one setting must be: ``expected`` in words, ``valid`` as a test."""

    code: str
    name: str
    expected: str
    valid: Callable[[object], bool]


def whole_number(minimum: int, maximum: int | None = None) -> Callable[[object], bool]:
    def valid(value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        return minimum <= value and (maximum is None or value <= maximum)

    return valid


def positive_number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > 0


def is_bool(value: object) -> bool:
    return isinstance(value, bool)


def is_string(value: object) -> bool:
    return isinstance(value, str)


def is_metrics_access(value: object) -> bool:
    return value in ("token", "open")


def is_regex_list(value: object) -> bool:
    if not isinstance(value, list | tuple) or not is_key_list(value):
        return False
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error:
            return False
    return True


def is_live_prefix(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9._-]{0,40}", value) is not None


def is_key_list(value: object) -> bool:
    if not isinstance(value, list | tuple):
        return False
    return all(isinstance(key, str) and key for key in value)


POSITIVE, DELAY, ABOVE_0 = whole_number(1), whole_number(0, 600_000), positive_number
BUDGET = whole_number(1, 60_000)
AT_LEAST_0 = whole_number(0)
# fmt: off
LIMITS = (
    Limit("E001", "STATIC_AGENTS_MAX_BODY_BYTES", "a whole number of bytes, at least 1", POSITIVE),
    Limit("E002", "STATIC_AGENTS_JOURNAL_MAX", "a whole number of entries, at least 1", POSITIVE),
    Limit("E002", "STATIC_AGENTS_JOURNAL_MAX_BYTES", "a whole number of bytes, >= 1", POSITIVE),
    Limit("E002", "STATIC_AGENTS_JOURNAL_BODY_BYTES", "a whole number of bytes, >= 0", AT_LEAST_0),
    Limit("E003", "STATIC_AGENTS_MAX_STREAM_SECONDS", "a number of seconds above 0", ABOVE_0),
    Limit("E004", "STATIC_AGENTS_MATCH_WINDOW", "a whole number of chars, at least 1", POSITIVE),
    Limit("E005", "STATIC_AGENTS_WORD_DELAY_MS", "a whole number of ms, 0 to 600000", DELAY),
    Limit("E005", "STATIC_AGENTS_FIRST_DELAY_MS", "a whole number of ms, 0 to 600000", DELAY),
    Limit("E007", "STATIC_AGENTS_JOURNAL", "True or False", is_bool),
    Limit("E008", "STATIC_AGENTS_API_KEYS", "a list of non-empty strings", is_key_list),
    Limit("E009", "STATIC_AGENTS_CONTROL_TOKEN", "a string (empty: serve creates one)", is_string),
    Limit("E010", "STATIC_AGENTS_MATCH_BUDGET_MS", "a whole number of ms, 1 to 60000", BUDGET),
    Limit("E011", "STATIC_AGENTS_REDACT_PATTERNS", "a list of regexes", is_regex_list),
    Limit("E012", "STATIC_AGENTS_VERSIONS_KEEP", "a whole number of versions, >= 1", POSITIVE),
    Limit("E013", "STATIC_AGENTS_JOURNAL_BACKLOG", "a whole number of entries, >= 0", AT_LEAST_0),
    Limit("E014", "STATIC_AGENTS_LIVE_PREFIX", "<= 40 of A-Za-z0-9._- or empty", is_live_prefix),
    Limit("E020", "STATIC_AGENTS_METRICS", "'token' or 'open'", is_metrics_access),
)
# fmt: on


def check_limits(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[CheckMessage]:
    """Each setting with a type or a range: E001 to E005, E007 to E014, E020."""
    errors: list[CheckMessage] = []
    for code, name, expected, valid in LIMITS:
        value = getattr(settings, name)
        if not valid(value):
            message = f"{name} must be {expected}; it is {value!r}."
            errors.append(Error(message, id=f"staticagents.{code}"))
    return errors


def check_fixtures(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[CheckMessage]:
    """E006: the fixtures ``serve`` loads exist (an empty ``STATIC_AGENTS_FIXTURE`` names none)."""
    errors: list[CheckMessage] = []
    for name in ("STATIC_AGENTS_FIXTURE", "STATIC_AGENTS_DEFAULT_FIXTURE"):
        value = getattr(settings, name)
        if value == "" and name == "STATIC_AGENTS_FIXTURE":
            continue
        if not isinstance(value, str | os.PathLike) or not Path(value).is_file():
            message = f"{name} must name a fixture file; there is no file {value!r}."
            hint = f"Relative paths start from the working directory, {Path.cwd()}."
            errors.append(Error(message, hint=hint, id="staticagents.E006"))
    return errors


def check_served_host(host: str) -> list[CheckMessage]:
    """W001, run by ``serve``: a known or weak ``SECRET_KEY`` on a host others can reach.

    The admin's sessions and signed cookies rest on the key; with DEBUG on, the
    service is a developer's own and the warning would only be noise.
    """
    if django_settings.DEBUG or is_loopback(host) or not weak_secret_key():
        return []
    message = f"SECRET_KEY is the development key or a weak one, and serve listens on {host}."
    hint = (
        "Set SECRET_KEY to a long random string, e.g. the output of "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'."
    )
    return [CheckWarning(message, hint=hint, id="staticagents.W001")]


def weak_secret_key() -> bool:
    """Django's own test (``security.W009``): short, repetitive or generated for development."""
    key = str(django_settings.SECRET_KEY)
    return (
        len(key) < SECRET_KEY_MIN_LENGTH
        or len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS
        or key.startswith(SECRET_KEY_INSECURE_PREFIX)
    )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything
