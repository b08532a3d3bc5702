"""The ASGI application: Channels consumers for the reply routes, Django for the rest.

The model-dialect reply routes, the SSE streams and the WebSocket are served by
Channels consumers; the Galaxy API, the control API and the admin go through
Django (DESIGN section 1).
"""

import gc
import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
# The admin's CSS and JS come straight from the installed apps (no collectstatic, any DEBUG).
django_application = ASGIStaticFilesHandler(get_asgi_application())

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from staticagents.middleware import PathGuard, RequestGuard  # noqa: E402
from staticagents.routing import http_routes, websocket_routes  # noqa: E402
from staticagents.transport.websocket import unknown_path_route  # noqa: E402

# Channels routes to ASGI apps; django-stubs only knows views here.
http_application = URLRouter([*http_routes, re_path(r"", RequestGuard(django_application))])  # type: ignore[arg-type]
websocket_application = URLRouter([*websocket_routes, unknown_path_route])
# Every request meets the PathGuard first: no NUL character in a path or query.
application = PathGuard(
    ProtocolTypeRouter({"http": http_application, "websocket": websocket_application})
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
