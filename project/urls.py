"""HTTP routes served through Django (the Galaxy API, the control API, the admin)."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", include("staticagents.api.urls")),
    path("control/", include("staticagents.api.control_urls")),
]
