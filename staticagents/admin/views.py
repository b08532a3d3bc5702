"""The admin's own pages for rules: move a rule, upload a fixture, download the current one.

Each view checks the model admin's permissions, calls a service or selector and
answers with a redirect, a page or a file; the admin site wraps them (login,
CSRF, no caching).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode

from staticagents.document.files import dump_fixture
from staticagents.forms import FixtureUploadForm
from staticagents.models import Rule
from staticagents.selectors import export_document
from staticagents.services import MOVES, ImportResult, import_fixture, move_rule

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

EXPORT_FILENAME = "static_agents.yml"


def curator(request: HttpRequest) -> str:
    """Who made a change in the admin, as the ruleset's history names them."""
    return request.user.get_username()


def changelist_url(model_admin: ModelAdmin[Rule], request: HttpRequest) -> str:
    """The rule list, with the filters and search the user came from."""
    url = reverse(f"{model_admin.admin_site.name}:staticagents_rule_changelist")
    filters = request.GET.get("_changelist_filters")
    return f"{url}?{filters}" if filters else url


def move_view(
    model_admin: ModelAdmin[Rule], request: HttpRequest, object_id: str, direction: str
) -> HttpResponse:
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not model_admin.has_change_permission(request):
        raise PermissionDenied
    if direction not in MOVES:
        raise Http404(f"unknown move {direction!r}: one of {', '.join(MOVES)}")
    rule = get_object_or_404(Rule, pk=object_id)
    place = move_rule(name=rule.name, direction=direction, by=curator(request))
    messages.success(request, f"“{rule.name}” is now rule #{place + 1}.")
    return HttpResponseRedirect(changelist_url(model_admin, request))


def move_query(request: HttpRequest) -> str:
    """The query string a move button carries, so the list looks the same afterwards."""
    filters = request.GET.urlencode()
    return f"?{urlencode({'_changelist_filters': filters})}" if filters else ""


def download_view(model_admin: ModelAdmin[Rule], request: HttpRequest) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    text = dump_fixture(export_document())
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{EXPORT_FILENAME}"'
    return response


def upload_view(model_admin: ModelAdmin[Rule], request: HttpRequest) -> HttpResponse:
    if not model_admin.has_change_permission(request):
        raise PermissionDenied
    if request.method == "POST":
        form = FixtureUploadForm(request.POST, request.FILES)
        if form.is_valid():
            return _import_upload(model_admin, request, form)
    else:
        form = FixtureUploadForm()
    context = _upload_context(model_admin, request, title="Upload a fixture", form=form)
    return TemplateResponse(request, "admin/staticagents/rule/upload_fixture.html", context)


def _upload_context(
    model_admin: ModelAdmin[Rule], request: HttpRequest, **extra: Any
) -> dict[str, Any]:
    return {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "changelist_url": changelist_url(model_admin, request),
        **extra,
    }


def _import_upload(
    model_admin: ModelAdmin[Rule], request: HttpRequest, form: FixtureUploadForm
) -> HttpResponse:
    mode = form.cleaned_data["mode"]
    merge = mode == "merge"
    # Replacing deletes every rule not in the file: that takes the right to delete.
    if not merge and not model_admin.has_delete_permission(request):
        raise PermissionDenied
    document = form.cleaned_data["document"]
    dry_run = form.cleaned_data["dry_run"]
    if dry_run or not (merge or form.cleaned_data["confirm"]):
        result = import_fixture(document=document, merge=merge, dry_run=True)
        return _preview(model_admin, request, form, result, confirming=not dry_run)
    result = import_fixture(document=document, merge=merge, by=curator(request))
    messages.success(request, f"Uploaded {form.source_name} ({mode}): {result.summary()}.")
    for warning in result.warnings:
        messages.warning(request, f"{form.source_name}: {warning}.")
    return HttpResponseRedirect(changelist_url(model_admin, request))


def _preview(
    model_admin: ModelAdmin[Rule],
    request: HttpRequest,
    form: FixtureUploadForm,
    result: ImportResult,
    *,
    confirming: bool,
) -> HttpResponse:
    """What the upload would do, by rule name, with a form that runs it for real: a dry
    run's report, or the confirmation a replace needs (it lists the rules deleted)."""
    mode = form.cleaned_data["mode"]
    title = (
        f"Replace the rules with {form.source_name}?"
        if confirming
        else f"Dry run of {form.source_name} ({mode})"
    )
    context = _upload_context(
        model_admin,
        request,
        title=title,
        confirming=confirming,
        result=result,
        mode=mode,
        source_name=form.source_name,
        staged=form.staged_token(),
        upload_url=request.path,
    )
    return TemplateResponse(request, "admin/staticagents/rule/upload_preview.html", context)
