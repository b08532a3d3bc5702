"""The admin: curate the rules (in order), the defaults and the fallback.

Validation is the models' ``clean()`` (the fixture schema), so a rule saved
here is judged exactly as one imported from YAML. Every change is written by a
service (``staticagents.services``), which bumps the ruleset version once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.forms import BaseInlineFormSet, ModelForm
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import truncatechars
from django.urls import URLPattern, path, reverse
from django.utils.dateformat import format as date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timezone import localtime

from staticagents.admin import (  # noqa: F401  (registers their admins)
    history,
    journal,
    trying,
    upstreams,
)
from staticagents.admin import views as admin_views
from staticagents.admin.errors import ErrorBannerMixin
from staticagents.admin.summaries import match_summary, response_summary
from staticagents.core.reach import Shadow
from staticagents.fields import CodeTextarea, GrowingTextarea, OptionalJSONField
from staticagents.forms import (
    EditStampForm,
    FallbackForm,
    RuleForm,
    RuleResponseForm,
    RuleResponseFormSet,
    place_choices,
)
from staticagents.models import Defaults, Fallback, Rule, RuleResponse, RulesetState
from staticagents.selectors import rule_answers, rule_shadows
from staticagents.services import (
    accept_recorded_rules,
    delete_rules,
    save_rule,
    set_defaults,
    set_fallback,
    set_rules_enabled,
)

admin.site.site_header = "Static Agents"
admin.site.site_title = "Static Agents"
admin.site.index_title = "Rules, defaults, fallback and journal"
admin.site.site_url = "/"  # "View site": the front door

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldsetSpec

    RuleAdminBase = admin.ModelAdmin[Rule]
    ResponseInlineBase = admin.StackedInline[RuleResponse, Rule]
    SingletonAdminBase = admin.ModelAdmin[Any]
else:  # the admin classes are not subscriptable at run time
    RuleAdminBase = SingletonAdminBase = admin.ModelAdmin
    ResponseInlineBase = admin.StackedInline

PREVIEW_LENGTH = 80
MOVE_LABELS = {
    "top": ("⤒", "Move to the top"),
    "up": ("↑", "Move up one place"),
    "down": ("↓", "Move down one place"),
    "bottom": ("⤓", "Move to the bottom"),
}

# Blank text means "not set" (absent in the fixture), never an empty string.
BLANK_IS_ABSENT: dict[type[models.Field[Any, Any]], dict[str, Any]] = {
    models.TextField: {"widget": GrowingTextarea, "empty_value": None},
    models.JSONField: {"form_class": OptionalJSONField, "widget": CodeTextarea},
}
RESPONSE_FIELDSETS: _FieldsetSpec = [
    (
        None,
        {"fields": ["content", "confidence", "agent_type", "reasoning", "suggestions", "metadata"]},
    ),
    (
        "Scripting",
        {
            "fields": [
                "thinking",
                "tool_calls",
                "finish_reason",
                "error",
                "retry_after",
                "fail_first",
                "template",
                "stream",
                "fault",
                "chaos",
                "usage",
            ],
            "description": "Optional: tool calls, scripted errors, flaky answers and timing.",
        },
    ),
    (
        "Embeddings",
        {
            "fields": ["embedding", "embedding_like"],
            "description": "Optional: the vector an embeddings request gets for the texts matched.",
        },
    ),
]


class RuleResponseInline(ResponseInlineBase):
    model = RuleResponse
    form = RuleResponseForm
    formset = RuleResponseFormSet
    verbose_name = "response"
    verbose_name_plural = "responses (sent in position order, one per match)"
    formfield_overrides = BLANK_IS_ABSENT
    fieldsets = [(None, {"fields": ["position"]}), *RESPONSE_FIELDSETS]

    def get_extra(self, request: HttpRequest, obj: Rule | None = None, **kwargs: Any) -> int:
        # A new rule gets a blank response to fill in; an existing one adds with "Add another".
        return 1 if obj is None or not obj.responses.exists() else 0


class RecordedFilter(admin.SimpleListFilter):
    """Rules recorded from a real model, by whether a curator has reviewed them yet."""

    title = "recorded"
    parameter_name = "recorded"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("unreviewed", "recorded, not yet reviewed"),
            ("reviewed", "recorded, reviewed"),
            ("all", "recorded"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Rule]) -> QuerySet[Rule]:
        wanted = self.value()
        if wanted not in ("unreviewed", "reviewed", "all"):
            return queryset
        recorded = queryset.filter(recorded_upstream__isnull=False)
        if wanted == "all":
            return recorded
        return recorded.filter(recorded_reviewed=wanted == "reviewed")


@admin.register(Rule)
class RuleAdmin(ErrorBannerMixin, RuleAdminBase):
    inlines = [RuleResponseInline]
    form = RuleForm
    list_display_links = ["name"]
    list_filter = [
        ("match_agent_type", admin.AllValuesFieldListFilter),
        "enabled",
        RecordedFilter,
    ]
    search_fields = [
        "name",
        "match_agent_type",
        "match_query",
        "match_contains",
        "match_context",
        "match_model",
        "match_system",
        "responses__content",
    ]
    # The list always shows the rules in the order they are tried.
    sortable_by = ()
    list_per_page = 200
    actions = ["enable_rules", "disable_rules", "accept_recorded"]
    readonly_fields = ["recorded_upstream", "recorded_at"]
    formfield_overrides = BLANK_IS_ABSENT
    fieldsets = [
        (None, {"fields": ["name", "enabled"]}),
        (
            "Match",
            {
                "fields": [
                    "match_agent_type",
                    "match_query",
                    "match_contains",
                    "match_context",
                    "match_model",
                    "match_system",
                    "match_dialect",
                    "match_turn",
                    "match_tool_result",
                ],
                "description": "Every predicate given must hold; a blank one is not checked. "
                "Regexes use Python's re.search (unanchored).",
            },
        ),
        ("Sequence", {"fields": ["on_exhausted"]}),
    ]

    def get_fieldsets(self, request: HttpRequest, obj: Rule | None = None) -> _FieldsetSpec:
        fieldsets = list(super().get_fieldsets(request, obj))
        if obj is not None:
            fieldsets.append((None, {"fields": ["seen"], "classes": ["hidden"]}))
        if obj is None:
            fieldsets.append(("Place", {"fields": ["place"]}))
        elif obj.recorded_upstream is not None:
            fields = ("recorded_upstream", "recorded_at", "recorded_reviewed")
            fieldsets.insert(1, ("Recorded from a real model", {"fields": fields}))
        return fieldsets

    def get_form(
        self, request: HttpRequest, obj: Rule | None = None, change: bool = False, **kwargs: Any
    ) -> type[ModelForm[Rule]]:
        form = super().get_form(request, obj, change, **kwargs)
        form.base_fields["place"].choices = place_choices()  # type: ignore[attr-defined]
        return form

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        page = RuleListPage()
        return [
            self.move_buttons(request),
            "place",
            "name",
            "matches",
            "replies",
            "content_preview",
            page.answered,
            page.last_answered,
            page.status,
        ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Rule]:
        # The list summarizes every rule's responses: read them in one query, not one per row.
        return super().get_queryset(request).prefetch_related("responses")

    @admin.display(description="#")
    def place(self, rule: Rule) -> int:
        return rule.position + 1

    @admin.display(description="matches")
    def matches(self, rule: Rule) -> str:
        return match_summary(rule.match_document())

    @admin.display(description="replies with")
    def replies(self, rule: Rule) -> SafeString:
        return response_summary([response.document() for response in rule.responses.all()])

    @admin.display(description="content")
    def content_preview(self, rule: Rule) -> str | None:
        first = next(iter(rule.responses.all()), None)
        return truncatechars(first.content, PREVIEW_LENGTH) if first and first.content else None

    def move_buttons(self, request: HttpRequest) -> Callable[[Rule], SafeString]:
        """A list column of move buttons; they post the list's form (and its CSRF token)."""
        query = admin_views.move_query(request)
        base = reverse(f"{self.admin_site.name}:staticagents_rule_changelist")
        ends: list[int | None] = []  # the first and last rule, read once per page

        @admin.display(description="move")
        def move(rule: Rule) -> SafeString:
            if not ends:
                ends.extend(first_and_last_rule())
            stuck = {
                "top": rule.pk == ends[0],
                "up": rule.pk == ends[0],
                "down": rule.pk == ends[1],
                "bottom": rule.pk == ends[1],
            }
            return format_html_join(
                "",
                '<button type="submit" name="move" value="{}" formaction="{}{}/move/{}/{}" '
                'title="{}" aria-label="{}: {}"{}>{}</button>',
                (
                    (
                        direction,
                        base,
                        rule.pk,
                        direction,
                        query,
                        title,
                        title,
                        rule.name,
                        " disabled" if stuck[direction] else "",
                        symbol,
                    )
                    for direction, (symbol, title) in MOVE_LABELS.items()
                ),
            )

        return move

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        own = [
            path("upload/", view(self.upload_view), name=f"{info}_upload_fixture"),
            path("download/", view(self.download_view), name=f"{info}_download_fixture"),
            path("try/", view(self.try_view), name=f"{info}_try"),
            path(
                "<path:object_id>/move/<str:direction>/", view(self.move_view), name=f"{info}_move"
            ),
        ]
        return own + super().get_urls()

    def upload_view(self, request: HttpRequest) -> HttpResponse:
        return admin_views.upload_view(self, request)

    def download_view(self, request: HttpRequest) -> HttpResponse:
        return admin_views.download_view(self, request)

    def try_view(self, request: HttpRequest) -> HttpResponse:
        return trying.try_view(self, request)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        rule = self.get_object(request, object_id)
        extra = {"try_url": trying.try_url(rule)} if rule is not None else {}
        return super().change_view(request, object_id, form_url, {**extra, **(extra_context or {})})

    def move_view(self, request: HttpRequest, object_id: str, direction: str) -> HttpResponse:
        return admin_views.move_view(self, request, object_id, direction)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {
            "can_upload_fixture": self.has_change_permission(request),
            "can_view_history": request.user.has_perm("staticagents.view_rulesetversion"),
            # rule_live.js tells of a later version (announced on the live journal).
            "ruleset_version": RulesetState.objects.values_list("version", flat=True).first() or 0,
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra)

    def save_model(
        self, request: HttpRequest, obj: Rule, form: ModelForm[Rule], change: bool
    ) -> None:
        """Nothing yet: the rule is saved with its responses, by ``save_related``."""

    def save_related(
        self,
        request: HttpRequest,
        form: ModelForm[Rule],
        formsets: list[BaseInlineFormSet[Any, Any, Any]],
        change: bool,
    ) -> None:
        """Save the rule and its responses in one service call (one version bump)."""
        before = None if change else journal.rule_to_precede(request)  # read before the save
        saved: list[RuleResponse] = []
        removed: list[RuleResponse] = []
        for formset in formsets:  # the responses inline, unless the user may not see it
            saved += formset.save(commit=False)  # builds the rows, and lists the deleted ones
            removed += formset.deleted_objects
        if change:
            place = "auto"  # an edited rule stays where it is
        elif before is not None:  # made from a journal entry: where it answers that request
            place = f"before:{before}"
        else:
            place = form.cleaned_data.get("place") or "auto"
        rule = save_rule(
            rule=form.instance,
            responses=saved,
            removed_responses=removed,
            place=place,
            by=admin_views.curator(request),
        )
        if before is not None:
            index = list(Rule.objects.order_by("position", "id").values_list("name", flat=True))
            self.message_user(
                request,
                f"“{rule.name}” is rule #{index.index(rule.name) + 1}, before “{before}”, "
                "so it answers that request.",
                messages.INFO,
            )
        shadow = rule_shadows().get(rule.name)
        if shadow is not None:
            messages.warning(request, f"{shadow.message()}.")

    def delete_model(self, request: HttpRequest, obj: Rule) -> None:
        # Its responses and session counters go too.
        delete_rules(names=[obj.name], by=admin_views.curator(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Rule]) -> None:
        names = list(queryset.values_list("name", flat=True))
        delete_rules(names=names, by=admin_views.curator(request))

    @admin.action(description="Enable selected rules", permissions=["change"])
    def enable_rules(self, request: HttpRequest, queryset: QuerySet[Rule]) -> None:
        self._set_enabled(request, queryset, enabled=True)

    @admin.action(description="Disable selected rules", permissions=["change"])
    def disable_rules(self, request: HttpRequest, queryset: QuerySet[Rule]) -> None:
        self._set_enabled(request, queryset, enabled=False)

    @admin.action(description="Accept recorded rules", permissions=["change"])
    def accept_recorded(self, request: HttpRequest, queryset: QuerySet[Rule]) -> None:
        names = list(queryset.values_list("name", flat=True))
        count = accept_recorded_rules(names=names, by=admin_views.curator(request))
        self.message_user(request, f"{count} recorded rule(s) accepted.", messages.SUCCESS)

    def _set_enabled(
        self, request: HttpRequest, queryset: QuerySet[Rule], *, enabled: bool
    ) -> None:
        names = list(queryset.values_list("name", flat=True))
        count = set_rules_enabled(names=names, enabled=enabled, by=admin_views.curator(request))
        state = "enabled" if enabled else "disabled"
        self.message_user(request, f"{count} rule(s) {state}.", messages.SUCCESS)


