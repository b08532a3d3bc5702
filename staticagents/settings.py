"""Django settings of the service as installed (``static-agents``), read from the environment.

Every knob a deployment needs is an environment variable; the defaults give the
embedded setup (a SQLite file and the in-memory channel layer).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import dj_database_url

PACKAGE_DIR = Path(__file__).resolve().parent


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value is None or not value.strip() else int(value)


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]


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
        pool_size = env_int("STATIC_AGENTS_DB_POOL_SIZE", 10)
        config["OPTIONS"] = {"pool": {"min_size": 2, "max_size": pool_size, "timeout": 10}}
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # WAL lets readers run beside the one writer; IMMEDIATE transactions take
        # the write lock up front, so concurrent counter updates queue instead of
        # failing with "database is locked" on a lock upgrade.
        config["OPTIONS"] = {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
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
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "staticagents",
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


def default_database_url() -> str:
    """SQLite in the working directory: an installed package never writes into site-packages.

    The file has a name of its own, so a Django project's ``db.sqlite3`` beside it
    is never touched (a checkout's ``project/settings.py`` uses ``db.sqlite3``).
    """
    return f"sqlite:///{Path.cwd() / 'static-agents.sqlite3'}"


DATABASES = {"default": database_config(env_str("DATABASE_URL", default_database_url()))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL", "")
CHANNEL_LAYERS = {
    "default": (
        {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
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
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "staticagents.openapi.add_components",
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "WARNING")},
}

# Static Agents' own settings.
STATIC_AGENTS_FIXTURE = env_str("STATIC_AGENTS_FIXTURE", "")
# Inside the package, so an installed wheel has it too (fixtures/demo.yml links to it).
STATIC_AGENTS_DEFAULT_FIXTURE = PACKAGE_DIR / "data" / "demo.yml"
# The control API's bearer token; when empty, `serve` creates one, stores it and prints it.
STATIC_AGENTS_CONTROL_TOKEN = env_str("STATIC_AGENTS_CONTROL_TOKEN", "")
# Record every inquiry (on by default; off only to measure what the journal costs).
STATIC_AGENTS_JOURNAL = env_bool("STATIC_AGENTS_JOURNAL", True)
# The journal keeps about this many newest entries; older ones are pruned.
STATIC_AGENTS_JOURNAL_MAX = env_int("STATIC_AGENTS_JOURNAL_MAX", 100_000)
# Rule regexes run on at most this many characters of a query, system prompt,
# context value or tool result, so no inquiry can make matching take long.
STATIC_AGENTS_MATCH_WINDOW = env_int("STATIC_AGENTS_MATCH_WINDOW", 100_000)
STATIC_AGENTS_MAX_BODY_BYTES = env_int("STATIC_AGENTS_MAX_BODY_BYTES", 10 * 1024 * 1024)
# Django-served routes read bodies through DRF/Django: the same limit there.
DATA_UPLOAD_MAX_MEMORY_SIZE = STATIC_AGENTS_MAX_BODY_BYTES
# Keys the reply routes require (comma-separated); empty: open, any key accepted.
STATIC_AGENTS_API_KEYS = env_list("STATIC_AGENTS_API_KEYS", "")
STATIC_AGENTS_MAX_STREAM_SECONDS = float(env_str("STATIC_AGENTS_MAX_STREAM_SECONDS", "120"))
# Server-wide stream timing, used where neither the rule nor the defaults set one.
STATIC_AGENTS_WORD_DELAY_MS = env_int("STATIC_AGENTS_WORD_DELAY_MS", 0)
STATIC_AGENTS_FIRST_DELAY_MS = env_int("STATIC_AGENTS_FIRST_DELAY_MS", 0)
