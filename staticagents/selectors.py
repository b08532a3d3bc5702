"""Reads of stored data: the rules as a document, their history, the journal, its counters, the
control token.

The compiled snapshot of the rules that replies are answered from is
``replying.snapshot``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from django.db import connection, transaction
from django.db.models import Count, Max, QuerySet, Value
from django.db.models.functions import StrIndex

from staticagents.core.reach import Shadow, shadowed_rules
from staticagents.document.terms import RESPONSE_KEYS
from staticagents.models import (
    DOCUMENT_FIELDS,
    MATCH_FIELDS,
    AgentMode,
    ControlToken,
    Defaults,
    Fallback,
    JournalEntry,
    Rule,
    RuleResponse,
    RulesetState,
    RulesetVersion,
    SessionScript,
    Upstream,
)

if TYPE_CHECKING:
    from staticagents.document.diff import DocumentDiff


@contextmanager
def one_snapshot() -> Iterator[None]:
    """Reads inside see the database as it was at one moment, whatever commits meanwhile.

    The rules and their responses are two queries: read apart, an import
    committing between them shows every rule with ``"response": {}``. SQLite
    (in WAL mode) reads one snapshot per transaction; PostgreSQL needs
    REPEATABLE READ for it (its default gives each statement its own). Inside
    an enclosing transaction the snapshot is that transaction's.
    """
    if connection.in_atomic_block:
        yield
    elif connection.vendor == "sqlite":
        # Not atomic(): the settings make its transactions IMMEDIATE, which would take
        # the write lock and hold every reply's counter update for the whole read.
        with connection.cursor() as cursor:
            cursor.execute("BEGIN DEFERRED")
        try:
            yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("COMMIT")
    else:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield


def stored_document() -> dict[str, Any]:
    """The rules, defaults and fallback in fixture form (what ``export_fixture`` writes)."""
    with one_snapshot():
        defaults, fallback = stored_defaults_and_fallback()
        rules = [rule for _, rule in stored_rules({})]
        upstreams, modes = stored_upstreams()
    document = {"version": 1, "defaults": defaults, "rules": rules, "fallback": fallback}
    if upstreams or modes:
        document.update(upstreams=upstreams, modes=modes)
    return document


def stored_upstreams() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The upstreams and the agent types' modes, in fixture form."""
    upstreams = [upstream.document() for upstream in Upstream.objects.all()]
    modes = AgentMode.modes_document(list(AgentMode.objects.all()))
    return upstreams, modes


def stored_defaults_and_fallback() -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The defaults (``confidence`` "medium" unless set) and the fallback, in fixture form."""
    defaults, fallback = stored_defaults_and_fallback_rows()
    return exported_defaults(defaults), fallback


def stored_defaults_and_fallback_rows() -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The defaults' and the fallback's rows in fixture form; None for a row there is not."""
    defaults = Defaults.objects.filter(pk=1).first()
    fallback = Fallback.objects.first()
    return defaults.document() if defaults else None, fallback.document() if fallback else None


def exported_defaults(row: dict[str, Any] | None) -> dict[str, Any]:
    return {"confidence": "medium", **(row or {})}


