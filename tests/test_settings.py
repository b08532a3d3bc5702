"""The environment is parsed strictly: a value that cannot be used stops start-up in one line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from staticagents.settings import (
    database_config,
    database_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_regex_list,
    env_str,
    env_url,
)

ROOT = Path(__file__).resolve().parents[1]
COMMAND = Path(sys.executable).parent / "static-agents"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        *[("true", True), ("Yes", True), ("on", True), ("1", True)],
        *[("false", False), ("NO", False), ("off", False), ("0", False)],
    ],
)
def test_a_boolean_variable_takes_the_usual_words(
    monkeypatch: pytest.MonkeyPatch, text: str, value: bool
) -> None:
    monkeypatch.setenv("DEBUG", f" {text} ")
    assert env_bool("DEBUG", not value) is value


@pytest.mark.parametrize("text", [None, "", "  "])
def test_an_unset_or_empty_typed_variable_means_its_default(
    monkeypatch: pytest.MonkeyPatch, text: str | None
) -> None:
    for name in ("DEBUG", "STATIC_AGENTS_JOURNAL_MAX", "STATIC_AGENTS_MAX_STREAM_SECONDS"):
        monkeypatch.delenv(name, raising=False)
        if text is not None:
            monkeypatch.setenv(name, text)
    assert env_bool("DEBUG", True) is True
    assert env_int("STATIC_AGENTS_JOURNAL_MAX", 7, unit="entries", minimum=1) == 7
    assert env_float("STATIC_AGENTS_MAX_STREAM_SECONDS", 2.5, unit="seconds", above=0) == 2.5


def test_a_misspelt_boolean_is_an_error_naming_the_variable_and_the_accepted_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEBUG", "tru")
    with pytest.raises(ImproperlyConfigured) as raised:
        env_bool("DEBUG", False)
    assert str(raised.value) == (
        "DEBUG='tru' is not a boolean: true or false, yes or no, on or off, 1 or 0 (default: false)"
    )


def test_a_size_with_a_unit_is_an_error_asking_for_a_whole_number_of_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STATIC_AGENTS_MAX_BODY_BYTES", "10MB")
    with pytest.raises(ImproperlyConfigured) as raised:
        env_int("STATIC_AGENTS_MAX_BODY_BYTES", 1024, unit="bytes", minimum=1)
    assert str(raised.value) == (
        "STATIC_AGENTS_MAX_BODY_BYTES='10MB' is not a whole number of bytes, at least 1 "
        "(default: 1024)"
    )


@pytest.mark.parametrize("text", ["0", "-3", "600001", "1.5"])
def test_a_whole_number_out_of_its_range_is_an_error(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv("STATIC_AGENTS_WORD_DELAY_MS", text)
    with pytest.raises(ImproperlyConfigured, match="from 1 to 600000"):
        env_int("STATIC_AGENTS_WORD_DELAY_MS", 5, unit="milliseconds", minimum=1, maximum=600_000)


def test_a_whole_number_in_its_range_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATIC_AGENTS_WORD_DELAY_MS", "600000")
    assert env_int("STATIC_AGENTS_WORD_DELAY_MS", 0, unit="ms", minimum=0, maximum=600_000) == (
        600_000
    )


@pytest.mark.parametrize("text", ["2m", "0", "-1", "nan", "inf"])
def test_a_duration_must_be_a_finite_number_above_zero(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.setenv("STATIC_AGENTS_MAX_STREAM_SECONDS", text)
    with pytest.raises(ImproperlyConfigured) as raised:
        env_float("STATIC_AGENTS_MAX_STREAM_SECONDS", 120, unit="seconds", above=0)
    assert str(raised.value) == (
        f"STATIC_AGENTS_MAX_STREAM_SECONDS={text!r} is not a number of seconds greater than 0 "
        "(default: 120)"
    )


def test_a_duration_may_be_a_fraction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATIC_AGENTS_MAX_STREAM_SECONDS", "0.5")
    assert env_float("STATIC_AGENTS_MAX_STREAM_SECONDS", 120, unit="seconds", above=0) == 0.5


def test_a_choice_is_read_in_any_case_and_anything_else_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOG_LEVEL", "info")
    assert env_str("LOG_LEVEL", "WARNING", choices=("INFO", "WARNING")) == "INFO"
    monkeypatch.setenv("LOG_LEVEL", "verbose")
    with pytest.raises(ImproperlyConfigured) as raised:
        env_str("LOG_LEVEL", "WARNING", choices=("INFO", "WARNING"))
    assert str(raised.value) == "LOG_LEVEL='verbose' is not one of INFO, WARNING (default: WARNING)"


def test_a_list_drops_blank_items(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATIC_AGENTS_API_KEYS", " sk-one, ,sk-two,")
    assert env_list("STATIC_AGENTS_API_KEYS", "") == ["sk-one", "sk-two"]


def test_redaction_patterns_are_a_json_array_of_regexes(monkeypatch: pytest.MonkeyPatch) -> None:
    name = "STATIC_AGENTS_REDACT_PATTERNS"
    assert env_regex_list(name) == []
    monkeypatch.setenv(name, '["ticket-[0-9]{3,5}", "(?i)internal"]')
    assert env_regex_list(name) == ["ticket-[0-9]{3,5}", "(?i)internal"]
    for value, problem in [
        ("ticket-[0-9]+", "a JSON array of regexes"),
        ('{"a": 1}', "a JSON array of regexes"),
        ('[""]', "a JSON array of regexes"),
        ('["ticket-("]', "'ticket-(' is not a valid regex"),
    ]:
        monkeypatch.setenv(name, value)
        with pytest.raises(ImproperlyConfigured, match=re.escape(problem)):
            env_regex_list(name)


def test_a_database_url_of_another_kind_is_an_error_that_never_shows_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://user:hunter2@db/app")
    with pytest.raises(ImproperlyConfigured) as raised:
        database_url("sqlite:///default.db")
    assert str(raised.value) == (
        "DATABASE_URL must start with one of sqlite://, postgres://, postgresql://, pgsql:// "
        "(its scheme is 'mysql')"
    )
    monkeypatch.setenv("DATABASE_URL", "hunter2")
    with pytest.raises(ImproperlyConfigured, match=r"\(it has no scheme\)$"):
        database_url("sqlite:///default.db")


def test_an_empty_database_url_means_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "")
    assert database_url("sqlite:///default.db") == "sqlite:///default.db"


def test_a_redis_url_needs_a_redis_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "localhost:6379")
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL must start with one of redis://"):
        env_url("REDIS_URL", "", schemes=("redis", "rediss", "unix"))


def test_a_pool_of_one_connection_is_a_pool_postgresql_accepts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STATIC_AGENTS_DB_POOL_SIZE", "1")
    config = database_config("postgres://user:password@db/app")
    assert config["OPTIONS"]["pool"] == {"min_size": 1, "max_size": 1, "timeout": 10}


def start(command: list[str], **variables: str) -> subprocess.CompletedProcess[str]:
    """Run a command line with ``variables`` added to a clean environment."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name != "DJANGO_SETTINGS_MODULE" and not name.startswith("STATIC_AGENTS_")
    }
    return subprocess.run(
        command,
        cwd=ROOT,
        env={**environment, **variables},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("command", "program"),
    [
        pytest.param([sys.executable, "manage.py", "serve"], "manage.py", id="manage.py serve"),
        pytest.param([str(COMMAND), "serve"], "static-agents", id="static-agents serve"),
        pytest.param([sys.executable, "-m", "staticagents", "serve"], "static-agents", id="-m"),
        pytest.param([str(COMMAND), "check"], "static-agents", id="static-agents check"),
        pytest.param([sys.executable, "manage.py", "migrate"], "manage.py", id="manage.py migrate"),
    ],
)
def test_a_malformed_variable_stops_every_entry_point_with_one_line(
    command: list[str], program: str
) -> None:
    started = start(command, DEBUG="tru")

    assert started.returncode == 1
    assert started.stderr == (
        f"{program}: DEBUG='tru' is not a boolean: true or false, yes or no, on or off, 1 or 0 "
        "(default: false)\n"
    )
    assert started.stdout == ""


def test_a_size_with_a_unit_stops_serve_naming_the_variable() -> None:
    started = start([str(COMMAND), "serve"], STATIC_AGENTS_MAX_BODY_BYTES="10MB")

    assert started.returncode == 1
    assert started.stderr.startswith(
        "static-agents: STATIC_AGENTS_MAX_BODY_BYTES='10MB' is not a whole number of bytes"
    )
    assert "Traceback" not in started.stderr
