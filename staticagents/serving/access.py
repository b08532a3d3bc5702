"""API keys for the reply routes: open by default, one of ``STATIC_AGENTS_API_KEYS`` when set.

A model stand-in accepts any key, so test code written for a real provider runs
unchanged; a shared staging service can require keys instead. Each dialect
carries its key where its clients send it (``KeySources``); the routes turn
a ``Refusal`` into that dialect's own 401. Keys are compared in constant time
and never repeated: not in a message, not in a log.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl

from staticagents.conf import settings

MISSING = "missing"
INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class KeySources:
    """Where a dialect's clients send their key (header names are lower case)."""

    headers: tuple[str, ...] = ()  # headers that carry the key as is (x-api-key)
    bearer: bool = True  # Authorization: Bearer <key>
    query: tuple[str, ...] = ()  # query parameters (Galaxy's ?key=, the WebSocket's ?api_key=)

    def describe(self) -> str:
        """How to send a key, for the refusal's message."""
        ways = ["Authorization: Bearer <key>"] if self.bearer else []
        ways += [f"the {name} header" for name in self.headers]
        ways += [f"the {name} query parameter" for name in self.query]
        return ways[0] if len(ways) == 1 else ", ".join(ways[:-1]) + " or " + ways[-1]


OPENAI = KeySources()
ANTHROPIC = KeySources(headers=("x-api-key",))
# GET /v1/models serves both SDKs, each with its own header.
MODELS = KeySources(headers=("x-api-key",))
ADK = KeySources(headers=("x-goog-api-key",))
# Gemini: the header google-genai sends, or ?key= as Google's REST examples put it.
GEMINI = KeySources(headers=("x-goog-api-key",), query=("key",))
GALAXY = KeySources(headers=("x-api-key",), query=("key",))
WEBSOCKET = KeySources(query=("api_key",))


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused (``missing`` or ``invalid``), in words that name no key."""

    reason: str
    message: str


def configured_keys() -> tuple[str, ...]:
    """The accepted keys; empty means the reply routes are open (read per request)."""
    return tuple(key for key in settings.STATIC_AGENTS_API_KEYS if key)


def check_key(
    sources: KeySources, headers: Mapping[str, str], query_string: str | bytes = ""
) -> Refusal | None:
    """None when the request may proceed; else why not.

    ``headers`` are lower-cased names; ``query_string`` is the raw query.
    """
    if not settings.STATIC_AGENTS_API_KEYS:
        return None  # open: the common case, decided without building anything
    keys = configured_keys()
    if not keys:
        return None
    presented = list(presented_keys(sources, headers, query_string))
    if not presented:
        return Refusal(MISSING, f"No API key provided: send one as {sources.describe()}.")
    if any(key_matches(candidate, keys) for candidate in presented):
        return None
    return Refusal(
        INVALID,
        "Incorrect API key provided: it is not one of the keys this service accepts "
        "(STATIC_AGENTS_API_KEYS).",
    )


def presented_keys(
    sources: KeySources, headers: Mapping[str, str], query_string: str | bytes
) -> Iterable[str]:
    """Every key the request carries where ``sources`` says to look."""
    if sources.bearer:
        scheme, _, token = headers.get("authorization", "").strip().partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            yield token.strip()
    for name in sources.headers:
        value = headers.get(name, "").strip()
        if value:
            yield value
    if sources.query and query_string:
        raw = query_string.decode("latin-1") if isinstance(query_string, bytes) else query_string
        for name, value in parse_qsl(raw):
            if name in sources.query and value:
                yield value


def key_matches(candidate: str, keys: Iterable[str]) -> bool:
    """Whether ``candidate`` is one of ``keys``, in time that does not depend on where they differ.

    Both sides are hashed first, so the comparison sees equal lengths, and every
    key is compared, so the time does not tell which one matched.
    """
    digest = _digest(candidate)
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(digest, _digest(key))
    return matched


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).digest()
