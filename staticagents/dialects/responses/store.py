"""Stored responses in the database: keep, read, replace and delete them.

Every worker process answers follow-ups, so what the service answered lives in
the database, keyed by response id. Keeping one is on every request's path
(``store`` is OpenAI's default), so responses are written as the journal is,
by a ``JournalWriter`` of their own: in rounds, one multi-row insert per round,
on the event loop for a SQLite file; and kept near the journal's cap
(``STATIC_AGENTS_JOURNAL_MAX``), the oldest deleted by id as the journal's are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from staticagents.dialects.responses.wire import Item
from staticagents.models import StoredResponse
from staticagents.replying.journal import JournalWriter

_writer = JournalWriter(StoredResponse)


async def keep_response(response_id: str, body: dict[str, Any], items: Sequence[Item]) -> None:
    """Keep ``body`` (the response object) and the conversation through it; return once
    it is committed."""
    row = {
        "response_id": response_id,
        "body": body,
        "items": [[item.kind, item.text] for item in items],
    }
    await _writer.record(row)


def conversation_of(response_id: str) -> list[Item] | None:
    """The conversation through a stored response; None when none has that id."""
    rows = StoredResponse.objects.filter(response_id=response_id).values_list("items", flat=True)
    stored = rows.first()
    if stored is None:
        return None
    return [Item(kind, text) for kind, text in stored]


def stored_body(response_id: str) -> dict[str, Any] | None:
    """The response object as it was sent (or as it ended); None when none has that id."""
    rows = StoredResponse.objects.filter(response_id=response_id).values_list("body", flat=True)
    body: dict[str, Any] | None = rows.first()
    return body


def replace_body(response_id: str, body: dict[str, Any]) -> None:
    """Record how a response ended when that differs from what was stored (a cut-off)."""
    StoredResponse.objects.filter(response_id=response_id).update(body=body)


def delete_response(response_id: str) -> bool:
    """Forget a stored response; False when none has that id."""
    deleted, _ = StoredResponse.objects.filter(response_id=response_id).delete()
    return deleted > 0
