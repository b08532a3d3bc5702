"""Writes: the rules, defaults and fallback, and their history; the journal and sessions; the
control token.

Every write to the ruleset goes through a service here: one transaction that
bumps the ruleset version once, last, so every worker rebuilds its snapshot
once per change, and records the ruleset as it is then (``RulesetVersion``):
``by`` names who wrote (a user's name, ``CONTROL_API`` or ``COMMAND``). No
signal receivers: a model saved or deleted elsewhere does not reach the workers.
"""

from __future__ import annotations

import datetime
import functools
import secrets
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from django.db import IntegrityError, connection, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Field, Max, Model, QuerySet
from django.utils import timezone

from staticagents.conf import settings
from staticagents.core.reach import first_shadowing, shadowed_rules
from staticagents.document.terms import DocumentInvalid, FieldError
from staticagents.models import (
    AgentMode,
    ControlToken,
    Defaults,
    Fallback,
    JournalEntry,
    Rule,
    RuleResponse,
    RulesetState,
    RulesetVersion,
    SessionCounter,
    SessionScript,
    Upstream,
)
from staticagents.replying import live
from staticagents.replying.journal import Statements, journal
from staticagents.replying.snapshot import snapshot_stamp, take_script
from staticagents.selectors import (
    StoredRuleset,
    rule_matches,
    rule_shadows,
    ruleset_version,
    stored_defaults_and_fallback_rows,
    stored_ruleset,
    stored_upstreams,
    written_ruleset,
)


@dataclass(frozen=True)
class ImportResult:
    created: int
    updated: int
    deleted: int
    dry_run: bool = False
    unchanged: int = 0  # replacing: rules the document holds as they were (not rewritten)
    warnings: tuple[str, ...] = ()  # rules of the resulting ruleset that never answer
    # The rules' names, in the document's order (deleted: in the stored order).
    created_names: tuple[str, ...] = ()
    updated_names: tuple[str, ...] = ()
    deleted_names: tuple[str, ...] = ()

    def summary(self) -> str:
        verb = "would import" if self.dry_run else "imported"
        kept = f", {self.unchanged} unchanged" if self.unchanged else ""
        return (
            f"{verb}: {self.created} rule(s) created, {self.updated} updated, "
            f"{self.deleted} deleted{kept}"
        )


class DryRunRollback(Exception):
    """Raised inside the import transaction to undo a dry run."""


MOVES = ("top", "up", "down", "bottom")
PLACES_HELP = (
    "'auto' (before the first rule that would shadow it, else last), 'top', 'end' "
    "or 'before:<rule name>'"
)
Ordered = TypeVar("Ordered", Rule, RuleResponse)
# Who wrote, as the history shows it, when no user did.
CONTROL_API = "control API"
COMMAND = "command"  # a management command, or any code calling a service itself


# -- the ruleset version --------------------------------------------------------


# The documents of the rules of the last version this process recorded, by digest: rules
# left as they were are not read again. A digest names one document, so a stale entry is
# never wrong, only unused.
_recorded: dict[str, dict[str, Any]] = {}


def _bump_version(
    *,
    by: str,
    what: str,
    written: Iterable[_RuleRows] = (),
    ruleset: StoredRuleset | None = None,
) -> int:
    """Record that the rules changed; every worker rebuilds its snapshot on its next request.

    Each service below calls it once, last in its transaction: workers see the
    new version and the new rules together, when the transaction commits. The
    version is kept in the history with ``by`` and ``what``: ``ruleset`` when the
    service knows the whole of it (a replace), else read back (``written``: the
    rows of the rules the service wrote from documents, whose documents need no
    reading back). Returns the new version's number.
    """
    global _recorded
    stamp = RulesetState.new_stamp()
    number = _next_version(stamp)
    if ruleset is None:
        ruleset = stored_ruleset({**_recorded, **{rows.digest: rows.document for rows in written}})
    else:
        written_ruleset.remember(stamp, ruleset)
    _recorded = {digest: rule for digest, rule in ruleset.rules if digest}
    _record_version(number=number, by=by, what=what, document=ruleset.document())
    transaction.on_commit(lambda: live.announce_ruleset(number))
    return number


def _next_version(stamp: str) -> int:
    """Bump the version, set the rules' stamp; the new version's number."""
    if connection.features.can_return_columns_from_insert:  # and from an UPDATE
        with connection.cursor() as cursor:
            cursor.execute(_bump_sql(), [stamp])
            row = cursor.fetchone()
        if row is not None:
            return int(row[0])
    elif RulesetState.objects.filter(pk=1).update(version=F("version") + 1, stamp=stamp):
        return RulesetState.objects.values_list("version", flat=True).get(pk=1)
    state, _ = RulesetState.objects.get_or_create(pk=1, defaults={"version": 1, "stamp": stamp})
    return state.version


