"""The WebSocket chat route, ``/ws/chat/``, on a Channels consumer.

One connection carries any number of inquiries, answered one after another in
the order they arrive: a message sent while a reply is still streaming waits in
a queue (at most ``QUEUE_LIMIT`` messages and ``STATIC_AGENTS_MAX_BODY_BYTES``
in all; beyond that it is refused at once with an ``error`` event, status 429)
and is answered after the current reply's ``done``. A message longer than
``STATIC_AGENTS_MAX_BODY_BYTES`` is neither answered nor journaled: ``serve``
has the protocol refuse it from its frame's header, unread, closing the socket
(code 1009); under a server that lets it through, it is refused on arrival with
an ``error`` event (status 413) and the socket stays open. Every
event of a reply is sent at its scripted offset from the start of that reply's
stream, by the paced sender that the SSE routes use too (``serving/stream.py``),
so late sends never push later ones back; each event is one text message. A
client that disconnects stops its stream at once and its journal entry is
marked cancelled; a stream that would outlast ``STATIC_AGENTS_MAX_STREAM_SECONDS``
is cut off there, with an ``error`` event.

With ``STATIC_AGENTS_API_KEYS`` set, the handshake must carry one of the keys
(``Authorization: Bearer …`` or ``?api_key=``); otherwise the socket is
accepted only to send one ``error`` event (status 401) and close with code 4401.

``turn`` counts the inquiries of one session on this connection, this one
included. The session is the handshake's ``X-Static-Session`` header, else the
message's ``session``, else the global session.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import orjson
from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncWebsocketConsumer
from django.urls import path, re_path

from staticagents.conf import settings
from staticagents.core.inquiry import session_key
from staticagents.core.replies import Fault
from staticagents.core.timing import TimedFrame
from staticagents.dialects.websocket import wire as dialect
from staticagents.replying.answer import Answer, aanswer_inquiry
from staticagents.replying.journal import journal
from staticagents.serving import access
from staticagents.serving.fallback import unknown_route_entry
from staticagents.serving.protocol import SEND_MANY
from staticagents.serving.stream import Faulted, paced, send_paced

log = logging.getLogger(__name__)

ROUTE = "/ws/chat/"
QUEUE_LIMIT = 32
# Application close codes (4000-4999) that mirror HTTP statuses, as graphql-ws does.
CLOSE_UNAUTHORIZED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_FAULT = 1011  # a scripted ``disconnect`` fault: the server gave up midway

Frame = tuple[str | None, bytes | None, int]  # a message's text or bytes, and its size


class ChatConsumer(AsyncWebsocketConsumer):
    # The chat route never uses the channel layer; skipping it saves a channel per socket.
    channel_layer_alias = "__none__"

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels' own dispatch first closes the Django connections of its sync
        # thread that are stale (``aclose_old_connections``): a hop to that thread
        # and back for every message. Nothing here uses those connections (the
        # journal and the session counters keep their own), so a message goes
        # straight to its handler.
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        self.inbox: asyncio.Queue[Frame] = asyncio.Queue(maxsize=QUEUE_LIMIT)
        self.queued_bytes = 0  # of the messages in the inbox
        self.turns: dict[str, int] = {}
        self.entry_id: int | None = None  # the journal entry of the reply now streaming
        self.worker: asyncio.Future[None] | None = None  # set once the handshake is admitted
        refusal = access.check_key(
            access.WEBSOCKET, self.handshake_headers, self.scope.get("query_string", b"")
        )
        await self.accept()
        if refusal is not None:
            await self.send_event(dialect.error_event("authentication_error", refusal.message, 401))
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        self.worker = asyncio.ensure_future(self.work())

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.worker is None:
            return  # refused at the handshake: the socket is closing
        size, limit = message_size(text_data, bytes_data), settings.STATIC_AGENTS_MAX_BODY_BYTES
        if size > limit:
            message = f"message exceeds {limit} bytes (STATIC_AGENTS_MAX_BODY_BYTES)"
            await self.send_event(dialect.error_event("request_too_large", message, 413))
            return
        if self.inbox.full() or (self.queued_bytes and self.queued_bytes + size > limit):
            message = "too many inquiries are already waiting: send more after a done event"
            await self.send_event(dialect.error_event("busy", message, 429))
            return
        self.queued_bytes += size
        self.inbox.put_nowait((text_data, bytes_data, size))

    async def disconnect(self, code: int) -> None:
        if self.worker is not None:
            self.worker.cancel()
            self.inbox = asyncio.Queue()  # what still waited is let go at once
        streaming, self.entry_id = self.entry_id, None
        await journal.mark(streaming, "cancelled")

    async def send_event(self, event: dict[str, Any]) -> None:
        await self.send(text_data=orjson.dumps(event).decode())

    # -- the inquiries, one at a time -------------------------------------------------

    async def work(self) -> None:
        while True:
            text, data, size = await self.inbox.get()
            self.queued_bytes -= size
            try:
                await self.answer(text, data)
            except Exception:
                log.exception("answering a WebSocket inquiry failed")
                await self.send_event(
                    dialect.error_event("api_error", "internal error in Static Agents", 500)
                )
            finally:
                self.entry_id = None

    async def answer(self, text: str | None, data: bytes | None) -> None:
        try:
            message = dialect.parse_message(text, data)
        except dialect.MessageInvalid as exc:
            await self.send_event(
                dialect.error_event("invalid_request", exc.message, 400, exc.request_id)
            )
            return
        session = session_key(self.handshake_headers, message.session)
        self.turns[session] = turn = self.turns.get(session, 0) + 1
        inquiry = dialect.build_inquiry(
            message, session=session, turn=turn, headers=self.handshake_headers
        )
        body = text if text is not None else (data or b"").decode("utf-8", "replace")
        answer: Answer = await aanswer_inquiry(inquiry, route=self.scope["path"], body=body)
        self.entry_id = answer.entry_id
        events = dialect.stream_events(answer.reply, session=session, request_id=message.request_id)
        timed = paced(answer.reply.timing)
        await self.stream(events, message.request_id, answer.reply.fault, paced=timed)

    async def stream(
        self,
        events: Iterable[TimedFrame],
        request_id: str | int | None,
        fault: Fault | None,
        *,
        paced: bool = True,
    ) -> None:
        """Send the events on their schedule (``serving/stream.py``); a stream that the
        maximum duration cuts off ends with an ``error`` event naming the limit.

        A scripted ``fault`` stops the stream after its events (the socket stays
        open, the conversation can go on), or closes the socket (``disconnect``).
        """

        def fault_frame(at: float) -> TimedFrame:
            return TimedFrame(at, dialect.fault_event(request_id))

        stopped = await send_paced(
            events,
            messages,
            self.send_messages,
            entry_id=self.entry_id,
            fault=fault,
            error_frame=fault_frame,
            paced=paced,
        )
        if isinstance(stopped, Faulted):
            if stopped.kind == "disconnect":
                await self.close(code=CLOSE_FAULT)
        elif stopped is not None:
            await self.send_event(dialect.cut_off_event(stopped.limit, request_id))

    async def send_messages(self, texts: list[str]) -> None:
        """Messages due together: in one write where the server can (``serving.protocol``)."""
        if len(texts) > 1 and SEND_MANY in self.scope.get("extensions", {}):
            await self.base_send({"type": SEND_MANY, "texts": texts})
            return
        for text in texts:
            await self.send(text_data=text)

    @property
    def handshake_headers(self) -> dict[str, str]:
        return handshake_headers(self.scope)


def handshake_headers(scope: dict[str, Any]) -> dict[str, str]:
    """The handshake's headers, names lower-cased."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


