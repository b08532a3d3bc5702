from django.apps import AppConfig
from django.core import checks

from staticagents.checks import check_fixtures, check_limits


class StaticAgentsConfig(AppConfig):
    name = "staticagents"
    verbose_name = "Static Agents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(check_limits, "staticagents")
        checks.register(check_fixtures, "staticagents")