class RuleListPage:
    """Columns read from the whole ruleset and the journal: each read once per page shown."""

    @functools.cached_property
    def shadows(self) -> Mapping[str, Shadow]:
        return rule_shadows()

    @functools.cached_property
    def answers(self) -> dict[str, tuple[int, datetime]]:
        return rule_answers()

    @admin.display(description="answered")
    def answered(self, rule: Rule) -> int:
        return self.answers.get(rule.name, (0, None))[0]

    @admin.display(description="last", empty_value="never")
    def last_answered(self, rule: Rule) -> str | None:
        answered = self.answers.get(rule.name)
        return date_format(localtime(answered[1]), "M j, H:i") if answered else None

    @admin.display(description="status", empty_value="")
    def status(self, rule: Rule) -> SafeString:
        shadow = self.shadows.get(rule.name)
        parts = []
        if shadow is not None:
            parts.append(
                format_html(
                    '<span class="rule-shadowed" title="{}">shadowed by {}</span>',
                    shadow.message(),
                    shadow.by,
                )
            )
        if not rule.enabled:
            parts.append(format_html('<span class="rule-disabled">{}</span>', "disabled"))
        if rule.recorded_upstream is not None:
            review = "reviewed" if rule.recorded_reviewed else "not yet reviewed"
            parts.append(
                format_html(
                    '<span class="rule-recorded" title="recorded from {} at {}, {}">'
                    "recorded{}</span>",
                    rule.recorded_upstream,
                    date_format(localtime(rule.recorded_at), "M j, H:i")
                    if rule.recorded_at
                    else "",
                    review,
                    "" if rule.recorded_reviewed else " · to review",
                )
            )
        return format_html_join(" ", "{}", ((part,) for part in parts))


