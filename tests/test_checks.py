"""System checks hold every STATIC_AGENTS_* setting to its limits, however it was set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import CheckMessage, run_checks
from django.test import override_settings

import staticagents.settings
from staticagents.checks import check_served_host

COMMAND = Path(sys.executable).parent / "static-agents"
DEVELOPMENT_KEY = "static-agents-insecure-development-key"  # staticagents.settings
STRONG_KEY = "k3y-" + "".join(chr(ord("a") + i % 26) + str(i) for i in range(40))


def service_checks() -> list[CheckMessage]:
    return run_checks(tags=["staticagents"])


def test_the_default_settings_pass_every_check() -> None:
    assert service_checks() == []


@pytest.mark.parametrize(
    ("name", "value", "code"),
    [
        ("STATIC_AGENTS_MAX_BODY_BYTES", 0, "E001"),
        ("STATIC_AGENTS_MAX_BODY_BYTES", "10MB", "E001"),
        ("STATIC_AGENTS_JOURNAL_MAX", 0, "E002"),
        ("STATIC_AGENTS_JOURNAL_MAX", 1.5, "E002"),
        ("STATIC_AGENTS_MAX_STREAM_SECONDS", 0, "E003"),
        ("STATIC_AGENTS_MAX_STREAM_SECONDS", float("inf"), "E003"),
        ("STATIC_AGENTS_MAX_STREAM_SECONDS", True, "E003"),
        ("STATIC_AGENTS_MATCH_WINDOW", -1, "E004"),
        ("STATIC_AGENTS_WORD_DELAY_MS", -1, "E005"),
        ("STATIC_AGENTS_FIRST_DELAY_MS", 600_001, "E005"),
        ("STATIC_AGENTS_FIXTURE", "no-such-fixture.yml", "E006"),
        ("STATIC_AGENTS_DEFAULT_FIXTURE", Path("no-such-demo.yml"), "E006"),
        ("STATIC_AGENTS_JOURNAL", "false", "E007"),
        ("STATIC_AGENTS_API_KEYS", "sk-one", "E008"),
        ("STATIC_AGENTS_API_KEYS", ["sk-one", ""], "E008"),
        ("STATIC_AGENTS_CONTROL_TOKEN", None, "E009"),
        ("STATIC_AGENTS_METRICS", "public", "E020"),
        ("STATIC_AGENTS_MATCH_BUDGET_MS", 0, "E010"),
        ("STATIC_AGENTS_VERSIONS_KEEP", 0, "E012"),
        ("STATIC_AGENTS_VERSIONS_KEEP", "200", "E012"),
        ("STATIC_AGENTS_JOURNAL_BACKLOG", -1, "E013"),
        ("STATIC_AGENTS_LIVE_PREFIX", "two words", "E014"),
        ("STATIC_AGENTS_LIVE_PREFIX", "x" * 41, "E014"),
        ("STATIC_AGENTS_LIVE_PREFIX", None, "E014"),
        ("STATIC_AGENTS_REDACT_PATTERNS", "ticket-[0-9]+", "E011"),
        ("STATIC_AGENTS_REDACT_PATTERNS", ["ticket-(unclosed"], "E011"),
        ("STATIC_AGENTS_REDACT_PATTERNS", [""], "E011"),
    ],
)
def test_a_setting_out_of_its_limits_is_an_error_with_its_id(
    name: str, value: Any, code: str
) -> None:
    with override_settings(**{name: value}):
        messages = service_checks()

    assert [message.id for message in messages] == [f"staticagents.{code}"]
    assert messages[0].msg.startswith(f"{name} must ")
    assert messages[0].is_serious()


def test_an_error_says_what_the_setting_must_be_and_what_it_is() -> None:
    with override_settings(STATIC_AGENTS_MAX_BODY_BYTES="10MB"):
        (message,) = service_checks()
    assert message.msg == (
        "STATIC_AGENTS_MAX_BODY_BYTES must be a whole number of bytes, at least 1; it is '10MB'."
    )


def test_an_empty_fixture_setting_names_no_fixture_and_an_existing_file_passes(
    tmp_path: Path,
) -> None:
    fixture = tmp_path / "rules.yml"
    fixture.write_text("rules: []\n")
    for value in ("", str(fixture), fixture):
        with override_settings(STATIC_AGENTS_FIXTURE=value):
            assert service_checks() == []


def test_a_fixture_setting_naming_a_directory_is_an_error(tmp_path: Path) -> None:
    with override_settings(STATIC_AGENTS_FIXTURE=str(tmp_path)):
        assert [message.id for message in service_checks()] == ["staticagents.E006"]


def test_the_limits_take_fractions_and_tuples_where_they_make_sense() -> None:
    with override_settings(STATIC_AGENTS_MAX_STREAM_SECONDS=0.25, STATIC_AGENTS_API_KEYS=("k",)):
        assert service_checks() == []


def test_every_setting_of_the_service_is_checked() -> None:
    names = [name for name in vars(staticagents.settings) if name.startswith("STATIC_AGENTS_")]
    assert len(names) == 19
    for name in names:
        with override_settings(**{name: object()}):
            messages = service_checks()
        assert [message.msg.split()[0] for message in messages] == [name]


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::", "static-agents.example"])
def test_a_weak_secret_key_served_beyond_this_machine_is_a_warning(host: str) -> None:
    with override_settings(DEBUG=False, SECRET_KEY=DEVELOPMENT_KEY):
        (warning,) = check_served_host(host)
    assert warning.id == "staticagents.W001"
    assert not warning.is_serious()
    assert host in warning.msg


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_a_weak_secret_key_on_this_machine_alone_is_fine(host: str) -> None:
    with override_settings(DEBUG=False, SECRET_KEY=DEVELOPMENT_KEY):
        assert check_served_host(host) == []


def test_a_strong_secret_key_or_debug_mode_raises_no_warning() -> None:
    with override_settings(DEBUG=False, SECRET_KEY=STRONG_KEY):
        assert check_served_host("0.0.0.0") == []
    with override_settings(DEBUG=True, SECRET_KEY=DEVELOPMENT_KEY):
        assert check_served_host("0.0.0.0") == []


def test_serve_stops_on_a_failed_check_before_serving(tmp_path: Path) -> None:
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")
        and not name.startswith("STATIC_AGENTS_")
    }
    environment["STATIC_AGENTS_FIXTURE"] = "missing.yml"
    started = subprocess.run(
        [COMMAND, "serve", "--port", "0"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert started.returncode == 1
    assert "(staticagents.E006) STATIC_AGENTS_FIXTURE must name a fixture file" in started.stderr
    assert "Traceback" not in started.stderr
    assert "serving on" not in started.stdout
    assert list(tmp_path.iterdir()) == []  # not even migrated
