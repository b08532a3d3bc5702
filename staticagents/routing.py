"""Routes served by Channels consumers (see project/asgi.py)."""

from __future__ import annotations

from typing import Any

from django.urls import re_path

from staticagents.transport import adk as adk_transport
from staticagents.transport import anthropic as anthropic_transport
from staticagents.transport import openai as openai_transport
from staticagents.transport import websocket as websocket_transport
from staticagents.transport.galaxy_stream import GalaxyStreamConsumer

http_routes: list[Any] = []
websocket_routes: list[Any] = []

# The router tries routes in order: the busiest reply routes first.
http_routes += openai_transport.http_routes
http_routes += anthropic_transport.http_routes
http_routes += adk_transport.http_routes
http_routes.append(re_path(r"^api/chat/stream$", GalaxyStreamConsumer.as_asgi()))
websocket_routes += websocket_transport.websocket_routes
