"""Answer the inquiries of one request together: each matched on its own, one journal entry.

An embeddings request carries many texts. Each is an inquiry of its own: it
may match its own rule, and advances that rule's script and fail-first count
as a single inquiry would. The request is journaled once: its query is the
texts, one per line; its rule the names of the rules that answered, in order
of first use, comma-separated (None when the fallback answered every text);
its outcome and status those of the first reply that failed, if any.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from staticagents.conf import settings
from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import CompiledRule, Ruleset, match_inquiry
from staticagents.core.regexes import Deadline
from staticagents.core.replies import FIRST_STEP, Reply, Step, build_reply
from staticagents.core.values import value_class
from staticagents.replying.answer import counter_threads, journal_entry, next_step
from staticagents.replying.journal import journal
from staticagents.replying.snapshot import current_ruleset

# Characters of text above which matching runs in a thread: every rule's regexes may read
# each text (up to the match window), so a large batch would hold the event loop.
THREAD_TEXT = 100_000


@value_class
class BatchAnswer:
    replies: tuple[Reply, ...]
    entry_id: int | None

    @property
    def failure(self) -> Reply | None:
        """The first reply that fails the request, or None."""
        return next((reply for reply in self.replies if reply.error is not None), None)


async def aanswer_inquiries(
    inquiries: Sequence[Inquiry],
    *,
    route: str,
    body: bytes | str = b"",
    ruleset: Ruleset | None = None,
    settle: Callable[[int, Reply], Reply] | None = None,
) -> BatchAnswer:
    """Decide the reply to each inquiry (in order) and journal the request once.

    ``settle(index, reply)`` may turn the reply to ``inquiries[index]`` into a
    failure the edge found in it (a pinned vector the request cannot carry)
    before the entry is written, so the journal says what the client got.
    """
    started = time.perf_counter()
    if ruleset is None:
        ruleset = await current_ruleset()
    deadline = ruleset.deadline()  # one budget for the whole request
    rules = await _matched(ruleset, inquiries, deadline)
    if any(rule is not None and rule.stateful for rule in rules):
        steps = await counter_threads.run(next_steps, rules, inquiries)
    else:
        steps = [FIRST_STEP] * len(rules)
    replies = tuple(
        build_reply(ruleset, inquiry, rule, step)
        for inquiry, rule, step in zip(inquiries, rules, steps, strict=True)
    )
    if settle is not None:
        replies = tuple(settle(index, reply) for index, reply in enumerate(replies))
    answer = BatchAnswer(replies, None)
    if not settings.STATIC_AGENTS_JOURNAL:
        return answer
    entry = batch_entry(
        inquiries, answer, ruleset, route=route, body=body, started=started, deadline=deadline
    )
    return BatchAnswer(replies, await journal.record(entry))


async def _matched(
    ruleset: Ruleset, inquiries: Sequence[Inquiry], deadline: Deadline
) -> list[CompiledRule | None]:
    """Each inquiry's rule; in a thread when the texts are long (``THREAD_TEXT``) or a
    timed search may run."""

    def match() -> list[CompiledRule | None]:
        return [match_inquiry(ruleset, inquiry, deadline) for inquiry in inquiries]

    long = sum(len(inquiry.query) for inquiry in inquiries) > THREAD_TEXT
    if not long and not any(ruleset.may_take_time(inquiry) for inquiry in inquiries):
        return match()
    return await asyncio.to_thread(match)


def next_steps(rules: Sequence[CompiledRule | None], inquiries: Sequence[Inquiry]) -> list[Step]:
    """``next_step`` for each inquiry whose rule keeps session state, in order."""
    return [
        next_step(rule, inquiry) if rule is not None and rule.stateful else FIRST_STEP
        for rule, inquiry in zip(rules, inquiries, strict=True)
    ]


def batch_entry(
    inquiries: Sequence[Inquiry],
    answer: BatchAnswer,
    ruleset: Ruleset,
    *,
    route: str,
    body: bytes | str,
    started: float,
    deadline: Deadline | None = None,
) -> dict[str, object]:
    """The journal row of the whole request (see the module doc)."""
    names = list(dict.fromkeys(r.rule for r in answer.replies if r.rule is not None))
    decisive = answer.failure or answer.replies[0]
    summary = replace(decisive, rule=",".join(names)[:200] if names else None)
    # The first text stands for the request: a fallback's diagnosis is about it.
    entry = journal_entry(
        inquiries[0], summary, ruleset, route=route, body=body, started=started, deadline=deadline
    )
    entry["query"] = "\n".join(inquiry.query for inquiry in inquiries)
    return entry
