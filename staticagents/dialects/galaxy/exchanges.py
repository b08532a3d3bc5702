"""Galaxy chat exchanges: answering a chat turn, saving it, and reading conversations back.

Shared by the DRF views (in a thread) and the lean reply routes (on the event
loop), so both answer, persist and report a turn the same way: the reads and
writes of a turn are journal jobs (``journal.run_now`` in a thread, ``await
journal.run`` on the loop, in the journal's rounds), one set of statements.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Prefetch

from staticagents.core.inquiry import Inquiry
from staticagents.core.replies import Reply
from staticagents.core.values import value_class
from staticagents.dialects.galaxy import wire as galaxy
from staticagents.models import ChatExchange, ChatMessage
from staticagents.replying.answer import Answer, aanswer_inquiry, answer_inquiry
from staticagents.replying.journal import Job, Statements, each_chunk, in_sql, journal

HISTORY_LIMIT_MAX = 1000


class ExchangeNotFound(Exception):
    def __init__(self, exchange_id: int) -> None:
        super().__init__(f"Chat exchange {exchange_id} not found")
        self.exchange_id = exchange_id


@dataclass(frozen=True)
class ChatTurn:
    """One answered chat question, not yet saved."""

    inquiry: Inquiry
    answer: Answer
    exchange_id: int | None  # the exchange this turn continues (once saved: its exchange)
    started: float  # perf_counter() when the request arrived
    saved: bool = False  # saved with its journal entry (``save_with_entry``)


def chat_inquiry(
    request: galaxy.ChatRequest, turns: Sequence[tuple[str, str]], headers: Mapping[str, str]
) -> Inquiry:
    """The inquiry of a chat turn (its query must be set), the exchange's history in its context."""
    if request.query is None:
        raise ValueError("a chat turn needs a query")
    context = {**request.context, "conversation_history": galaxy.conversation_history(turns)}
    return galaxy.galaxy_inquiry(
        query=request.query,
        agent_type=request.agent_type,
        context=context,
        headers=headers,
        conversation_id=request.exchange_id,
        turn=1 + sum(1 for role, _ in turns if role == "user"),
    )


def answer_chat_turn(
    request: galaxy.ChatRequest,
    *,
    headers: Mapping[str, str],
    route: str,
    body: bytes,
    started: float,
) -> ChatTurn:
    """Answer ``request`` (its query must be set), in a thread (the DRF view)."""
    job = earlier_turns_job(request.exchange_id) if request.exchange_id else None
    turns = journal.run_now(job) if job is not None else []
    inquiry = chat_inquiry(request, turns, headers)
    answer = answer_inquiry(inquiry, route=route, body=body)
    return ChatTurn(inquiry, answer, request.exchange_id, started)


def _never(reply: Reply) -> bool:
    return False


async def aanswer_chat_turn(
    request: galaxy.ChatRequest,
    *,
    headers: Mapping[str, str],
    route: str,
    body: bytes,
    started: float,
    save_with_entry: Callable[[Reply], bool] = _never,
) -> ChatTurn:
    """``answer_chat_turn`` for the event loop: the reads and writes go in the journal's rounds.

    When ``save_with_entry(reply)``, the turn is saved in its journal entry's own
    round (one commit for both, ``journal.record(entry, job=...)``), and the
    ChatTurn comes back ``saved``; otherwise ``afinish_chat_turn`` saves it.
    """
    job = earlier_turns_job(request.exchange_id) if request.exchange_id else None
    turns = await journal.run(job) if job is not None else []
    inquiry = chat_inquiry(request, turns, headers)
    saved: dict[str, int | None] = {}  # "as": the exchange, once saved with the entry

    def keep(pk: int) -> None:
        saved["as"] = pk

    def then(reply: Reply) -> Job | None:
        if not save_with_entry(reply):
            return None
        saved["as"] = request.exchange_id  # a failed turn is not saved (``reply_save_job``)
        return reply_save_job(inquiry, reply, request.exchange_id, keep=keep)

    answer = await aanswer_inquiry(inquiry, route=route, body=body, then=then)
    if "as" in saved:
        return ChatTurn(inquiry, answer, saved["as"], started, saved=True)
    return ChatTurn(inquiry, answer, request.exchange_id, started)


