"""Any change to the rules bumps the ruleset version, so every worker rebuilds its snapshot."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_delete, post_save

from staticagents.models import Defaults, Fallback, Rule, RuleResponse
from staticagents.services import bump_version


def _changed(sender: type, **kwargs: Any) -> None:
    if not kwargs.get("raw"):
        bump_version()


for model in (Rule, RuleResponse, Defaults, Fallback):
    post_save.connect(_changed, sender=model, dispatch_uid=f"bump-on-save-{model.__name__}")
    post_delete.connect(_changed, sender=model, dispatch_uid=f"bump-on-delete-{model.__name__}")
