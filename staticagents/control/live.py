"""``/control/journal/live``: the journal as it is written, over a WebSocket, as JSON events.

The handshake carries the control token (``Authorization: Bearer …`` or
``?token=``, which the logs mask), or the admin's session of a staff user with
the journal's view permission (``view_journalentry``; the page must come from
the same host). The query chooses what to follow: ``session``, ``agent_type``,
``outcome``, ``fallbacks=true``; or ``ruleset=true`` alone, ruleset versions only
(``ruleset``, ``available`` and ``unavailable`` events), which a staff session
may follow with the rules' view permission (``view_rule``: the admin's rule
list). Events, one JSON text message each:

* ``{"type": "subscribed", "filters": {...}, "available": bool}`` first;
* ``{"type": "entry", "entry": {...}}``: an entry as ``GET /control/journal`` lists it;
* ``{"type": "dropped", "count": n}``: this socket read too slowly, n entries were let go;
* ``{"type": "unavailable"}`` / ``{"type": "available"}``: the channel layer failed / is back;
* ``{"type": "update", "id": n, "outcome": ...}``: an entry's outcome changed later
  (``cancelled``, ``cut_off``, ``fault``), whatever the filters;
* ``{"type": "ruleset", "version": n}``, ``{"type": "session_reset", "session": key}``.

A refused handshake is accepted only to send one ``error`` event and close
(4400 for a bad query, 4401 without credentials, 4403 without the permission).
The socket takes no messages: one longer than ``STATIC_AGENTS_MAX_BODY_BYTES`` is
refused as the chat's are, any other is ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import parse_qs

import orjson
from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.urls import path

from staticagents.conf import settings
from staticagents.control.views import control_token_matches
from staticagents.dialects.websocket.consumer import handshake_headers, message_size
from staticagents.models import JournalEntry
from staticagents.replying import live

ROUTE = "/control/journal/live"
CLOSE_INVALID = 4400
CLOSE_UNAUTHORIZED = 4401
CLOSE_FORBIDDEN = 4403
PERMISSION = "staticagents.view_journalentry"
RULESET_PERMISSION = "staticagents.view_rule"
OUTCOMES = {o for o, _ in JournalEntry.OUTCOMES}
PARAMETERS = {"session", "agent_type", "outcome", "fallbacks", "ruleset", "token"}
BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


class Refused(Exception):
    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def parse_filters(query_string: bytes) -> live.Filters:
    """The subscriber's filters from the handshake's query; ``Refused`` naming a bad one."""
    try:
        params = parse_qs(query_string.decode(), keep_blank_values=True, strict_parsing=False)
    except UnicodeDecodeError:
        raise Refused(400, CLOSE_INVALID, "the query string is not UTF-8") from None
    unknown = sorted(set(params) - PARAMETERS)
    if unknown:
        raise Refused(400, CLOSE_INVALID, f"{unknown[0]}: unknown query parameter")
    value = {name: values[-1] for name, values in params.items()}
    outcome = value.get("outcome") or None
    if outcome is not None and outcome not in OUTCOMES:
        raise Refused(400, CLOSE_INVALID, f"outcome: not one of {', '.join(sorted(OUTCOMES))}")
    chosen = {}
    for name in ("fallbacks", "ruleset"):
        chosen[name] = BOOLEANS.get(value.get(name, "false").lower())
        if chosen[name] is None:
            raise Refused(400, CLOSE_INVALID, f"{name}: true or false")
    filters = live.Filters(
        session=value.get("session") or None,
        agent_type=value.get("agent_type") or None,
        outcome=outcome,
        fallbacks=bool(chosen["fallbacks"]),
        ruleset=bool(chosen["ruleset"]),
    )
    if filters.ruleset and filters != live.Filters(ruleset=True):
        raise Refused(400, CLOSE_INVALID, "ruleset: takes no other filter")
    return filters


def _token(headers: dict[str, str], query_string: bytes) -> str | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return token.strip()
    given = parse_qs(query_string.decode("latin-1")).get("token")
    return given[-1] if given else None


def _same_origin(headers: dict[str, str]) -> bool:
    """Whether a browser's page comes from this host: a session's cookie goes to a socket
    that any page opens, so only the service's own pages may use it."""
    origin = headers.get("origin", "")
    return bool(origin) and origin.split("://", 1)[-1] == headers.get("host")


class LiveJournalConsumer(AsyncWebsocketConsumer):
    # The feed holds one channel per process for every subscriber (``replying.live``).
    channel_layer_alias = "__none__"
    sender: asyncio.Future[None] | None = None

    async def connect(self) -> None:
        await self.accept()
        try:
            filters = parse_filters(self.scope.get("query_string", b""))
            await self.admit(RULESET_PERMISSION if filters.ruleset else PERMISSION)
        except Refused as refused:
            event = {"type": "error", "status": refused.status, "message": refused.message}
            await self.send(text_data=orjson.dumps(event).decode())
            await self.close(code=refused.code)
            return
        self.sender = asyncio.ensure_future(self.follow(filters))

    async def admit(self, permission: str) -> None:
        headers = handshake_headers(self.scope)
        token = _token(headers, self.scope.get("query_string", b""))
        if token is not None:
            if not await database_sync_to_async(control_token_matches)(token):
                raise Refused(401, CLOSE_UNAUTHORIZED, "invalid control token")
            return
        user = self.scope.get("user")
        if user is None or not (user.is_active and user.is_staff) or not _same_origin(headers):
            raise Refused(401, CLOSE_UNAUTHORIZED, "send the control token or sign in as staff")
        if not await database_sync_to_async(user.has_perm)(permission):
            needed = permission.split(".")[1]
            raise Refused(403, CLOSE_FORBIDDEN, f"following this needs {needed}")

    async def follow(self, filters: live.Filters) -> None:
        feed = live.feed()
        async with feed.subscribed(filters) as subscription:
            chosen = {k: v for k, v in vars(filters).items() if v not in (None, False)}
            await self.send_event(
                {"type": "subscribed", "filters": chosen, "available": feed.available}
            )
            while True:
                for event in await subscription.next_events():
                    await self.send_event(event)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        limit = settings.STATIC_AGENTS_MAX_BODY_BYTES
        if message_size(text_data, bytes_data) > limit:
            message = f"message exceeds {limit} bytes (STATIC_AGENTS_MAX_BODY_BYTES)"
            await self.send_event({"type": "error", "status": 413, "message": message})

    async def disconnect(self, code: int) -> None:
        if self.sender is not None:
            self.sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.sender

    async def send_event(self, event: dict[str, Any]) -> None:
        await self.send(text_data=orjson.dumps(event).decode())


websocket_routes = [
    path(ROUTE.lstrip("/"), AuthMiddlewareStack(LiveJournalConsumer.as_asgi())),
]
