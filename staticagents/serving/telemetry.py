"""Per request: one access-log line and the request metrics, and a JSON 500 in the API's own
shape for a request that failed before it answered.

A reply route observes its own request (``serving.route.ReplyRoute.run`` holds an
``Observation`` and calls ``finished``); ``Observed`` wraps every other request
(the Galaxy API, the control API, the admin, WebSockets) and watches its ``send``
for the status. Wrapping the reply routes as well, with the latency histogram fed
one observation at a time, took 3 % more instructions a reply (bench/README.md,
"sixth session").

The line (logger ``staticagents.access``, info level) gives the method, the path
without its query, the status, the dialect, the rule and the outcome the journal
recorded (``-`` when the request was not journaled: a refusal, the admin) and the
duration. A WebSocket connection is one line when it ends (method ``WS``,
status 101 once accepted). What is logged never includes a header or a query, so
never a key.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from time import perf_counter
from typing import Any

from staticagents.replying.recorded import RequestRecord, current_request
from staticagents.serving.fallback import api_of
from staticagents.serving.guards import ASGIApp, Message, Receive, Scope, Send, refuse
from staticagents.serving.metrics import request_tally

access_log = logging.getLogger("staticagents.access")
log = logging.getLogger(__name__)
SERVER_ERROR = "internal error in Static Agents (logged with its traceback)"


class Observed:
    """The ASGI application ``app``, each request counted and logged when it ends."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        exchange = Exchange(send)
        reset = current_request.set(exchange)
        try:
            await self.app(scope, receive, exchange.send)
        except Exception:
            if scope["type"] != "http" or exchange.status:
                raise  # begun: the server ends the connection (a WebSocket: see serving.protocol)
            # Nothing sent yet: the API's own JSON 500, where the server would answer text.
            log.exception("%s %s failed before it answered", scope["method"], scope["path"])
            headers = {
                name.decode("latin-1").lower(): value.decode("latin-1")
                for name, value in scope.get("headers", [])
            }
            await refuse(exchange.send, scope["path"], headers, 500, SERVER_ERROR)
        finally:
            current_request.reset(reset)
            finished(scope, exchange)


def failing(error: Exception) -> ASGIApp:
    """An application that fails with ``error`` (Observed answers it, and logs why)."""

    async def fail(scope: Scope, receive: Receive, send: Send) -> None:
        raise error

    return fail


class Observation(RequestRecord):
    """One request: what the journal recorded, the response's status and when it began."""

    __slots__ = ("began", "started", "status")

    def __init__(self) -> None:
        self.dialect = self.rule = self.outcome = ""
        self.status = 0  # none sent yet
        self.started = perf_counter()
        self.began = 0.0

    def responds(self, status: int) -> None:
        """The response begins with ``status``."""
        self.status = status
        self.began = perf_counter()


class Exchange(Observation):
    """The observation of a request whose application sends through ``send`` (``Observed``)."""

    __slots__ = ("send_on",)

    def __init__(self, send: Send) -> None:
        super().__init__()
        self.send_on = send

    def send(self, message: Message) -> Awaitable[None]:
        if self.status == 0:
            self.starts(message)
        return self.send_on(message)  # the server's own send, awaited by the caller

    def starts(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.responds(message["status"])
        elif kind == "websocket.accept":
            self.responds(101)
        elif kind in ("websocket.close", "websocket.http.response.start"):
            self.responds(403)  # refused before the handshake completed


def finished(scope: Scope, observation: Observation) -> None:
    """Count the request and log its line (the server answers an unstarted response with 500)."""
    status = observation.status or 500
    dialect = observation.dialect or dialect_of(scope)
    ended = perf_counter()
    request_tally().count(
        dialect, observation.outcome, status, (observation.began or ended) - observation.started
    )
    if access_log.isEnabledFor(logging.INFO):
        log_line(scope, observation, status, dialect, (ended - observation.started) * 1000)


_dialects: dict[str, str] = {}  # the dialect of a path no journal entry named
CACHE_SIZE = 1024


def dialect_of(scope: Scope) -> str:
    """The API a request was for, from its path, when no journal entry said."""
    if scope["type"] == "websocket":
        return "websocket"
    path = scope["path"]
    dialect = _dialects.get(path)
    if dialect is None:
        if len(_dialects) >= CACHE_SIZE:
            _dialects.clear()
        dialect = _dialects[path] = api_of(path, {})
    return dialect


def log_line(
    scope: Scope, record: RequestRecord, status: int, dialect: str, duration_ms: float
) -> None:
    method = "WS" if scope["type"] == "websocket" else scope.get("method", "")
    # The raw path, as sent: the decoded one could carry a line break into the log.
    raw = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
    path = raw.split(b"?", 1)[0].decode("ascii", "backslashreplace")
    fields = {
        "method": method,
        "path": path,
        "status": status,
        "dialect": dialect,
        "rule": record.rule or None,
        "outcome": record.outcome or None,
        "duration_ms": round(duration_ms, 3),
    }
    access_log.info(
        "%s %s %d dialect=%s rule=%s outcome=%s %.1fms",
        method,
        path,
        status,
        dialect,
        record.rule or "-",
        record.outcome or "-",
        duration_ms,
        extra={"request": fields},
    )