@functools.cache
def _bump_sql() -> str:
    quote = connection.ops.quote_name
    version = quote("version")
    return (
        f"UPDATE {quote(RulesetState._meta.db_table)} SET {version} = {version} + 1, "
        f"{quote('stamp')} = %s WHERE {quote('id')} = 1 RETURNING {version}"
    )


def _record_version(*, number: int, by: str, what: str, document: dict[str, Any]) -> None:
    """Keep ``document`` as version ``number``; drop the oldest versions beyond
    ``STATIC_AGENTS_VERSIONS_KEEP``."""
    db = connections[RulesetVersion.objects.db]
    version = RulesetVersion(
        number=number,
        by=by[: RulesetVersion._meta.get_field("by").max_length],
        what=_shortened(what, RulesetVersion._meta.get_field("what").max_length or 0),
        packed=RulesetVersion.pack(document),
    )
    fields = list(RulesetVersion._meta.concrete_fields)
    table, column = db.ops.quote_name(RulesetVersion._meta.db_table), db.ops.quote_name("number")
    # Two plain statements: through the ORM, compiling them cost ten times their running.
    with db.cursor() as cursor:
        cursor.execute(_insert_sql(db, RulesetVersion, fields, []), _values(db, version, fields))
        oldest = number - settings.STATIC_AGENTS_VERSIONS_KEEP
        cursor.execute(f"DELETE FROM {table} WHERE {column} <= %s", [oldest])


def _shortened(text: str, length: int) -> str:
    return text if len(text) <= length else text[: length - 1] + "…"


def _rules_named(verb: str, names: Collection[str]) -> str:
    """``deleted rule "a"``, or ``deleted 3 rules: a, b, c``."""
    if len(names) == 1:
        return f'{verb} rule "{next(iter(names))}"'
    return f"{verb} {len(names)} rules: {', '.join(names)}"


def restore_version(*, number: int, by: str = COMMAND) -> int | None:
    """Replace the ruleset with version ``number``'s document, as a fixture replace does; the
    change is a version of its own ("restored version N"), whose number is returned; None when
    the rules are that version's already (nothing changes, no version is kept)."""
    version = ruleset_version(number)
    if version is None:
        raise RulesetVersion.DoesNotExist(f"no version {number} is kept")
    # The schema's models load at their first use, not with the service (document.terms).
    from staticagents.document.schema import validate_document

    # Validated again: the schema may have grown stricter since the version was kept. A
    # document without upstreams is a ruleset that had none (an import would keep them).
    document = validate_document({"upstreams": [], "modes": {}, **version.document()})
    _, made = _import(document, merge=False, by=by, what=f"restored version {number}")
    return made


# -- fixtures -------------------------------------------------------------------


def import_fixture(
    *, document: dict[str, Any], merge: bool = False, dry_run: bool = False, by: str = COMMAND
) -> ImportResult:
    """Apply a validated document (``files.load_fixture``): all of it, or nothing.

    Replace (the default) makes the database hold exactly the document; merge
    upserts rules by name, appending new ones, and replaces the defaults and
    the fallback only when the document gives them. Either way the upstreams and
    modes are replaced only when the document gives them (``upstreams`` or ``modes``).
    """
    mode = "merge" if merge else "replace"
    count = len(document["rules"])
    what = f"imported {count} rule{'' if count == 1 else 's'} ({mode})"
    result, _ = _import(document, merge=merge, dry_run=dry_run, by=by, what=what)
    return result


def _import(
    document: dict[str, Any], *, merge: bool, by: str, what: str, dry_run: bool = False
) -> tuple[ImportResult, int | None]:
    """``import_fixture``, kept in the history as ``what``; also the number of the version it
    made (None: nothing changed)."""
    result, number = ImportResult(0, 0, 0, dry_run), None
    # A replace's rows are made before the transaction: SQLite's write lock, which every
    # reply's journal row waits for, is then held only while the statements run.
    known = _recorded
    made = None if merge else [_rule_rows(doc, i, known) for i, doc in enumerate(document["rules"])]
    try:
        with transaction.atomic():
            ruleset = None
            if made is None:
                result, written = _merge(document)
                changed = True
            else:
                (result, ruleset), written = _replace(document, made), made
                changed = ruleset is not None
            # A replaced ruleset is the document: no need to read it back.
            shadows = rule_shadows() if merge else shadowed_rules(document["rules"])
            warnings = tuple(shadow.message() for shadow in shadows.values())
            result = replace(result, warnings=warnings, dry_run=dry_run)
            if dry_run:
                raise DryRunRollback
            if changed:  # a replace by the very rules stored changes nothing
                number = _bump_version(by=by, what=what, written=written, ruleset=ruleset)
    except DryRunRollback:
        pass  # the counts and warnings of what would have been
    return result, number


