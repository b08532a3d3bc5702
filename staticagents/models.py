"""Rules, defaults, the fallback and the ruleset version, as the database holds them.

Columns mirror the fixture format (DESIGN section 2) one to one, so a rule can be
edited field by field in the admin. Each model's ``clean()`` validates through
the same schema as the YAML import (``staticagents.document.schema``): one gate per rule.
That schema (pydantic) is imported by the ``clean()`` that validates, not with the models:
the service starts without it (``document.terms``).
"""

from __future__ import annotations

import hashlib
import uuid
import zlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar

import orjson
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from staticagents.document.terms import (
    CONFIDENCES,
    DIALECTS,
    FINISH_REASONS,
    MODES,
    RESPONSE_KEYS,
    UPSTREAM_DIALECTS,
    DocumentInvalid,
    recorded_time,
)

CONFIDENCE_CHOICES = [(c, c) for c in CONFIDENCES]
FINISH_CHOICES = [(f, f) for f in FINISH_REASONS]
DIALECT_CHOICES = [(d, d) for d in DIALECTS]
EXHAUSTED_CHOICES = [("repeat_last", "repeat the last reply"), ("error", "fail: script exhausted")]
MATCH_KEYS = (
    "agent_type",
    "query",
    "contains",
    "context",
    "model",
    "system",
    "dialect",
    "turn",
    "tool_result",
)
MATCH_FIELDS = tuple(f"match_{key}" for key in MATCH_KEYS)
RECORDED_FIELDS = ("recorded_upstream", "recorded_at", "recorded_reviewed")
# The rule's own fields its document is made of (``Rule.document_of``).
DOCUMENT_FIELDS = ("name", "enabled", "on_exhausted", *MATCH_FIELDS, *RECORDED_FIELDS)


def raise_for_document(exc: DocumentInvalid, field_prefix: str = "") -> None:
    """Turn schema errors into a Django ValidationError keyed by model field."""
    by_field: dict[str, list[ValidationError]] = {}
    for error in exc.errors:
        head = error.path.split(".")[0].split("[")[0]
        field = f"{field_prefix}{head}" if head else "__all__"
        rest = error.path[len(head) :].lstrip(".")
        message = f"{rest}: {error.message}" if rest else error.message
        # Prefixed: a model form swaps a message whose code its field knows ("invalid",
        # "required") for the field's generic text, losing the schema's explanation.
        by_field.setdefault(field, []).append(ValidationError(message, code=f"schema_{error.code}"))
    raise ValidationError(by_field)


class ResponseFields(models.Model):
    """One scripted reply: Galaxy's AgentResponse fields plus the scripting fields."""

    content = models.TextField(null=True, blank=True)
    confidence = models.CharField(max_length=6, choices=CONFIDENCE_CHOICES, null=True, blank=True)
    agent_type = models.CharField(max_length=200, null=True, blank=True)
    suggestions = models.JSONField(null=True, blank=True, help_text="Galaxy ActionSuggestions")
    metadata = models.JSONField(null=True, blank=True)
    reasoning = models.TextField(null=True, blank=True)
    thinking = models.TextField(null=True, blank=True, help_text="Reasoning sent before the answer")
    tool_calls = models.JSONField(null=True, blank=True, help_text="[{name, arguments, id?}]")
    finish_reason = models.CharField(max_length=20, choices=FINISH_CHOICES, null=True, blank=True)
    error = models.JSONField(null=True, blank=True, help_text="{status, type, message}")
    retry_after = models.FloatField(null=True, blank=True, help_text="Seconds, sent as Retry-After")
    fail_first = models.PositiveIntegerField(
        null=True, blank=True, help_text="Fail this many times per distinct query, then answer"
    )
    template = models.BooleanField(default=False, help_text="Substitute $query, $model, ...")
    stream = models.JSONField(
        null=True, blank=True, help_text="{first_delay_ms, word_delay_ms, chunk}"
    )
    fault = models.JSONField(
        null=True,
        blank=True,
        help_text="{after_chunks, kind}: a stream that fails midway (disconnect, malformed, "
        "error_event, stall)",
    )
    chaos = models.JSONField(
        null=True,
        blank=True,
        help_text="{probability, kinds, seed, after_chunks}: faults drawn per request",
    )
    usage = models.JSONField(null=True, blank=True, help_text="{input_tokens, output_tokens}")
    embedding = models.JSONField(
        null=True, blank=True, help_text="[numbers]: the vector of the texts this rule matches"
    )
    embedding_like = models.TextField(
        null=True, blank=True, help_text="Give the texts this rule matches the vector of this text"
    )

    class Meta:
        abstract = True

    def document(self) -> dict[str, Any]:
        return self.document_of({key: getattr(self, key) for key in RESPONSE_KEYS})

    @staticmethod
    def document_of(values: Mapping[str, Any]) -> dict[str, Any]:
        """The response in fixture form, from its fields' values (a ``.values()`` row)."""
        return {
            key: value
            for key in RESPONSE_KEYS
            if (value := values[key]) is not None and (key != "template" or value)
        }

    @classmethod
    def fields_from(cls, doc: dict[str, Any]) -> dict[str, Any]:
        return {key: doc[key] for key in RESPONSE_KEYS if key in doc}

    def clean(self) -> None:
        from staticagents.document import schema

        try:
            schema.validate_part(schema.ResponseSpec, self.document())
        except DocumentInvalid as exc:
            raise_for_document(exc)


