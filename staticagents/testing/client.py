"""A typed Python client for the control API (``/control/``), for tests of agent code.

A client holds one *session*: a random key that the agent under test sends in
its URL (``client.openai_base_url`` and the other base URLs start with
``/sessions/{key}``), or as the ``X-Static-Session`` header (``client.headers``,
for an SDK's ``default_headers``). The session keeps the test's scripted sequences,
fail-first counts and journal apart from every other test's::

    client = StaticAgentsClient("http://127.0.0.1:8000", token="...")
    client.replies(tool_call("lookup", {"topic": "weather"}), "It is sunny.")
    agent = OpenAI(base_url=client.openai_base_url, api_key="any")
    ...  # run the agent
    sent = client.requests()          # what the agent sent, oldest first, bodies parsed

Every failure of the service is raised as a ``StaticAgentsError`` naming what
went wrong; a rejected fixture is a ``FixtureRejected`` carrying the server's
errors, each with its path in the document (``rules[0].match.querry``).

The client needs only urllib3 (and websockets to follow the journal): it imports
nothing from Django, so it works in any test process, beside any other Django
project. It speaks through urllib3's connection pool, not httpx: each kit call is
overhead on a test, and httpx's client spent about 1 ms more on one than urllib3's
(bench/README.md, "the ninth session").
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import ssl
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias
from urllib.parse import quote, urlencode, urlsplit
from urllib.request import getproxies, proxy_bypass

import urllib3

from staticagents.testing.keys import new_session_key

SESSION_HEADER = "X-Static-Session"
TOKEN_VARIABLE = "STATIC_AGENTS_CONTROL_TOKEN"

__all__ = [
    "ControlAPIError",
    "Counters",
    "ErrorDetail",
    "Explanation",
    "FixtureRejected",
    "FixtureSource",
    "InstallResult",
    "NoMatchingRequest",
    "RecordedRequest",
    "Reply",
    "RulesetNotReached",
    "ServiceUnreachable",
    "SessionReset",
    "StaticAgentsClient",
    "StaticAgentsError",
    "Step",
    "ToolCall",
    "Unauthorized",
    "Verdict",
    "error",
    "new_session_key",
    "text",
    "thinking",
    "tool_call",
]


# -- errors -----------------------------------------------------------------------------


class StaticAgentsError(Exception):
    """Anything that went wrong talking to Static Agents."""


class NoMatchingRequest(StaticAgentsError):
    """``wait_for`` timed out: no request matched; ``arrived`` is what did arrive."""

    def __init__(self, wanted: str, timeout: float, arrived: Sequence[RecordedRequest]) -> None:
        self.arrived = list(arrived)
        lines = [f"no request matching {wanted} arrived within {timeout:g} s"]
        if arrived:
            lines.append(f"{len(arrived)} request(s) arrived:")
            lines += [f"  #{entry.id} {entry.query!r}: {entry.describe()}" for entry in arrived]
        else:
            lines.append("no request arrived in the session")
        super().__init__("\n".join(lines))


class RulesetNotReached(StaticAgentsError):
    """``wait_for_ruleset`` timed out; ``version`` is the one the ruleset is at."""

    def __init__(self, wanted: int, timeout: float, version: int) -> None:
        self.version = version
        super().__init__(
            f"the ruleset did not reach version {wanted} within {timeout:g} s"
            f" (it is at version {version})"
        )


class ServiceUnreachable(StaticAgentsError):
    """No answer at the client's base URL (not started, wrong port, gone)."""


@dataclass(frozen=True)
class ErrorDetail:
    """One problem the server reported: where (``path``), what, and its ``code``."""

    path: str
    message: str
    code: str = "invalid"
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        line = f" (line {self.line})" if self.line is not None else ""
        return f"{where}{self.message}{line}"

    @classmethod
    def from_json(cls, data: Any) -> ErrorDetail:
        if not isinstance(data, Mapping):
            return cls("", str(data))
        line = data.get("line")
        return cls(
            path=str(data.get("path") or ""),
            message=str(data.get("message") or ""),
            code=str(data.get("code") or "invalid"),
            line=line if isinstance(line, int) else None,
        )


