"""The admin's "Try it" page: which rule answers a question, its reply, and why the rules
before it did not.

It asks the same matcher the reply routes ask (``core.matching.explain_inquiry`` on the
active snapshot) and renders the reply the answering rule would give first, without
advancing any session's script. The form is a GET: a result is a link to share.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django import forms
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from staticagents.core.inquiry import DIALECTS, Inquiry
from staticagents.core.matching import RuleVerdict, explain_inquiry
from staticagents.core.replies import Reply, Step, build_reply
from staticagents.fields import parse_json
from staticagents.models import Rule
from staticagents.replying.snapshot import active_ruleset

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

# Raw HTML in a reply is shown as text; markdown-it also refuses javascript: and data: links.
MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
DEFAULT_DIALECT = "openai"


class TryRuleForm(forms.Form):
    agent_type = forms.CharField(max_length=200, initial="router")
    dialect = forms.ChoiceField(choices=[(d, d) for d in DIALECTS], initial=DEFAULT_DIALECT)
    query = forms.CharField(
        required=False, strip=False, widget=forms.Textarea(attrs={"rows": 3, "cols": 80})
    )
    system = forms.CharField(
        label="System prompt",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
    )
    model = forms.CharField(required=False, max_length=200)
    context = forms.CharField(
        label="Context (JSON)",
        required=False,
        help_text='An object, e.g. {"page_id": "p-17"}',
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80, "class": "vLargeTextField"}),
    )
    turn = forms.IntegerField(min_value=1, initial=1, help_text="The user message's number")
    tool_result = forms.CharField(
        label="Tool result",
        required=False,
        strip=False,
        help_text="The text of a tool result, when the last message is one; blank: none",
    )

    def clean_context(self) -> dict[str, Any] | None:
        text = self.cleaned_data["context"].strip()
        if not text:
            return None
        value = parse_json(text)
        if not isinstance(value, dict):
            raise ValidationError("must be a JSON object", code="type")
        return value

    def inquiry(self) -> Inquiry:
        data = self.cleaned_data
        return Inquiry(
            query=data["query"],
            agent_type=data["agent_type"],
            context=data["context"],
            model=data["model"],
            system=data["system"],
            dialect=data["dialect"],
            turn=data["turn"],
            tool_result=data["tool_result"] or None,
        )


@dataclass(frozen=True)
class Trial:
    """What the service would do with one inquiry."""

    rule: str | None  # None: the fallback answers
    refused: list[RuleVerdict]  # every earlier rule, with the predicate that failed
    reply: Reply
    scripted: int  # how many responses the answering rule scripts
    routing: str | None = None  # how an agent type an upstream answers is answered

    @property
    def content_html(self) -> SafeString:
        html: str = MARKDOWN.render(self.reply.content)
        return mark_safe(html)  # raw HTML in the content was escaped by MARKDOWN

    @property
    def tool_calls_json(self) -> str:
        calls = [{"name": c.name, "arguments": c.arguments} for c in self.reply.tool_calls]
        return json.dumps(calls, indent=2, ensure_ascii=False)


def try_inquiry(inquiry: Inquiry) -> Trial:
    ruleset = active_ruleset()
    verdicts = explain_inquiry(ruleset, inquiry)
    answering = verdicts[-1].rule if verdicts and verdicts[-1].matched else None
    rule = next((r for r in ruleset.rules if r.name == answering), None)
    return Trial(
        rule=answering,
        refused=[verdict for verdict in verdicts if not verdict.matched],
        reply=build_reply(ruleset, inquiry, rule, Step()),
        scripted=len(rule.responses) if rule is not None else 0,
        routing=ruleset.routing.describe(inquiry.agent_type)
        if ruleset.routing.target(inquiry.agent_type) is not None
        else None,
    )


def try_url(rule: Rule) -> str:
    """The Try-it page, prefilled with a question that exercises ``rule``."""
    return f"{reverse('admin:staticagents_rule_try')}?{urlencode(sample_inquiry(rule))}"


def sample_inquiry(rule: Rule) -> dict[str, Any]:
    """Form values the rule's predicates accept, where they can be read off them."""
    contains = rule.match_contains
    needles = [contains] if isinstance(contains, str) else list(contains or [])
    query = " ".join([*needles, _literal(rule.match_query)]).strip()
    values: dict[str, Any] = {
        "agent_type": rule.match_agent_type or "router",
        "dialect": rule.match_dialect or DEFAULT_DIALECT,
        "query": query,
        "system": _literal(rule.match_system),
        "model": _literal(rule.match_model),
        "turn": rule.match_turn or 1,
    }
    if rule.match_context:
        context = {name: _literal(regex) for name, regex in rule.match_context.items()}
        values["context"] = json.dumps(context)
    tool_result = rule.match_tool_result
    if tool_result is not None and tool_result is not False:
        values["tool_result"] = "ok" if tool_result is True else _literal(tool_result) or "ok"
    return values


def _literal(regex: str | None) -> str:
    """A text the regex finds, when it is a plain word or phrase; else blank."""
    if not regex:
        return ""
    text = re.sub(r"^(\(\?[aiLmsux]+\))?\^?|\$$", "", regex)
    text = re.sub(r"\\(.)", r"\1", text)
    try:
        return text if re.search(regex, text) else ""
    except re.error:
        return ""


def try_view(model_admin: ModelAdmin[Rule], request: HttpRequest) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    form = TryRuleForm(request.GET if "query" in request.GET else None)
    trial = try_inquiry(form.inquiry()) if form.is_bound and form.is_valid() else None
    context: dict[str, Any] = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": "Try a question",
        "form": form,
        "trial": trial,
    }
    if trial is not None:
        urls = change_urls([verdict.rule for verdict in trial.refused] + [trial.rule or ""])
        context["rule_url"] = urls.get(trial.rule or "")
        context["refused"] = [(verdict, urls.get(verdict.rule)) for verdict in trial.refused]
    return TemplateResponse(request, "admin/staticagents/rule/try.html", context)


def change_urls(names: list[str]) -> dict[str, str]:
    rules = Rule.objects.filter(name__in=names).only("pk", "name")
    return {rule.name: reverse("admin:staticagents_rule_change", args=[rule.pk]) for rule in rules}