class Rule(models.Model):
    """An ordered, named rule: predicates (all must hold) and one or more responses."""

    position = models.PositiveIntegerField(default=0, db_index=True)
    name = models.SlugField(max_length=200, unique=True)
    enabled = models.BooleanField(default=True)
    match_agent_type = models.CharField(
        "agent type", max_length=200, null=True, blank=True, db_index=True
    )
    match_query = models.TextField("query regex", null=True, blank=True)
    match_contains = models.JSONField(
        "contains", null=True, blank=True, help_text='A string or a list of strings, e.g. ["P-17"]'
    )
    match_context = models.JSONField(
        "context", null=True, blank=True, help_text='Field → regex, e.g. {"page_id": "."}'
    )
    match_model = models.TextField("model regex", null=True, blank=True)
    match_system = models.TextField("system prompt regex", null=True, blank=True)
    match_dialect = models.CharField(
        "dialect", max_length=20, choices=DIALECT_CHOICES, null=True, blank=True
    )
    match_turn = models.PositiveIntegerField("turn", null=True, blank=True)
    match_tool_result = models.JSONField(
        "tool result", null=True, blank=True, help_text="true, false or a regex on the result text"
    )
    on_exhausted = models.CharField(
        max_length=20,
        choices=EXHAUSTED_CHOICES,
        null=True,
        blank=True,
        help_text="For a sequence of responses",
    )
    # Set when the rule was recorded from a real model (``staticagents.recording``).
    recorded_upstream = models.CharField(
        "recorded from", max_length=200, null=True, blank=True, help_text="The upstream's name"
    )
    recorded_at = models.DateTimeField("recorded at", null=True, blank=True)
    recorded_reviewed = models.BooleanField(
        "reviewed", default=False, help_text="A curator has checked the recorded reply"
    )
    updated_at = models.DateTimeField(auto_now=True)
    # The digest of the document the rule was last written from (blank after an edit
    # made field by field): a replace by the same document leaves the rule as it is.
    digest = models.CharField(max_length=40, blank=True, default="", editable=False)

    responses: models.Manager[RuleResponse]

    class Meta:
        ordering: ClassVar = ["position", "id"]

    def __str__(self) -> str:
        return self.name

    def match_document(self) -> dict[str, Any]:
        return self.match_document_of({f: getattr(self, f) for f in MATCH_FIELDS})

    @staticmethod
    def match_document_of(values: Mapping[str, Any]) -> dict[str, Any]:
        """The rule's ``match``, from its fields' values (a ``.values()`` row)."""
        return {key: value for key in MATCH_KEYS if (value := values[f"match_{key}"]) is not None}

    @classmethod
    def fields_from(cls, doc: dict[str, Any]) -> dict[str, Any]:
        match = doc.get("match") or {}
        fields = {f"match_{key}": match[key] for key in MATCH_KEYS if key in match}
        recorded = doc.get("recorded")
        fields.update(
            name=doc["name"],
            enabled=doc.get("enabled", True),
            on_exhausted=doc.get("on_exhausted"),
            recorded_upstream=recorded["upstream"] if recorded else None,
            recorded_at=datetime.fromisoformat(recorded["at"]) if recorded else None,
            recorded_reviewed=bool(recorded and recorded.get("reviewed")),
            digest=cls.digest_of(doc),
        )
        return fields

    @staticmethod
    def digest_of(doc: dict[str, Any]) -> str:
        """The digest of a validated rule document (its responses included)."""
        return hashlib.sha1(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()

    def document(self, responses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The rule in fixture form, keys in a stable order."""
        if responses is None:
            responses = [r.document() for r in self.responses.all()]
        values = {f: getattr(self, f) for f in DOCUMENT_FIELDS}
        return self.document_of(values, responses)

    @classmethod
    def document_of(
        cls, values: Mapping[str, Any], responses: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The rule in fixture form, from its fields' values (a ``.values()`` row) and its
        responses' documents."""
        doc: dict[str, Any] = {"name": values["name"]}
        if not values["enabled"]:
            doc["enabled"] = False
        match = cls.match_document_of(values)
        if match:
            doc["match"] = match
        on_exhausted = values["on_exhausted"]
        if len(responses) > 1 or on_exhausted is not None:
            doc["responses"] = responses
            if on_exhausted is not None:
                doc["on_exhausted"] = on_exhausted
        else:
            doc["response"] = responses[0] if responses else {}
        if values["recorded_upstream"] is not None:
            doc["recorded"] = {
                "upstream": values["recorded_upstream"],
                "at": recorded_time(values["recorded_at"]),
                "reviewed": values["recorded_reviewed"],
            }
        return doc

    def clean(self) -> None:
        from staticagents.document import schema

        try:
            schema.validate_part(schema.MatchSpec, self.match_document())
        except DocumentInvalid as exc:
            raise_for_document(exc, field_prefix="match_")


class RuleResponse(ResponseFields):
    """One response of a rule; a rule with several answers them in order (a script)."""

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="responses")
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering: ClassVar = ["position", "id"]

    def __str__(self) -> str:
        return f"{self.rule.name} #{self.position + 1}"


class Fallback(ResponseFields):
    """The response used when no rule matches (one row at most)."""

    class Meta:
        verbose_name_plural = "fallback"

    def __str__(self) -> str:
        return "Fallback response"


class Defaults(models.Model):
    """Values that fill what a response leaves out (one row at most)."""

    confidence = models.CharField(
        max_length=6, choices=CONFIDENCE_CHOICES, null=True, blank=True, help_text="Absent: medium"
    )
    stream = models.JSONField(
        null=True, blank=True, help_text="{first_delay_ms, word_delay_ms, chunk}"
    )
    chaos = models.JSONField(
        null=True,
        blank=True,
        help_text="{probability, kinds, seed, after_chunks}: faults drawn per request, for every "
        "rule's response that scripts no error, fault or chaos of its own",
    )

    class Meta:
        verbose_name_plural = "defaults"

    def __str__(self) -> str:
        return "Defaults"

    def document(self) -> dict[str, Any]:
        keys = ("confidence", "stream", "chaos")
        return {k: v for k in keys if (v := getattr(self, k)) is not None}

    def clean(self) -> None:
        from staticagents.document import schema

        try:
            schema.validate_part(schema.DefaultsSpec, self.document())
        except DocumentInvalid as exc:
            raise_for_document(exc)


class RulesetState(models.Model):
    """The version of the rules: bumped by every change, watched by every worker."""

    version = models.PositiveBigIntegerField(default=0)
    stamp = models.CharField(max_length=32, default="")
    # Changed by every change to a session's script: the scripts are part of the snapshot,
    # but a new script rebuilds no rule.
    scripts_stamp = models.CharField(max_length=32, default="")
    changed_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"ruleset version {self.version}"

    @staticmethod
    def new_stamp() -> str:
        return uuid.uuid4().hex


class RulesetVersion(models.Model):
    """The whole ruleset after one change to it: who made the change, when, and what it was.

    ``number`` is the ruleset's version (``RulesetState.version``) the change made.
    The document is the export's (``selectors.export_document``), stored as
    zlib-compressed JSON: a 5,000-rule ruleset takes about 35 kB.
    """

    number = models.PositiveBigIntegerField(primary_key=True)
    created_at = models.DateTimeField(default=timezone.now)
    by = models.CharField(max_length=150, help_text='A user\'s name, "control API" or "command"')
    what = models.CharField(max_length=300)
    packed = models.BinaryField(help_text="The ruleset document, as zlib-compressed JSON")

    class Meta:
        ordering: ClassVar = ["-number"]
        verbose_name = "version"

    def __str__(self) -> str:
        return f"version {self.number}"

    def document(self) -> dict[str, Any]:
        document: dict[str, Any] = orjson.loads(zlib.decompress(self.packed))
        return document

    @staticmethod
    def pack(document: dict[str, Any]) -> bytes:
        return zlib.compress(orjson.dumps(document))


class SessionCounter(models.Model):
    """A per-session count: a sequence's position or a fail-first attempt count.

    Rows advance atomically in the database, so counts stay exact with many
    concurrent requests and several worker processes.
    """

    session = models.CharField(max_length=200)
    rule = models.CharField(max_length=200)
    key = models.CharField(
        max_length=80, default="", help_text="'seq' or 'fail:<step>:<query hash>'"
    )
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["session", "rule", "key"], name="unique_counter")
        ]

    def __str__(self) -> str:
        return f"{self.session}/{self.rule}/{self.key}={self.count}"