def stored_rules(
    known: Mapping[str, dict[str, Any]], sizing: Callable[[int], None] | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The rules in order, as (digest, document); a rule whose digest is in ``known`` (the
    documents of digests read before) is not read again. ``sizing`` is told how many
    rules are read anew, before they are."""
    order = list(Rule.objects.order_by("position", "id").values_list("id", "digest"))
    missing = [pk for pk, digest in order if not digest or digest not in known]
    if sizing is not None:
        sizing(len(missing))
    read: dict[int, dict[str, Any]] = {}
    for start in range(0, len(missing), 500):  # a bounded number of parameters per query
        read.update(_rule_documents(missing[start : start + 500]))
    return [(digest, read[pk] if pk in read else known[digest]) for pk, digest in order]


def _rule_documents(pks: list[int]) -> Iterator[tuple[int, dict[str, Any]]]:
    """The documents of the rules ``pks``, read as rows (model instances cost 4 times more)."""
    responses: dict[int, list[dict[str, Any]]] = {}
    rows = RuleResponse.objects.filter(rule_id__in=pks).order_by("position", "id")
    for row in rows.values("rule_id", *RESPONSE_KEYS):
        responses.setdefault(row["rule_id"], []).append(RuleResponse.document_of(row))
    for row in Rule.objects.filter(pk__in=pks).values("id", *DOCUMENT_FIELDS):
        yield row["id"], Rule.document_of(row, responses.get(row["id"], []))


def stored_scripts() -> dict[str, tuple[int, dict[str, Any]]]:
    """Every session's script, by session key: its row's id and its rule document."""
    fields = ("id", "session", "responses", "on_exhausted")
    return {
        session: (row, SessionScript.rule_document(responses, end))
        for row, session, responses, end in SessionScript.objects.values_list(*fields)
    }


def session_script(session: str) -> dict[str, Any] | None:
    """The session's script as a rule document, or None."""
    script = SessionScript.objects.filter(session=session).first()
    return script.document() if script is not None else None


# The last analysis of the stored rules, with the stamp they had (every change to them sets
# a new one): the admin's rule list shows it on every page, and over 10,000 rules it takes
# about a second (bench/README.md, "The admin's rule list").
_shadows: tuple[str, Mapping[str, Shadow]] = ("", {})


def rule_shadows() -> Mapping[str, Shadow]:
    """The stored rules that never answer, by name: an earlier enabled rule shadows each."""
    global _shadows
    if connection.in_atomic_block:
        # Rules this transaction wrote have no new stamp until it bumps the version.
        return _analysed_shadows()
    with one_snapshot():
        stamp = RulesetState.objects.filter(pk=1).values_list("stamp", flat=True).first()
        kept_stamp, kept = _shadows
        if stamp and stamp == kept_stamp:
            return kept
        found = _analysed_shadows()
    if stamp:
        _shadows = (stamp, found)
    return found


def _analysed_shadows() -> Mapping[str, Shadow]:
    return MappingProxyType(shadowed_rules(rule_matches()))


def rule_matches() -> list[dict[str, Any]]:
    """Every stored rule's name, whether it is enabled and its ``match``, in order: what
    reachability reads of them (``core.reach``)."""
    rows = Rule.objects.order_by("position", "id").values("name", "enabled", *MATCH_FIELDS)
    return [
        {"name": row["name"], "enabled": row["enabled"], "match": Rule.match_document_of(row)}
        for row in rows
    ]


def rule_answers() -> dict[str, tuple[int, datetime]]:
    """How many journal entries each rule answered, and when it last did (one query)."""
    rows = (
        JournalEntry.objects.exclude(rule=None)
        .values("rule")
        .annotate(n=Count("id"), last=Max("created_at"))
        .order_by()
    )
    return {row["rule"]: (row["n"], row["last"]) for row in rows}


def stored_rule(name: str) -> dict[str, Any] | None:
    """The rule called ``name`` in fixture form, read in one snapshot; None when there is none."""
    with one_snapshot():
        rule = Rule.objects.filter(name=name).prefetch_related("responses").first()
        return rule.document() if rule is not None else None


def export_document() -> dict[str, Any]:
    """The stored document without empty parts, ready to write out."""
    document, _ = digested_document({})
    return document


def digested_document(
    known: Mapping[str, dict[str, Any]],
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``export_document()``, and its rules' documents by digest (those that have one);
    rules whose digest is in ``known`` are not read (``stored_rules``)."""
    ruleset = stored_ruleset(known)
    return ruleset.document(), {digest: rule for digest, rule in ruleset.rules if digest}


@dataclass(frozen=True)
class StoredRuleset:
    """The stored ruleset in fixture form, in the parts a snapshot is built of."""

    rules: list[tuple[str, dict[str, Any]]]  # (digest, document), in order
    defaults: dict[str, Any] | None  # the rows (``stored_defaults_and_fallback_rows``)
    fallback: dict[str, Any] | None
    upstreams: list[dict[str, Any]]
    modes: dict[str, Any]

    def document(self) -> dict[str, Any]:
        """The export's document (``export_document``)."""
        rules = [rule for _, rule in self.rules]
        document = {"version": 1, "defaults": exported_defaults(self.defaults), "rules": rules}
        if self.fallback is not None:
            document["fallback"] = self.fallback
        if self.upstreams or self.modes:
            document.update(upstreams=self.upstreams, modes=self.modes)
        return document


def stored_ruleset(known: Mapping[str, dict[str, Any]]) -> StoredRuleset:
    """The stored ruleset, read in one snapshot; rules whose digest is in ``known`` are not
    read (``stored_rules``)."""
    with one_snapshot():
        defaults, fallback = stored_defaults_and_fallback_rows()
        rules = stored_rules(known)
        upstreams, modes = stored_upstreams()
    return StoredRuleset(rules, defaults, fallback, upstreams, modes)


class WrittenRuleset:
    """The ruleset as this process's last write to it left it, and the stamp that write set
    (``services``): while the database holds that stamp, it holds that ruleset, so the next
    replace need not read it back. Every write to the ruleset sets a new stamp (a uuid), and
    a write rolled back leaves a stamp that is never read; a row changed without a service
    (no new stamp) goes unseen here as it does by every worker's snapshot."""

    def __init__(self) -> None:
        self._last: tuple[str, StoredRuleset] | None = None

    def remember(self, stamp: str, ruleset: StoredRuleset) -> None:
        self._last = (stamp, ruleset)

    def at(self, stamp: str) -> StoredRuleset | None:
        """The ruleset written with ``stamp`` (the rules' part of the stamp), or None."""
        last = self._last
        return last[1] if last is not None and last[0] == stamp else None


written_ruleset = WrittenRuleset()


# -- the ruleset's history --------------------------------------------------------


def ruleset_versions() -> QuerySet[RulesetVersion]:
    """The kept versions, newest first, without their documents."""
    return RulesetVersion.objects.defer("packed").order_by("-number")


def ruleset_version(number: int) -> RulesetVersion | None:
    return RulesetVersion.objects.filter(number=number).first()


def version_changes(version: RulesetVersion) -> tuple[int | None, DocumentDiff | None]:
    """What ``version`` changed: the number of the version it is compared with and the
    difference; version 1 is compared with an empty ruleset (number 0), and a version whose
    predecessor is no longer kept with nothing (``None, None``)."""
    # Imported here: only the versions' pages compare documents, and the service's start
    # does without it (bench/README.md, the testing kit, step 23).
    from staticagents.document.diff import EMPTY_DOCUMENT, diff_documents

    before = RulesetVersion.objects.filter(number__lt=version.number).order_by("-number").first()
    if before is not None:
        return before.number, diff_documents(before.document(), version.document())
    if version.number == 1:
        return 0, diff_documents(EMPTY_DOCUMENT, version.document())
    return None, None


def journal_entries(
    *,
    session: str | None = None,
    dialect: str | None = None,
    agent_type: str | None = None,
    rule: str | None = None,
    outcome: str | None = None,
    fallback: bool | None = None,
    contains: str | None = None,
) -> QuerySet[JournalEntry]:
    """Journal entries, newest first; every given filter must hold.

    ``contains`` is a case-sensitive substring of the request body (StrIndex,
    not LIKE, which SQLite compares case-insensitively).
    """
    exact = {
        "session": session,
        "dialect": dialect,
        "agent_type": agent_type,
        "rule": rule,
        "outcome": outcome,
    }
    entries = JournalEntry.objects.filter(**{k: v for k, v in exact.items() if v is not None})
    if fallback is not None:
        entries = entries.filter(rule__isnull=fallback)
    if contains:
        entries = entries.alias(at=StrIndex("body", Value(contains))).filter(at__gt=0)
    return entries.order_by("-id")


def journal_counters(*, session: str | None = None) -> dict[str, Any]:
    """What the service saw, summed from the journal in one aggregate query.

    Entries whose counts were reset (``counted`` cleared) are left out; entries
    pruned by the journal cap or cleared are no longer counted.
    """
    entries = JournalEntry.objects.filter(counted=True)
    if session is not None:
        entries = entries.filter(session=session)
    rows = entries.values("rule", "outcome", "upstream").annotate(n=Count("id")).order_by()
    outcomes: Counter[str] = Counter()
    rules: Counter[str] = Counter()
    for row in rows:
        outcomes[row["outcome"]] += row["n"]
        # An unknown route, or an upstream's answer: no rule answered, nor the fallback.
        if row["outcome"] != "unknown_route" and not row["upstream"]:
            rules[row["rule"] or ""] += row["n"]
    fallbacks = rules.pop("", 0)
    return {
        "session": session,
        "requests": sum(outcomes.values()),
        "rules": dict(sorted(rules.items())),
        "fallbacks": fallbacks,
        "errors": outcomes["error"],
        "failed_first": outcomes["failed_first"],
        "cancelled": outcomes["cancelled"],
        "cut_off": outcomes["cut_off"],
        "outcomes": dict(sorted(outcomes.items())),
    }


def stored_control_token() -> ControlToken | None:
    """The token ``serve`` created (its digest, hint and date), if it created one."""
    return ControlToken.objects.order_by("id").first()


def stored_control_token_digest() -> str | None:
    """The digest of the token ``serve`` created, if it created one."""
    return ControlToken.objects.order_by("id").values_list("digest", flat=True).first()
