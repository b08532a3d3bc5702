"""Stored responses in the database: keep, read, replace and delete them.

Every worker process answers follow-ups, so what the service answered lives in
the database, keyed by response id. Keeping one is on every request's path
(``store`` is OpenAI's default), so the responses a loop is asked to keep are
saved in rounds (``Rounds``): one transaction for all those waiting when a round
begins, one round at a time, as the journal is written. The table is kept near
the journal's cap (``STATIC_AGENTS_JOURNAL_MAX``): every so many responses a
process stores, it deletes those older than the cap's newest.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from channels.db import database_sync_to_async
from django.db import transaction

from staticagents.conf import settings
from staticagents.dialects.responses.wire import Item
from staticagents.models import StoredResponse
from staticagents.serving.loop_local import LoopLocal

_unpruned = 0
_prune_lock = threading.Lock()


async def keep_response(response_id: str, body: dict[str, Any], items: Sequence[Item]) -> None:
    """Keep ``body`` (the response object) and the conversation through it; return once
    it is committed."""
    row = StoredResponse(
        response_id=response_id, body=body, items=[[item.kind, item.text] for item in items]
    )
    await _rounds.get().save(row)


class Rounds:
    """The responses one event loop keeps, saved in rounds (see the module doc)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: list[tuple[StoredResponse, asyncio.Future[None]]] = []
        self.saving: asyncio.Task[None] | None = None

    async def save(self, row: StoredResponse) -> None:
        future: asyncio.Future[None] = self.loop.create_future()
        self.waiting.append((row, future))
        if self.saving is None:
            # A task, started next turn: the rows of every request of this turn join it.
            self.saving = self.loop.create_task(self._rounds())
        await future

    async def _rounds(self) -> None:
        try:
            while self.waiting:
                batch, self.waiting = self.waiting, []
                try:
                    await database_sync_to_async(save_rows)([row for row, _ in batch])
                except Exception as exc:  # the round's requests fail, not the rounds
                    outcome: BaseException | None = exc
                else:
                    outcome = None
                for _, future in batch:
                    if future.done():  # the request was cancelled meanwhile
                        continue
                    if outcome is None:
                        future.set_result(None)
                    else:
                        future.set_exception(outcome)
        finally:
            self.saving = None


_rounds = LoopLocal(Rounds)


def save_rows(rows: list[StoredResponse]) -> None:
    """Insert ``rows`` in one transaction, pruning the table when it is due."""
    with transaction.atomic():
        saved = StoredResponse.objects.bulk_create(rows)
        if _prune_due(len(saved)):
            newest = max(row.pk for row in saved)
            cap = settings.STATIC_AGENTS_JOURNAL_MAX
            StoredResponse.objects.filter(id__lte=newest - cap).delete()


def _prune_due(written: int) -> bool:
    """Count ``written`` stored responses; whether it is time to prune (about 1% of the cap)."""
    global _unpruned
    with _prune_lock:
        _unpruned += written
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