class SessionScript(models.Model):
    """A session's own script (the testing kit's ``replies()``): it answers that session's
    requests, in order, before any rule is tried, and goes when the session is reset."""

    RULE_NAME = "replies"  # the name its answers carry in the journal and the counters

    session = models.CharField(max_length=200, unique=True)
    responses = models.JSONField(help_text="The responses, in the fixture's form")
    on_exhausted = models.CharField(max_length=20, choices=EXHAUSTED_CHOICES, default="error")

    def __str__(self) -> str:
        return f"script of {self.session}"

    def document(self) -> dict[str, Any]:
        """The script as a rule document (no match: every request of the session)."""
        return self.rule_document(self.responses, self.on_exhausted)

    @classmethod
    def rule_document(cls, responses: list[Any], on_exhausted: str) -> dict[str, Any]:
        """A script's rule document from its stored columns (read without the model)."""
        return {"name": cls.RULE_NAME, "responses": list(responses), "on_exhausted": on_exhausted}


class JournalEntry(models.Model):
    """One inquiry that reached a reply route, and what the service did with it."""

    # What the control API (and the live journal) shows of an entry, beside its id and time.
    API_FIELDS = (
        "dialect",
        "route",
        "method",
        "session",
        "agent_type",
        "model",
        "query",
        "body",
        "body_bytes",
        "headers",
        "rule",
        "outcome",
        "status",
        "duration_ms",
        "diagnosis",
        "upstream",
        "upstream_ms",
    )

    OUTCOMES = [
        (o, o)
        for o in (
            "answered",
            "error",
            "failed_first",
            "cancelled",
            "cut_off",
            "rejected",
            "unknown_route",
            "fault",
            "proxied",
            "upstream_error",
        )
    ]

    # Only ``session`` is indexed: every index is paid on each insert, on the reply
    # path, and the other filters scan a journal the cap keeps small.
    created_at = models.DateTimeField(auto_now_add=True)
    dialect = models.CharField(max_length=20)
    route = models.CharField(max_length=300)
    method = models.CharField(
        max_length=10, blank=True, default="", help_text="The HTTP method (unknown routes only)"
    )
    session = models.CharField(max_length=200, db_index=True)
    agent_type = models.CharField(max_length=200)
    model = models.CharField(max_length=200, blank=True, default="")
    query = models.TextField(blank=True, default="")
    body = models.TextField(
        blank=True, default="", help_text="The request body as sent (its first bytes, if long)"
    )
    body_bytes = models.PositiveBigIntegerField(
        default=0, help_text="The body's whole length in bytes (more than stored: truncated)"
    )
    size = models.PositiveIntegerField(
        default=0, help_text="The bytes the entry's body and query take (the journal's budget)"
    )
    headers = models.JSONField(default=dict, help_text="Credentials masked")
    rule = models.CharField(
        max_length=200, null=True, blank=True, help_text="Empty: the fallback answered"
    )
    outcome = models.CharField(max_length=20, choices=OUTCOMES)
    status = models.PositiveSmallIntegerField(default=200)
    duration_ms = models.FloatField(default=0)
    diagnosis = models.JSONField(
        null=True, blank=True, help_text="Why no rule matched, or which rules ran out of time"
    )
    counted = models.BooleanField(default=True, help_text="Cleared when the counters are reset")
    upstream = models.CharField(
        max_length=200, blank=True, default="", help_text="The upstream that answered, if any"
    )
    upstream_ms = models.FloatField(
        null=True, blank=True, help_text="The upstream's latency: until its reply (or stream) began"
    )

    class Meta:
        ordering: ClassVar = ["-id"]
        verbose_name_plural = "journal entries"
        # The sizes in id order, read without the rows (whose bodies may be long):
        # pruning to the byte budget and paging under a byte ceiling read only this.
        indexes: ClassVar = [models.Index(fields=["id", "size"], name="journal_size")]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.dialect} {self.outcome}"


