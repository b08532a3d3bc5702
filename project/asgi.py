"""The ASGI application: lean handlers for the reply routes, Channels and Django for the rest.

The model-dialect reply routes and their SSE streams are served by the lean
reply router (``staticagents.routing``), the WebSocket by a Channels consumer;
the Galaxy API, the control API and the admin go through Django (DESIGN
section 1).
"""

import gc
import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
# The admin's CSS and JS come straight from the installed apps (no collectstatic, any DEBUG).
django_application = ASGIStaticFilesHandler(get_asgi_application())

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from staticagents.middleware import PathGuard, RequestGuard  # noqa: E402
from staticagents.routing import ReplyRouter, http_routes, websocket_routes  # noqa: E402
from staticagents.transport.websocket import unknown_path_route  # noqa: E402

websocket_application = URLRouter([*websocket_routes, unknown_path_route])
# A reply route's request goes straight to its handler (which refuses a NUL character in
# the path or query itself); any other request meets the PathGuard, then Django or Channels.
application = ReplyRouter(
    http_routes,
    PathGuard(
        ProtocolTypeRouter(
            {
                "http": RequestGuard(django_application),  # type: ignore[arg-type]
                "websocket": websocket_application,
            }
        )
    ),
)

# Each request allocates thousands of short-lived container objects, so with
# Python's default thresholds the cyclic collector ran thousands of times a second:
# a fifth of the reply path's time. Nearly all of those objects are freed by
# reference counting; the collector now runs after a million net allocations, and
# everything built at start-up (Django, the apps, the URL configuration) is moved
# out of its way. Memory stays flat under load (bench/README.md).
gc.collect()
gc.freeze()
gc.set_threshold(1_000_000, 20, 100)
