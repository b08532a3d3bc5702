"""Random session keys, in a module of their own: the kit's server makes its control
token with one before its client (and urllib3) is imported."""

from __future__ import annotations

import secrets


def new_session_key(prefix: str = "test") -> str:
    """A random session key (``prefix-<16 hex digits>``)."""
    return f"{prefix}-{secrets.token_hex(8)}"
