"""The admin of the upstreams and the agent types' modes (real models beside static ones).

Staff only, as the whole admin is. A key never shows here: an upstream holds the
name of the environment variable that holds its key. Writes go through services.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from staticagents.admin.views import curator
from staticagents.document import schema
from staticagents.fields import OptionalJSONField
from staticagents.models import AgentMode, Upstream
from staticagents.selectors import stored_upstreams
from staticagents.services import (
    delete_agent_modes,
    delete_upstream,
    save_agent_mode,
    save_upstream,
)

if TYPE_CHECKING:
    UpstreamAdminBase = admin.ModelAdmin[Upstream]
    AgentModeAdminBase = admin.ModelAdmin[AgentMode]
else:  # the admin classes are not subscriptable at run time
    UpstreamAdminBase = AgentModeAdminBase = admin.ModelAdmin


@admin.register(Upstream)
class UpstreamAdmin(UpstreamAdminBase):
    list_display = ["name", "dialect", "base_url", "api_key_env", "model", "timeout"]
    fields = [*Upstream.KEYS]
    formfield_overrides = {models.JSONField: {"form_class": OptionalJSONField}}
    actions = None  # deleted one by one: a mode may need it

    def get_readonly_fields(self, request: HttpRequest, obj: Upstream | None = None) -> list[str]:
        return ["name"] if obj is not None else []  # modes name it

    def has_delete_permission(self, request: HttpRequest, obj: Upstream | None = None) -> bool:
        if obj is not None and needed_by_modes(obj.name):
            return False
        return super().has_delete_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Upstream, form: Any, change: bool) -> None:
        obj.pk = save_upstream(document=obj.document(), by=curator(request)).pk

    def delete_model(self, request: HttpRequest, obj: Upstream) -> None:
        delete_upstream(name=obj.name, by=curator(request))


def needed_by_modes(name: str) -> bool:
    """Whether removing the upstream ``name`` would leave a mode without its upstream."""
    upstreams, modes = stored_upstreams()
    rest = [upstream for upstream in upstreams if upstream["name"] != name]
    return bool(schema.mode_problems(rest, modes))


@admin.register(AgentMode)
class AgentModeAdmin(AgentModeAdminBase):
    list_display = ["__str__", "mode", "upstream"]
    fields = ["agent_type", "mode", "upstream"]

    def save_model(self, request: HttpRequest, obj: AgentMode, form: Any, change: bool) -> None:
        if change and "agent_type" in form.changed_data:
            delete_agent_modes(agent_types=[form.initial["agent_type"]], by=curator(request))
        saved = save_agent_mode(
            agent_type=obj.agent_type, mode=obj.mode, upstream=obj.upstream, by=curator(request)
        )
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: AgentMode) -> None:
        delete_agent_modes(agent_types=[obj.agent_type], by=curator(request))

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        delete_agent_modes(agent_types=[row.agent_type for row in queryset], by=curator(request))
