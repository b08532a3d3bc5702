"""The journal in the admin: what agents asked, what answered, and a rule made from a miss.

Read-only: entries are written by the reply routes and cleared through the
control API. The list must stay fast on a journal of millions of rows, so it
shows only stored columns (no per-row query) and counts no more than a page.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import SafeString

from staticagents.admin import trying
from staticagents.core.inquiry import Inquiry
from staticagents.core.literals import anchored_literal
from staticagents.dialects.anthropic.wire import parse_messages_request
from staticagents.dialects.llm.wire import Conversation, InvalidRequest
from staticagents.dialects.openai.wire import parse_chat_request
from staticagents.models import JournalEntry

if TYPE_CHECKING:
    JournalAdminBase = admin.ModelAdmin[JournalEntry]
else:
    JournalAdminBase = admin.ModelAdmin

# The dialects whose stored body tells more than the journal's columns (system, turn, tools).
BODY_PARSERS: dict[str, Callable[[Mapping[str, Any]], Conversation]] = {
    "openai": parse_chat_request,
    "anthropic": parse_messages_request,
}
FROM_ENTRY = "from_entry"  # the add-rule form's parameter naming the entry it was made from
NEVER_MATCHED = ("unknown_route", "rejected")  # no rule was asked: none can be made to answer
COUNT_CAP = 10_000  # the list counts (and pages through) at most this many entries


class CappedPaginator(Paginator):  # type: ignore[type-arg]
    """Pages of the newest ``COUNT_CAP`` entries: counting a journal of millions takes seconds."""

    @cached_property
    def count(self) -> int:
        entries = cast("QuerySet[JournalEntry]", self.object_list)
        return entries[:COUNT_CAP].count()


ENTRY_FIELDS: tuple[str, ...] = (
    "created_at",
    "outcome_label",
    "dialect",
    "route",
    "method",
    "session",
    "agent_type",
    "model",
    "query_text",
    "answered_by",
    "create_rule",
    "status",
    "duration_ms",
    "request_body",
    "request_headers",
    "diagnosis_table",
)


class OutcomeFilter(admin.SimpleListFilter):
    """The stored outcomes, with "answered" split into a rule's answer and the fallback's."""

    title = "outcome"
    parameter_name = "outcome"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        outcomes = [o for o, _ in JournalEntry.OUTCOMES if o != "answered"]
        return [
            ("answered", "answered by a rule"),
            ("fallback", "fallback"),
            *[(o, o) for o in outcomes],
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "answered":
            return queryset.filter(outcome="answered", rule__isnull=False)
        if value == "fallback":
            return queryset.filter(outcome="answered", rule__isnull=True)
        return queryset.filter(outcome=value) if value else queryset


class RecentValuesFilter(admin.SimpleListFilter):
    """A filter on one column by an exact value (``?rule=greet``).

    Listing every value would read the whole journal; the choices are the first
    ``SHOWN`` values met in the newest ``SAMPLE`` entries, and any other value
    can be given in the URL.
    """

    field = ""
    SAMPLE = 1000
    SHOWN = 20

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        newest = JournalEntry.objects.order_by("-id").values_list(self.field, flat=True)
        recent = dict.fromkeys(v for v in newest[: self.SAMPLE] if v)
        values = sorted(list(recent)[: self.SHOWN])
        chosen = self.value()
        if chosen and chosen not in values:
            values.append(chosen)
        return [(v, v) for v in values]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset


def recent_values_filter(name: str, label: str) -> type[RecentValuesFilter]:
    attributes = {"field": name, "parameter_name": name, "title": label}
    return type(f"{name}_filter", (RecentValuesFilter,), attributes)


@admin.register(JournalEntry)
class JournalEntryAdmin(JournalAdminBase):
    list_display = [
        "created_at",
        "outcome_label",
        "dialect",
        "agent_type",
        "query_preview",
        "rule",
        "session",
    ]
    list_display_links = ["created_at"]
    list_filter = [
        OutcomeFilter,
        recent_values_filter("dialect", "dialect"),
        recent_values_filter("agent_type", "agent type"),
        recent_values_filter("rule", "rule"),
        recent_values_filter("session", "session"),
    ]
    search_fields = ["query"]
    ordering = ["-id"]
    sortable_by = ()
    list_per_page = 50
    show_full_result_count = False  # no COUNT(*) over the whole journal for "n of N"
    show_facets = admin.ShowFacets.NEVER  # nor one per filter choice
    paginator = CappedPaginator
    fields = ENTRY_FIELDS
    readonly_fields = ENTRY_FIELDS

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the control API clears it: DELETE /control/journal

    def get_queryset(self, request: HttpRequest) -> QuerySet[JournalEntry]:
        # The bodies and diagnoses can be large: the list reads only what it shows.
        queryset = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and (match.url_name or "").endswith("_changelist"):
            return queryset.defer("body", "headers", "diagnosis")
        return queryset

    @admin.display(description="outcome")
    def outcome_label(self, entry: JournalEntry) -> str:
        return "fallback" if is_fallback(entry) else entry.outcome

    @admin.display(description="query")
    def query_preview(self, entry: JournalEntry) -> str:
        return entry.query if len(entry.query) <= 80 else entry.query[:79] + "…"

    @admin.display(description="query")
    def query_text(self, entry: JournalEntry) -> SafeString:
        return format_html('<pre class="journal-text">{}</pre>', entry.query)

    @admin.display(description="answered by")
    def answered_by(self, entry: JournalEntry) -> SafeString | str:
        if entry.upstream:
            latency = f", {entry.upstream_ms:.0f} ms" if entry.upstream_ms is not None else ""
            return f"upstream {entry.upstream}{latency}"
        if entry.rule is None:
            return "the fallback" if entry.outcome == "answered" else "-"
        url = trying.change_urls([entry.rule]).get(entry.rule)
        if url is None:
            return format_html("{} (no longer exists)", entry.rule)
        return format_html('<a href="{}" class="answering-rule">{}</a>', url, entry.rule)

    @admin.display(description="request body")
    def request_body(self, entry: JournalEntry) -> SafeString:
        return format_html('<pre class="journal-text">{}</pre>', pretty_body(entry.body))

    @admin.display(description="headers (credentials masked)")
    def request_headers(self, entry: JournalEntry) -> SafeString:
        return format_html(
            '<pre class="journal-text">{}</pre>', json.dumps(entry.headers, indent=2)
        )

    @admin.display(description="why no rule answered (today's rules)")
    def diagnosis_table(self, entry: JournalEntry) -> SafeString | str:
        if not is_fallback(entry):
            return "-"
        trial = trying.try_inquiry(entry_inquiry(entry))
        urls = trying.change_urls([v.rule for v in trial.refused] + [trial.rule or ""])
        rows = format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td></tr>',
            ((urls.get(v.rule, ""), v.rule, v.predicate, v.reason) for v in trial.refused),
        )
        verdict = (
            format_html(
                'Today rule <a href="{}">{}</a> answers it.', urls.get(trial.rule, ""), trial.rule
            )
            if trial.rule
            else "Today no rule answers it: the fallback replies."
        )
        return format_html(
            '<p class="journal-verdict">{}</p><table class="journal-diagnosis"><thead><tr>'
            "<th>rule</th><th>failed predicate</th><th>why</th></tr></thead>"
            "<tbody>{}</tbody></table>",
            verdict,
            rows,
        )

    @admin.display(description="a rule for it")
    def create_rule(self, entry: JournalEntry) -> SafeString | str:
        if entry.outcome in NEVER_MATCHED:
            return "-"
        return format_html(
            '<a href="{}" class="button create-rule">Create rule from this request</a>',
            new_rule_url(entry),
        )


def is_fallback(entry: JournalEntry) -> bool:
    return entry.outcome == "answered" and entry.rule is None


def pretty_body(body: str) -> str:
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return body


def entry_inquiry(entry: JournalEntry) -> Inquiry:
    """The inquiry an entry records, read again from its body where the dialect allows."""
    inquiry = Inquiry(
        query=entry.query, agent_type=entry.agent_type, model=entry.model, dialect=entry.dialect
    )
    parser = BODY_PARSERS.get(entry.dialect)
    if parser is None:
        return inquiry
    try:
        payload = json.loads(entry.body)
        conversation = parser(payload) if isinstance(payload, dict) else None
    except (ValueError, RecursionError, InvalidRequest):
        conversation = None
    if conversation is None:
        return inquiry
    return conversation.inquiry(
        dialect=entry.dialect, agent_type=entry.agent_type, session=entry.session, headers={}
    )


def new_rule_url(entry: JournalEntry) -> str:
    """The add-rule form, prefilled to answer the entry's request."""
    values: dict[str, str | int] = {
        "name": f"from-journal-{entry.pk}",
        "match_agent_type": entry.agent_type,
        "match_query": anchored_literal(entry.query),
        FROM_ENTRY: entry.pk,
    }
    if dialect_mattered(entry):
        values["match_dialect"] = entry.dialect
    return f"{reverse('admin:staticagents_rule_add')}?{urlencode(values)}"


def dialect_mattered(entry: JournalEntry) -> bool:
    """Whether a rule would have answered the request but for its dialect."""
    verdicts = entry.diagnosis if isinstance(entry.diagnosis, list) else []
    return any(isinstance(v, dict) and v.get("predicate") == "dialect" for v in verdicts)


def rule_to_precede(request: HttpRequest) -> str | None:
    """Where a rule made from a journal entry goes: before the rule that answers it today.

    That is the first enabled rule that answers the entry's request with today's
    rules; placed just before it, the new rule gives the next identical request
    its reply. None: the form was not opened from an entry, the entry is gone, or
    only the fallback answers (the end of the list is then as good).
    """
    entry_id = request.GET.get(FROM_ENTRY, "")
    entry = JournalEntry.objects.filter(pk=int(entry_id)).first() if entry_id.isdigit() else None
    return trying.try_inquiry(entry_inquiry(entry)).rule if entry is not None else None