def _replace(
    document: dict[str, Any], made: list[_RuleRows]
) -> tuple[ImportResult, StoredRuleset | None]:
    """Make the stored rules exactly the document's (``made``: its rules' rows, in order),
    rewriting only the rules whose document differs (``Rule.digest``), so the snapshot
    recompiles only those; a rule that only moved gets its new place. Also the ruleset as
    it is now, or None when nothing changed.

    The ruleset this process's last replace left is not read again while its stamp is the
    stored one (``selectors.WrittenRuleset``)."""
    before = written_ruleset.at(_locked_rules_stamp())
    stored = _rule_places(before)
    wanted = {rows.name for rows in made}
    gone = sorted((name for name in stored if name not in wanted), key=lambda n: stored[n][0])
    deleted = 0
    for start in range(0, len(gone), 500):  # a bounded number of parameters per statement
        deleted += _delete_rules(Rule.objects.filter(name__in=gone[start : start + 500]))
    fresh: list[_RuleRows] = []
    rewritten: list[_RuleRows] = []
    moved: list[tuple[int, str]] = []
    for position, rows in enumerate(made):
        place, digest = stored.get(rows.name, (None, ""))
        if not digest or digest != rows.digest:
            (fresh if place is None else rewritten).append(rows.written())
        elif place != position:
            moved.append((position, rows.name))
    _write_rule_rows(fresh, rewritten, moved)
    extras_changed, defaults, fallback = _replace_defaults_and_fallback(
        document["defaults"], document["fallback"], before
    )
    if "upstreams" in document:  # the environment's upstreams stay unless the document says
        changed, upstreams, modes = _replace_upstreams(
            document["upstreams"], document["modes"], before
        )
        extras_changed |= changed
    else:
        upstreams, modes = (before.upstreams, before.modes) if before else stored_upstreams()
    result = ImportResult(
        len(fresh),
        len(rewritten),
        deleted,
        unchanged=len(made) - len(fresh) - len(rewritten),
        created_names=tuple(rows.name for rows in fresh),
        updated_names=tuple(rows.name for rows in rewritten),
        deleted_names=tuple(gone),
    )
    if not (fresh or rewritten or deleted or moved or extras_changed):
        return result, None
    rules = [(rows.digest, rows.document) for rows in made]
    return result, StoredRuleset(rules, defaults, fallback, upstreams, modes)


def _locked_rules_stamp() -> str:
    """The rules' stamp, its row locked until the transaction ends (SQLite's write
    transaction holds the whole database already)."""
    table = connection.ops.quote_name(RulesetState._meta.db_table)
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT stamp FROM {table} WHERE id = 1{lock}")
        row = cursor.fetchone()
    return str(row[0]) if row else ""


def _rule_places(known: StoredRuleset | None) -> dict[str, tuple[int, str]]:
    """Each stored rule's position and digest, by name (``known``: the stored ruleset, whose
    rules a replace numbered 0..n-1)."""
    if known is not None:
        return {rule["name"]: (i, digest) for i, (digest, rule) in enumerate(known.rules)}
    rows = Rule.objects.values_list("name", "position", "digest")
    return {name: (position, digest) for name, position, digest in rows}


def _replace_defaults_and_fallback(
    defaults: dict[str, Any] | None,
    fallback: dict[str, Any] | None,
    known: StoredRuleset | None,
) -> tuple[bool, dict[str, Any] | None, dict[str, Any] | None]:
    """Store the defaults and fallback unless they are stored already (``known``: the stored
    ruleset, else read): whether they were not, and the rows as they are now."""
    stored = (known.defaults, known.fallback) if known else stored_defaults_and_fallback_rows()
    wanted = (
        None if defaults is None else Defaults(**_defaults_fields(defaults)).document(),
        None if fallback is None else Fallback(**Fallback.fields_from(fallback)).document(),
    )
    if stored == wanted:
        return False, *wanted
    _set_defaults(defaults)
    _set_fallback(fallback)
    return True, *wanted


