"""HTTP routes served through Django (the Galaxy API, the control API, the admin)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.urls import path, re_path
from django.utils.module_loading import import_string
from django.views.decorators.csrf import csrf_exempt

from staticagents import front
from staticagents.control.metrics import metrics_view
from staticagents.serving import fallback


# The admin, each API and the schema's views are imported when first asked for (include()
# would import them with this module): a service started for a test serves its first reply
# without loading what it never uses.
def lazy_include(module: str, namespace: str | None = None) -> Any:
    """``include(module, namespace)``, imported when a path under it is first resolved."""
    return (module, namespace, namespace)


def lazy_view(dotted_path: str, **initkwargs: Any) -> Callable[..., HttpResponseBase]:
    """The class-based view at ``dotted_path``, imported at its first request."""

    @cache
    def view() -> Callable[..., HttpResponseBase]:
        view_class = import_string(dotted_path)
        return view_class.as_view(**initkwargs)  # type: ignore[no-any-return]

    @csrf_exempt  # as DRF's own views are
    def lazily(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return view()(request, *args, **kwargs)

    return lazily


urlpatterns = [
    path("", front.front_door, name="front-door"),
    re_path(r"^health/?$", front.health, name="health"),
    path("admin/", lazy_include("staticagents.admin.urls", namespace="admin")),
    # Swagger UI from drf-spectacular-sidecar's copy: served here, nothing from a CDN.
    path(
        "api/docs/",
        lazy_view("drf_spectacular.views.SpectacularSwaggerView", url_name="openapi-schema"),
        name="api-docs",
    ),
    # The OpenAPI schema of the DRF routes (Galaxy's API and the control API).
    re_path(
        r"^api/schema/?$",
        lazy_view("drf_spectacular.views.SpectacularAPIView"),
        name="openapi-schema",
    ),
    path("api/", lazy_include("staticagents.dialects.galaxy.urls")),
    path("control/", lazy_include("staticagents.control.urls")),
    path("metrics", metrics_view, name="metrics"),
    # Any other path (the admin keeps its own): a JSON 404 in the shape of its API, DEBUG or not.
    re_path(r"^(?!admin(?:/|$))", fallback.not_found),
]

handler400 = "staticagents.serving.fallback.bad_request"
handler500 = "staticagents.serving.fallback.server_error"
