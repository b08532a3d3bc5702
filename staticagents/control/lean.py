"""The testing kit's hot control calls without Django's middleware and DRF's dispatch.

Every kit test makes two control calls: ``PUT /control/sessions/{key}`` (a
``replies()`` script) or ``PUT /control/fixture``, then ``GET
/control/journal?session=``. Through Django and DRF each pays the middleware,
the URL resolver, content negotiation, the filter serializer's deep copy and
the paginator (about half of a journal read's CPU time, bench/README.md).

``lean_response`` answers the plain, well-formed case of the script install, of
a fixture replacing the rules (``?session=``; the same fixture again changes
nothing, ``views.LastReplace``) and of the journal read itself, with the views'
own functions, and returns None for
anything else: another authentication (a staff session), a bad or missing
token, an odd key, host or Accept header, an unknown parameter, a body the
views would refuse, a journal longer than one page. Those take the full path,
so every error is the views' own. ``tests/control/test_lean.py`` sends the same
requests both ways and compares status, headers and body.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, MutableMapping
from dataclasses import asdict
from typing import Any

from django.conf import settings as django_settings
from django.core.handlers.asgi import ASGIRequest
from rest_framework.renderers import JSONRenderer

from staticagents.control.views import (
    JournalPagination,
    JournalView,
    JSONBodyParser,
    body_truncated,
    control_token_matches,
    last_replace,
    replace_rules,
    script_document,
)
from staticagents.document.files import MAX_FIXTURE_BYTES, load_fixture
from staticagents.replying.background import background_work
from staticagents.replying.snapshot import active_ruleset
from staticagents.selectors import journal_entries
from staticagents.services import CONTROL_API, reset_session

Message = dict[str, Any]

SESSION_PATH = re.compile(r"^/control/sessions/(?P<key>[-A-Za-z0-9_.:]{1,200}?)/?$")
JOURNAL_PATH = re.compile(r"^/control/journal/?$")
FIXTURE_PATH = re.compile(r"^/control/fixture/?$")
# A session key as a query parameter: what the kit makes, and nothing DRF's CharField
# would trim or refuse.
SESSION_KEY = re.compile(r"^[-A-Za-z0-9_.:]{1,200}$")
ACCEPTED = {b"", b"*/*", b"application/json"}
RENDERER = JSONRenderer()


def lean_response(scope: MutableMapping[str, Any], body: bytes) -> tuple[Message, bytes] | None:
    """The response to a plain kit call, or None: the request takes Django's path."""
    if scope.get("root_path") or scope.get("query_string", b"").count(b"%"):
        return None
    method, path = scope["method"], scope["path"]
    found = SESSION_PATH.match(path) if method == "PUT" else None
    if found is not None:
        return _guarded(
            scope,
            body,
            lambda headers: _install_script(found["key"], body, headers.get(b"content-type", b"")),
            "GET, PUT, DELETE",
        )
    if method == "PUT" and FIXTURE_PATH.match(path):
        answer = lambda headers: _fixture(scope, body)  # noqa: E731
        return _guarded(scope, body, answer, "GET, POST, PUT")
    if method == "GET" and JOURNAL_PATH.match(path):
        return _guarded(scope, body, lambda headers: _journal(scope), "GET, DELETE")
    return None


def _guarded(
    scope: MutableMapping[str, Any],
    body: bytes,
    answer: Callable[[dict[bytes, bytes]], dict[str, Any] | None],
    allow: str,
) -> tuple[Message, bytes] | None:
    headers = dict(scope["headers"])
    if b"cookie" in headers or headers.get(b"accept", b"") not in ACCEPTED:
        return None
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() != "bearer":
        return None
    request = ASGIRequest(dict(scope), io.BytesIO(body))
    try:
        request.get_host()  # as CommonMiddleware checks it
    except Exception:
        return None
    if not control_token_matches(token.strip()):
        return None
    data = answer(headers)
    if data is None:
        return None
    content = RENDERER.render(data)
    return _start(content, allow), content


def _install_script(key: str, body: bytes, content_type: bytes) -> dict[str, Any] | None:
    if content_type != b"application/json":
        return None  # the parser decides
    try:
        payload = JSONBodyParser().parse(io.BytesIO(body))
        script = script_document(payload)
    except Exception:
        return None  # the view says what is wrong
    reset = reset_session(session=key, script=script)
    active_ruleset()  # as the view: this process's snapshot takes the script now
    return {"session": key, **reset}


def _fixture(scope: MutableMapping[str, Any], body: bytes) -> dict[str, Any] | None:
    """A replace of the rules that starts the session afresh (``?session=``), as the view
    does it; the fixture this process last replaced the rules with, again, changes nothing
    (``views.LastReplace``)."""
    params = _query(scope["query_string"])
    if params is None or set(params) != {"session"} or not SESSION_KEY.match(params["session"]):
        return None
    result = last_replace.unchanged(body)
    if result is None:
        if len(body) > MAX_FIXTURE_BYTES:
            return None  # the view reads one byte past the limit, and names it
        with background_work():
            try:
                document = load_fixture(body, source="request body")
            except Exception:
                return None  # the view says what is wrong
            result = replace_rules(body, document, by=CONTROL_API)
    reset_session(session=params["session"])
    active_ruleset()
    return asdict(result)


def _journal(scope: MutableMapping[str, Any]) -> dict[str, Any] | None:
    params = _query(scope["query_string"])
    if params is None or not set(params) <= {"session", "page_size"} or "session" not in params:
        return None
    session, size = params["session"], params.get("page_size", str(JournalPagination.page_size))
    if not SESSION_KEY.match(session) or not size.isdigit() or not 0 < int(size) <= 1000:
        return None
    entries = journal_entries(session=session)
    # One page holding every entry, as the paginator chooses it; anything longer takes
    # the paginator's path (its cursors and links).
    sized = list(entries.values("id", "size")[: int(size) + 1])
    if len(sized) > int(size) or sum(e["size"] for e in sized) > JournalPagination.PAGE_BYTES:
        return None
    rows = list(entries.values(*JournalView.FIELDS)) if sized else []
    if [row["id"] for row in rows] != [e["id"] for e in sized]:
        return None  # the journal moved between the reads
    for row in rows:
        row["created_at"] = JournalView.CREATED_AT.to_representation(row["created_at"])
        row["body_truncated"] = body_truncated(row["body"], row["body_bytes"])
    return {"count": len(rows), "next": None, "previous": None, "results": rows}


def _query(query_string: bytes) -> dict[str, str] | None:
    """The parameters of a plain query (each once, nothing escaped); None for any other."""
    params: dict[str, str] = {}
    for part in query_string.decode("latin-1").split("&") if query_string else ():
        name, equals, value = part.partition("=")
        if not equals or name in params or "+" in value:
            return None
        params[name] = value
    return params


def _start(content: bytes, allow: str) -> Message:
    """The headers Django's path sends with a view's JSON (its middleware's included)."""
    headers = [
        (b"Content-Type", b"application/json"),
        (b"Allow", f"{allow}, HEAD, OPTIONS".encode()),
        (b"X-Frame-Options", django_settings.X_FRAME_OPTIONS.encode()),
        (b"Content-Length", str(len(content)).encode()),
        (b"X-Content-Type-Options", b"nosniff"),
        (b"Referrer-Policy", django_settings.SECURE_REFERRER_POLICY.encode()),
        (b"Cross-Origin-Opener-Policy", django_settings.SECURE_CROSS_ORIGIN_OPENER_POLICY.encode()),
    ]
    return {"type": "http.response.start", "status": 200, "headers": headers}
