"""Writes: the rules, defaults and fallback; the journal and sessions; the control token.

Every write to the ruleset goes through a service here: one transaction that
bumps the ruleset version once, last, so every worker rebuilds its snapshot
once per change. No signal receivers: a model saved or deleted elsewhere does
not reach the workers.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Field, Max, Model, QuerySet

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


MOVES = ("top", "up", "down", "bottom")
Ordered = TypeVar("Ordered", Rule, RuleResponse)


# -- the ruleset version --------------------------------------------------------


def _bump_version() -> None:
    """Record that the rules changed; every worker rebuilds its snapshot on its next request.

    Each service below calls it once, last in its transaction: workers see the
    new version and the new rules together, when the transaction commits.
    """
    updated = RulesetState.objects.filter(pk=1).update(
        version=F("version") + 1, stamp=RulesetState.new_stamp()
    )
    if not updated:
        RulesetState.objects.get_or_create(
            pk=1, defaults={"version": 1, "stamp": RulesetState.new_stamp()}
        )


# -- fixtures -------------------------------------------------------------------


def import_fixture(
    *, document: dict[str, Any], merge: bool = False, dry_run: bool = False
) -> ImportResult:
    """Apply a validated document (``files.load_fixture``): all of it, or nothing.

    Replace (the default) makes the database hold exactly the document; merge
    upserts rules by name, appending new ones, and replaces the defaults and
    the fallback only when the document gives them.
    """
    result = ImportResult(0, 0, 0, dry_run)
    # A replace's rows are made before the transaction: SQLite's write lock, which every
    # reply's journal row waits for, is then held only while the statements run.
    rows = None if merge else _rule_rows(document["rules"], start=0)
    try:
        with transaction.atomic():
            result = _merge(document) if merge else _replace(document, rows)
            _bump_version()
            if dry_run:
                raise DryRunRollback
    except DryRunRollback:
        return ImportResult(result.created, result.updated, result.deleted, dry_run=True)
    return result


def _replace(document: dict[str, Any], rows: _Rows | None) -> ImportResult:
    deleted = _delete_rules(Rule.objects.all())
    _insert_rows(rows or _rule_rows(document["rules"], start=0))
    _set_defaults(document["defaults"])
    _set_fallback(document["fallback"])
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
    _create_rules(fresh, start=_next_position())
    if document["defaults"]:
        _set_defaults(document["defaults"])
    if document["fallback"] is not None:
        _set_fallback(document["fallback"])
    return ImportResult(created=len(fresh), updated=len(existing), deleted=0)


def _create_rules(docs: list[dict[str, Any]], *, start: int) -> None:
    _insert_rows(_rule_rows(docs, start=start))


@dataclass(frozen=True)
class _Rows:
    """New rules and their responses as two INSERT statements and their rows, made without
    touching the database; a response names its rule by the rule's (unique) name."""

    rules: tuple[str, list[list[Any]]]
    responses: tuple[str, list[list[Any]]]


def _rule_rows(docs: list[dict[str, Any]], *, start: int) -> _Rows:
    db = connections[Rule.objects.db]
    rules = [Rule(position=start + i, **Rule.fields_from(doc)) for i, doc in enumerate(docs)]
    responses = [
        RuleResponse(position=i, **RuleResponse.fields_from(response))
        for doc in docs
        for i, response in enumerate(_responses(doc))
    ]
    names = [rule.name for rule, doc in zip(rules, docs, strict=True) for _ in _responses(doc)]
    rule_fields = [f for f in Rule._meta.concrete_fields if not f.primary_key]
    response_fields = [
        f for f in RuleResponse._meta.concrete_fields if not f.primary_key and f.name != "rule"
    ]
    find_rule = (
        f"(SELECT {db.ops.quote_name('id')} FROM {db.ops.quote_name(Rule._meta.db_table)} "
        f"WHERE {db.ops.quote_name('name')} = %s)"
    )
    return _Rows(
        rules=(
            _insert_sql(db, Rule, rule_fields, []),
            [_values(db, rule, rule_fields) for rule in rules],
        ),
        responses=(
            _insert_sql(db, RuleResponse, response_fields, [("rule_id", find_rule)]),
            [
                [*_values(db, response, response_fields), name]
                for response, name in zip(responses, names, strict=True)
            ],
        ),
    )


