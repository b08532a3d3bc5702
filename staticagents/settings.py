"""Django settings of the service as installed (``static-agents``), read from the environment.

Every knob a deployment needs is an environment variable; the defaults give the
embedded setup (a SQLite file and the in-memory channel layer). Values are parsed
strictly: a malformed one raises ``ImproperlyConfigured`` naming the variable, the
value and what it accepts, and the command line prints that one line and stops.
The same limits hold for values set in Python: ``staticagents.checks``.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

PACKAGE_DIR = Path(__file__).resolve().parent
BOOLEANS = {"true": True, "yes": True, "on": True, "1": True}
BOOLEANS |= {"false": False, "no": False, "off": False, "0": False}
DATABASE_SCHEMES = ("sqlite", "postgres", "postgresql", "pgsql")
REDIS_SCHEMES = ("redis", "rediss", "unix")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def invalid(name: str, value: str, expected: str, default: object) -> ImproperlyConfigured:
    """The error for a variable whose value is not what it accepts."""
    return ImproperlyConfigured(f"{name}={value!r} is not {expected} (default: {default})")


def env_typed(name: str) -> str | None:
    """A typed variable's text; unset and empty both mean its default (None)."""
    value = os.environ.get(name, "").strip()
    return value or None


def env_str(name: str, default: str, *, choices: Collection[str] = ()) -> str:
    """A text variable as given (empty stays empty); with ``choices``, one of them (any case)."""
    value = os.environ.get(name, default)
    if not choices:
        return value
    for choice in choices:
        if value.strip().lower() == choice.lower():
            return choice
    raise invalid(name, value, f"one of {', '.join(choices)}", default)


def env_bool(name: str, default: bool) -> bool:
    value = env_typed(name)
    if value is None:
        return default
    if value.lower() not in BOOLEANS:
        words = "true or false, yes or no, on or off, 1 or 0"
        raise invalid(name, value, f"a boolean: {words}", str(default).lower())
    return BOOLEANS[value.lower()]


def env_int(name: str, default: int, *, unit: str, minimum: int, maximum: int | None = None) -> int:
    """A whole number of ``unit`` from ``minimum`` (to ``maximum``, when given)."""
    value = env_typed(name)
    if value is None:
        return default
    bounds = f"at least {minimum}" if maximum is None else f"from {minimum} to {maximum}"
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or number < minimum or (maximum is not None and number > maximum):
        raise invalid(name, value, f"a whole number of {unit}, {bounds}", default)
    return number


