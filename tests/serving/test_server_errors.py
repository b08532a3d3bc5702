"""What the server would answer in text is JSON: a request that failed before it answered
(a JSON 500, logged with its traceback), a failed WebSocket handshake, ``OPTIONS *``."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import uuid
from typing import Any

import pytest

from staticagents.serving.router import ReplyRouter
from staticagents.serving.telemetry import Observed

HANDSHAKE = (
    b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
)


def exchange(live_url: str, request: bytes) -> tuple[bytes, dict[str, str], Any]:
    """Send raw ``request`` bytes and read to the end; the status line, the headers and the
    JSON body."""
    host, port = live_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        raw.sendall(request)
        answer = b""
        while chunk := raw.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, json.loads(body)


def plain(request_line: str) -> bytes:
    return f"{request_line} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()


def test_a_failed_websocket_handshake_is_answered_in_json(live_url: str) -> None:
    keyless = (
        b"GET /ws/chat/ HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    )
    status, headers, body = exchange(live_url, keyless)
    assert status.startswith(b"HTTP/1.1 400") and headers["content-type"] == "application/json"
    assert "Sec-WebSocket-Key" in body["error"]["message"]

    # Refused by the application before it accepted (a NUL in the path): a 403.
    refused = b"GET /ws/chat/%00 HTTP/1.1\r\nHost: x\r\n" + HANDSHAKE + b"\r\n"
    status, headers, body = exchange(live_url, refused)
    assert status.startswith(b"HTTP/1.1 403") and headers["content-type"] == "application/json"
    assert body["error"]["message"] == "WebSocket connection refused: Forbidden"


def test_options_star_names_the_methods_in_json(live_url: str) -> None:
    status, headers, body = exchange(live_url, plain("OPTIONS *"))
    assert status.startswith(b"HTTP/1.1 200") and headers["content-type"] == "application/json"
    assert body == {"allow": headers["allow"].split(", ")}
    assert "POST" in body["allow"]
    status, _, body = exchange(live_url, plain("GET *"))
    assert status.startswith(b"HTTP/1.1 404") and body["error"]["message"] == "Unknown path: GET *"


def test_a_request_that_fails_before_it_answers_gets_a_json_500_and_a_logged_traceback(
    live_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(self: ReplyRouter, path: str) -> None:
        raise LookupError("the router broke")

    monkeypatch.setattr(ReplyRouter, "resolve", broken)
    path = f"/v1/never-seen-{uuid.uuid4().hex}"  # not in the router's cache: resolved
    with caplog.at_level(logging.ERROR, logger="staticagents.serving.telemetry"):
        status, headers, body = exchange(
            live_url, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
    assert status.startswith(b"HTTP/1.1 500") and headers["content-type"] == "application/json"
    assert body["error"]["type"] == "server_error"  # OpenAI's shape, as the path asks
    [record] = [r for r in caplog.records if r.name == "staticagents.serving.telemetry"]
    assert path in record.getMessage() and record.exc_info is not None
    assert "the router broke" in str(record.exc_info[1])


def test_a_response_already_begun_is_left_to_the_server() -> None:
    sent: list[dict[str, Any]] = []

    async def half_then_boom(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise LookupError("after the start")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    scope = {"type": "http", "method": "GET", "path": "/v1/models", "headers": []}
    with pytest.raises(LookupError):
        asyncio.run(Observed(half_then_boom)(scope, receive, send))
    assert [message["type"] for message in sent] == ["http.response.start"]
