"""Writes: importing fixtures and bumping the ruleset version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import F, Max

from staticagents.models import Defaults, Fallback, Rule, RuleResponse, RulesetState


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