class ControlAPIError(StaticAgentsError):
    """The control API answered with an error status; ``errors`` says what and where."""

    def __init__(self, action: str, status: int, errors: Sequence[ErrorDetail]) -> None:
        self.action = action
        self.status = status
        self.errors = list(errors)
        super().__init__(self.describe())

    def describe(self) -> str:
        lines = [f"{self.action} failed with HTTP {self.status}"]
        lines += [f"  {detail}" for detail in self.errors]
        return "\n".join(lines)


class Unauthorized(ControlAPIError):
    """The control token is missing or wrong."""

    def describe(self) -> str:
        hint = (
            f"  pass token=... or set {TOKEN_VARIABLE}; `serve` prints the token it "
            "creates when none is configured"
        )
        return f"{super().describe()}\n{hint}"


class FixtureRejected(ControlAPIError):
    """The service refused a fixture; nothing was changed. ``errors`` names every problem."""

    def __init__(self, source: str, status: int, errors: Sequence[ErrorDetail]) -> None:
        self.source = source
        super().__init__(f"installing {source}", status, errors)

    def describe(self) -> str:
        lines = [f"{self.source} was rejected (HTTP {self.status}); no rule was changed:"]
        lines += [f"  {detail}" for detail in self.errors]
        return "\n".join(lines)


# -- results ----------------------------------------------------------------------------


@dataclass(frozen=True)
class InstallResult:
    """What installing a fixture did, and the session the client now uses."""

    created: int
    updated: int
    deleted: int
    session: str
    unchanged: int = 0


@dataclass(frozen=True)
class RecordedRequest:
    """One journal entry: a request that reached a reply route, and what the service did.

    ``body`` is the request body parsed as JSON (the text itself when it is not
    JSON); ``raw_body`` is the text as sent. ``rule`` is None when the fallback
    answered. ``headers`` are as the server recorded them, credentials masked.
    """

    id: int
    created_at: datetime | None
    dialect: str
    route: str
    session: str
    agent_type: str
    model: str
    query: str
    body: Any
    raw_body: str
    headers: Mapping[str, str]
    rule: str | None
    outcome: str
    status: int
    duration_ms: float
    diagnosis: Any = None
    upstream: str = ""  # the upstream that answered (outcome proxied or upstream_error)
    upstream_ms: float | None = None  # its latency
    method: str = ""  # unknown routes only (outcome "unknown_route")

    @property
    def fallback(self) -> bool:
        """Whether no rule matched (the fallback answered)."""
        return self.rule is None

    @property
    def messages(self) -> list[Any]:
        """The ``messages`` of an OpenAI or Anthropic request body; empty otherwise."""
        if isinstance(self.body, Mapping) and isinstance(self.body.get("messages"), list):
            return list(self.body["messages"])
        return []

    def describe(self) -> str:
        """One line naming the request: dialect, route, the rule that answered, the outcome."""
        answered_by = "the fallback" if self.rule is None else f"rule {self.rule!r}"
        return f"{self.dialect} {self.route} -> {answered_by}, {self.outcome} {self.status}"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RecordedRequest:
        raw = str(data.get("body") or "")
        return cls(
            id=int(data["id"]),
            created_at=_parse_time(data.get("created_at")),
            dialect=str(data.get("dialect", "")),
            route=str(data.get("route", "")),
            session=str(data.get("session", "")),
            agent_type=str(data.get("agent_type", "")),
            model=str(data.get("model") or ""),
            query=str(data.get("query") or ""),
            body=_parse_body(raw),
            raw_body=raw,
            headers=dict(data.get("headers") or {}),
            rule=data.get("rule") or None,
            outcome=str(data.get("outcome", "")),
            status=int(data.get("status") or 0),
            duration_ms=float(data.get("duration_ms") or 0),
            diagnosis=data.get("diagnosis"),
            upstream=str(data.get("upstream") or ""),
            upstream_ms=data.get("upstream_ms"),
            method=str(data.get("method") or ""),
        )