def message_size(text: str | None, data: bytes | None) -> int:
    """A message's length in bytes (UTF-8, as it came), counted without copying ASCII text."""
    if text is None:
        return len(data or b"")
    return len(text) if text.isascii() else len(text.encode())


def messages(frames: list[TimedFrame]) -> list[str]:
    """Each frame as one WebSocket text message."""
    return [frame.json().decode() for frame in frames]


class UnknownPathConsumer(AsyncWebsocketConsumer):
    """Any other WebSocket path: one ``error`` event (status 404), then close with 4404."""

    channel_layer_alias = "__none__"

    async def connect(self) -> None:
        await self.accept()
        path = self.scope.get("path", "")
        entry = unknown_route_entry("GET", path, handshake_headers(self.scope), dialect="websocket")
        if entry is not None:
            await journal.record(entry)
        message = f"Unknown WebSocket path {path}: the chat is at {ROUTE}"
        event = dialect.error_event("not_found", message, 404)
        await self.send(text_data=orjson.dumps(event).decode())
        await self.close(code=CLOSE_NOT_FOUND)


websocket_routes = [path("ws/chat/", ChatConsumer.as_asgi())]
# project/asgi.py puts it after every WebSocket route.
unknown_path_route = re_path(r"", UnknownPathConsumer.as_asgi())