def _merge(document: dict[str, Any]) -> tuple[ImportResult, list[_RuleRows]]:
    rules = document["rules"]
    existing = {
        rule.name: rule for rule in Rule.objects.filter(name__in=[r["name"] for r in rules])
    }
    fresh = [r for r in rules if r["name"] not in existing]
    before = list(Rule.objects.order_by("position", "id"))
    for doc in rules:
        if doc["name"] in existing:
            _update_rule(existing[doc["name"]], doc)
    written = _create_rules(fresh, start=_next_position())
    if fresh and before:
        order = merged_order(
            [rule.name for rule in before], [r["name"] for r in rules], _first_catch_all(before)
        )
        by_name = {rule.name: rule for rule in _rules_in_order()}
        _put_in_order([by_name[name] for name in order])
    if document["defaults"]:
        _set_defaults(document["defaults"])
    if document["fallback"] is not None:
        _set_fallback(document["fallback"])
    if "upstreams" in document:
        _replace_upstreams(document["upstreams"], document["modes"])  # read back at the bump
    result = ImportResult(
        created=len(fresh),
        updated=len(existing),
        deleted=0,
        created_names=tuple(r["name"] for r in fresh),
        updated_names=tuple(r["name"] for r in rules if r["name"] in existing),
    )
    return result, written


def merged_order(existing: list[str], fixture: list[str], fallback: int) -> list[str]:
    """The order after a merge: each new rule follows the existing rule it follows in the
    fixture; new rules before any of them precede the first existing rule the fixture
    names; with no existing rule named, they go at index ``fallback`` of the existing ones."""
    known = set(existing)
    after: dict[str | None, list[str]] = {}
    anchor: str | None = None
    for name in fixture:
        if name in known:
            anchor = name
        else:
            after.setdefault(anchor, []).append(name)
    order = [placed for name in existing for placed in (name, *after.get(name, ()))]
    leading = after.get(None, [])
    first_known = next((name for name in fixture if name in known), None)
    at = order.index(first_known) if first_known is not None else fallback
    order[at:at] = leading
    return order


def _first_catch_all(rules: list[Rule]) -> int:
    """The index of the first enabled rule that matches on nothing but (maybe) an agent type."""
    for i, rule in enumerate(rules):
        if rule.enabled and not set(rule.match_document()) - {"agent_type"}:
            return i
    return len(rules)


def _create_rules(docs: list[dict[str, Any]], *, start: int) -> list[_RuleRows]:
    rows = [_rule_rows(doc, start + i) for i, doc in enumerate(docs)]
    _write_rule_rows(rows, [])
    return rows


@dataclass(frozen=True)
class _RuleRows:
    """A rule's row and its responses' rows (``_rule_fields``, ``_response_fields``), made
    without touching the database; a response names its rule by the rule's (unique) name."""

    name: str
    digest: str  # ``Rule.digest``
    document: dict[str, Any]  # ``Rule.document()``, as the rows will read back
    rule: list[Any] | None  # None: not made (``written``)
    responses: list[list[Any]]
    source: dict[str, Any]  # the validated rule document
    position: int

    def written(self) -> _RuleRows:
        """These rows, made now if they were not."""
        return self if self.rule is not None else _rule_rows(self.source, self.position)


def _rule_rows(
    doc: dict[str, Any], position: int, known: Mapping[str, dict[str, Any]] | None = None
) -> _RuleRows:
    """The rows of a rule; not made when its digest is ``known`` (documents by digest: a rule
    stored as it is, most likely, whose rows are made only if it must be written after all)."""
    digest = Rule.digest_of(doc)
    if known and digest in known:
        return _RuleRows(doc["name"], digest, known[digest], None, [], doc, position)
    db = connections[Rule.objects.db]
    rule = Rule(position=position, **Rule.fields_from(doc))
    responses = [
        RuleResponse(position=i, **RuleResponse.fields_from(response))
        for i, response in enumerate(_responses(doc))
    ]
    return _RuleRows(
        name=rule.name,
        digest=rule.digest,
        document=rule.document([response.document() for response in responses]),
        rule=_values(db, rule, _rule_fields()),
        responses=[[*_values(db, r, _response_fields()), rule.name] for r in responses],
        source=doc,
        position=position,
    )


def _rule_fields() -> list[Field[Any, Any]]:
    return [f for f in Rule._meta.concrete_fields if not f.primary_key]


def _response_fields() -> list[Field[Any, Any]]:
    return [f for f in RuleResponse._meta.concrete_fields if not f.primary_key and f.name != "rule"]