class Upstream(models.Model):
    """A real model endpoint (the fixture's ``upstreams``); its key stays in the environment."""

    DIALECTS: ClassVar = [(d, d) for d in UPSTREAM_DIALECTS]

    position = models.PositiveIntegerField(default=0)
    name = models.SlugField(max_length=200, unique=True)
    dialect = models.CharField(max_length=20, choices=DIALECTS)
    base_url = models.CharField(
        max_length=2000, help_text="http(s); OpenAI's ends in /v1, as the SDK's base_url does"
    )
    api_key_env = models.CharField(
        "API key variable",
        max_length=200,
        help_text="The name of the environment variable holding the key (never the key itself)",
    )
    model = models.CharField(
        max_length=200, null=True, blank=True, help_text="Asked for instead of the client's model"
    )
    timeout = models.FloatField(default=60.0, help_text="Seconds")
    headers = models.JSONField(null=True, blank=True, help_text="Extra headers (no credentials)")
    record_model = models.BooleanField(default=False, help_text="Recorded rules match the model")
    record_timing = models.BooleanField(default=False, help_text="Recorded rules keep the timing")

    KEYS = (
        "name",
        "dialect",
        "base_url",
        "api_key_env",
        "model",
        "timeout",
        "headers",
        "record_model",
        "record_timing",
    )

    class Meta:
        ordering: ClassVar = ["position", "id"]

    def __str__(self) -> str:
        return self.name

    def document(self) -> dict[str, Any]:
        doc = {key: getattr(self, key) for key in self.KEYS}
        return {k: v for k, v in doc.items() if v is not None and v is not False}

    def clean(self) -> None:
        from staticagents.document import schema

        try:
            schema.validate_part(schema.UpstreamSpec, self.document())
        except DocumentInvalid as exc:
            raise_for_document(exc)
        upstreams = [u.document() for u in Upstream.objects.exclude(pk=self.pk)]
        check_modes([*upstreams, self.document()], list(AgentMode.objects.all()))


