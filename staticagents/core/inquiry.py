"""The dialect-independent question a reply route hands to the matcher."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from staticagents.core.values import value_class

DIALECTS = (
    "galaxy",
    "openai",
    "anthropic",
    "adk",
    "websocket",
    "gemini",
    "embeddings",
    "responses",
)
GLOBAL_SESSION = "global"


@value_class
class Inquiry:
    """What an agent asked, whatever wire format it arrived in."""

    query: str
    agent_type: str = "router"
    context: Mapping[str, Any] | None = None
    model: str = ""
    system: str = ""
    dialect: str = "galaxy"
    turn: int = 1
    tool_result: str | None = None  # text of the last message when it is a tool result
    session: str = GLOBAL_SESSION
    headers: Mapping[str, str] = field(default_factory=dict)


# A header or query parameter whose name holds one of these carries a credential.
CREDENTIAL_WORDS = ("key", "token", "secret", "auth", "cookie", "password")
MASK = "***"


@functools.lru_cache(maxsize=1024)  # a request's headers are nearly always the same few names
def is_credential_name(name: str) -> bool:
    """Whether a header or query parameter called ``name`` carries a credential (any case)."""
    lower = name.lower()
    return any(word in lower for word in CREDENTIAL_WORDS)


def mask_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Headers with credential values masked, keeping the scheme of an Authorization."""
    masked = {}
    for name, value in headers.items():
        lower = name.lower()
        if not is_credential_name(lower):
            masked[lower] = value
        elif lower in ("authorization", "proxy-authorization") and " " in value:
            masked[lower] = f"{value.split(' ', 1)[0]} {MASK}"
        else:
            masked[lower] = MASK
    return masked


def session_key(headers: Mapping[str, str], conversation_id: str | None = None) -> str:
    """The X-Static-Session header, else the dialect's conversation id, else the global session."""
    explicit = headers.get("x-static-session", "").strip()
    if explicit:
        return explicit[:200]
    if conversation_id:
        return str(conversation_id)[:200]
    return GLOBAL_SESSION
