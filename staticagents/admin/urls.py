"""The admin's URLs, imported when a path under /admin/ is first resolved (``staticagents.urls``).

The admin app is installed without discovery (``apps.AdminConfig``): every app's
``admin`` module, this project's included, is imported here, so a service that is
only asked for replies never loads the admin's modules and forms.
"""

from __future__ import annotations

from django.contrib import admin

admin.autodiscover()

app_name = "admin"
urlpatterns = admin.site.get_urls()
