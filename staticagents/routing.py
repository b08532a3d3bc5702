"""Routes served by Channels consumers (see project/asgi.py)."""

from __future__ import annotations

from typing import Any

http_routes: list[Any] = []
websocket_routes: list[Any] = []