def first_and_last_rule() -> tuple[int | None, int | None]:
    ordered = Rule.objects.values_list("pk", flat=True)
    return (
        ordered.order_by("position", "id").first(),
        ordered.order_by("-position", "-id").first(),
    )


class SingletonAdmin(ErrorBannerMixin, SingletonAdminBase):
    """A model with at most one row, pk=1: its list leads straight to that row."""

    formfield_overrides = BLANK_IS_ABSENT
    form = EditStampForm

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and not self.model.objects.exists()

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        info = f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}"
        existing = self.model.objects.order_by("pk").first()
        if existing is not None:
            return HttpResponseRedirect(reverse(f"{info}_change", args=[existing.pk]))
        if self.has_add_permission(request):
            return HttpResponseRedirect(reverse(f"{info}_add"))
        return super().changelist_view(request, extra_context)

    def store(self, document: dict[str, Any] | None, *, by: str) -> None:
        """Write the row from a document, or remove it (``None``), through a service."""
        raise NotImplementedError

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        self.store(obj.document(), by=admin_views.curator(request))
        obj.pk = 1  # the row the services write, for the admin's redirect and log

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self.store(None, by=admin_views.curator(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self.store(None, by=admin_views.curator(request))


@admin.register(Defaults)
class DefaultsAdmin(SingletonAdmin):
    fields = ["confidence", "stream", "chaos", "seen"]

    def store(self, document: dict[str, Any] | None, *, by: str) -> None:
        set_defaults(document=document, by=by)


@admin.register(Fallback)
class FallbackAdmin(SingletonAdmin):
    form = FallbackForm
    fieldsets = [*RESPONSE_FIELDSETS, (None, {"fields": ["seen"], "classes": ["hidden"]})]

    def store(self, document: dict[str, Any] | None, *, by: str) -> None:
        set_fallback(document=document, by=by)
