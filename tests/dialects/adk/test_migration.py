"""Migration 0017: every existing ADK session gets its user turns from its events."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("staticagents", "0016_upstreams")]
AFTER = [("staticagents", "0017_adk_session_turns")]


def user_message(text: str) -> dict[str, Any]:
    return {"author": "user", "content": {"role": "user", "parts": [{"text": text}]}}


@pytest.mark.django_db(transaction=True)
def test_existing_sessions_get_their_user_turns_from_their_events() -> None:
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(BEFORE)
        old = executor.loader.project_state(BEFORE).apps
        session_model = old.get_model("staticagents", "AdkSession")
        event_model = old.get_model("staticagents", "AdkEvent")
        talked = session_model.objects.create(app="a", user="u", session_id="talked", state={})
        silent = session_model.objects.create(app="a", user="u", session_id="silent", state={})
        payloads = [user_message("one"), {"author": "a"}, user_message("two"), ["no", "event"]]
        event_model.objects.bulk_create(event_model(session=talked, payload=p) for p in payloads)
        event_model.objects.create(session=silent, payload={"author": "a"})

        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        new = executor.loader.project_state(AFTER).apps.get_model("staticagents", "AdkSession")
        turns = dict(new.objects.values_list("session_id", "user_turns"))
        assert turns == {"talked": 2, "silent": 0}
        assert new.objects.get(session_id="talked").last_user_text == "two"
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
