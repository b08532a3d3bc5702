"""The testing kit's hot control calls without Django's middleware and DRF's dispatch.

Every kit test makes two control calls: ``PUT /control/sessions/{key}`` (a
``replies()`` script) or ``PUT /control/fixture``, then ``GET
/control/journal?session=``; the plugin ends a script with ``DELETE
/control/sessions/{key}``. Through Django and DRF each pays the middleware, the
URL resolver, content negotiation, the filter serializer's deep copy and the
paginator (about half of a journal read's CPU time, bench/README.md).

``lean_call`` picks out the plain, well-formed case of the script install and
the session's end, of a fixture replacing the rules (``?session=``; the same
fixture again changes nothing, ``views.LastReplace``) and of the journal read, as a journal job
(``replying.journal.Statements``) that answers with the views' own functions.
Anything else gives None, and so does the job for what it finds it cannot
answer: another authentication (a staff session), a bad or missing token, an
odd key, host or Accept header, an unknown parameter, a body the views would
refuse, a journal longer than one page. Those take the full path, so every error
is the views' own. ``tests/control/test_lean.py`` sends the same requests both
ways and compares status, headers and body.

The job runs where the reply routes touch the database: on the event loop's own
connection to a SQLite file (``lean_on_loop``: no thread hop, which on a busy
machine waits for a core), else, or while the file is busy, on the control
thread (``lean_response``).
"""

from __future__ import annotations

import io
import re
import secrets
import sys
from collections.abc import Callable, MutableMapping
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings as django_settings
from django.core.handlers.asgi import ASGIRequest
from django.core.signals import setting_changed
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
from staticagents.document.terms import MAX_FIXTURE_BYTES
from staticagents.models import ControlToken, JournalEntry
from staticagents.replying.background import background_work
from staticagents.replying.journal import NotOnLoop, Prepared, Statements, journal
from staticagents.replying.snapshot import STAMP_SQL, active_ruleset
from staticagents.selectors import journal_entries
from staticagents.services import CONTROL_API, SessionReset

Message = dict[str, Any]

SESSION_PATH = re.compile(r"^/control/sessions/(?P<key>[-A-Za-z0-9_.:]{1,200}?)/?$")
JOURNAL_PATH = re.compile(r"^/control/journal/?$")
FIXTURE_PATH = re.compile(r"^/control/fixture/?$")
# A session key as a query parameter: what the kit makes, and nothing DRF's CharField
# would trim or refuse.
SESSION_KEY = re.compile(r"^[-A-Za-z0-9_.:]{1,200}$")
ACCEPTED = {b"", b"*/*", b"application/json"}
RENDERER = JSONRenderer()
# What a call on the event loop reads or deletes at most, beyond which a thread answers:
# a kit test's session holds a few entries; a big one would hold every other request.
LOOP_ROWS = 1000
LOOP_BYTES = 256 * 1024


@dataclass(frozen=True)
class LeanCall:
    """A kit call answered as a journal job: the response's data, or None (Django's path).
    ``reset``, when the job starts a session afresh, is told once that is committed."""

    job: Callable[[Statements], dict[str, Any] | None]
    allow: str
    write: bool = False
    reset: SessionReset | None = None

    def answered(self, data: dict[str, Any] | None) -> tuple[Message, bytes] | None:
        if data is None:
            return None
        if self.reset is not None:
            self.reset.committed()
        content = RENDERER.render(data)
        return _start(content, self.allow), content


def lean_response(scope: MutableMapping[str, Any], body: bytes) -> tuple[Message, bytes] | None:
    """The response to a plain kit call, on this thread; None: it takes Django's path."""
    call = lean_call(scope, body)
    if call is None:
        return None
    response = call.answered(journal.run_now(call.job, write=call.write))
    if response is not None and call.write:
        active_ruleset()  # as the views: this process's snapshot is the new one now
    return response


async def lean_on_loop(
    scope: MutableMapping[str, Any], body: bytes
) -> tuple[Message, bytes] | None:
    """The response to a plain kit call, on the event loop; None: a thread must answer
    (``lean_response``), as the database is not a SQLite file, is busy, or the call is
    not plain."""
    call = lean_call(scope, body, on_loop=True)
    if call is None:
        return None
    try:
        data = journal.run_on_loop(call.job, write=call.write)
    except NotOnLoop:
        return None
    # A write's script is in this process's snapshot already (``snapshot.take_script``);
    # were it not, the next reply would find the stamp moved and rebuild it.
    return call.answered(data)


