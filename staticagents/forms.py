"""Forms of the admin: a rule (kept from lost edits), its responses, the fixture upload."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.core import signing
from django.core.exceptions import ValidationError

from staticagents.document.files import load_fixture
from staticagents.document.terms import DocumentInvalid
from staticagents.fields import literals_field, suggestions_field, tool_calls_field
from staticagents.models import Rule

MAX_FIXTURE_BYTES = 20 * 1024 * 1024
# A file kept between a dry run and the real run travels in the page: bounded.
MAX_STAGED_BYTES = 1024 * 1024
STAGED_SALT = "staticagents.upload.staged"
STAGED_SECONDS = 60 * 60


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


class EditStampForm(forms.ModelForm):  # type: ignore[type-arg]
    """A change form that refuses to overwrite a change made since it was opened.

    ``seen`` carries the stored object's fingerprint and the time the page was made;
    on a conflict the form is shown again with the curator's input and a fresh stamp,
    so saving once more overwrites deliberately.
    """

    seen = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["seen"].initial = _stamp(self.instance)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        seen = cleaned.get("seen") or ""
        if self.instance.pk is None or not seen:
            return cleaned
        fingerprint, _, opened = seen.partition(" ")
        current = _stamp(self.instance)
        if current and current.partition(" ")[0] != fingerprint:
            self.add_error(None, ValidationError(_changed_by(self.instance, opened)))
            data = self.data.copy()  # type: ignore[attr-defined]  # a QueryDict
            data[self.add_prefix("seen")] = current
            self.data = data
        return cleaned


def _stamp(obj: Any) -> str:
    """The stored object's fingerprint (its document's digest) and the time now."""
    fresh = type(obj).objects.filter(pk=obj.pk).first()
    if fresh is None:
        return ""
    return f"{Rule.digest_of(fresh.document())} {time.time():.6f}"


def _changed_by(obj: Any, opened: str) -> str:
    try:
        since = datetime.fromtimestamp(float(opened), tz=UTC)
    except ValueError:  # an altered stamp: name no one
        since = datetime.max.replace(tzinfo=UTC)
    entry = (
        LogEntry.objects.filter(
            content_type=ContentType.objects.get_for_model(obj),
            object_id=str(obj.pk),
            action_time__gt=since,
        )
        .select_related("user")
        .order_by("-action_time")
        .first()
    )
    who = (
        f"by {entry.user} at {entry.action_time:%Y-%m-%d %H:%M:%S} UTC"
        if entry is not None
        else "outside this form (an upload, a move, a command or the control API)"
    )
    return (
        f"This was changed {who} since you opened this page; your changes are not saved. "
        "They are kept below: check them against the stored version and save again to "
        "overwrite it."
    )


class RuleForm(EditStampForm):
    """A rule; a new one also says where it goes among the others (the admin names the
    model and its fields)."""

    match_contains = literals_field()

    place = forms.ChoiceField(
        choices=[AUTO_PLACE],
        required=False,
        initial="auto",
        help_text="A rule placed after one that matches every question it matches never "
        "answers; the first choice avoids that.",
    )


class RuleResponseForm(forms.ModelForm):  # type: ignore[type-arg]
    """A response of a rule: tool calls and suggestions typed in rows (the inline names the
    model and its fields)."""

    tool_calls = tool_calls_field()
    suggestions = suggestions_field()


class FallbackForm(EditStampForm):
    """The fallback response: tool calls and suggestions typed in rows, as in a rule's."""

    tool_calls = tool_calls_field()
    suggestions = suggestions_field()


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
    """A fixture to import, chosen as a file or kept (``staged``) from a dry run or a
    confirmation page; ``clean`` parses and validates it like ``import_fixture``."""

    MODES = [
        ("merge", "Merge: update rules of the same name, add new ones, keep the rest"),
        ("replace", "Replace: the database holds exactly the fixture afterwards"),
    ]

    fixture = forms.FileField(
        required=False, help_text="YAML or JSON, in the fixture format (version 1)."
    )
    mode = forms.ChoiceField(choices=MODES, initial="merge", widget=forms.RadioSelect)
    dry_run = forms.BooleanField(
        required=False,
        label="Dry run",
        help_text="Validate and list what would change; change nothing.",
    )
    # The file kept by a dry run or a confirmation page, signed so it cannot be altered.
    staged = forms.CharField(required=False, widget=forms.HiddenInput)
    # Set by the page that listed the rules a replace deletes.
    confirm = forms.BooleanField(required=False, widget=forms.HiddenInput)
    source_name = "fixture"
    source_text = b""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if "fixture" in self.errors:  # the file field's own error (an empty file, say)
            return cleaned
        try:
            if cleaned.get("fixture"):
                name, text = _read_upload(cleaned["fixture"])
            elif cleaned.get("staged"):
                name, text = _unstage(cleaned["staged"])
            else:
                raise ValidationError("Choose a fixture file.", code="required")
            self.source_name = name
            cleaned["document"] = _parse_fixture(text, name)
            self.source_text = text
        except ValidationError as exc:
            self.add_error("fixture", exc)
        return cleaned

    def staged_token(self) -> str:
        """The validated file, signed, for the next step; empty when too large to keep."""
        if len(self.source_text) > MAX_STAGED_BYTES:
            return ""
        kept = {"name": self.source_name, "text": self.source_text.decode()}
        return signing.dumps(kept, salt=STAGED_SALT, compress=True)


def _read_upload(upload: Any) -> tuple[str, bytes]:
    if upload.size > MAX_FIXTURE_BYTES:
        raise ValidationError(
            f"{upload.name}: the file is larger than {MAX_FIXTURE_BYTES // (1024 * 1024)} MB",
            code="too_large",
        )
    return str(upload.name), upload.read()


def _unstage(token: str) -> tuple[str, bytes]:
    try:
        kept = signing.loads(token, salt=STAGED_SALT, max_age=STAGED_SECONDS)
    except signing.BadSignature:  # SignatureExpired included
        raise ValidationError(
            "The kept file has expired or was altered: choose the file again.", code="staged"
        ) from None
    return str(kept["name"]), str(kept["text"]).encode()


def _parse_fixture(text: bytes, name: str) -> dict[str, Any]:
    try:
        return load_fixture(text, source=name)
    except DocumentInvalid as exc:
        # One message per problem, worded exactly as the import command prints them.
        raise ValidationError(
            [
                ValidationError(line, code=error.code)
                for line, error in zip(exc.lines(), exc.errors, strict=True)
            ]
        ) from None