def _insert_sql(
    db: BaseDatabaseWrapper,
    model: type[Model],
    fields: list[Field[Any, Any]],
    extra: list[tuple[str, str]],
) -> str:
    """``INSERT`` of one row: ``fields`` as parameters, then ``extra`` columns as SQL."""
    quote = db.ops.quote_name
    columns = [quote(field.column) for field in fields] + [quote(name) for name, _ in extra]
    values = ["%s"] * len(fields) + [sql for _, sql in extra]
    table = quote(model._meta.db_table)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(values)})"


def _values(db: BaseDatabaseWrapper, obj: Model, fields: list[Field[Any, Any]]) -> list[Any]:
    """The row of ``obj``, each value as Django's own insert passes it."""
    return [
        field.get_db_prep_save(field.pre_save(obj, add=True), connection=db) for field in fields
    ]


def _insert_rows(rows: _Rows) -> None:
    with connections[Rule.objects.db].cursor() as cursor:
        for sql, values in (rows.rules, rows.responses):
            if values:
                cursor.executemany(sql, values)


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


def _delete_rules(rules: QuerySet[Rule]) -> int:
    """Delete rules and their responses in two statements; return how many rules went."""
    RuleResponse.objects.filter(rule__in=rules).delete()
    # Not rules.delete(): its cascade to the (now absent) responses would first read every rule.
    return rules._raw_delete(rules.db) or 0  # None when the query can match nothing


def _next_position() -> int:
    """The place after the last rule: where a new rule cannot shadow an existing one."""
    top = Rule.objects.aggregate(top=Max("position"))["top"]
    return 0 if top is None else top + 1


# -- defaults and fallback --------------------------------------------------------


def set_defaults(*, document: dict[str, Any] | None) -> None:
    """Replace the defaults with a validated ``defaults`` document; ``None`` removes them."""
    with transaction.atomic():
        _set_defaults(document)
        _bump_version()


def set_fallback(*, document: dict[str, Any] | None) -> None:
    """Replace the fallback with a validated response document; ``None`` removes it."""
    with transaction.atomic():
        _set_fallback(document)
        _bump_version()


def _set_defaults(doc: dict[str, Any] | None) -> None:
    if doc is None:
        Defaults.objects.all().delete()
        return
    Defaults.objects.update_or_create(
        pk=1, defaults={"confidence": doc.get("confidence"), "stream": doc.get("stream")}
    )


def _set_fallback(doc: dict[str, Any] | None) -> None:
    Fallback.objects.all().delete()
    if doc is not None:
        Fallback.objects.create(pk=1, **Fallback.fields_from(doc))


# -- single rules (the control API and the admin) -------------------------------------


def create_rule(*, document: dict[str, Any]) -> Rule:
    """Append a validated rule document; an unnamed rule is named as an import would name it."""
    with transaction.atomic():
        names = list(Rule.objects.values_list("name", flat=True))
        if "name" in document and document["name"] in names:
            raise _duplicate_name(document["name"])
        if "name" not in document:
            name_rules([*({"name": n} for n in names), document])
        _create_rules([document], start=_next_position())
        _bump_version()
        return Rule.objects.get(name=document["name"])


def update_rule(*, name: str, document: dict[str, Any]) -> Rule:
    """Replace the rule called ``name`` with a validated document (which may rename it)."""
    with transaction.atomic():
        rule = _rule_named(name)
        document.setdefault("name", name)
        if document["name"] != name and Rule.objects.filter(name=document["name"]).exists():
            raise _duplicate_name(document["name"])
        _update_rule(rule, document)
        _bump_version()
        return rule