def _write_rule_rows(
    fresh: list[_RuleRows], rewritten: list[_RuleRows], moved: Sequence[tuple[int, str]] = ()
) -> None:
    """Insert the ``fresh`` rules; rewrite the ``rewritten`` ones in place (found by name,
    their responses replaced); then insert the responses of both. ``moved``: (position,
    name) of rules that only get a new place."""
    db = connections[Rule.objects.db]
    quote = db.ops.quote_name
    rules, name = quote(Rule._meta.db_table), quote("name")
    find_rule = f"(SELECT {quote('id')} FROM {rules} WHERE {name} = %s)"
    rule_id = quote(RuleResponse._meta.get_field("rule").column)
    responses = [row for rows in (*fresh, *rewritten) for row in rows.responses]
    with db.cursor() as cursor:
        if fresh:
            insert = _insert_sql(db, Rule, _rule_fields(), [])
            cursor.executemany(insert, [rows.rule for rows in fresh])
        if rewritten:
            setting = ", ".join(f"{quote(f.column)} = %s" for f in _rule_fields())
            cursor.executemany(
                f"UPDATE {rules} SET {setting} WHERE {name} = %s",
                [[*(rows.rule or ()), rows.name] for rows in rewritten],
            )
            cursor.executemany(
                f"DELETE FROM {quote(RuleResponse._meta.db_table)} WHERE {rule_id} = {find_rule}",
                [[rows.name] for rows in rewritten],
            )
        if responses:
            insert = _insert_sql(db, RuleResponse, _response_fields(), [("rule_id", find_rule)])
            cursor.executemany(insert, responses)
        if moved:
            position = quote(Rule._meta.get_field("position").column)
            cursor.executemany(f"UPDATE {rules} SET {position} = %s WHERE {name} = %s", moved)


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


def set_defaults(*, document: dict[str, Any] | None, by: str = COMMAND) -> None:
    """Replace the defaults with a validated ``defaults`` document; ``None`` removes them."""
    with transaction.atomic():
        _set_defaults(document)
        _bump_version(
            by=by, what="removed the defaults" if document is None else "set the defaults"
        )


def set_fallback(*, document: dict[str, Any] | None, by: str = COMMAND) -> None:
    """Replace the fallback with a validated response document; ``None`` removes it."""
    with transaction.atomic():
        _set_fallback(document)
        _bump_version(
            by=by, what="removed the fallback" if document is None else "set the fallback"
        )


def _set_defaults(doc: dict[str, Any] | None) -> None:
    if doc is None:
        Defaults.objects.all().delete()
        return
    Defaults.objects.update_or_create(pk=1, defaults=_defaults_fields(doc))


def _defaults_fields(doc: dict[str, Any]) -> dict[str, Any]:
    return {key: doc.get(key) for key in ("confidence", "stream", "chaos")}


def _set_fallback(doc: dict[str, Any] | None) -> None:
    Fallback.objects.all().delete()
    if doc is not None:
        Fallback.objects.create(pk=1, **Fallback.fields_from(doc))


# -- upstreams and modes ------------------------------------------------------------


def set_upstreams(
    *, upstreams: list[dict[str, Any]], modes: dict[str, Any], by: str = COMMAND
) -> bool:
    """Replace the upstreams and modes with validated ones (``schema.validate_upstreams``);
    whether anything changed."""
    with transaction.atomic():
        changed, _, _ = _replace_upstreams(upstreams, modes)
        if changed:
            _bump_version(by=by, what="replaced the upstreams and modes")
    return changed


def save_upstream(*, document: dict[str, Any], by: str = COMMAND) -> Upstream:
    """Add or change (by name) one validated upstream."""
    fields = {key: document.get(key) for key in Upstream.KEYS if key != "name"}
    fields["record_model"] = bool(fields["record_model"])
    fields["record_timing"] = bool(fields["record_timing"])
    fields["timeout"] = fields["timeout"] or 60.0
    with transaction.atomic():
        upstream = Upstream.objects.filter(name=document["name"]).first()
        if upstream is None:
            position = (Upstream.objects.aggregate(Max("position"))["position__max"] or 0) + 1
            upstream = Upstream(name=document["name"], position=position)
        for key, value in fields.items():
            setattr(upstream, key, value)
        upstream.save()
        _bump_version(by=by, what=f'saved upstream "{upstream.name}"')
    return upstream


def delete_upstream(*, name: str, by: str = COMMAND) -> None:
    """Remove an upstream (the caller has checked that no mode needs it)."""
    with transaction.atomic():
        Upstream.objects.filter(name=name).delete()
        _bump_version(by=by, what=f'deleted upstream "{name}"')


def save_agent_mode(
    *, agent_type: str, mode: str, upstream: str | None, by: str = COMMAND
) -> AgentMode:
    """Set how ``agent_type`` ("" for the default) is answered."""
    with transaction.atomic():
        row, _ = AgentMode.objects.update_or_create(
            agent_type=agent_type, defaults={"mode": mode, "upstream": upstream or None}
        )
        _bump_version(by=by, what=f"set the mode of {agent_type or 'the default'} to {mode}")
    return row


def delete_agent_modes(*, agent_types: Collection[str], by: str = COMMAND) -> int:
    """Make these agent types follow the default again (or the rules: no default)."""
    with transaction.atomic():
        deleted, _ = AgentMode.objects.filter(agent_type__in=list(agent_types)).delete()
        _bump_version(by=by, what=f"removed the modes of {', '.join(agent_types)}")
    return deleted


