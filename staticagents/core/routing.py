"""Which agent types answer from rules and which from a real model (an upstream).

Pure: built from the fixture's validated ``upstreams`` and ``modes`` into the ruleset
snapshot, read on every request (``Routing.target``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

STATIC = "static"
PROXY = "proxy"
RECORD = "record"
RECORD_ON_MISS = "record_on_miss"


@dataclass(frozen=True, slots=True)
class Upstream:
    """A real model endpoint; ``api_key_env`` names the variable holding its key."""

    name: str
    dialect: str  # openai | anthropic
    base_url: str
    api_key_env: str
    model: str | None = None
    timeout: float = 60.0
    headers: Mapping[str, str] = field(default_factory=dict)
    record_model: bool = False
    record_timing: bool = False

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> Upstream:
        return cls(
            name=doc["name"],
            dialect=doc["dialect"],
            base_url=doc["base_url"],
            api_key_env=doc["api_key_env"],
            model=doc.get("model"),
            timeout=float(doc.get("timeout", 60.0)),
            headers=dict(doc.get("headers") or {}),
            record_model=bool(doc.get("record_model")),
            record_timing=bool(doc.get("record_timing")),
        )


@dataclass(frozen=True, slots=True)
class Target:
    """Where an agent type's requests go: ``mode`` is proxy, record or record_on_miss."""

    mode: str
    upstream: Upstream

    @property
    def records(self) -> bool:
        return self.mode in (RECORD, RECORD_ON_MISS)


@dataclass(frozen=True, slots=True)
class Routing:
    default: Target | None = None
    agent_types: Mapping[str, Target | None] = field(default_factory=dict)  # None: static

    def target(self, agent_type: str) -> Target | None:
        """The upstream for ``agent_type``, or None when its rules answer it."""
        if agent_type in self.agent_types:
            return self.agent_types[agent_type]
        return self.default

    def mode(self, agent_type: str) -> str:
        target = self.target(agent_type)
        return STATIC if target is None else target.mode

    @property
    def mixed(self) -> bool:
        """Whether any agent type is answered by an upstream."""
        return self.default is not None or any(self.agent_types.values())

    def describe(self, agent_type: str) -> str:
        """``agent type X is proxied to upstream Y`` (or answered from rules)."""
        target = self.target(agent_type)
        if target is None:
            return f"agent type {agent_type!r} is static: its rules answer it"
        verb = {
            PROXY: "proxied to",
            RECORD: "proxied to and recorded from",
            RECORD_ON_MISS: "answered by its rules, else proxied to and recorded from",
        }[target.mode]
        return f"agent type {agent_type!r} is {verb} upstream {target.upstream.name!r}"


STATIC_ROUTING = Routing()


def compile_routing(upstreams: Sequence[Mapping[str, Any]], modes: Mapping[str, Any]) -> Routing:
    """The routing of a validated ``upstreams`` list and ``modes`` mapping."""
    if not upstreams and not modes:
        return STATIC_ROUTING
    by_name = {doc["name"]: Upstream.from_document(doc) for doc in upstreams}
    only = next(iter(by_name.values())) if len(by_name) == 1 else None
    default_upstream = by_name.get(modes.get("upstream") or "", only)

    def target(mode: str | None, upstream: Upstream | None) -> Target | None:
        if mode is None or mode == STATIC or upstream is None:
            return None
        return Target(mode, upstream)

    agent_types = {
        agent_type: target(spec["mode"], by_name.get(spec.get("upstream") or "", default_upstream))
        for agent_type, spec in (modes.get("agent_types") or {}).items()
    }
    return Routing(target(modes.get("default"), default_upstream), agent_types)
