"""Credentials as their issuers shape them: found in text, or masked out of it.

One list, used by the testing kit's ``assert_no_credentials`` (which reports what
it finds) and by recording (which masks it out of what a real model answered).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

# Most specific first: an Anthropic key also looks like an OpenAI one.
CREDENTIAL_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("an Anthropic API key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{16,}")),
    ("an OpenAI API key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("a Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("an AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{22,})")),
    ("a Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a bearer token", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{16,}")),
    ("a JSON Web Token", re.compile(r"\beyJ[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]{8,}")),
    ("a private key", re.compile(r"-----BEGIN (?:[A-Z]+ )*PRIVATE KEY-----")),
    ("a password in a URL", re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@\"']+:[^/\s@\"']+@")),
)
REDACTED = "[redacted]"


def credentials_in(text: str) -> Iterator[tuple[str, re.Match[str]]]:
    """Each credential in ``text`` as (what it is, where), each span reported once."""
    taken: list[range] = []  # an Anthropic key must not be reported again as OpenAI's
    for what, pattern in CREDENTIAL_PATTERNS:
        for match in pattern.finditer(text):
            if any(match.start() in span for span in taken):
                continue
            taken.append(range(match.start(), match.end()))
            yield what, match


def redact(text: str, patterns: Iterable[re.Pattern[str]] = ()) -> str:
    """``text`` with every credential and every match of ``patterns`` replaced by ``REDACTED``."""
    for pattern in (*(pattern for _, pattern in CREDENTIAL_PATTERNS), *patterns):
        text = pattern.sub(REDACTED, text)
    return text