def lean_call(
    scope: MutableMapping[str, Any], body: bytes, *, on_loop: bool = False
) -> LeanCall | None:
    """The kit call ``scope`` makes, when it is plain enough to answer lean (reading no
    database yet), else None. ``on_loop``: the job declines what would hold the event
    loop (more than ``LOOP_ROWS`` of the session's entries, or ``LOOP_BYTES``)."""
    most = LOOP_ROWS if on_loop else None
    if scope.get("root_path") or scope.get("query_string", b"").count(b"%"):
        return None
    method, path = scope["method"], scope["path"]
    token = _bearer(scope, body)
    if token is None:
        return None
    session = SESSION_PATH.match(path) if method in ("PUT", "DELETE") else None
    if session is not None:
        key = session["key"]
        if method == "DELETE":
            if body or scope.get("query_string"):
                return None
            return _resetting(token, SessionReset(key), most)
        script = _script(scope, body, on_loop)
        return None if script is None else _resetting(token, SessionReset(key, script), most)
    if method == "PUT" and FIXTURE_PATH.match(path):
        return _fixture(scope, body, token, most, on_loop)
    if method == "GET" and JOURNAL_PATH.match(path) and not body:
        return _journal(scope, token, LOOP_BYTES if on_loop else JournalPagination.PAGE_BYTES)
    return None


def _bearer(scope: MutableMapping[str, Any], body: bytes) -> str | None:
    """The request's control token, when it authenticates with one alone, as the views
    would see it."""
    headers = dict(scope["headers"])
    if b"cookie" in headers or headers.get(b"accept", b"") not in ACCEPTED:
        return None
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() != "bearer":
        return None
    if not _host_allowed(scope):
        return None
    return str(token.strip())


# Whether Django accepts the host of requests with these Host and X-Forwarded-Host
# headers, for the last few seen: with a Host header, the answer depends on them and the
# settings alone, and the request object made to ask cost a kit call more than the rest
# of its checks together. Forgotten when a setting changes.
_hosts_seen: dict[tuple[tuple[bytes, bytes], ...], bool] = {}
HOSTS_SEEN = 64


def _host_allowed(scope: MutableMapping[str, Any]) -> bool:
    """Whether the request's host is one of ``ALLOWED_HOSTS``, as CommonMiddleware checks."""
    hosts = tuple(
        (name, value) for name, value in scope["headers"] if name in (b"host", b"x-forwarded-host")
    )
    allowed = _hosts_seen.get(hosts)
    if allowed is None:
        try:
            ASGIRequest(dict(scope), io.BytesIO()).get_host()
            allowed = True
        except Exception:
            allowed = False
        if any(name == b"host" for name, _ in hosts):  # else the server's address counts too
            if len(_hosts_seen) >= HOSTS_SEEN:
                _hosts_seen.clear()
            _hosts_seen[hosts] = allowed
    return allowed


setting_changed.connect(lambda **kwargs: _hosts_seen.clear(), weak=False)


def _token_matches(token: str, run: Statements) -> bool:
    """``views.control_token_matches``, reading a stored token on the job's connection."""
    if django_settings.STATIC_AGENTS_CONTROL_TOKEN:
        return control_token_matches(token)
    stored = run.values(ControlToken.objects.order_by("id").values("digest")[:1])
    digest = ControlToken.digest_of(token)
    return bool(stored) and secrets.compare_digest(digest, stored[0]["digest"])


def _resetting(token: str, reset: SessionReset, most: int | None) -> LeanCall:
    """A session's fresh start (``services.reset_session``), answered as the views do."""

    def job(run: Statements) -> dict[str, Any] | None:
        if not _token_matches(token, run) or _more_entries(run, reset.session, most):
            return None
        return {"session": reset.session, **reset(run)}

    return LeanCall(job, "GET, PUT, DELETE", write=True, reset=reset)


def _script(scope: MutableMapping[str, Any], body: bytes, on_loop: bool) -> dict[str, Any] | None:
    if scope.get("query_string") or dict(scope["headers"]).get(b"content-type") != (
        b"application/json"
    ):
        return None  # the parser decides
    if on_loop and "staticagents.document.schema" not in sys.modules:
        # The first script is read on the control thread: validating it imports the
        # fixture schema (pydantic: 60 ms), which must not hold the event loop.
        return None
    try:
        return script_document(JSONBodyParser().parse(io.BytesIO(body)))
    except Exception:
        return None  # the view says what is wrong


