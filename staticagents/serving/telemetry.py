"""Per request: one access-log line and the request metrics (``Observed``, around the service).

The line (logger ``staticagents.access``, info level) gives the method, the path
without its query, the status, the dialect, the rule and the outcome the journal
recorded (``-`` when the request was not journaled: a refusal, the admin) and the
duration. A WebSocket connection is one line when it ends (method ``WS``,
status 101 once accepted). What is logged never includes a header or a query, so
never a key.
"""

from __future__ import annotations

import logging
from time import perf_counter
from typing import Any

from staticagents.replying.recorded import RequestRecord, current_request
from staticagents.serving.fallback import api_of
from staticagents.serving.metrics import REPLY_SECONDS, REQUESTS
from staticagents.serving.route import Message, Receive, Scope, Send

access_log = logging.getLogger("staticagents.access")


class Observed:
    """The ASGI application ``app``, each request counted and logged when it ends."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        record = RequestRecord()
        reset = current_request.set(record)
        started = perf_counter()
        response = Response()

        async def observed_send(message: Message) -> None:
            if response.status == 0:
                response.starts(message)
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            current_request.reset(reset)
            finished(scope, record, response, started)


class Response:
    """The status of a response, and when it began, from the first message that says."""

    __slots__ = ("began", "status")

    def __init__(self) -> None:
        self.status = 0
        self.began = 0.0

    def starts(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
        elif kind == "websocket.accept":
            self.status = 101
        elif kind in ("websocket.close", "websocket.http.response.start"):
            self.status = 403  # refused before the handshake completed
        else:
            return
        self.began = perf_counter()


def finished(scope: Scope, record: RequestRecord, response: Response, started: float) -> None:
    """Count the request and log its line (the server answers an unstarted response with 500)."""
    status = response.status or 500
    websocket = scope["type"] == "websocket"
    dialect = record.dialect or ("websocket" if websocket else api_of(scope["path"], {}))
    outcome = record.outcome or "none"
    REQUESTS.labels(dialect, outcome, str(status)).inc()
    ended = perf_counter()
    REPLY_SECONDS.labels(dialect).observe((response.began or ended) - started)
    if access_log.isEnabledFor(logging.INFO):
        log_line(scope, record, status, dialect, (ended - started) * 1000)


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