def finish_chat_turn(turn: ChatTurn) -> dict[str, Any]:
    """Save the turn (a failed one is not saved, as in Galaxy) and render its ChatResponse."""
    job = chat_save_job(turn)
    exchange_id = journal.run_now(job) if job is not None else turn.exchange_id
    return chat_response(turn, exchange_id)


async def afinish_chat_turn(turn: ChatTurn) -> dict[str, Any]:
    """``finish_chat_turn`` for the event loop."""
    if turn.saved:
        return chat_response(turn, turn.exchange_id)
    job = chat_save_job(turn)
    exchange_id = await journal.run(job) if job is not None else turn.exchange_id
    return chat_response(turn, exchange_id)


def chat_save_job(turn: ChatTurn) -> Job | None:
    """What saves the turn: nothing for a failed one (as in Galaxy)."""
    return reply_save_job(turn.inquiry, turn.answer.reply, turn.exchange_id)


def reply_save_job(
    inquiry: Inquiry,
    reply: Reply,
    exchange_id: int | None,
    *,
    keep: Callable[[int], None] | None = None,
) -> SaveTurn | None:
    """What saves ``inquiry`` and its ``reply`` to the exchange: nothing for a failed reply."""
    if reply.error is not None:
        return None
    agent_response = galaxy.render_agent_response(reply)
    return save_turn_job(inquiry, reply.content, agent_response, exchange_id, keep=keep)


def chat_response(turn: ChatTurn, exchange_id: int | None) -> dict[str, Any]:
    return galaxy.render_chat_response(
        turn.answer.reply,
        exchange_id=exchange_id,
        processing_time=time.perf_counter() - turn.started,
    )


EXCHANGES = ChatExchange._meta.db_table
MESSAGES = ChatMessage._meta.db_table
FIND_EXCHANGES = f"SELECT id FROM {EXCHANGES} WHERE id IN "
TOUCH_EXCHANGES = f"UPDATE {EXCHANGES} SET updated_at = %s WHERE id IN "


def save_turn_job(
    inquiry: Inquiry,
    response: str,
    agent_response: Mapping[str, Any],
    exchange_id: int | None = None,
    *,
    keep: Callable[[int], None] | None = None,
) -> SaveTurn:
    """Append the question and its answer to the exchange (a new one when none is given,
    or when it was deleted while this turn was answered); the job returns its id, and
    tells it to ``keep`` too (a job given with a journal entry hands no result back)."""
    return SaveTurn(
        agent_type=inquiry.agent_type[:200],
        session=inquiry.session,
        query=inquiry.query,
        response=response,
        agent_response=agent_response,
        exchange_id=exchange_id,
        keep=keep,
    )


@value_class
class SaveTurn:
    """The job that appends a turn to its exchange (``save_turn_job``). The turns of a
    journal round are saved together (a ``JobKind``): one read and one update of the
    exchanges they continue, one insert of the new ones, one of all their messages,
    where each turn took two or three statements."""

    agent_type: str
    session: str
    query: str
    response: str
    agent_response: Mapping[str, Any]
    exchange_id: int | None
    keep: Callable[[int], None] | None

    def __call__(self, sql: Statements) -> int:
        [pk] = self.together(sql, [self])
        return pk

    @classmethod
    def together(cls, sql: Statements, jobs: list[SaveTurn]) -> list[int]:
        continued = sorted({job.exchange_id for job in jobs if job.exchange_id is not None})
        present: set[int] = set()
        for chunk, count in each_chunk(continued, 1):
            touched = [int(pk) for (pk,) in sql.rows(in_sql(FIND_EXCHANGES, count), chunk)]
            if touched:  # most recent conversations list first
                now = sql.now(ChatExchange, "updated_at")
                sql.run(in_sql(TOUCH_EXCHANGES, len(touched)), [now, *touched])
            present.update(touched)
        new = [job for job in jobs if job.exchange_id not in present]
        made = iter(
            sql.insert(
                ChatExchange, [{"agent_type": j.agent_type, "session": j.session} for j in new]
            )
        )
        ids: list[int] = []
        for job in jobs:
            pk = job.exchange_id
            ids.append(pk if pk is not None and pk in present else next(made))
        messages: list[Mapping[str, Any]] = []
        for job, pk in zip(jobs, ids, strict=True):
            messages.append({"exchange_id": pk, "role": "user", "content": job.query})
            messages.append(
                {
                    "exchange_id": pk,
                    "role": "assistant",
                    "content": job.response,
                    "agent_response": dict(job.agent_response),
                }
            )
        sql.append(ChatMessage, messages)
        for job, pk in zip(jobs, ids, strict=True):
            if job.keep is not None:
                job.keep(pk)
        return ids


