"""Hand a proxied exchange to the recorder (``staticagents.recording``), off the event loop."""

from __future__ import annotations

import dataclasses
import importlib
import logging

from asgiref.sync import sync_to_async

from staticagents.core.inquiry import Inquiry, mask_headers
from staticagents.core.routing import Upstream
from staticagents.proxying.wire import Relayed

log = logging.getLogger(__name__)


def record(upstream: Upstream, inquiry: Inquiry, relayed: Relayed) -> str | None:
    """Save the exchange as a rule; its name, or None (the recorder logs why)."""
    try:
        recording = importlib.import_module("staticagents.recording")
    except ImportError:
        log.warning("upstream %r: recording is not available in this build", upstream.name)
        return None
    reply = recording.RecordedReply(
        content=relayed.content,
        tool_calls=tuple(
            {"name": call["name"], "arguments": call["arguments"]} for call in relayed.tool_calls
        ),
        thinking=relayed.thinking,
        finish_reason=relayed.finish_reason,
        usage=relayed.usage,
        chunks=relayed.chunks,
    )
    # The request's own credentials are never handed on, not even masked ones' values.
    asked = dataclasses.replace(inquiry, headers=mask_headers(inquiry.headers))
    exchange = recording.Exchange(upstream=upstream.name, inquiry=asked, reply=reply)
    try:
        name: str | None = recording.record_exchange(
            exchange, match_model=upstream.record_model, keep_timing=upstream.record_timing
        )
    except Exception:
        log.exception("upstream %r: recording the exchange failed", upstream.name)
        return None
    return name


async def arecord(upstream: Upstream, inquiry: Inquiry, relayed: Relayed) -> str | None:
    return await sync_to_async(record, thread_sensitive=True)(upstream, inquiry, relayed)