def _more_entries(run: Statements, session: str, most: int | None) -> bool:
    """Whether the session holds more than ``most`` journal entries (None: no bound)."""
    if most is None:
        return False
    table = JournalEntry._meta.db_table
    sql = f"SELECT COUNT(*) FROM (SELECT 1 FROM {table} WHERE session = %s LIMIT %s) AS e"
    return bool(run.rows(sql, [session, most + 1])[0][0] > most)


def _fixture(
    scope: MutableMapping[str, Any], body: bytes, token: str, most: int | None, on_loop: bool
) -> LeanCall | None:
    """A fixture replacing the rules, then the session's fresh start (``?session=``), as
    the view does it. The fixture this process last replaced the rules with, again,
    changes nothing (``views.LastReplace``): the loop answers that; a replace that
    writes rules takes the control thread (the ORM's)."""
    params = _query(scope["query_string"])
    if params is None or set(params) != {"session"} or not SESSION_KEY.match(params["session"]):
        return None
    if on_loop and not last_replace.last_body(body):
        return None  # a replace that writes rules: the thread's, with not a statement here
    reset = SessionReset(params["session"])

    def job(run: Statements) -> dict[str, Any] | None:
        if not _token_matches(token, run) or _more_entries(run, reset.session, most):
            return None
        [(stamp,)] = run.rows(STAMP_SQL) or [("",)]
        result = last_replace.unchanged(body, stamp.partition(":")[0])
        if result is None:
            if on_loop or len(body) > MAX_FIXTURE_BYTES:
                return None  # the thread replaces; the view names a body past the limit
            # The fixture files' module (YAML, pydantic) loads with the first fixture read.
            from staticagents.document.files import load_fixture

            with background_work():
                try:
                    document = load_fixture(body, source="request body")
                except Exception:
                    return None  # the view says what is wrong
                result = replace_rules(body, document, by=CONTROL_API)
        reset(run)
        return asdict(result)

    return LeanCall(job, "GET, POST, PUT", write=True, reset=reset)


def _journal(scope: MutableMapping[str, Any], token: str, most_bytes: int) -> LeanCall | None:
    params = _query(scope["query_string"])
    if params is None or not set(params) <= {"session", "page_size"} or "session" not in params:
        return None
    session, size = params["session"], params.get("page_size", str(JournalPagination.page_size))
    if not SESSION_KEY.match(session) or not size.isdigit() or not 0 < int(size) <= 1000:
        return None
    limit = int(size)

    def job(run: Statements) -> dict[str, Any] | None:
        if not _token_matches(token, run):
            return None
        # One page holding every entry, as the paginator chooses it; anything longer takes
        # the paginator's path (its cursors and links).
        sized = run.values(_entries(run, session, ("id", "size"), limit + 1))
        if len(sized) > limit or sum(e["size"] for e in sized) > most_bytes:
            return None  # on the loop, also what would hold it
        rows = run.values(_entries(run, session, JournalView.FIELDS, None)) if sized else []
        if [row["id"] for row in rows] != [e["id"] for e in sized]:
            return None  # the journal moved between the reads
        for row in rows:
            row["created_at"] = JournalView.CREATED_AT.to_representation(row["created_at"])
            row["body_truncated"] = body_truncated(row["body"], row["body_bytes"])
        return {"count": len(rows), "next": None, "previous": None, "results": rows}

    return LeanCall(job, "GET, DELETE")


# The journal's two queries are compiled once per kind of connection and page size: the
# ORM's building and compiling took most of a read's CPU time (bench/README.md).
_PREPARED: dict[tuple[str, str, tuple[str, ...], int | None], Prepared] = {}
_SESSION = "\x00session"  # stands for the session key in the compiled parameters


def _entries(run: Statements, session: str, fields: tuple[str, ...], limit: int | None) -> Prepared:
    """``journal_entries(session=session).values(*fields)[:limit]``, prepared for ``run``."""
    key = (run.db.vendor, run.placeholder, fields, limit)
    prepared = _PREPARED.get(key)
    if prepared is None:
        rows = journal_entries(session=_SESSION).values(*fields)
        prepared = _PREPARED[key] = run.prepare(rows[:limit] if limit else rows)
    return prepared.with_params([session if p == _SESSION else p for p in prepared.params])


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