def earlier_turns_job(exchange_id: int) -> Job:
    """The exchange's messages as ``(role, content)``; ExchangeNotFound if there is none."""

    def read(sql: Statements) -> list[tuple[str, str]]:
        if not sql.rows(f"SELECT 1 FROM {EXCHANGES} WHERE id = %s", [exchange_id]):
            raise ExchangeNotFound(exchange_id)
        rows = sql.rows(
            f"SELECT role, content FROM {MESSAGES} WHERE exchange_id = %s ORDER BY id",
            [exchange_id],
        )
        return [(str(role), str(content)) for role, content in rows]

    return read


# -- reads and housekeeping for the chat routes --------------------------------------


def stored(message: ChatMessage) -> galaxy.StoredMessage:
    return galaxy.StoredMessage(
        role=message.role,
        content=message.content,
        agent_response=message.agent_response,
        timestamp=message.created_at.isoformat() if message.created_at else None,
    )


def exchange_messages(exchange_id: int) -> list[dict[str, Any]]:
    """The exchange's user and assistant entries; empty when there is no such exchange."""
    exchange = ChatExchange.objects.filter(pk=exchange_id).first()
    if exchange is None:
        return []
    messages = [stored(m) for m in exchange.messages.order_by("id")]
    return galaxy.render_exchange_messages(messages, exchange.feedback)


def chat_history(*, session: str | None, limit: int) -> list[dict[str, Any]]:
    """Conversations, most recent first, each summarised by its first turn."""
    exchanges = _exchanges(session).prefetch_related(
        Prefetch("messages", queryset=ChatMessage.objects.order_by("id"))
    )[: min(limit, HISTORY_LIMIT_MAX)]
    return [
        galaxy.render_history_item(
            exchange.pk,
            exchange.agent_type,
            [stored(m) for m in exchange.messages.all()],
            exchange.feedback,
        )
        for exchange in exchanges
        if exchange.messages.all()
    ]


def set_feedback(exchange_id: int, feedback: int) -> None:
    if not ChatExchange.objects.filter(pk=exchange_id).update(feedback=feedback):
        raise ExchangeNotFound(exchange_id)


def delete_exchange(exchange_id: int) -> None:
    with transaction.atomic():
        ChatMessage.objects.filter(exchange_id=exchange_id).delete()
        deleted, _ = ChatExchange.objects.filter(pk=exchange_id).delete()
    if not deleted:
        raise ExchangeNotFound(exchange_id)


def delete_exchanges(exchange_ids: Sequence[int]) -> int:
    with transaction.atomic():
        ChatMessage.objects.filter(exchange_id__in=exchange_ids).delete()
        deleted, _ = ChatExchange.objects.filter(pk__in=exchange_ids).delete()
    return deleted


def clear_history(*, session: str | None) -> tuple[int, int]:
    """Delete the conversations (of one session, or all): ``(exchanges, turns)`` deleted."""
    with transaction.atomic():
        exchanges = _exchanges(session)
        messages = ChatMessage.objects.filter(exchange__in=exchanges)
        turns = messages.filter(role="user").count()
        messages.delete()
        count, _ = exchanges.delete()
    return count, turns


def _exchanges(session: str | None) -> Any:
    exchanges = ChatExchange.objects.order_by("-updated_at", "-id")
    return exchanges.filter(session=session) if session else exchanges
