"""HTTP routes served through Django (the Galaxy API, the control API, the admin)."""

from django.contrib import admin
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularSwaggerView

from staticagents import front
from staticagents.control.metrics import metrics_view
from staticagents.serving import fallback

urlpatterns = [
    path("", front.front_door, name="front-door"),
    re_path(r"^health/?$", front.health, name="health"),
    path("admin/", admin.site.urls),
    # Swagger UI from drf-spectacular-sidecar's copy: served here, nothing from a CDN.
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="openapi-schema"), name="api-docs"),
    path("api/", include("staticagents.dialects.galaxy.urls")),
    path("control/", include("staticagents.control.urls")),
    path("metrics", metrics_view, name="metrics"),
    # Any other path (the admin keeps its own): a JSON 404 in the shape of its API, DEBUG or not.
    re_path(r"^(?!admin(?:/|$))", fallback.not_found),
]

handler400 = "staticagents.serving.fallback.bad_request"
handler500 = "staticagents.serving.fallback.server_error"
