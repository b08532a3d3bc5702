"""Galaxy chat exchanges: answering a chat turn, saving it, and reading conversations back.

Shared by the blocking ``/api/chat`` view and the ``/api/chat/stream`` consumer,
so both answer, persist and report a turn the same way.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Prefetch

from staticagents.core.inquiry import Inquiry
from staticagents.dialects.galaxy import wire as galaxy
from staticagents.models import ChatExchange, ChatMessage
from staticagents.replying.answer import Answer, answer_inquiry

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
    exchange_id: int | None  # the exchange this turn continues, if any
    started: float  # perf_counter() when the request arrived


def answer_chat_turn(
    request: galaxy.ChatRequest,
    *,
    headers: Mapping[str, str],
    route: str,
    body: bytes,
    started: float,
) -> ChatTurn:
    """Answer ``request`` (its query must be set) with the exchange's history in its context."""
    if request.query is None:
        raise ValueError("a chat turn needs a query")
    turns = earlier_turns(request.exchange_id) if request.exchange_id else []
    context = {**request.context, "conversation_history": galaxy.conversation_history(turns)}
    inquiry = galaxy.galaxy_inquiry(
        query=request.query,
        agent_type=request.agent_type,
        context=context,
        headers=headers,
        conversation_id=request.exchange_id,
        turn=1 + sum(1 for role, _ in turns if role == "user"),
    )
    answer = answer_inquiry(inquiry, route=route, body=body)
    return ChatTurn(inquiry, answer, request.exchange_id, started)


def finish_chat_turn(turn: ChatTurn) -> dict[str, Any]:
    """Save the turn (a failed one is not saved, as in Galaxy) and render its ChatResponse."""
    reply = turn.answer.reply
    exchange_id = turn.exchange_id
    if reply.error is None:
        agent_response = galaxy.render_agent_response(reply)
        exchange_id = save_turn(turn.inquiry, reply.content, agent_response, exchange_id)
    return galaxy.render_chat_response(
        reply, exchange_id=exchange_id, processing_time=time.perf_counter() - turn.started
    )


def save_turn(
    inquiry: Inquiry,
    response: str,
    agent_response: Mapping[str, Any],
    exchange_id: int | None = None,
) -> int:
    """Append the question and its answer to the exchange (a new one when none is given)."""
    with transaction.atomic():
        exchange = None
        if exchange_id is not None:
            exchange = ChatExchange.objects.filter(pk=exchange_id).first()
        if exchange is None:  # new, or deleted while this turn was answered
            exchange = ChatExchange.objects.create(
                agent_type=inquiry.agent_type[:200], session=inquiry.session
            )
        ChatMessage.objects.bulk_create(
            [
                ChatMessage(exchange=exchange, role="user", content=inquiry.query),
                ChatMessage(
                    exchange=exchange,
                    role="assistant",
                    content=response,
                    agent_response=dict(agent_response),
                ),
            ]
        )
        exchange.save(update_fields=["updated_at"])  # most recent conversations list first
    return exchange.pk


def earlier_turns(exchange_id: int) -> list[tuple[str, str]]:
    """The exchange's messages as ``(role, content)``; ExchangeNotFound if there is none."""
    if not ChatExchange.objects.filter(pk=exchange_id).exists():
        raise ExchangeNotFound(exchange_id)
    messages = ChatMessage.objects.filter(exchange_id=exchange_id).order_by("id")
    return list(messages.values_list("role", "content"))


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
