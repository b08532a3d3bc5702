"""The service's ASGI application: lean reply routes first, then Channels and Django.

The reply routes of every dialect (model dialects, ADK run, Galaxy's agent
routes, chat and chat stream) are plain ASGI handlers served by ``serving.router.ReplyRouter``
(OpenAI's imported at start-up, the others at the first request they might take); the
WebSocket goes to its Channels consumer; the Galaxy API, the control API and
the admin go through Django (DESIGN section 1), the control API in one thread
hop a request (``serving.onehop``).
"""

import asyncio
import contextlib
import gc
import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "staticagents.settings")
django_application = get_asgi_application()

from staticagents.serving.static import StaticFiles  # noqa: E402

django_application = StaticFiles(django_application)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from staticagents.dialects.gemini import routes as gemini  # noqa: E402
from staticagents.dialects.openai import routes as openai  # noqa: E402
from staticagents.replying import live  # noqa: E402
from staticagents.serving.guards import PathGuard, RequestGuard  # noqa: E402
from staticagents.serving.onehop import OneHopDjango  # noqa: E402
from staticagents.serving.router import LaterRoutes, ReplyRouter  # noqa: E402
from staticagents.serving.sessions import SessionPrefix  # noqa: E402
from staticagents.serving.shutdown import stop_streams_on_exit_signals  # noqa: E402
from staticagents.serving.telemetry import Observed  # noqa: E402

# The router tries the reply routes in order: the busiest first.
reply_routes = [
    # GET /v1/models: OpenAI's and Anthropic's listing, and Gemini's for Google's clients.
    gemini.shared_models_listing(openai.ModelsRoute),
    *openai.http_routes,
]


def later_reply_routes() -> list[Any]:
    """The other dialects' reply routes, after OpenAI's: their modules are imported at the
    first request on a path they might take (``LATER_SEGMENTS``), not at start-up (a
    third of what serving the first reply imported; bench/README.md, step 21)."""
    from staticagents.dialects.adk import routes as adk
    from staticagents.dialects.anthropic import routes as anthropic
    from staticagents.dialects.embeddings import routes as embeddings
    from staticagents.dialects.galaxy import routes as galaxy
    from staticagents.dialects.galaxy import stream as galaxy_stream
    from staticagents.dialects.responses import routes as responses

    return [
        *responses.http_routes,
        *anthropic.http_routes,
        *embeddings.http_routes,  # before the other Gemini model routes
        *gemini.http_routes,
        *adk.http_routes,
        *galaxy.http_routes,  # POST only: the views behind take the other methods
        *galaxy_stream.http_routes,
    ]


# Every first path segment a later reply route takes (tests/serving/test_router.py).
LATER_SEGMENTS = frozenset({"v1", "v1beta", "agents", "api", "list-apps", "apps", "run", "run_sse"})
# The control API, which tests drive before and after every agent run, in one thread hop.
http_application = OneHopDjango("/control/", django_application)  # type: ignore[arg-type]


class WebSocketApplication:
    """The WebSocket routes (the dialect's chat and the live journal), whose modules (the
    consumers, the WebSocket wire module with Galaxy's) are imported at the first WebSocket
    connection: an HTTP-only service never needs them (bench/README.md, step 22)."""

    def __init__(self) -> None:
        self.router: Any = None

    def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if self.router is None:
            self.router = self.load()
        return self.router(scope, receive, send)

    @staticmethod
    def load() -> URLRouter:
        from staticagents.control import live as live_journal
        from staticagents.dialects.websocket import consumer as websocket

        routes = [*websocket.websocket_routes, *live_journal.websocket_routes]
        return URLRouter([*routes, websocket.unknown_path_route])


websocket_application = WebSocketApplication()
# /sessions/{key}/... binds the rest of the path to a session; a reply route's request then
# goes straight to its handler (which refuses a NUL character in the path or query itself,
# and counts and logs its request); any other request is counted and logged by Observed
# (serving.telemetry), then meets the PathGuard, then Django or Channels.
application = SessionPrefix(
    ReplyRouter(
        reply_routes,
        later=LaterRoutes(LATER_SEGMENTS, later_reply_routes),
        app=Observed(
            PathGuard(
                ProtocolTypeRouter(
                    {
                        "http": RequestGuard(http_application),
                        "websocket": websocket_application,
                    }
                )
            )
        ),
    )
)


def served_application() -> Any:
    """The ASGI application as ``serve`` runs it, in each worker process: streams end at once
    when the service is told to stop (``serving.shutdown``), the worker listens on the
    channel layer (``replying.live``), and the collector is tuned.

    Each request allocates thousands of short-lived containers, so with Python's
    default thresholds the cyclic collector ran thousands of times a second (a
    fifth of the reply path's time; bench/README.md). Reference counting frees
    nearly all of them: the collector runs after a million net allocations, and
    what start-up built is frozen out of its way (with no full collection first:
    it took 40 ms of the start-up and found a few dozen objects to free).
    """
    with contextlib.suppress(RuntimeError):  # called outside a server's loop: no signals
        loop = asyncio.get_running_loop()
        stop_streams_on_exit_signals(loop)
        live.feed(loop).start()  # session resets and ruleset versions reach this worker
    gc.freeze()
    gc.set_threshold(1_000_000, 20, 100)
    return application
