"""Matching: inquiries per second of the pure matcher with 10, 1,000 and 10,000 rules.

The answering rule is always the last one, so a matcher that tried every rule
in turn would slow down in proportion to the rule count.
"""

from __future__ import annotations

import time
from typing import Any

from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import compile_ruleset, match_inquiry

SIZES = (10, 1_000, 10_000)


def rule_documents(count: int) -> list[dict[str, Any]]:
    """A realistic mix: problem-id rules, regex rules for two agent types, a catch-all."""
    rules: list[dict[str, Any]] = []
    for i in range(count - 1):
        if i % 3 == 0:
            match: dict[str, Any] = {"contains": f"problem-{i:05d}"}
        elif i % 3 == 1:
            match = {"agent_type": "router", "query": f"(?i)^topic {i:05d}\\b"}
        else:
            match = {"agent_type": "error_analysis", "query": f"error {i:05d}"}
        rules.append({"name": f"rule-{i}", "match": match, "response": {"content": "x"}})
    rules.append(
        {"name": "answer", "match": {"contains": "the-last-one"}, "response": {"content": "found"}}
    )
    return rules


def inquiries_per_second(count: int, seconds: float = 1.0) -> float:
    ruleset = compile_ruleset(stamp="bench", rules=rule_documents(count))
    inquiry = Inquiry("please find the-last-one for me", agent_type="router")
    assert match_inquiry(ruleset, inquiry).name == "answer"  # type: ignore[union-attr]
    done, started = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        for _ in range(1000):
            match_inquiry(ruleset, inquiry)
        done += 1000
    return done / elapsed


def run(seconds: float = 1.0) -> list[dict[str, Any]]:
    rates = {count: inquiries_per_second(count, seconds) for count in SIZES}
    base = rates[SIZES[0]]
    return [
        {"rules": count, "inquiries/s": round(rate), "slowdown vs 10 rules": round(base / rate, 2)}
        for count, rate in rates.items()
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
