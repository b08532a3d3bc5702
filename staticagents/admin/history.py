"""The ruleset's history in the admin: every version, what each changed, and a way back.

Read-only: versions are kept by the services, one per write to the ruleset. A
version's page shows what it changed against the version before it, rule by
rule and field by field; "Restore this version" asks for confirmation (showing
what a restore would change) and then replaces the rules with that version's
document through the same service as a fixture replace, itself a new version.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from staticagents.admin.views import curator
from staticagents.document.diff import DocumentDiff, FieldChange, diff_documents
from staticagents.document.terms import DocumentInvalid
from staticagents.models import RulesetVersion
from staticagents.selectors import export_document, ruleset_version, version_changes
from staticagents.services import restore_version

if TYPE_CHECKING:
    VersionAdminBase = admin.ModelAdmin[RulesetVersion]
else:
    VersionAdminBase = admin.ModelAdmin

# Restoring replaces every rule, as a fixture replace does.
RESTORE_PERMISSIONS = ("add_rule", "change_rule", "delete_rule")
ABSENT = "—"
VERSION_FIELDS = ("number", "created_at", "by", "what", "changes")


@admin.register(RulesetVersion)
class RulesetVersionAdmin(VersionAdminBase):
    list_display = ["number", "created_at", "by", "what"]
    list_display_links = ["number"]
    search_fields = ["what", "by"]
    ordering = ["-number"]
    sortable_by = ()
    list_per_page = 50
    fields = VERSION_FIELDS
    readonly_fields = VERSION_FIELDS

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # pruned by the services, past STATIC_AGENTS_VERSIONS_KEEP

    def get_queryset(self, request: HttpRequest) -> QuerySet[RulesetVersion]:
        queryset = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and (match.url_name or "").endswith("_changelist"):
            return queryset.defer("packed")  # the list shows no document
        return queryset

    @admin.display(description="what it changed")
    def changes(self, version: RulesetVersion) -> SafeString:
        against, diff = version_changes(version)
        if diff is None:
            return format_html(
                '<p class="version-against">{}</p>',
                "The version before it is no longer kept (STATIC_AGENTS_VERSIONS_KEEP): "
                "there is nothing to compare it with.",
            )
        if against == 0:
            compared = "Compared with an empty ruleset (this is the first version)."
        else:
            url = reverse("admin:staticagents_rulesetversion_change", args=[against])
            compared = format_html('Compared with <a href="{}">version {}</a>.', url, against)
        return format_html('<p class="version-against">{}</p>{}', compared, diff_table(diff))

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        restore = path(
            "<int:number>/restore/",
            view(self.restore_view),
            name="staticagents_rulesetversion_restore",
        )
        return [restore, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = {"can_restore": may_restore(request), **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra)

    def restore_view(self, request: HttpRequest, number: int) -> HttpResponse:
        """GET: what restoring the version would change, and a form to do it; POST: do it."""
        if not (self.has_view_permission(request) and may_restore(request)):
            raise PermissionDenied
        version = ruleset_version(number)
        if version is None:
            raise Http404(f"no version {number} is kept")
        if request.method == "POST":
            return self._restore(request, version)
        diff = diff_documents(export_document(), version.document())
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Restore version {number}?",
            "version": version,
            "diff": diff_table(diff) if diff else None,
            "version_url": reverse("admin:staticagents_rulesetversion_change", args=[number]),
        }
        return TemplateResponse(
            request, "admin/staticagents/rulesetversion/restore_confirmation.html", context
        )

    def _restore(self, request: HttpRequest, version: RulesetVersion) -> HttpResponse:
        number = version.number
        try:
            made = restore_version(number=number, by=curator(request))
        except DocumentInvalid as exc:
            for line in exc.lines():
                messages.error(request, f"Version {number} cannot be restored: {line}")
            url = reverse("admin:staticagents_rulesetversion_change", args=[number])
            return HttpResponseRedirect(url)
        if made is None:
            messages.info(request, f"The rules are version {number}'s already: nothing changed.")
        else:
            messages.success(request, f"Restored version {number}: the rules are version {made}.")
        return HttpResponseRedirect(reverse("admin:staticagents_rulesetversion_changelist"))


def may_restore(request: HttpRequest) -> bool:
    return request.user.has_perms([f"staticagents.{name}" for name in RESTORE_PERMISSIONS])


def diff_table(diff: DocumentDiff) -> SafeString:
    """The changes as a table: a heading row per rule (or defaults, fallback), then its fields."""
    sections: list[tuple[str, str, tuple[FieldChange, ...]]] = []
    if diff.defaults:
        sections.append(("changed", "the defaults", diff.defaults))
    if diff.fallback:
        sections.append((_part_change(diff.fallback), "the fallback", diff.fallback))
    for rule in diff.rules:
        sections.append((rule.change, f"rule “{rule.name}”", rule.fields))
    rows = format_html_join(
        "",
        '<tbody class="diff-{}"><tr class="diff-head"><th colspan="3">{} {}</th></tr>{}</tbody>',
        ((change, change, label, _field_rows(fields)) for change, label, fields in sections),
    )
    return format_html(
        '<table class="version-diff"><thead><tr><th>field</th><th>before</th><th>after</th>'
        "</tr></thead>{}</table>",
        rows,
    )


def _part_change(fields: tuple[FieldChange, ...]) -> str:
    if all(field.old is None for field in fields):
        return "added"
    if all(field.new is None for field in fields):
        return "removed"
    return "changed"


def _field_rows(fields: tuple[FieldChange, ...]) -> SafeString:
    return format_html_join(
        "",
        '<tr><td class="diff-field">{}</td><td class="diff-old">{}</td>'
        '<td class="diff-new">{}</td></tr>',
        ((field.field, shown(field.old), shown(field.new)) for field in fields),
    )


def shown(value: Any) -> str:
    """A field's value as a curator reads it: text as it is, anything else as JSON."""
    if value is None:
        return ABSENT
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
