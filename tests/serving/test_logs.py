"""The service's log lines: credentials in a query are masked, JSON lines are JSON."""

from __future__ import annotations

import json
import logging

from staticagents.serving.logs import JsonFormatter, MaskCredentials, mask_query_credentials


def test_a_credential_in_a_query_is_masked_and_the_rest_kept() -> None:
    line = '127.0.0.1:5 - "WebSocket /ws/chat/?api_key=sk-1&page=2&Token=t&key=k" [accepted]'

    assert mask_query_credentials(line) == (
        '127.0.0.1:5 - "WebSocket /ws/chat/?api_key=***&page=2&Token=***&key=***" [accepted]'
    )


def test_the_filter_masks_a_message_built_from_its_arguments() -> None:
    path = ("/ws?token=abc",)
    record = logging.LogRecord("uvicorn.error", 20, "", 0, '"WebSocket %s"', path, None)

    assert MaskCredentials().filter(record)
    assert record.getMessage() == '"WebSocket /ws?token=***"'


def test_a_json_line_carries_the_request_fields_or_the_message() -> None:
    access = logging.LogRecord("staticagents.access", 20, "", 0, "GET / 200", (), None)
    access.request = {"method": "GET", "path": "/", "status": 200}
    other = logging.LogRecord("uvicorn.error", 30, "", 0, "Shutting %s", ("down",), None)

    line, plain = (json.loads(JsonFormatter().format(record)) for record in (access, other))
    assert (line["logger"], line["level"], line["method"], line["status"]) == (
        "staticagents.access",
        "info",
        "GET",
        200,
    )
    assert "message" not in line
    assert plain["message"] == "Shutting down" and plain["level"] == "warning"