class AgentMode(models.Model):
    """How an agent type is answered (the fixture's ``modes``); a blank agent type is the
    default for every type not listed."""

    MODES: ClassVar = [(m, m) for m in MODES]

    agent_type = models.CharField(
        max_length=200, unique=True, blank=True, help_text="Blank: the default for every type"
    )
    mode = models.CharField(max_length=20, choices=MODES, default="static")
    upstream = models.SlugField(
        max_length=200,
        null=True,
        blank=True,
        help_text="An upstream's name (blank: the default's, else the only one)",
    )

    class Meta:
        ordering: ClassVar = ["agent_type"]

    def __str__(self) -> str:
        return self.agent_type or "(default)"

    @staticmethod
    def modes_document(rows: list[AgentMode]) -> dict[str, Any]:
        """The fixture's ``modes`` of these rows."""
        modes: dict[str, Any] = {}
        agent_types: dict[str, Any] = {}
        for row in rows:
            if not row.agent_type:
                modes["default"] = row.mode
                if row.upstream:
                    modes["upstream"] = row.upstream
            else:
                spec = {"mode": row.mode}
                agent_types[row.agent_type] = spec | (
                    {"upstream": row.upstream} if row.upstream else {}
                )
        if agent_types:
            modes["agent_types"] = agent_types
        return modes

    def clean(self) -> None:
        upstreams = [u.document() for u in Upstream.objects.all()]
        check_modes(upstreams, [*AgentMode.objects.exclude(pk=self.pk), self])


