"""The reply router: the later dialects' routes load at the first request they might take."""

from __future__ import annotations

from typing import Any

from staticagents import asgi
from staticagents.serving.router import LaterRoutes, ReplyRouter

# One path for each reply route (a prefix of an agent type or none), and some of no route.
PATHS = [
    "/v1/models",
    "/agents/a/v1/models",
    "/v1/chat/completions",
    "/v1/responses",
    "/agents/a/v1/responses/r1",
    "/v1/messages",
    "/agents/a/v1/messages/",
    "/v1/embeddings",
    "/v1beta/models/m:embedContent",
    "/agents/a/v1/models/m:batchEmbedContents",
    "/v1beta/models/m:generateContent",
    "/v1/models/m:streamGenerateContent",
    "/v1beta/models/m:countTokens",
    "/v1beta/models",
    "/v1beta/models/m",
    "/list-apps",
    "/apps/a/users/u/sessions",
    "/apps/a/users/u/sessions/s",
    "/run",
    "/run_sse",
    "/api/ai/agents/query",
    "/api/ai/agents/error-analysis",
    "/api/ai/agents/custom-tool",
    "/api/chat",
    "/api/chat/stream",
    "/control/counters/",
    "/admin/",
    "/v1/nothing",
    "/nothing",
]
UNLOADED = ["/v1/chat/completions", "/v1/models", "/control/counters/", "/admin/", "/nothing"]


def routers() -> tuple[ReplyRouter, ReplyRouter, list[int]]:
    """One router with every route, one with the later routes as the service has them,
    and how many times the second loaded them."""
    every = [*asgi.reply_routes, *asgi.later_reply_routes()]
    loads: list[int] = []

    def load() -> list[Any]:
        loads.append(1)
        return asgi.later_reply_routes()

    eager = ReplyRouter(every, app=None)
    lazy = ReplyRouter(asgi.reply_routes, app=None, later=LaterRoutes(asgi.LATER_SEGMENTS, load))
    return eager, lazy, loads


def test_each_path_goes_where_it_would_with_every_route_loaded() -> None:
    eager = routers()[0]
    found = [eager.resolve(path) for path in PATHS]
    later = ReplyRouter.matchers(asgi.later_reply_routes())
    # Every later route has a path here (OpenAI's /v1/models is the shared listing's).
    assert {handler for _, handler, _ in later} <= {taken[0] for taken in found if taken}
    for path in PATHS:  # each the first request of a router: the later routes not loaded
        assert routers()[1].resolve(path) == eager.resolve(path), path


def test_the_later_routes_load_once_at_the_first_path_they_might_take() -> None:
    _, lazy, loads = routers()
    for path in UNLOADED:
        lazy.resolve(path)
    assert loads == []
    assert lazy.resolve("/agents/a/v1/messages") is not None
    assert lazy.resolve("/v1/chat/completions") is not None
    assert lazy.resolve("/run") is not None
    assert loads == [1]