def _parse_body(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


@dataclass(frozen=True)
class Counters:
    """What the service saw, for one session or (``session`` None) overall."""

    session: str | None
    requests: int
    rules: Mapping[str, int]
    fallbacks: int
    errors: int
    failed_first: int
    cancelled: int
    cut_off: int
    outcomes: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Counters:
        return cls(
            session=data.get("session"),
            requests=int(data.get("requests", 0)),
            rules=dict(data.get("rules") or {}),
            fallbacks=int(data.get("fallbacks", 0)),
            errors=int(data.get("errors", 0)),
            failed_first=int(data.get("failed_first", 0)),
            cancelled=int(data.get("cancelled", 0)),
            cut_off=int(data.get("cut_off", 0)),
            outcomes=dict(data.get("outcomes") or {}),
        )


@dataclass(frozen=True)
class SessionReset:
    """What resetting a session cleared: its counter rows and journal entries."""

    session: str
    counters: int
    journal: int


@dataclass(frozen=True)
class Verdict:
    """Why one rule did or did not answer: the failing predicate and the reason."""

    rule: str
    matched: bool
    predicate: str | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Explanation:
    """The rule that would answer an inquiry (None: the fallback), and every rule's verdict."""

    rule: str | None
    fallback: bool
    verdicts: tuple[Verdict, ...]
    mode: str = "static"  # how the agent type is answered: static, proxy, record, record_on_miss
    upstream: str | None = None  # the upstream that answers it, when not static
    routing: str = ""  # "agent type 'x' is proxied to upstream 'y'"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Explanation:
        verdicts = tuple(
            Verdict(
                rule=str(v.get("rule")),
                matched=bool(v.get("matched")),
                predicate=v.get("predicate"),
                reason=v.get("reason"),
            )
            for v in data.get("verdicts") or ()
        )
        return cls(
            rule=data.get("rule"),
            fallback=bool(data.get("fallback")),
            verdicts=verdicts,
            mode=str(data.get("mode") or "static"),
            upstream=data.get("upstream"),
            routing=str(data.get("routing") or ""),
        )


# -- scripted replies -------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """A tool call the stand-in model makes; ``id`` is generated by the service when absent."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None

    def document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "arguments": dict(self.arguments)}
        if self.id is not None:
            doc["id"] = self.id
        return doc


@dataclass(frozen=True)
class Reply:
    """One step of a scripted conversation, in the fixture's response fields.

    ``extra`` holds any other response field of the fixture format (``stream``,
    ``usage``, ``template``, ``fail_first``, ...), passed through as given.
    """

    content: str | None = None
    thinking: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: Literal["stop", "length", "tool_calls", "content_filter"] | None = None
    error: Mapping[str, Any] | None = None
    retry_after: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        """The reply as a fixture response mapping."""
        doc: dict[str, Any] = {}
        if self.content is not None:
            doc["content"] = self.content
        if self.thinking is not None:
            doc["thinking"] = self.thinking
        if self.tool_calls:
            doc["tool_calls"] = [call.document() for call in self.tool_calls]
        if self.finish_reason is not None:
            doc["finish_reason"] = self.finish_reason
        if self.error is not None:
            doc["error"] = dict(self.error)
        if self.retry_after is not None:
            doc["retry_after"] = self.retry_after
        doc.update(self.extra)
        return doc


def text(
    content: str,
    *,
    thinking: str | None = None,
    finish_reason: Literal["stop", "length", "tool_calls", "content_filter"] | None = None,
) -> Reply:
    """Answer with ``content`` (after ``thinking``, if given), ending with ``finish_reason``."""
    return Reply(content=content, thinking=thinking, finish_reason=finish_reason)


