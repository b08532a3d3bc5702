"""Writes: fixtures, single rules, the ruleset version, the journal and sessions."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F, Max

from staticagents.document.schema import DocumentInvalid, FieldError, name_rules
from staticagents.models import (
    ControlToken,
    Defaults,
    Fallback,
    JournalEntry,
    Rule,
    RuleResponse,
    RulesetState,
    SessionCounter,
)


@dataclass(frozen=True)
class ImportResult:
    created: int
    updated: int
    deleted: int
    dry_run: bool = False

    def summary(self) -> str:
        verb = "would import" if self.dry_run else "imported"
        return (
            f"{verb}: {self.created} rule(s) created, {self.updated} updated, "
            f"{self.deleted} deleted"
        )


class DryRunRollback(Exception):
    """Raised inside the import transaction to undo a dry run."""


def bump_version() -> None:
    """Record that the rules changed; every worker rebuilds its snapshot on its next request."""
    updated = RulesetState.objects.filter(pk=1).update(
        version=F("version") + 1, stamp=RulesetState.new_stamp()
    )
    if not updated:
        RulesetState.objects.get_or_create(
            pk=1, defaults={"version": 1, "stamp": RulesetState.new_stamp()}
        )


def import_fixture(
    document: dict[str, Any], *, merge: bool = False, dry_run: bool = False
) -> ImportResult:
    """Apply a validated document (``fixtures.load_fixture``): all of it, or nothing.

    Replace (the default) makes the database hold exactly the document; merge
    upserts rules by name, appending new ones, and replaces the defaults and
    the fallback only when the document gives them.
    """
    result = ImportResult(0, 0, 0, dry_run)
    try:
        with transaction.atomic():
            result = (_merge if merge else _replace)(document)
            bump_version()
            if dry_run:
                raise DryRunRollback
    except DryRunRollback:
        return ImportResult(result.created, result.updated, result.deleted, dry_run=True)
    return result


def _replace(document: dict[str, Any]) -> ImportResult:
    deleted = Rule.objects.count()
    # Delete responses first: a cascade from Rule would fetch them all into memory.
    RuleResponse.objects.all().delete()
    Rule.objects.all().delete()
    _create_rules(document["rules"], start=0)
    _set_defaults(document["defaults"])
    _set_fallback(document["fallback"], clear=True)
    return ImportResult(created=len(document["rules"]), updated=0, deleted=deleted)


def _merge(document: dict[str, Any]) -> ImportResult:
    rules = document["rules"]
    existing = {
        rule.name: rule for rule in Rule.objects.filter(name__in=[r["name"] for r in rules])
    }
    fresh = [r for r in rules if r["name"] not in existing]
    for doc in rules:
        if doc["name"] in existing:
            _update_rule(existing[doc["name"]], doc)
    start = (Rule.objects.aggregate(top=Max("position"))["top"] or 0) + 1
    _create_rules(fresh, start=start)
    if document["defaults"]:
        _set_defaults(document["defaults"])
    _set_fallback(document["fallback"], clear=False)
    return ImportResult(created=len(fresh), updated=len(existing), deleted=0)


def _create_rules(docs: list[dict[str, Any]], *, start: int) -> None:
    rules = Rule.objects.bulk_create(
        [Rule(position=start + i, **Rule.fields_from(doc)) for i, doc in enumerate(docs)],
        batch_size=500,
    )
    RuleResponse.objects.bulk_create(
        [
            RuleResponse(rule=rule, position=i, **RuleResponse.fields_from(response))
            for rule, doc in zip(rules, docs, strict=True)
            for i, response in enumerate(_responses(doc))
        ],
        batch_size=500,
    )


def _update_rule(rule: Rule, doc: dict[str, Any]) -> None:
    for field in Rule._meta.concrete_fields:
        if field.name.startswith("match_"):
            setattr(rule, field.name, None)
    for field_name, value in Rule.fields_from(doc).items():
        setattr(rule, field_name, value)
    rule.save()
    rule.responses.all().delete()
    RuleResponse.objects.bulk_create(
        [
            RuleResponse(rule=rule, position=i, **RuleResponse.fields_from(r))
            for i, r in enumerate(_responses(doc))
        ]
    )


def _responses(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["responses"]) if "responses" in doc else [doc.get("response") or {}]


def _set_defaults(doc: dict[str, Any]) -> None:
    Defaults.objects.update_or_create(
        pk=1, defaults={"confidence": doc.get("confidence"), "stream": doc.get("stream")}
    )


def _set_fallback(doc: dict[str, Any] | None, *, clear: bool) -> None:
    if doc is None:
        if clear:
            Fallback.objects.all().delete()
        return
    Fallback.objects.all().delete()
    Fallback.objects.create(pk=1, **Fallback.fields_from(doc))


# -- single rules (the control API) -------------------------------------------


def create_rule(*, document: dict[str, Any]) -> Rule:
    """Append a validated rule document; an unnamed rule is named as an import would name it."""
    with transaction.atomic():
        names = list(Rule.objects.values_list("name", flat=True))
        if "name" in document and document["name"] in names:
            raise _duplicate_name(document["name"])
        if "name" not in document:
            name_rules([*({"name": n} for n in names), document])
        top = Rule.objects.aggregate(top=Max("position"))["top"]
        _create_rules([document], start=0 if top is None else top + 1)
        bump_version()
        return Rule.objects.get(name=document["name"])


def update_rule(*, name: str, document: dict[str, Any]) -> Rule:
    """Replace the rule called ``name`` with a validated document (which may rename it)."""
    with transaction.atomic():
        rule = _rule_named(name)
        document.setdefault("name", name)
        if document["name"] != name and Rule.objects.filter(name=document["name"]).exists():
            raise _duplicate_name(document["name"])
        _update_rule(rule, document)
        bump_version()
        return rule


def delete_rule(*, name: str) -> None:
    """Delete a rule and its sessions' positions in it."""
    with transaction.atomic():
        rule = _rule_named(name)
        rule.responses.all().delete()
        rule.delete()
        SessionCounter.objects.filter(rule=name).delete()
        bump_version()


