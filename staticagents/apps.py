from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.contrib.admin import autodiscover
from django.contrib.admin.apps import SimpleAdminConfig
from django.contrib.admin.checks import check_admin_app, check_dependencies
from django.core import checks

from staticagents.checks import check_fixtures, check_limits


class StaticAgentsConfig(AppConfig):
    default = True  # this app's own config, of the ones this module holds
    name = "staticagents"
    verbose_name = "Static Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(check_limits, "staticagents")
        checks.register(check_fixtures, "staticagents")


class AdminConfig(SimpleAdminConfig):
    """Django's admin, its apps' ``admin`` modules imported with its URLs
    (``staticagents/admin/urls.py``) rather than at start-up, or by its checks."""

    def ready(self) -> None:
        checks.register(check_dependencies, checks.Tags.admin)
        checks.register(check_discovered_admin, checks.Tags.admin)


def check_discovered_admin(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The admin's own check of every registered ModelAdmin, once they are registered."""
    autodiscover()
    messages: list[checks.CheckMessage] = check_admin_app(app_configs, **kwargs)
    return messages
