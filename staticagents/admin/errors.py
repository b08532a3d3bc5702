"""The error banner of a change form: it links to the first field in error (an anchor,
so it works without JavaScript)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils.text import capfirst


@dataclass(frozen=True)
class ErrorBanner:
    text: str
    anchor: str = ""  # the id of the first field in error, if a field is in error
    label: str = ""


def error_banner(context: dict[str, Any]) -> ErrorBanner | None:
    """The banner for a change form's context, or None when the form has no error."""
    errors = context.get("errors")
    if not errors:
        return None
    text = (
        "Please correct the error below"
        if len(errors) == 1
        else ("Please correct the errors below")
    )
    first = first_field_in_error(context["adminform"], context.get("inline_admin_formsets", []))
    if first is None:
        return ErrorBanner(f"{text}.")
    anchor, label = first
    return ErrorBanner(f"{text}; the first is in", anchor, label)


def first_field_in_error(
    adminform: Any, inline_admin_formsets: Iterable[Any]
) -> tuple[str, str] | None:
    """(anchor, label) of the first field in error, in the order of the page."""
    found = _first_in(adminform)
    if found is not None:
        return found[0], capfirst(found[1])
    for inline in inline_admin_formsets:
        noun = inline.opts.verbose_name
        for number, inline_form in enumerate(inline, 1):
            found = _first_in(inline_form)
            if found is not None:
                return found[0], f"{capfirst(found[1])} of {noun} {number}"
        if inline.formset.non_form_errors():
            return f"{inline.formset.prefix}-group", capfirst(inline.opts.verbose_name_plural)
    return None


def _first_in(form: Any) -> tuple[str, str] | None:
    for fieldset in form:
        for line in fieldset:
            for field in line:
                if field.is_readonly or not field.field.errors:
                    continue
                return field.field.auto_id, str(field.field.label)
    return None


class ErrorBannerMixin:
    """A model admin whose change form shows ``ErrorBanner`` in place of Django's banner
    (templates ``admin/staticagents/change_form.html``)."""

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        context["error_banner"] = error_banner(context)
        if context["error_banner"] is not None:
            context["errors"] = []  # Django's own banner (not a template block) stays hidden
        response: HttpResponse = super().render_change_form(  # type: ignore[misc]
            request, context, add, change, form_url, obj
        )
        return response
