"""Forms of the admin: JSON fields that may stay blank, the responses inline, the fixture upload."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib.admin.widgets import AdminTextareaWidget
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput

from staticagents.document.files import load_fixture
from staticagents.document.schema import DocumentInvalid
from staticagents.models import Rule

MAX_FIXTURE_BYTES = 20 * 1024 * 1024
COMPACT_JSON_WIDTH = 60


class GrowingTextarea(AdminTextareaWidget):
    """A textarea tall enough for the text it holds (3 to 20 lines)."""

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context(name, value, attrs)
        text = str(context["widget"]["value"] or "")
        lines = sum(1 + len(line) // 90 for line in text.splitlines())
        context["widget"]["attrs"]["rows"] = min(max(3, lines), 20)
        return context


class OptionalJSONField(forms.JSONField):
    """JSON shown blank when absent (not ``null``), and indented when it is long."""

    def prepare_value(self, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, InvalidJSONInput):
            return value  # what the user typed, to correct
        compact = json.dumps(value, ensure_ascii=False, cls=self.encoder)
        if len(compact) <= COMPACT_JSON_WIDTH:
            return compact
        return json.dumps(value, ensure_ascii=False, indent=2, cls=self.encoder)


AUTO_PLACE = ("auto", "Before the first rule that would shadow it (else last)")


def place_choices() -> list[tuple[str, str]]:
    """Where a new rule may go: automatically, first, last, or before any rule."""
    names = Rule.objects.order_by("position", "id").values_list("name", flat=True)
    return [
        AUTO_PLACE,
        ("top", "At the top"),
        ("end", "At the end"),
        *((f"before:{name}", f"Before {name}") for name in names),
    ]


class RuleForm(forms.ModelForm):  # type: ignore[type-arg]
    """A rule; a new one also says where it goes among the others (the admin names the
    model and its fields)."""

    place = forms.ChoiceField(
        choices=[AUTO_PLACE],
        required=False,
        initial="auto",
        help_text="A rule placed after one that matches every question it matches never "
        "answers; the first choice avoids that.",
    )


class RuleResponseFormSet(forms.BaseInlineFormSet):  # type: ignore[type-arg]
    """The responses of a rule: at least one, new ones numbered after the existing ones."""

    def get_form_kwargs(self, index: int | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = super().get_form_kwargs(index)
        # Every blank form (and "Add another") offers the place after the last response, so
        # new responses append; several new ones keep their form order (ties go by age).
        if index is None or index >= self.initial_form_count():
            kwargs["initial"] = {"position": self._next_position()}
        return kwargs

    def _next_position(self) -> int:
        return max((response.position for response in self.get_queryset()), default=-1) + 1

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return  # the forms' own errors say what to fix first
        deleted = self.deleted_forms
        if not any(
            form.instance.pk is not None or form.has_changed()
            for form in self.forms
            if form not in deleted
        ):
            raise ValidationError(
                "A rule needs at least one response: fill in at least one field of a response "
                "(its content, for example).",
                code="no_response",
            )


class FixtureUploadForm(forms.Form):
    """A fixture file to import; ``clean`` parses and validates it like ``import_fixture``."""

    MODES = [
        ("replace", "Replace: the database holds exactly the fixture afterwards"),
        ("merge", "Merge: update rules of the same name, append new ones, keep the rest"),
    ]

    fixture = forms.FileField(help_text="YAML or JSON, in the fixture format (version 1).")
    mode = forms.ChoiceField(choices=MODES, initial="replace", widget=forms.RadioSelect)
    dry_run = forms.BooleanField(
        required=False,
        label="Dry run",
        help_text="Validate and report what would change; change nothing.",
    )
    source_name = "fixture"

    def clean_fixture(self) -> dict[str, Any]:
        upload = self.cleaned_data["fixture"]
        self.source_name = str(upload.name)
        if upload.size > MAX_FIXTURE_BYTES:
            raise ValidationError(
                f"{upload.name}: the file is larger than {MAX_FIXTURE_BYTES // (1024 * 1024)} MB",
                code="too_large",
            )
        try:
            return load_fixture(upload.read(), source=upload.name)
        except DocumentInvalid as exc:
            # One message per problem, worded exactly as the import command prints them.
            raise ValidationError(
                [
                    ValidationError(line, code=error.code)
                    for line, error in zip(exc.lines(), exc.errors, strict=True)
                ]
            ) from None