def env_float(name: str, default: float, *, unit: str, above: float) -> float:
    """A finite number of ``unit`` greater than ``above`` (``0.5`` and ``120`` alike)."""
    value = env_typed(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number <= above:
        raise invalid(name, value, f"a number of {unit} greater than {above:g}", f"{default:g}")
    return number


def env_list(name: str, default: str) -> list[str]:
    """A comma-separated variable's items, blanks dropped."""
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


def env_regex_list(name: str) -> list[str]:
    """A JSON array of regexes (commas are common inside a regex, so not a comma list)."""
    value = env_typed(name)
    if value is None:
        return []
    expected = 'a JSON array of regexes, e.g. ["ticket-[0-9]+"]'
    try:
        patterns = json.loads(value)
    except ValueError:
        raise invalid(name, value, expected, "[]") from None
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise invalid(name, value, expected, "[]")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ImproperlyConfigured(f"{name}: {pattern!r} is not a valid regex: {exc}") from None
    return patterns


def env_url(name: str, default: str, *, schemes: Collection[str]) -> str:
    """A URL variable whose scheme is one of ``schemes``; the error never shows the URL."""
    value = env_str(name, default).strip()
    scheme, separator, _ = value.partition("://")
    if value and not (separator and scheme in schemes):
        accepted = ", ".join(f"{accepted}://" for accepted in schemes)
        found = f"its scheme is {scheme!r}" if separator else "it has no scheme"
        raise ImproperlyConfigured(f"{name} must start with one of {accepted} ({found})")
    return value


def database_config(url: str) -> dict[str, Any]:
    # Django's ASGI handler runs each request's sync code in a thread of its own,
    # so a connection kept past the request would never be used again, only leaked
    # until the garbage collector finds it: connections close at the end of each
    # request, and PostgreSQL's come from a pool, so closing one is cheap. The reply
    # path's database thread keeps its own connection for good.
    # Health checks: a pooled connection the server dropped (a restart) is
    # replaced when it is checked out.
    config: dict[str, Any] = dict(
        dj_database_url.parse(url, conn_max_age=0, conn_health_checks=True)
    )
    if config["ENGINE"] == "django.db.backends.postgresql":
        pool_size = env_int("STATIC_AGENTS_DB_POOL_SIZE", 10, unit="connections", minimum=1)
        pool = {"min_size": min(2, pool_size), "max_size": pool_size, "timeout": 10}
        config["OPTIONS"] = {"pool": pool}
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # WAL lets readers run beside the one writer; IMMEDIATE transactions take
        # the write lock up front, so concurrent counter updates queue instead of
        # failing with "database is locked" on a lock upgrade.
        config["OPTIONS"] = {
            # The log is cut back to 64 MiB after a checkpoint (auto_vacuum, which lets
            # the journal writer give pruned pages back, is set once, by migration 0009:
            # setting it takes the write lock).
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
            "PRAGMA journal_size_limit=67108864;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
        }
        # A file (not memory), so the test server's threads share it; one per test
        # run, so runs side by side never share a database.
        config["TEST"] = {"NAME": os.path.join(tempfile.gettempdir(), f"sa-test-{os.getpid()}.db")}
    return config


SECRET_KEY = env_str("SECRET_KEY", "static-agents-insecure-development-key")
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "*")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "staticagents.apps.AdminConfig",  # Django's admin, discovered with its URLs
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Before staticfiles: its runserver command (half the API, over WSGI) gives way to ours.
    "staticagents",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # the API documentation's assets (/api/docs/), served locally
    "channels",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "staticagents.urls"
ASGI_APPLICATION = "staticagents.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def database_url(default: str) -> str:
    """``DATABASE_URL``: SQLite or PostgreSQL, the two databases the service runs on."""
    return env_url("DATABASE_URL", default, schemes=DATABASE_SCHEMES) or default


def default_database_url() -> str:
    """SQLite in the working directory: an installed package never writes into site-packages.

    The file has a name of its own, so a Django project's ``db.sqlite3`` beside it
    is never touched (a checkout's ``project/settings.py`` uses ``db.sqlite3``).
    """
    return f"sqlite:///{Path.cwd() / 'static-agents.sqlite3'}"


DATABASES = {"default": database_config(database_url(default_database_url()))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_url("REDIS_URL", "", schemes=REDIS_SCHEMES)
# redis-py's reads time out after 5 s by default, as channels-redis's BRPOP does: a read
# would then fail now and then on an idle layer. Reads wait longer than a BRPOP.
REDIS_HOST = {"address": REDIS_URL, "socket_timeout": 15}
CHANNEL_LAYERS = {
    "default": (
        {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_HOST]}}
        if REDIS_URL
        else {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    )
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"

REST_FRAMEWORK = {
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "EXCEPTION_HANDLER": "staticagents.control.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

# The OpenAPI schema of the DRF routes at /api/schema/ (staticagents/openapi.py).
SPECTACULAR_SETTINGS = {
    "TITLE": "Static Agents",
    "DESCRIPTION": "Galaxy's agent and chat API, and the control API (README).",
    "VERSION": "1",
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "DEFAULT_GENERATOR_CLASS": "staticagents.openapi.DescribedGenerator",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # No validator badge: Swagger UI would send the schema to validator.swagger.io.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "staticagents.openapi.add_components",
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "WARNING", choices=LOG_LEVELS)},
}