def save_rule(
    *,
    rule: Rule,
    responses: Iterable[RuleResponse] = (),
    removed_responses: Iterable[RuleResponse] = (),
) -> Rule:
    """Save a rule edited field by field (the admin's change form) with its responses.

    The rule and its responses are validated already (the models' ``clean()``).
    ``responses`` are the new and changed ones, ``removed_responses`` the ones to
    delete. A new rule goes last; the rule's responses are numbered 0..n-1 in
    their order (ties: the older one first).
    """
    with transaction.atomic():
        if rule.pk is None:
            rule.position = _next_position()
        rule.save()
        RuleResponse.objects.filter(pk__in=[r.pk for r in removed_responses]).delete()
        for response in responses:
            response.rule = rule
            response.save()
        _renumber_responses(rule)
        _bump_version()
    return rule


def _renumber_responses(rule: Rule) -> None:
    responses = list(rule.responses.order_by("position", "id"))
    RuleResponse.objects.bulk_update(_renumbered(responses), ["position"])


def delete_rule(*, name: str) -> None:
    """Delete a rule, its responses and its sessions' positions in it; close the gap it leaves."""
    with transaction.atomic():
        _rule_named(name)
        _delete_named_rules([name])
        _bump_version()


def delete_rules(*, names: Collection[str]) -> int:
    """Delete the named rules as ``delete_rule`` does, all at once; return how many went."""
    with transaction.atomic():
        deleted = _delete_named_rules(names)
        _bump_version()
    return deleted


def _delete_named_rules(names: Collection[str]) -> int:
    deleted = _delete_rules(Rule.objects.filter(name__in=names))
    SessionCounter.objects.filter(rule__in=names).delete()
    _put_in_order(list(_rules_in_order()))  # no gap: the admin's "#" stays the rule's place
    return deleted


def set_rules_enabled(*, names: Collection[str], enabled: bool) -> int:
    """Enable or disable the named rules; return how many there are."""
    with transaction.atomic():
        count = Rule.objects.filter(name__in=names).update(enabled=enabled)
        _bump_version()
    return count


# -- order ------------------------------------------------------------------------


def reorder_rules(*, names: list[str]) -> list[str]:
    """Put the named rules first, in the given order; the others follow in their order."""
    with transaction.atomic():
        rules = {rule.name: rule for rule in _rules_in_order()}
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
        _put_in_order([rules[name] for name in order])
        _bump_version()
        return order


def move_rule(*, name: str, direction: str) -> int:
    """Move a rule one place ``up`` or ``down``, or to the ``top`` or ``bottom``.

    Returns the rule's new index (0 is first). A move that changes nothing (the
    first rule up) writes nothing and keeps the version.
    """
    if direction not in MOVES:
        raise ValueError(f"unknown move {direction!r}: one of {', '.join(MOVES)}")
    with transaction.atomic():
        _rule_named(name)  # a missing rule is an error, not a move to nowhere
        rules = list(_rules_in_order())
        index = [rule.name for rule in rules].index(name)
        target = {"top": 0, "up": index - 1, "down": index + 1, "bottom": len(rules) - 1}
        place = max(0, min(target[direction], len(rules) - 1))
        if place != index:
            rules.insert(place, rules.pop(index))
            _put_in_order(rules)
            _bump_version()
    return place


def _rules_in_order() -> QuerySet[Rule]:
    return (
        Rule.objects.select_for_update().only("id", "name", "position").order_by("position", "id")
    )


def _put_in_order(rules: list[Rule]) -> None:
    """Number the rules 0..n-1 in the given order, writing only those whose place changed."""
    Rule.objects.bulk_update(_renumbered(rules), ["position"], batch_size=500)


def _renumbered(rows: list[Ordered]) -> list[Ordered]:
    """Number ``rows`` 0..n-1 in their order; return those whose number changed."""
    changed = []
    for position, row in enumerate(rows):
        if row.position != position:
            row.position = position
            changed.append(row)
    return changed


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