def tool_call(
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    id: str | None = None,
    content: str | None = None,
) -> Reply:
    """Call one tool; for parallel calls build ``Reply(tool_calls=(ToolCall(...), ...))``."""
    return Reply(content=content, tool_calls=(ToolCall(name, dict(arguments or {}), id),))


def thinking(thought: str, then: str = "") -> Reply:
    """Think ``thought`` (sent as the dialect's reasoning), then answer ``then``."""
    return Reply(content=then, thinking=thought)


def error(
    message: str = "Scripted error",
    *,
    status: int = 500,
    type: str = "api_error",
    retry_after: float | None = None,
) -> Reply:
    """Fail with HTTP ``status`` in the dialect's own error shape (``Retry-After`` if given)."""
    return Reply(
        error={"status": status, "type": type, "message": message}, retry_after=retry_after
    )


Step: TypeAlias = "str | Reply | Mapping[str, Any]"
FixtureSource: TypeAlias = "str | os.PathLike[str] | Mapping[str, Any] | Sequence[Step]"


def step_document(step: Step, index: int = 0) -> dict[str, Any]:
    """A step of ``replies()`` as a fixture response: text, a Reply, or a response mapping."""
    if isinstance(step, str):
        return {"content": step}
    if isinstance(step, Reply):
        return step.document()
    if isinstance(step, Mapping):
        return dict(step)
    raise TypeError(
        f"step {index + 1} must be a str, a Reply or a response mapping, not {type(step).__name__}"
    )


def script_document(
    steps: Sequence[Step], *, on_exhausted: Literal["error", "repeat_last"] = "error"
) -> dict[str, Any]:
    """A session's script: the steps answer the session's requests, in order."""
    if not steps:
        raise ValueError("replies() needs at least one step")
    responses = [step_document(step, index) for index, step in enumerate(steps)]
    return {"responses": responses, "on_exhausted": on_exhausted}