def check_modes(upstreams: list[dict[str, Any]], modes: list[AgentMode]) -> None:
    """Every mode can tell its upstream (a ValidationError naming each one that cannot)."""
    from staticagents.document.schema import mode_problems

    problems = mode_problems(upstreams, AgentMode.modes_document(modes))
    if problems:
        raise ValidationError([f"{p.path}: {p.message}" for p in problems], code="modes")


class ChatExchange(models.Model):
    """A Galaxy chat conversation: its messages and the user's feedback."""

    agent_type = models.CharField(max_length=200)
    session = models.CharField(max_length=200, default="")
    feedback = models.PositiveSmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    messages: models.Manager[ChatMessage]

    class Meta:
        ordering: ClassVar = ["-updated_at", "-id"]

    def __str__(self) -> str:
        return f"exchange {self.pk}"


class ChatMessage(models.Model):
    exchange = models.ForeignKey(ChatExchange, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=20)  # user | assistant
    content = models.TextField(blank=True, default="")
    agent_response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar = ["id"]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"


class ControlToken(models.Model):
    """The control API's bearer token when STATIC_AGENTS_CONTROL_TOKEN is unset (one row).

    Only a SHA-256 digest is stored: ``serve`` (or ``token --rotate``) prints the token
    once, when it creates it. ``hint`` keeps its first ``HINT_LENGTH`` characters, so
    ``static-agents token`` can say which token is current: the other 37 characters
    (222 random bits) stay unguessable.
    """

    HINT_LENGTH = 6

    digest = models.CharField(max_length=64)
    hint = models.CharField(max_length=HINT_LENGTH, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"control token created {self.created_at:%Y-%m-%d %H:%M}"

    @staticmethod
    def digest_of(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()


class AdkSession(models.Model):
    """A Google ADK session (``/apps/{app}/users/{user}/sessions/{id}``): state and events."""

    app = models.CharField(max_length=200)
    user = models.CharField(max_length=200)
    session_id = models.CharField(max_length=200)
    state = models.JSONField(default=dict, blank=True)
    # What a run reads of the events (``wire.UserTurns``): a run never reads them all.
    user_turns = models.PositiveIntegerField(default=0)
    last_user_text = models.TextField(default="", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    events: models.Manager[AdkEvent]

    class Meta:
        ordering: ClassVar = ["id"]
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["app", "user", "session_id"], name="unique_adk_session")
        ]

    def __str__(self) -> str:
        return f"{self.app}/{self.user}/{self.session_id}"


class AdkEvent(models.Model):
    """One event of an ADK session, as the wire shows it (camelCase); appended, never edited."""

    session = models.ForeignKey(AdkSession, on_delete=models.CASCADE, related_name="events")
    payload = models.JSONField()

    class Meta:
        ordering: ClassVar = ["id"]

    def __str__(self) -> str:
        return f"{self.session} event {self.pk}"


class StoredResponse(models.Model):
    """A response of the OpenAI Responses API, kept (``store``, OpenAI's default) so that
    ``GET /v1/responses/{id}`` returns it and a follow-up naming it continues its conversation.

    ``items`` is that conversation through this response, as the rules read it:
    ``[[kind, text], ...]`` (``dialects/responses/wire.Item``).
    """

    response_id = models.CharField(max_length=100, unique=True)
    body = models.JSONField(help_text="The response object, as sent")
    items = models.JSONField(default=list, help_text="The conversation through this response")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar = ["id"]

    def __str__(self) -> str:
        return self.response_id
