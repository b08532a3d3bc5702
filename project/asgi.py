"""The service's ASGI application on this checkout's settings.

For an ASGI server started by hand: ``uvicorn project.asgi:application``.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from staticagents.asgi import application

__all__ = ["application"]
