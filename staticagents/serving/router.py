"""The lean router in front of the service: a reply route's request goes straight to its handler.

The model-dialect routes, the ADK routes and the Galaxy stream are plain ASGI
handlers (``serving.route.ReplyRoute``, or an app that picks one); ``staticagents/asgi.py``
lists them. Each counts and logs its own request (``ReplyRoute.run``). Every other
request (the Galaxy API, the control API, the admin) and every WebSocket goes on to
the application behind the router, which ``serving.telemetry.Observed`` wraps.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.urls import URLPattern

from staticagents.serving.route import Receive, Scope, Send
from staticagents.serving.telemetry import Observed, failing

# (handler, url_route, the methods it takes or None for all), or no reply route
Resolved = tuple[Any, dict[str, Any], frozenset[str] | None] | None


@dataclass(frozen=True)
class LaterRoutes:
    """Reply routes that come after the router's own, imported (``load``) at the first
    request they might take: its path's first segment is one of ``segments`` and no
    route before them takes it."""

    segments: frozenset[str]
    load: Callable[[], list[URLPattern]]


class ReplyRouter:
    """HTTP requests on a reply route go to its handler; everything else to ``app``.

    The routes are Django URL patterns (``path``/``re_path``), matched against the
    path without its leading slash; what they capture is in
    ``scope["url_route"]["kwargs"]``, as Channels' router puts it. The path is taken
    below ``root_path`` (where ``SessionPrefix`` puts a session prefix). A route whose
    ``only_methods`` is set takes only those methods: other requests on its path go
    on to ``app`` (a DRF view that also serves a reply POST's schema). A path's
    resolution is remembered (up to ``CACHE_SIZE`` paths, then forgotten at once).
    ``later`` routes follow ``routes``, imported when first needed (``LaterRoutes``).
    """

    CACHE_SIZE = 4096

    def __init__(
        self, routes: list[URLPattern], app: Any, later: LaterRoutes | None = None
    ) -> None:
        self.routes = self.matchers(routes)
        self.later = later
        self.app = app
        self.resolved: dict[str, Resolved] = {}

    @staticmethod
    def matchers(routes: list[URLPattern]) -> list[tuple[Any, Any, frozenset[str] | None]]:
        handlers = [getattr(route.callback, "handler_class", route.callback) for route in routes]
        return [
            (route.pattern.match, handler, getattr(handler, "only_methods", None))
            for route, handler in zip(routes, handlers, strict=True)
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            root = scope.get("root_path")
            if root:  # a mount point (or a session prefix): the routes are below it
                path = path.removeprefix(root)
            try:
                resolved = self.resolved[path]
            except KeyError:
                try:
                    resolved = self.resolve(path)
                except Exception as error:  # answered as any request that failed: a JSON 500
                    await Observed(failing(error))(scope, receive, send)
                    return
            if resolved is not None:
                handler, route, methods = resolved
                if methods is None or scope["method"] in methods:
                    scope["url_route"] = route
                    if isinstance(handler, type):  # a ReplyRoute: made here, no wrapper between
                        await handler(scope, send).run(receive)
                    else:
                        await handler(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    def resolve(self, path: str) -> Resolved:
        resolved = self.first_match(path, 0)
        later = self.later
        if resolved is None and later is not None and path[1:].split("/", 1)[0] in later.segments:
            start = len(self.routes)
            self.routes = self.routes + self.matchers(later.load())
            self.later = None  # what was resolved before stays right: these come after
            resolved = self.first_match(path, start)
        if len(self.resolved) >= self.CACHE_SIZE:
            self.resolved.clear()
        self.resolved[path] = resolved
        return resolved

    def first_match(self, path: str, start: int) -> Resolved:
        for match, handler, methods in itertools.islice(self.routes, start, None):
            found = match(path[1:])
            if found is not None:
                return handler, {"args": found[1], "kwargs": found[2]}, methods
        return None
