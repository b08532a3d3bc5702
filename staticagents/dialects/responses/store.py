"""Stored responses in the database: keep, read, replace and delete them.

Every worker process answers follow-ups, so what the service answered lives in
the database, keyed by response id. The table is kept near the journal's cap
(``STATIC_AGENTS_JOURNAL_MAX``): every so many responses a process stores, it
deletes those older than the cap's newest, as the journal is pruned.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from staticagents.conf import settings
from staticagents.dialects.responses.wire import Item
from staticagents.models import StoredResponse

_unpruned = 0
_prune_lock = threading.Lock()


def save_response(*, response_id: str, body: dict[str, Any], items: Sequence[Item]) -> None:
    """Keep ``body`` (the response object) and the conversation through it."""
    row = StoredResponse.objects.create(
        response_id=response_id,
        body=body,
        items=[[item.kind, item.text] for item in items],
    )
    if _prune_due():
        StoredResponse.objects.filter(id__lte=row.id - settings.STATIC_AGENTS_JOURNAL_MAX).delete()


def _prune_due() -> bool:
    """Count one stored response; whether it is time to prune (about 1% of the cap)."""
    global _unpruned
    with _prune_lock:
        _unpruned += 1
        if _unpruned < max(1, min(1000, settings.STATIC_AGENTS_JOURNAL_MAX // 100)):
            return False
        _unpruned = 0
        return True


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