def reorder_rules(*, names: list[str]) -> list[str]:
    """Put the named rules first, in the given order; the others follow in their order."""
    with transaction.atomic():
        rules = {rule.name: rule for rule in Rule.objects.order_by("position", "id")}
        errors, listed = [], set()
        for i, name in enumerate(names):
            if name not in rules:
                errors.append(FieldError(f"[{i}]", f"no rule named {name!r}", "not_found"))
            elif name in listed:
                errors.append(FieldError(f"[{i}]", f"{name!r} is listed twice", "duplicate"))
            listed.add(name)
        if errors:
            raise DocumentInvalid(errors)
        order = [*names, *(name for name in rules if name not in listed)]
        for position, name in enumerate(order):
            rules[name].position = position
        Rule.objects.bulk_update(rules.values(), ["position"], batch_size=500)
        bump_version()
        return order


def _rule_named(name: str) -> Rule:
    try:
        return Rule.objects.select_for_update().get(name=name)
    except Rule.DoesNotExist:
        raise Rule.DoesNotExist(f"no rule named {name!r}") from None


def _duplicate_name(name: str) -> DocumentInvalid:
    return DocumentInvalid([FieldError("name", f"a rule named {name!r} exists", "duplicate")])


# -- the journal, counters and sessions ---------------------------------------


def clear_journal(*, session: str | None = None) -> int:
    """Delete the journal, or one session's part of it; counters derive from it, so they follow."""
    entries = JournalEntry.objects.all()
    if session is not None:
        entries = entries.filter(session=session)
    deleted, _ = entries.delete()
    return deleted


def reset_counters(*, session: str | None = None) -> int:
    """Zero the counters (overall or one session's) and keep the journal itself."""
    entries = JournalEntry.objects.filter(counted=True)
    if session is not None:
        entries = entries.filter(session=session)
    return entries.update(counted=False)


def reset_session(*, session: str) -> dict[str, int]:
    """A session's fresh start: its sequence positions, fail-first counts and journal go."""
    with transaction.atomic():
        counters, _ = SessionCounter.objects.filter(session=session).delete()
        entries = clear_journal(session=session)
    return {"counters": counters, "journal": entries}


# -- the control API's token ----------------------------------------------------


def ensure_control_token(configured: str) -> str | None:
    """Create and store a control token unless one is configured or stored; return it if new."""
    if configured:
        return None
    with transaction.atomic():
        if ControlToken.objects.exists():
            return None
        token = secrets.token_urlsafe(32)
        ControlToken.objects.create(digest=ControlToken.digest_of(token))
        return token
