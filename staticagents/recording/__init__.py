"""Record what a real model answered as rules a curator reviews, and that replay it offline.

The proxy (``dialects``' upstream relay) hands each exchange it relayed to
``record_exchange``, off the event loop: the exchange becomes a rule matching the
same question at the same turn, placed where it answers, tagged ``recorded``.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence

from django.utils import timezone

from staticagents.conf import settings
from staticagents.recording.exchange import Exchange, RecordedReply, recorded_rule

__all__ = ["Exchange", "RecordedReply", "record_exchange"]

logger = logging.getLogger(__name__)


def record_exchange(
    exchange: Exchange, *, match_model: bool = False, keep_timing: bool = False
) -> str | None:
    """Save the exchange as a rule (sync, database); return its name; never raises (logs)."""
    # Imported here: the package's dataclasses are imported where no database is set up.
    from staticagents.document.schema import RuleSpec, validate_part
    from staticagents.services import record_rule

    try:
        document = recorded_rule(
            exchange,
            at=timezone.now(),
            match_model=match_model,
            keep_timing=keep_timing,
            patterns=redact_patterns(tuple(settings.STATIC_AGENTS_REDACT_PATTERNS)),
        )
        return record_rule(document=validate_part(RuleSpec, document)).name
    except Exception:
        logger.exception("could not record an exchange with upstream %r", exchange.upstream)
        return None


@functools.lru_cache(maxsize=8)
def redact_patterns(patterns: Sequence[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(pattern) for pattern in patterns)
