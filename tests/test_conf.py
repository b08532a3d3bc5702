"""One way to read the service's settings: ``staticagents.conf.settings``, cheap and never stale."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.conf import settings as django_settings
from django.test import override_settings

import staticagents.settings
from staticagents import conf
from staticagents.models import JournalEntry

RULES = {"rules": [{"name": "hi", "match": {"contains": "hi"}, "response": {"content": "Hello"}}]}


def chat(text: str) -> dict[str, Any]:
    return {"model": "static", "messages": [{"role": "user", "content": text}]}


def test_a_copy_follows_override_settings_in_and_out() -> None:
    limit = django_settings.STATIC_AGENTS_MAX_BODY_BYTES
    assert conf.settings.STATIC_AGENTS_MAX_BODY_BYTES == limit != 123
    with override_settings(STATIC_AGENTS_MAX_BODY_BYTES=123):
        assert conf.settings.STATIC_AGENTS_MAX_BODY_BYTES == 123
    assert limit == conf.settings.STATIC_AGENTS_MAX_BODY_BYTES  # the setting as it was


def test_a_copy_follows_the_settings_fixture(settings: Any) -> None:
    assert conf.settings.STATIC_AGENTS_MATCH_WINDOW != 77
    settings.STATIC_AGENTS_MATCH_WINDOW = 77
    assert conf.settings.STATIC_AGENTS_MATCH_WINDOW == 77


def test_every_setting_of_the_service_is_read_through_the_accessor() -> None:
    defined = {name for name in vars(staticagents.settings) if name.startswith("STATIC_AGENTS_")}
    declared = {name for name in vars(conf.ServiceSettings) if name.startswith("STATIC_AGENTS_")}
    assert defined == declared
    for name in defined:
        assert getattr(conf.settings, name) == getattr(django_settings, name)


def test_the_accessor_reads_no_other_setting() -> None:
    with pytest.raises(AttributeError):
        conf.settings.DEBUG  # type: ignore[attr-defined]  # noqa: B018


def test_settings_changed_between_requests_apply_to_the_next_one(
    live_url: str, load_rules: Callable[[Any], Any], settings: Any
) -> None:
    load_rules(RULES)
    with httpx.Client(base_url=live_url) as http:
        assert http.post("/v1/chat/completions", json=chat("hi")).status_code == 200
        assert JournalEntry.objects.count() == 1

        settings.STATIC_AGENTS_JOURNAL = False
        assert http.post("/v1/chat/completions", json=chat("hi")).status_code == 200
        assert JournalEntry.objects.count() == 1  # not journaled

        settings.STATIC_AGENTS_MAX_BODY_BYTES = 20
        assert http.post("/v1/chat/completions", json=chat("hi")).status_code == 413

        settings.STATIC_AGENTS_API_KEYS = ["sk-test"]
        assert http.post("/v1/chat/completions", json=chat("hi")).status_code == 401