# Static Agents' own settings (their limits: staticagents.checks; read them through
# staticagents.conf.settings).
STATIC_AGENTS_FIXTURE = env_str("STATIC_AGENTS_FIXTURE", "")
# Inside the package, so an installed wheel has it too (fixtures/demo.yml links to it).
STATIC_AGENTS_DEFAULT_FIXTURE = PACKAGE_DIR / "data" / "demo.yml"
# The control API's bearer token; when empty, `serve` creates one, stores it and prints it.
STATIC_AGENTS_CONTROL_TOKEN = env_str("STATIC_AGENTS_CONTROL_TOKEN", "")
# Record every inquiry (on by default; off only to measure what the journal costs).
STATIC_AGENTS_JOURNAL = env_bool("STATIC_AGENTS_JOURNAL", True)
# The journal keeps about this many newest entries; older ones are pruned.
STATIC_AGENTS_JOURNAL_MAX = env_int("STATIC_AGENTS_JOURNAL_MAX", 100_000, unit="entries", minimum=1)
# ... and about this many bytes of bodies and queries (older entries are pruned) ...
STATIC_AGENTS_JOURNAL_MAX_BYTES = env_int(
    "STATIC_AGENTS_JOURNAL_MAX_BYTES", 256 * 1024 * 1024, unit="bytes", minimum=1
)
# ... of which one entry stores at most this many of its body (and of its query);
# the rest is dropped, the body's full length kept (``body_bytes``).
STATIC_AGENTS_JOURNAL_BODY_BYTES = env_int(
    "STATIC_AGENTS_JOURNAL_BODY_BYTES", 1024 * 1024, unit="bytes", minimum=0
)
# While another connection holds SQLite's write lock (a big import), up to this many
# journal rows of answered requests wait in memory for it (replying.journal).
STATIC_AGENTS_JOURNAL_BACKLOG = env_int(
    "STATIC_AGENTS_JOURNAL_BACKLOG", 20_000, unit="entries", minimum=0
)
# The live journal's group names on the Channels layer start with this (letters, digits,
# "-", "_", ".", at most 40); empty: derived from the default database (replying.live).
STATIC_AGENTS_LIVE_PREFIX = env_str("STATIC_AGENTS_LIVE_PREFIX", "")
# Rule regexes run on at most this many characters of a query, system prompt,
# context value or tool result, so no inquiry can make matching take long.
STATIC_AGENTS_MATCH_WINDOW = env_int(
    "STATIC_AGENTS_MATCH_WINDOW", 100_000, unit="characters", minimum=1
)
# What the regexes RE2 cannot run (lookaround, backreferences, atomic groups) may spend
# on one inquiry, in all; a rule that runs out does not answer it (core.regexes).
STATIC_AGENTS_MATCH_BUDGET_MS = env_int(
    "STATIC_AGENTS_MATCH_BUDGET_MS", 50, unit="ms", minimum=1, maximum=60_000
)
# The ruleset's history keeps this many newest versions (each a whole ruleset, compressed).
STATIC_AGENTS_VERSIONS_KEEP = env_int(
    "STATIC_AGENTS_VERSIONS_KEEP", 200, unit="versions", minimum=1
)
STATIC_AGENTS_MAX_BODY_BYTES = env_int(
    "STATIC_AGENTS_MAX_BODY_BYTES", 10 * 1024 * 1024, unit="bytes", minimum=1
)
# Django-served routes read bodies through DRF/Django: the same limit there.
DATA_UPLOAD_MAX_MEMORY_SIZE = STATIC_AGENTS_MAX_BODY_BYTES
# Keys the reply routes require (comma-separated); empty: open, any key accepted.
STATIC_AGENTS_API_KEYS = env_list("STATIC_AGENTS_API_KEYS", "")
# Who may read /metrics: "token" (the control token, as the control API) or "open" (anyone).
STATIC_AGENTS_METRICS = env_str("STATIC_AGENTS_METRICS", "token", choices=("token", "open"))
# Regexes whose matches a recorded reply never keeps (credentials are masked anyway).
STATIC_AGENTS_REDACT_PATTERNS = env_regex_list("STATIC_AGENTS_REDACT_PATTERNS")
STATIC_AGENTS_MAX_STREAM_SECONDS = env_float(
    "STATIC_AGENTS_MAX_STREAM_SECONDS", 120.0, unit="seconds", above=0
)
# Server-wide stream timing, used where neither the rule nor the defaults set one
# (the fixture format's own range).
STATIC_AGENTS_WORD_DELAY_MS = env_int(
    "STATIC_AGENTS_WORD_DELAY_MS", 0, unit="milliseconds", minimum=0, maximum=600_000
)
STATIC_AGENTS_FIRST_DELAY_MS = env_int(
    "STATIC_AGENTS_FIRST_DELAY_MS", 0, unit="milliseconds", minimum=0, maximum=600_000
)