# -- the client ---------------------------------------------------------------------------


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One certificate store for every client: loading it costs each new client ~20 ms."""
    return ssl.create_default_context()


class StaticAgentsClient:
    """The control API of one Static Agents service, bound to one session.

    ``token`` defaults to ``$STATIC_AGENTS_CONTROL_TOKEN``; ``session`` to a new
    random key. Use it as a context manager, or call ``close()``.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        session: str | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        token = token if token is not None else os.environ.get(TOKEN_VARIABLE)
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self._control = f"{self.base_url}/control"
        self._http = _pool(self.base_url, timeout)
        self._session = session or new_session_key()
        self._installs = 0
        self._scripted = False

    # -- the session the agent under test sends -----------------------------------------

    @property
    def session(self) -> str:
        """The session key, sent in the base URLs (``/sessions/{key}``) or ``X-Static-Session``."""
        return self._session

    @property
    def headers(self) -> dict[str, str]:
        """Headers carrying the session, for an SDK's ``default_headers``."""
        return {SESSION_HEADER: self._session}

    @property
    def session_url(self) -> str:
        """The service's URL bound to this session (``/sessions/{key}``): every route below
        it (model dialects, Galaxy, ADK, the WebSocket) is served in this session, with
        no header to send. The base URLs below start with it."""
        return f"{self.base_url}/sessions/{quote(self._session, safe='')}"

    @property
    def openai_base_url(self) -> str:
        """``base_url`` for the OpenAI SDK (and OpenAI-compatible clients)."""
        return f"{self.session_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """``base_url`` for the Anthropic SDK."""
        return self.session_url

    @property
    def gemini_base_url(self) -> str:
        """``base_url`` for google-genai's ``HttpOptions`` and ADK's ``Gemini`` model (the
        SDK adds ``/v1beta`` or ``/v1`` itself)."""
        return self.session_url

    @property
    def galaxy_base_url(self) -> str:
        """Where a Galaxy client finds the agent API (``/api/ai/agents/query``, ``/api/chat``)."""
        return self.session_url

    @property
    def adk_base_url(self) -> str:
        """Where an ADK API client finds ``/run``, ``/run_sse`` and ``/apps/.../sessions``."""
        return self.session_url

    @property
    def websocket_url(self) -> str:
        """The WebSocket chat's URL (``ws://.../ws/chat/``) in this session."""
        return f"ws{self.session_url.removeprefix('http')}/ws/chat/"

    @property
    def installs(self) -> int:
        """How many times this client replaced the rules (``replies`` replaces none)."""
        return self._installs

    @property
    def scripted(self) -> bool:
        """Whether this client gave its session a script (``replies``)."""
        return self._scripted

    def new_session(self) -> str:
        """Switch to a new random session key and return it (earlier headers and URLs keep
        the old one)."""
        self._session = new_session_key()
        return self._session

    # -- rules ---------------------------------------------------------------------------

    def install(self, fixture: FixtureSource) -> InstallResult:
        """Replace every rule with ``fixture`` and start the session afresh.

        ``fixture`` is a path to a YAML or JSON file, a fixture mapping, or a
        list of replies (given to ``replies``: the session's own script, the
        rules left as they are). The session keeps its key (so SDK clients built
        with ``headers`` stay bound to it) but its sequences, fail-first counts,
        journal and script start over. Rules the fixture keeps as they are stay
        compiled in the service. A fixture the service refuses raises
        ``FixtureRejected`` and changes nothing.
        """
        if isinstance(fixture, str | os.PathLike):
            path = Path(fixture)
            if not path.is_file():
                raise FileNotFoundError(f"fixture file not found: {path}")
            return self._put_fixture(path.read_bytes(), f"fixture {path}", "application/yaml")
        if isinstance(fixture, Mapping):
            source = "the fixture mapping"
            return self._put_fixture(json.dumps(fixture).encode(), source, "application/json")
        if isinstance(fixture, Sequence):
            return self.replies(*fixture)
        raise TypeError(
            "install() takes a path, a fixture mapping or a list of replies, "
            f"not {type(fixture).__name__}"
        )

    def replies(
        self, *steps: Step, on_exhausted: Literal["error", "repeat_last"] = "error"
    ) -> InstallResult:
        """Script the model for this session: answer its n-th request with the n-th step.

        Each step is a str (the answer's text), a ``Reply`` (``text``,
        ``tool_call``, ``thinking``, ``error``) or a response mapping in the
        fixture format. After the last step the service fails with a "script
        exhausted" error (``on_exhausted="repeat_last"`` repeats the last one).
        The script is the session's own: it answers before any rule, the rules
        stay as they are for every other session, and the session starts afresh
        (as with ``install``). ``reset`` ends the script.
        """
        document = script_document(steps, on_exhausted=on_exhausted)
        source = f"replies() with {len(steps)} step(s)"
        response = self._request("PUT", self._session_path(self._session), payload=document)
        if response.status_code == 400:
            raise FixtureRejected(source, 400, _error_details(response))
        _raise_for_status(response, f"installing {source}")
        self._scripted = True
        return InstallResult(created=0, updated=0, deleted=0, session=self._session)

    def script(self, session: str | None = None) -> dict[str, Any] | None:
        """The script of a session (default: this client's) as the service holds it, or None."""
        key = session or self._session
        response = self._send("GET", self._session_path(key), f"reading session {key!r}")
        script: dict[str, Any] | None = response.json().get("script")
        return script

    def export_fixture(self) -> dict[str, Any]:
        """The rules, defaults and fallback as the service holds them (fixture form)."""
        response = self._send("GET", "/fixture", "exporting the fixture", params={"format": "json"})
        document: dict[str, Any] = response.json()
        return document

    def _put_fixture(self, body: bytes, source: str, content_type: str) -> InstallResult:
        response = self._request(
            "PUT",
            "/fixture",
            content=body,
            headers={"Content-Type": content_type},
            params={"session": self._session},  # started afresh in the same request
        )
        if response.status_code == 400:
            raise FixtureRejected(source, 400, _error_details(response))
        _raise_for_status(response, f"installing {source}")
        imported = response.json()
        self._installs += 1
        self._scripted = False
        return InstallResult(
            created=int(imported.get("created", 0)),
            updated=int(imported.get("updated", 0)),
            deleted=int(imported.get("deleted", 0)),
            session=self._session,
            unchanged=int(imported.get("unchanged", 0)),
        )

    # -- what happened ---------------------------------------------------------------------

    def requests(
        self,
        session: str | None = None,
        *,
        every_session: bool = False,
        **filters: str | bool,
    ) -> list[RecordedRequest]:
        """The journal of a session (default: this client's), oldest first.

        ``every_session=True`` lists every session's requests. ``filters`` are the
        journal's own: ``dialect``, ``agent_type``, ``rule``, ``outcome``,
        ``fallback`` (bool), ``contains`` (a substring of the body).
        """
        params: dict[str, str] = {"page_size": "1000"}
        if not every_session:
            params["session"] = session or self._session
        for name, value in filters.items():
            params[name] = str(value).lower() if isinstance(value, bool) else value
        entries = [RecordedRequest.from_json(e) for e in self._journal_pages(params)]
        return sorted(entries, key=lambda entry: entry.id)

    def wait_for(
        self,
        predicate: Callable[[RecordedRequest], bool] | None = None,
        *,
        timeout: float = 10.0,
        session: str | None = None,
        every_session: bool = False,
        **filters: str | bool,
    ) -> RecordedRequest:
        """The first request of the session (default: this client's) that matches
        ``filters`` (as ``requests()`` takes them) and ``predicate``, waiting up to
        ``timeout`` seconds for it: for an agent that calls the model in the background.

        A request that arrived before the call counts: the journal is read once the
        live journal (``/control/journal/live``) is followed, then what arrives.
        Raises ``NoMatchingRequest`` listing what did arrive.
        """
        key = None if every_session else (session or self._session)
        params = {
            "session": key,
            "agent_type": filters.get("agent_type"),
            "outcome": filters.get("outcome"),
        }
        wanted = _describe_wanted(predicate, filters)
        deadline = time.monotonic() + timeout
        with self._following(params, timeout) as receive:
            arrived = self.requests(session, every_session=every_session, **filters)
            for entry in arrived:
                if predicate is None or predicate(entry):
                    return entry
            seen = {entry.id for entry in arrived}
            while (event := receive(deadline)) is not None:
                if event.get("type") != "entry" or event["entry"]["id"] in seen:
                    continue
                entry = RecordedRequest.from_json(event["entry"])
                seen.add(entry.id)
                if _kept(entry, filters):
                    arrived.append(entry)
                    if predicate is None or predicate(entry):
                        return entry
        raise NoMatchingRequest(wanted, timeout, arrived)

    def wait_for_ruleset(self, version: int | None = None, *, timeout: float = 10.0) -> int:
        """Wait until the ruleset is at ``version`` or later (None: the next change after
        this call), up to ``timeout`` seconds; the version it is at. For a test whose
        rules are installed by someone else (a CI step, another process, the admin).

        Follows the ruleset announcements of the live journal, so nothing is polled;
        a version reached before the call counts. Raises ``RulesetNotReached``.
        """
        deadline = time.monotonic() + timeout
        # This client's session only: the socket carries its entries, few or none.
        with self._following({"session": self._session}, timeout) as receive:
            page = self._send("GET", "/versions", "reading the versions", params={"page_size": "1"})
            newest = page.json().get("results") or [{"number": 0}]
            current = int(newest[0]["number"])
            wanted = current + 1 if version is None else version
            while current < wanted:
                event = receive(deadline)
                if event is None:
                    raise RulesetNotReached(wanted, timeout, current)
                if event.get("type") == "ruleset" and isinstance(event.get("version"), int):
                    current = max(current, event["version"])
        return current

    @contextlib.contextmanager
    def _following(
        self, params: Mapping[str, str | bool | None], timeout: float
    ) -> Iterator[Callable[[float], dict[str, Any] | None]]:
        """The live journal followed with ``params`` (once subscribed): a function giving
        its next event, or None once the ``time.monotonic()`` deadline it is given passed."""
        from websockets.exceptions import WebSocketException
        from websockets.sync.client import connect

        query = urlencode({k: v for k, v in params.items() if isinstance(v, str)})
        url = f"{self.base_url.replace('http', 'ws', 1)}/control/journal/live?{query}"
        secure = _tls_context() if url.startswith("wss:") else None
        try:
            with connect(
                url, additional_headers=self._auth, ssl=secure, open_timeout=timeout, max_size=None
            ) as socket:
                first = json.loads(socket.recv(timeout=timeout))
                if first.get("type") != "subscribed":
                    raise ControlAPIError(
                        "following the journal",
                        int(first.get("status") or 0),
                        [ErrorDetail(path="", message=str(first.get("message", first)))],
                    )

                def receive(deadline: float) -> dict[str, Any] | None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    try:
                        event: dict[str, Any] = json.loads(socket.recv(timeout=left))
                    except TimeoutError:
                        return None
                    return event

                yield receive
        except (OSError, WebSocketException) as exc:
            raise ServiceUnreachable(
                f"cannot follow the journal at {self.base_url}: {exc or type(exc).__name__}"
            ) from exc

    def expect_request(
        self,
        query: str | None = None,
        *,
        timeout: float = 10.0,
        session: str | None = None,
        every_session: bool = False,
        **filters: str | bool,
    ) -> RecordedRequest:
        """``wait_for`` the first request whose query contains ``query`` (any, if None)."""
        wanted = query

        def asks(entry: RecordedRequest) -> bool:
            return wanted is None or wanted in entry.query

        asks.__doc__ = "any request" if wanted is None else f"query containing {wanted!r}"
        return self.wait_for(
            asks, timeout=timeout, session=session, every_session=every_session, **filters
        )

    def _journal_pages(self, params: dict[str, str]) -> Iterator[Mapping[str, Any]]:
        response = self._send("GET", "/journal", "reading the journal", params=params)
        while True:
            page = response.json()
            yield from page.get("results") or ()
            next_url = page.get("next")
            if not next_url:
                return
            response = self._send("GET", next_url, "reading the journal")

    def counters(self, session: str | None = None, *, every_session: bool = False) -> Counters:
        """What the service counted for a session (default: this client's), or overall."""
        params = {} if every_session else {"session": session or self._session}
        response = self._send("GET", "/counters", "reading the counters", params=params)
        return Counters.from_json(response.json())

    def reset(self, session: str | None = None) -> SessionReset:
        """Start a session (default: this client's) afresh: sequences, counts, journal."""
        key = session or self._session
        data = self._send("DELETE", self._session_path(key), f"resetting session {key!r}").json()
        if key == self._session:
            self._scripted = False
        return SessionReset(
            session=key, counters=int(data.get("counters", 0)), journal=int(data.get("journal", 0))
        )

    def explain(
        self,
        query: str,
        *,
        agent_type: str | None = None,
        context: Mapping[str, Any] | None = None,
        model: str | None = None,
        system: str | None = None,
        dialect: str | None = None,
        turn: int | None = None,
        tool_result: str | None = None,
    ) -> Explanation:
        """Which rule would answer this inquiry, and why each rule before it did not."""
        given = {
            "query": query,
            "agent_type": agent_type,
            "context": dict(context) if context is not None else None,
            "model": model,
            "system": system,
            "dialect": dialect,
            "turn": turn,
            "tool_result": tool_result,
        }
        inquiry = {key: value for key, value in given.items() if value is not None}
        response = self._send("POST", "/explain", "explaining an inquiry", payload=inquiry)
        return Explanation.from_json(response.json())

    # -- plumbing ------------------------------------------------------------------------------

    @staticmethod
    def _session_path(key: str) -> str:
        return f"/sessions/{quote(key, safe='')}"

    def _send(self, method: str, url: str, action: str, **kwargs: Any) -> _Response:
        response = self._request(method, url, **kwargs)
        _raise_for_status(response, action)
        return response

    def _request(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        payload: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> _Response:
        """``url``: a path under ``/control``, or a whole URL (a page's ``next``);
        ``payload``: sent as JSON, else ``content`` as it is."""
        if not url.startswith(("http:", "https:")):
            url = self._control + url
        if params:
            url += ("&" if "?" in url else "?") + urlencode(params)
        sent = {**self._auth, **(headers or {})}
        if payload is not None:
            content = json.dumps(payload).encode()
            sent["Content-Type"] = "application/json"
        try:
            response = self._http.request(method, url, body=content, headers=sent)
        except urllib3.exceptions.HTTPError as exc:
            # MaxRetryError's reason: the error of the last attempt.
            detail = str(getattr(exc, "reason", None) or exc) or type(exc).__name__
            raise ServiceUnreachable(
                f"cannot reach Static Agents at {self.base_url}: {detail}"
            ) from exc
        return _Response(response.status, response.data, response.reason or "")

    def close(self) -> None:
        self._http.clear()

    def __enter__(self) -> StaticAgentsClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StaticAgentsClient({self.base_url!r}, session={self._session!r})"


def _kept(entry: RecordedRequest, filters: Mapping[str, str | bool]) -> bool:
    """Whether ``entry`` passes the journal's filters (as ``GET /control/journal`` applies them)."""
    for name, value in filters.items():
        if name == "fallback":
            if entry.fallback != bool(value):
                return False
        elif name == "contains":
            if str(value) not in entry.raw_body:
                return False
        elif getattr(entry, name, None) != value:
            return False
    return True


def _describe_wanted(
    predicate: Callable[[RecordedRequest], bool] | None, filters: Mapping[str, str | bool]
) -> str:
    parts = [f"{name}={value!r}" for name, value in filters.items()]
    if predicate is not None:
        parts.append(predicate.__doc__ or str(getattr(predicate, "__name__", "the predicate")))
    return ", ".join(parts) or "anything"


def _pool(base_url: str, timeout: float) -> urllib3.PoolManager:
    """Connections to the service, kept open between calls; through the proxy the
    environment names for its host (``HTTP_PROXY``, ``NO_PROXY``...), if any."""
    options: dict[str, Any] = {
        "timeout": urllib3.Timeout(connect=timeout, read=timeout),
        # Once more on a fresh connection when a kept one was closed meanwhile (every
        # control call may be sent again: none adds anything twice); a refused connection
        # is the answer at once.
        "retries": urllib3.Retry(total=1, connect=0, redirect=False, raise_on_status=False),
        "ssl_context": _tls_context(),
    }
    url = urlsplit(base_url)
    proxy = getproxies().get(url.scheme)
    if proxy and not proxy_bypass(url.hostname or ""):
        return urllib3.ProxyManager(proxy, **options)
    return urllib3.PoolManager(**options)


@dataclass(frozen=True)
class _Response:
    """A control call's response, read whole."""

    status_code: int
    content: bytes
    reason_phrase: str

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _raise_for_status(response: _Response, action: str) -> None:
    if response.is_success:
        return
    details = _error_details(response)
    if response.status_code == 401:
        raise Unauthorized(action, 401, details)
    raise ControlAPIError(action, response.status_code, details)


def _error_details(response: _Response) -> list[ErrorDetail]:
    """The server's ``{"errors": [...]}``; the body's text when it is not in that shape."""
    try:
        errors = response.json().get("errors")
    except (ValueError, AttributeError):
        errors = None
    if isinstance(errors, list) and errors:
        return [ErrorDetail.from_json(e) for e in errors]
    return [ErrorDetail("", response.text.strip()[:500] or response.reason_phrase, "http_error")]
