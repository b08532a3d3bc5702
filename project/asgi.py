"""The ASGI application: Channels consumers for the reply routes, Django for the rest.

The model-dialect reply routes, the SSE streams and the WebSocket are served by
Channels consumers; the Galaxy API, the control API and the admin go through
Django (DESIGN section 1).
"""

import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
# The admin's CSS and JS come straight from the installed apps (no collectstatic, any DEBUG).
django_application = ASGIStaticFilesHandler(get_asgi_application())

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import re_path  # noqa: E402

from staticagents.routing import http_routes, websocket_routes  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Channels routes to ASGI apps; django-stubs only knows views here.
        "http": URLRouter([*http_routes, re_path(r"", django_application)]),  # type: ignore[arg-type]
        "websocket": URLRouter(websocket_routes),
    }
)
