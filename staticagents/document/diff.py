"""What changed between two ruleset documents (the export's form): rule by rule, field by field.

Pure: the history's version pages (admin and control API) show it. A rule is
known by its name; a rule whose document differs is "changed", with each field
that differs (``match.query``, ``response.content``, ``responses[1].tool_calls``)
old → new; a rule that only changed place among the others is "moved". A field
absent on one side is ``None`` there.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

EMPTY_DOCUMENT: dict[str, Any] = {"version": 1, "defaults": {"confidence": "medium"}, "rules": []}


@dataclass(frozen=True)
class FieldChange:
    field: str
    old: Any  # None: absent
    new: Any

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "old": self.old, "new": self.new}


@dataclass(frozen=True)
class RuleChange:
    name: str
    change: str  # "added", "removed", "changed" or "moved"
    fields: tuple[FieldChange, ...]

    def as_dict(self) -> dict[str, Any]:
        fields = [field.as_dict() for field in self.fields]
        return {"name": self.name, "change": self.change, "fields": fields}

    def summary(self) -> str:
        return f'{self.change} rule "{self.name}"'


@dataclass(frozen=True)
class DocumentDiff:
    defaults: tuple[FieldChange, ...]
    fallback: tuple[FieldChange, ...]
    rules: tuple[RuleChange, ...]

    def __bool__(self) -> bool:
        return bool(self.defaults or self.fallback or self.rules)

    def as_dict(self) -> dict[str, Any]:
        return {
            "defaults": [field.as_dict() for field in self.defaults],
            "fallback": [field.as_dict() for field in self.fallback],
            "rules": [rule.as_dict() for rule in self.rules],
        }


def diff_documents(old: dict[str, Any], new: dict[str, Any]) -> DocumentDiff:
    """What turns ``old`` into ``new``: the rules in ``new``'s order, then the removed ones."""
    return DocumentDiff(
        defaults=_field_changes(old.get("defaults") or {}, new.get("defaults") or {}),
        fallback=_field_changes(_flat(old.get("fallback")), _flat(new.get("fallback"))),
        rules=tuple(_rule_changes(old.get("rules") or [], new.get("rules") or [])),
    )


def _rule_changes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[RuleChange]:
    before = {rule["name"]: (place, rule) for place, rule in enumerate(old)}
    after = {rule["name"] for rule in new}
    kept = [rule["name"] for rule in new if rule["name"] in before]
    in_order = _in_order([before[name][0] for name in kept])
    moved = {name for i, name in enumerate(kept) if i not in in_order}
    changes = []
    for place, rule in enumerate(new):
        name = rule["name"]
        if name not in before:
            changes.append(RuleChange(name, "added", _rule_fields(None, rule)))
            continue
        old_place, old_rule = before[name]
        fields = _rule_fields(old_rule, rule)
        if name in moved:
            fields = (FieldChange("position", old_place + 1, place + 1), *fields)
        if fields:
            change = "moved" if fields[0].field == "position" and len(fields) == 1 else "changed"
            changes.append(RuleChange(name, change, fields))
    for rule in old:
        if rule["name"] not in after:
            changes.append(RuleChange(rule["name"], "removed", _rule_fields(rule, None)))
    return changes


def _in_order(places: list[int]) -> set[int]:
    """The indexes of a longest increasing run of ``places`` (not necessarily adjacent): the
    rules that kept their order; the others moved."""
    tails: list[int] = []  # tails[k]: the index ending the best run of length k + 1
    ends: list[int] = []  # ends[k]: places[tails[k]]
    links: list[int | None] = []
    for i, place in enumerate(places):
        k = bisect_left(ends, place)
        links.append(tails[k - 1] if k else None)
        if k == len(tails):
            tails.append(i)
            ends.append(place)
        else:
            tails[k], ends[k] = i, place
    kept: set[int] = set()
    at = tails[-1] if tails else None
    while at is not None:
        kept.add(at)
        at = links[at]
    return kept


def _rule_fields(old: dict[str, Any] | None, new: dict[str, Any] | None) -> tuple[FieldChange, ...]:
    single = max(len(_responses(old)), len(_responses(new))) == 1
    changes = _field_changes(_flat(old, single), _flat(new, single))
    if old is None or new is None:  # a rule added or removed: "enabled" only when it is not
        return tuple(c for c in changes if not (c.field == "enabled" and True in (c.old, c.new)))
    return changes


def _flat(rule: dict[str, Any] | None, single: bool = True) -> dict[str, Any]:
    """A rule (or a response: the fallback) as field → value, one level into its parts."""
    if rule is None:
        return {}
    if "name" not in rule:  # a response
        return dict(rule)
    fields: dict[str, Any] = {"enabled": rule.get("enabled", True)}
    fields.update({f"match.{key}": value for key, value in (rule.get("match") or {}).items()})
    for i, response in enumerate(_responses(rule)):
        prefix = "response" if single else f"responses[{i}]"
        fields.update({f"{prefix}.{key}": value for key, value in response.items()})
    if "on_exhausted" in rule:
        fields["on_exhausted"] = rule["on_exhausted"]
    return fields


def _responses(rule: dict[str, Any] | None) -> list[dict[str, Any]]:
    if rule is None:
        return []
    return list(rule["responses"]) if "responses" in rule else [rule.get("response") or {}]


def _field_changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[FieldChange, ...]:
    keys = [*old, *(key for key in new if key not in old)]
    return tuple(
        FieldChange(key, old.get(key), new.get(key)) for key in keys if old.get(key) != new.get(key)
    )