def _replace_upstreams(
    upstreams: list[dict[str, Any]], modes: dict[str, Any], known: StoredRuleset | None = None
) -> tuple[bool, list[dict[str, Any]], dict[str, Any]]:
    """Store the upstreams and modes unless they are stored already (``known``: the stored
    ruleset, else read): whether they were not, and the upstreams and modes as they are now."""
    made = [
        Upstream(position=i, **{key: doc[key] for key in Upstream.KEYS if key in doc})
        for i, doc in enumerate(upstreams)
    ]
    documents = [row.document() for row in made]
    stored = (known.upstreams, known.modes) if known else stored_upstreams()
    if stored == (documents, modes):
        return False, *stored
    Upstream.objects.all().delete()
    AgentMode.objects.all().delete()
    Upstream.objects.bulk_create(made)
    rows = [
        AgentMode(agent_type=agent_type, mode=spec["mode"], upstream=spec.get("upstream"))
        for agent_type, spec in (modes.get("agent_types") or {}).items()
    ]
    if "default" in modes or "upstream" in modes:
        default = modes.get("default", "static")
        rows.append(AgentMode(agent_type="", mode=default, upstream=modes.get("upstream")))
    AgentMode.objects.bulk_create(rows)
    return True, documents, AgentMode.modes_document(rows)


# -- single rules (the control API and the admin) -------------------------------------


def create_rule(*, document: dict[str, Any], place: str = "auto", by: str = COMMAND) -> Rule:
    """Add a validated rule document at ``place`` (``PLACES``); an unnamed rule is named as
    an import would name it."""
    with transaction.atomic():
        names = list(Rule.objects.values_list("name", flat=True))
        if "name" in document and document["name"] in names:
            raise _duplicate_name(document["name"])
        if "name" not in document:
            from staticagents.document.schema import name_rules  # see restore_version

            name_rules([*({"name": n} for n in names), document])
        index = _place_index(place, document.get("match") or {})
        written = _create_rules([document], start=_next_position())
        rule = Rule.objects.get(name=document["name"])
        _insert_at(rule, index)
        _bump_version(by=by, what=f'added rule "{rule.name}"', written=written)
        return _with_responses(document["name"])


def update_rule(*, name: str, document: dict[str, Any], by: str = COMMAND) -> Rule:
    """Replace the rule called ``name`` with a validated document (which may rename it)."""
    with transaction.atomic():
        rule = _rule_named(name)
        document.setdefault("name", name)
        if document["name"] != name and Rule.objects.filter(name=document["name"]).exists():
            raise _duplicate_name(document["name"])
        _update_rule(rule, document)
        renamed = f' (renamed "{document["name"]}")' if document["name"] != name else ""
        _bump_version(by=by, what=f'changed rule "{name}"{renamed}')
        return _with_responses(document["name"])


def record_rule(*, document: dict[str, Any]) -> Rule:
    """Save a validated recorded rule (``staticagents.recording``): a new one goes where it
    answers (``auto``); one recorded before gets the new reply in its place, to be reviewed
    again, unless the reply is the same (then nothing is written)."""
    try:
        return _record_rule(document)
    except (DocumentInvalid, IntegrityError):  # another worker recorded it meanwhile
        return _record_rule(document)


def _record_rule(document: dict[str, Any]) -> Rule:
    by = f"recording from {document['recorded']['upstream']}"
    with transaction.atomic():
        stored = Rule.objects.select_for_update().filter(name=document["name"]).first()
        if stored is None:
            return create_rule(document=document, place="auto", by=by)
        current = _with_responses(stored.name).document()
        if all(current.get(key) == document.get(key) for key in ("match", "response")):
            return stored
        if not stored.enabled:  # a curator's choice the new recording keeps
            document = {**document, "enabled": False}
        return update_rule(name=stored.name, document=document, by=by)


def accept_recorded_rules(*, names: Collection[str], by: str = COMMAND) -> int:
    """Mark the named recorded rules reviewed; return how many were waiting for review."""
    with transaction.atomic():
        waiting = Rule.objects.filter(
            name__in=names, recorded_upstream__isnull=False, recorded_reviewed=False
        )
        accepted = list(waiting.values_list("name", flat=True))
        count = waiting.update(recorded_reviewed=True, digest="")
        if count:
            _bump_version(by=by, what=_rules_named("accepted recorded", accepted))
    return count


def _with_responses(name: str) -> Rule:
    """The rule read back with its responses inside the transaction that wrote them, so its
    ``document()`` cannot meet another writer's changes."""
    return Rule.objects.prefetch_related("responses").get(name=name)


