from django.apps import AppConfig


class StaticAgentsConfig(AppConfig):
    name = "staticagents"
    verbose_name = "Static Agents"
    default_auto_field = "django.db.models.BigAutoField"