def save_rule(
    *,
    rule: Rule,
    responses: Iterable[RuleResponse] = (),
    removed_responses: Iterable[RuleResponse] = (),
    place: str = "auto",
    by: str = COMMAND,
) -> Rule:
    """Save a rule edited field by field (the admin's change form) with its responses.

    The rule and its responses are validated already (the models' ``clean()``).
    ``responses`` are the new and changed ones, ``removed_responses`` the ones to
    delete. A new rule goes to ``place`` (``PLACES``); the rule's responses are numbered 0..n-1 in
    their order (ties: the older one first).
    """
    with transaction.atomic():
        index = None
        verb = "added" if rule.pk is None else "changed"
        if rule.pk is None:
            index = _place_index(place, rule.match_document())
            rule.position = _next_position()
        rule.digest = ""  # edited field by field: no document to compare a replace with
        rule.save()
        if index is not None:
            _insert_at(rule, index)
        RuleResponse.objects.filter(pk__in=[r.pk for r in removed_responses]).delete()
        for response in responses:
            response.rule = rule
            response.save()
        _renumber_responses(rule)
        _bump_version(by=by, what=f'{verb} rule "{rule.name}"')
    return rule


def _place_index(place: str, match: dict[str, Any]) -> int:
    """Where a new rule goes among the current rules, as an index (see ``PLACES``)."""
    if place == "top":
        return 0
    rules = Rule.objects.order_by("position", "id")
    if place == "end":
        return rules.count()
    if place == "auto":
        documents = rule_matches()
        shadowing = first_shadowing(documents, match)
        return len(documents) if shadowing is None else shadowing
    name = place.removeprefix("before:")
    names = list(rules.values_list("name", flat=True))
    if place.startswith("before:") and name in names:
        return names.index(name)
    problem = f"no rule named {name!r}" if place.startswith("before:") else "unknown place"
    raise DocumentInvalid([FieldError("place", f"{problem}: {PLACES_HELP}", "invalid_place")])


def _insert_at(rule: Rule, index: int) -> None:
    rules = [r for r in _rules_in_order() if r.pk != rule.pk]
    rules.insert(index, rule)
    _put_in_order(rules)


def _renumber_responses(rule: Rule) -> None:
    responses = list(rule.responses.order_by("position", "id"))
    RuleResponse.objects.bulk_update(_renumbered(responses), ["position"])


def delete_rule(*, name: str, by: str = COMMAND) -> None:
    """Delete a rule, its responses and its sessions' positions in it; close the gap it leaves."""
    with transaction.atomic():
        _rule_named(name)
        _delete_named_rules([name])
        _bump_version(by=by, what=_rules_named("deleted", [name]))


def delete_rules(*, names: Collection[str], by: str = COMMAND) -> int:
    """Delete the named rules as ``delete_rule`` does, all at once; return how many went."""
    with transaction.atomic():
        deleted = _delete_named_rules(names)
        _bump_version(by=by, what=_rules_named("deleted", names))
    return deleted


def _delete_named_rules(names: Collection[str]) -> int:
    deleted = _delete_rules(Rule.objects.filter(name__in=names))
    SessionCounter.objects.filter(rule__in=names).delete()
    _put_in_order(list(_rules_in_order()))  # no gap: the admin's "#" stays the rule's place
    return deleted


def set_rules_enabled(*, names: Collection[str], enabled: bool, by: str = COMMAND) -> int:
    """Enable or disable the named rules; return how many there are."""
    with transaction.atomic():
        count = Rule.objects.filter(name__in=names).update(enabled=enabled, digest="")
        _bump_version(by=by, what=_rules_named("enabled" if enabled else "disabled", names))
    return count


# -- order ------------------------------------------------------------------------


def reorder_rules(*, names: list[str], by: str = COMMAND) -> list[str]:
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
        _bump_version(by=by, what=f"reordered the rules: {', '.join(names)} first")
        return order


def move_rule(*, name: str, direction: str, by: str = COMMAND) -> int:
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
            _bump_version(by=by, what=f'moved rule "{name}" {direction} (to #{place + 1})')
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


def reset_session(*, session: str, script: dict[str, Any] | None = None) -> dict[str, int]:
    """A session's fresh start: its sequence positions, fail-first counts, journal and
    script go; ``script`` (a validated rule document with ``responses``) is its new one."""
    reset = SessionReset(session, script)
    counts: dict[str, int] = journal.run_now(reset)
    transaction.on_commit(reset.committed)  # at once, unless a caller's transaction is open
    return counts


class SessionReset:
    """``reset_session`` as a journal job (``journal.run_now`` in a thread, ``run_on_loop``
    on the event loop: the testing kit's calls), then ``committed()`` once it is.

    Raw statements, each table's rows in one (the testing kit does this every test):
    the journal's rows go ``RETURNING`` the ids of those still streaming; a script is
    inserted unless the session has one (then replaced); the scripts' stamp moves, and
    this process's snapshot takes the script without reading the others
    (``snapshot.take_script``) when it was current.
    """

    def __init__(self, session: str, script: dict[str, Any] | None = None) -> None:
        self.session = session
        self.script = script
        self.streaming: list[int] = []
        self.changed: tuple[str, str, int | None] | None = None  # stamps before, after; row

    def __call__(self, run: Statements) -> dict[str, int]:
        session, script = self.session, self.script
        counters = run.run(f"DELETE FROM {_table(SessionCounter)} WHERE session = %s", [session])
        # The session's streams still open, every worker ends once this commits (a stream
        # may have waited to begin: serving.pacer.HOLD_LIMIT_SECONDS, with room to spare).
        open_for = settings.STATIC_AGENTS_MAX_STREAM_SECONDS + 60
        since = run.param(
            JournalEntry, "created_at", timezone.now() - datetime.timedelta(seconds=open_for)
        )
        entries = run.rows(
            f"DELETE FROM {_table(JournalEntry)} WHERE session = %s "
            "RETURNING CASE WHEN created_at >= %s THEN id END",
            [session, since],
        )
        self.streaming = [row[0] for row in entries if row[0] is not None]
        row: int | None = None
        if script is None:
            ended = run.run(f"DELETE FROM {_table(SessionScript)} WHERE session = %s", [session])
        else:
            row, ended = self._insert_script(run, script), 0
        if ended or script is not None:
            self.changed = (*self._bump_scripts_stamp(run), row)
        return {"counters": counters, "journal": len(entries)}

    def _insert_script(self, run: Statements, script: dict[str, Any]) -> int:
        """The new script's row id (the session's previous script, if any, goes)."""
        insert = (
            f"INSERT INTO {_table(SessionScript)} (session, responses, on_exhausted) "
            "VALUES (%s, %s, %s) ON CONFLICT (session) DO NOTHING RETURNING id"
        )
        values = [
            self.session,
            run.param(SessionScript, "responses", script["responses"]),
            script.get("on_exhausted") or "error",
        ]
        inserted = run.rows(insert, values)
        if not inserted:  # a new row, so a new position: nothing rendered for the old one
            run.run(f"DELETE FROM {_table(SessionScript)} WHERE session = %s", [self.session])
            inserted = run.rows(insert, values)
        return int(inserted[0][0])

    @staticmethod
    def _bump_scripts_stamp(run: Statements) -> tuple[str, str]:
        """Record that a session's script changed (workers reload the scripts, and no
        rule); the whole stamp before and after, when this process's snapshot was the one
        before (else the next reply rebuilds it)."""
        stamp, known = RulesetState.new_stamp(), snapshot_stamp() or ""
        state = _table(RulesetState)
        moved = run.rows(
            f"UPDATE {state} SET scripts_stamp = %s "
            f"WHERE id = 1 AND stamp || ':' || scripts_stamp = %s RETURNING stamp",
            [stamp, known],
        )
        if moved:
            return known, f"{moved[0][0]}:{stamp}"
        if not run.run(f"UPDATE {state} SET scripts_stamp = %s WHERE id = 1", [stamp]):
            run.run(
                f"INSERT INTO {state} (id, version, stamp, scripts_stamp, changed_at) "
                "VALUES (1, 0, '', %s, %s)",
                [stamp, run.now(RulesetState, "changed_at")],
            )
        return "", ""

    def committed(self) -> None:
        live.announce_session_reset(self.session, self.streaming)
        if self.changed is not None and self.changed[0]:
            before, after, row = self.changed
            script = self.script
            if script is not None and row is not None:
                document = SessionScript.rule_document(
                    script["responses"], script.get("on_exhausted") or "error"
                )
                take_script(before, after, self.session, (row, document))
            else:
                take_script(before, after, self.session, None)


def _table(model: type[Model]) -> str:
    return model._meta.db_table


# -- the control API's token ----------------------------------------------------


def ensure_control_token(configured: str) -> str | None:
    """Create and store a control token unless one is configured or stored; return it if new."""
    if configured:
        return None
    with transaction.atomic():
        if ControlToken.objects.exists():
            return None
        return _store_new_control_token()


def rotate_control_token() -> str:
    """Replace the stored control token with a new one, and return it (it is shown only now)."""
    with transaction.atomic():
        ControlToken.objects.all().delete()
        return _store_new_control_token()


def _store_new_control_token() -> str:
    token = secrets.token_urlsafe(32)
    hint = token[: ControlToken.HINT_LENGTH]
    ControlToken.objects.create(digest=ControlToken.digest_of(token), hint=hint)
    return token
