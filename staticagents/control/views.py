"""The control API (``/control/``): rules, defaults, fixtures, the ruleset's versions, the
journal, sessions, counters, explain.

Tests and people drive the service through it. Every route needs the control
token (``Authorization: Bearer …``) or a staff session; anything else gets 401
and changes nothing. The token may do everything; a staff user only what their
Django model permissions allow, as in the admin: each view names the permissions
each method needs (``needs``: ``view_*`` to read, ``add_*``/``change_*``/``delete_*``
to write), and a session without them gets 403. Rules travel in fixture form and
pass the same schema as a YAML import; every error has the shape
``{"errors": [{path, message, code}]}``.

The fixture schema and the fixture files (pydantic, YAML) are imported by the views
that read or write a document, at their first request: the service's first control
call, which reads the counters, needs neither (``document.terms``).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import IO, Any, ClassVar

import orjson
from django.db import connection, transaction
from django.http import HttpResponse
from rest_framework import serializers
from rest_framework.authentication import (
    BaseAuthentication,
    SessionAuthentication,
    get_authorization_header,
)
from rest_framework.exceptions import AuthenticationFailed, NotFound, ParseError, PermissionDenied
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.parsers import JSONParser
from rest_framework.permissions import BasePermission
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from staticagents.conf import settings
from staticagents.core.inquiry import DIALECTS, Inquiry
from staticagents.core.matching import explain_inquiry
from staticagents.core.numbers import is_ascii_number
from staticagents.core.storable import NUL_PROBLEM, nul_in_json, repeated_json_keys
from staticagents.document.terms import MAX_FIXTURE_BYTES, DocumentInvalid, FieldError
from staticagents.models import (
    ControlToken,
    JournalEntry,
    RulesetState,
    RulesetVersion,
    SessionScript,
)
from staticagents.replying.background import background_work
from staticagents.replying.snapshot import active_ruleset, ruleset_stamp
from staticagents.selectors import (
    export_document,
    journal_counters,
    journal_entries,
    ruleset_version,
    ruleset_versions,
    session_script,
    stored_control_token_digest,
    stored_document,
    stored_rule,
    stored_upstreams,
    version_changes,
)
from staticagents.services import (
    CONTROL_API,
    ImportResult,
    clear_journal,
    create_rule,
    delete_rule,
    import_fixture,
    reorder_rules,
    reset_counters,
    reset_session,
    restore_version,
    set_defaults,
    set_upstreams,
    update_rule,
)

# -- authentication ---------------------------------------------------------------


@dataclass(frozen=True)
class ControlClient:
    """Whoever presented the control token (DRF's ``request.user`` for token requests)."""

    is_authenticated: bool = True
    is_staff: bool = False


def control_token_matches(token: str) -> bool:
    """The configured token when there is one, else the one ``serve`` created and stored."""
    configured = settings.STATIC_AGENTS_CONTROL_TOKEN
    if configured:
        return secrets.compare_digest(token.encode(), configured.encode())
    stored = stored_control_token_digest()
    return stored is not None and secrets.compare_digest(ControlToken.digest_of(token), stored)


class ControlTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[ControlClient, str] | None:
        scheme, _, token = get_authorization_header(request).decode("latin-1").partition(" ")
        if scheme.lower() != "bearer":
            return None  # maybe a staff session
        if not control_token_matches(token.strip()):
            raise AuthenticationFailed("invalid control token")
        return ControlClient(), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="static-agents-control"'


class StaffSessionAuthentication(SessionAuthentication):
    """A logged-in staff user (the admin's session); CSRF is enforced as for any session."""

    def authenticate(self, request: Request) -> tuple[Any, None] | None:
        user = getattr(request._request, "user", None)
        if user is None or not (user.is_active and user.is_staff):
            return None
        self.enforce_csrf(request)
        return user, None


class ModelPermissions(BasePermission):
    """The control token may do anything; a staff user what the view ``needs`` for the method."""

    message = "your account lacks the permission this needs (ask for it in the admin)"

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if isinstance(user, ControlClient):
            return True
        if user is None or not user.is_authenticated:
            return False
        method = "GET" if request.method == "HEAD" else request.method
        needed = view.needs.get(method, ())
        if not user.has_perms([f"staticagents.{codename}" for codename in needed]):
            self.message = f"{request.method} here needs the permission(s) {', '.join(needed)}"
            return False
        return True


class JSONBodyParser(JSONParser):
    """JSON on orjson: deep nesting is a 400 (the json module would recurse and fail); a key
    given twice in one object is a 400 naming it, as in a fixture (JSON lets the last win)."""

    def parse(
        self, stream: IO[bytes], media_type: str | None = None, parser_context: Any = None
    ) -> Any:
        raw = stream.read()
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        where = nul_in_json(raw, payload)
        if where is not None:
            raise ParseError(f"{where}: {NUL_PROBLEM}")
        try:
            repeated = repeated_json_keys(raw)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        if repeated:  # found again, with paths and lines, by the fixture files' YAML reader
            from staticagents.document.files import json_duplicates

            raise DocumentInvalid(json_duplicates(raw), "request body")
        return payload


class ControlView(APIView):
    authentication_classes = [ControlTokenAuthentication, StaffSessionAuthentication]
    permission_classes = [ModelPermissions]
    # Method → the model permissions a staff user needs for it (codenames, without the app).
    needs: ClassVar[dict[str, tuple[str, ...]]] = {}
    renderer_classes = [JSONRenderer]
    parser_classes = [JSONBodyParser]

    def handle_exception(self, exc: Exception) -> Response:
        response = super().handle_exception(exc)
        # Errors are JSON, whatever representation the request asked for.
        self.request.accepted_renderer = JSONRenderer()
        self.request.accepted_media_type = JSONRenderer.media_type
        return response


def writer(request: Request) -> str:
    """Who writes, as the ruleset's history names them: a staff user by name, else the token's
    holder, "control API"."""
    user = request.user
    return CONTROL_API if isinstance(user, ControlClient) else str(user.get_username())


def reject_unknown_params(request: Request, known: set[str]) -> None:
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise serializers.ValidationError(
            {
                name: serializers.ErrorDetail("unknown query parameter", "unknown_key")
                for name in unknown
            }
        )


def session_param(request: Request) -> str | None:
    reject_unknown_params(request, {"session"})
    session = request.query_params.get("session")
    return session if session else None


# -- rules ------------------------------------------------------------------------


def rule_document(data: Any) -> dict[str, Any]:
    """A rule in fixture form, validated exactly as a rule of an imported fixture."""
    from staticagents.document import schema

    return schema.validate_part(schema.RuleSpec, data)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396 JSON merge patch: mappings merge, ``null`` removes a key, the rest replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def patched_rule(current: dict[str, Any], patch: Any) -> Any:
    merged = merge_patch(current, patch)
    if isinstance(patch, dict) and isinstance(merged, dict):
        # Giving one form of the reply replaces the other.
        if "response" in patch:
            merged.pop("responses", None)
            if "on_exhausted" not in patch:
                merged.pop("on_exhausted", None)
        if "responses" in patch:
            merged.pop("response", None)
    return merged


class RulesView(ControlView):
    """``GET`` the rules in order; ``POST`` one rule to add it at ``?place=`` (``auto``: before
    the first rule that would shadow it, else last; ``top``; ``end``; ``before:<name>``)."""

    needs = {"GET": ("view_rule",), "POST": ("add_rule",)}

    def get(self, request: Request) -> Response:
        reject_unknown_params(request, {"recorded"})
        rules = stored_document()["rules"]
        recorded = request.query_params.get("recorded")
        if recorded is not None:
            if recorded not in RECORDED_FILTERS:
                detail = f"one of {', '.join(RECORDED_FILTERS)}"
                raise serializers.ValidationError(
                    {"recorded": serializers.ErrorDetail(detail, "invalid")}
                )
            rules = [rule for rule in rules if _recorded_as(rule, recorded)]
        return Response({"rules": rules})

    def post(self, request: Request) -> Response:
        reject_unknown_params(request, {"place"})
        place = request.query_params.get("place") or "auto"
        rule = create_rule(document=rule_document(request.data), place=place, by=writer(request))
        headers = {"Location": f"{request.path.rstrip('/')}/{rule.name}"}
        return Response(rule.document(), status=201, headers=headers)


RECORDED_FILTERS = ("unreviewed", "reviewed", "all")


def _recorded_as(rule: dict[str, Any], wanted: str) -> bool:
    """Whether ``rule`` was recorded from a real model and is ``wanted`` (``RECORDED_FILTERS``)."""
    recorded = rule.get("recorded")
    if recorded is None:
        return False
    return wanted == "all" or recorded["reviewed"] == (wanted == "reviewed")


class RuleView(ControlView):
    """One rule by name: ``GET``, ``PUT`` (replace), ``PATCH`` (merge patch), ``DELETE``."""

    needs = {
        "GET": ("view_rule",),
        "PUT": ("change_rule",),
        "PATCH": ("change_rule",),
        "DELETE": ("delete_rule",),
    }

    def get(self, request: Request, name: str) -> Response:
        return Response(_rule(name))

    def put(self, request: Request, name: str) -> Response:
        document = rule_document(request.data)
        return Response(update_rule(name=name, document=document, by=writer(request)).document())

    def patch(self, request: Request, name: str) -> Response:
        document = rule_document(patched_rule(_rule(name), request.data))
        return Response(update_rule(name=name, document=document, by=writer(request)).document())

    def delete(self, request: Request, name: str) -> Response:
        delete_rule(name=name, by=writer(request))
        return Response(status=204)


def _rule(name: str) -> dict[str, Any]:
    document = stored_rule(name)
    if document is None:
        raise NotFound(f"no rule named {name!r}")
    return document


class ReorderRulesView(ControlView):
    """``POST ["b", "a"]``: those rules first, in that order; the others follow in theirs."""

    needs = {"POST": ("change_rule",)}

    def post(self, request: Request) -> Response:
        names = serializers.ListField(child=serializers.CharField(), allow_empty=False)
        order = reorder_rules(names=names.run_validation(request.data), by=writer(request))
        return Response({"rules": order})


# -- defaults ---------------------------------------------------------------------


class DefaultsView(ControlView):
    """The fixture's ``defaults``: ``GET``, ``PUT`` (replace), ``PATCH`` (merge patch)."""

    def get(self, request: Request) -> Response:
        return Response(stored_document()["defaults"])

    def put(self, request: Request) -> Response:
        return self._store(request, request.data)

    def patch(self, request: Request) -> Response:
        return self._store(request, merge_patch(stored_document()["defaults"], request.data))

    def _store(self, request: Request, data: Any) -> Response:
        from staticagents.document import schema

        document = schema.validate_part(schema.DefaultsSpec, data, "defaults")
        set_defaults(document=document, by=writer(request))
        return Response(stored_document()["defaults"])


# -- fixtures ---------------------------------------------------------------------


class FixtureView(ControlView):
    """``GET`` exports (YAML, or JSON by Accept); ``PUT`` replaces; ``POST`` merges.

    The body is YAML, JSON or the ADK test-agent format, read raw whatever its
    content type; a document with any error changes nothing (400, every error).
    ``?session=KEY`` also starts that session afresh, as ``DELETE /sessions/KEY`` does.
    """

    needs = {
        "GET": ("view_rule",),
        "PUT": ("add_rule", "change_rule", "delete_rule"),  # the rules are replaced
        "POST": ("add_rule", "change_rule"),
    }

    def get(self, request: Request) -> Response | HttpResponse:
        reject_unknown_params(request, {"format"})
        document = export_document()
        if _wants_json(request):
            return Response(document)
        from staticagents.document.files import dump_fixture

        return HttpResponse(dump_fixture(document), content_type="application/yaml; charset=utf-8")

    def put(self, request: Request) -> Response:
        return self._import(request, merge=False)

    def post(self, request: Request) -> Response:
        return self._import(request, merge=True)

    def _import(self, request: Request, *, merge: bool) -> Response:
        reject_unknown_params(request, {"dry_run", "session"})
        dry_run = request.query_params.get("dry_run", "").lower() in ("1", "true", "yes")
        # Read one byte past the limit, so load_fixture can name an oversized body.
        body = request.read(MAX_FIXTURE_BYTES + 1)
        replacing = not (merge or dry_run)
        result = last_replace.unchanged(body) if replacing else None
        if result is None:
            from staticagents.document.files import load_fixture

            with background_work():
                document = load_fixture(body, source="request body")
                if "upstreams" in document:
                    require(request, UpstreamsView.needs["PUT"], "a fixture that sets upstreams")
                if replacing:
                    result = replace_rules(body, document, by=writer(request))
                else:
                    result = import_fixture(
                        document=document, merge=merge, dry_run=dry_run, by=writer(request)
                    )
        session = request.query_params.get("session")
        if session and not dry_run:  # the testing kit's session starts afresh with the rules
            reset_session(session=session)
        # Built after the commit, outside the write lock; replies meanwhile answer from the
        # previous snapshot (replying.snapshot), and this call returns once it is installed.
        active_ruleset()
        return Response(asdict(result))


def replace_rules(body: bytes, document: dict[str, Any], *, by: str) -> ImportResult:
    """Replace the rules with ``document``, loaded from ``body`` (``last_replace``)."""
    with transaction.atomic():  # the stamp remembered is the one this replace left
        last_replace.lock_stamp()
        result = import_fixture(document=document, by=by)
        last_replace.remember(body, result)
    return result


class LastReplace:
    """The body of this process's last replace, and the rules' stamp it left: the testing
    kit puts the same fixture before every test, and while the stamp is unchanged the rules
    are still that body's, so it is answered without reading or writing any rule."""

    def __init__(self) -> None:
        self._remembered: tuple[bytes, str, ImportResult] | None = None

    @staticmethod
    def lock_stamp() -> None:
        """Lock the stamp's row until the transaction ends (SQLite's write transaction
        holds the whole database already)."""
        if connection.features.has_select_for_update:
            list(RulesetState.objects.select_for_update().filter(pk=1).values("pk"))

    def remember(self, body: bytes, result: ImportResult) -> None:
        """Called inside the replace's transaction, the stamp's row locked: the stamp read
        is the one the replace leaves, as no other write can commit before it."""
        self._remembered = (self.digest(body), rules_stamp(), result)

    def last_body(self, body: bytes) -> bool:
        """Whether ``body`` is the last replace's (the rules may have changed since)."""
        return self._remembered_for(body) is not None

    def unchanged(self, body: bytes, stamp: str | None = None) -> ImportResult | None:
        """What replacing with ``body`` again does (nothing), or None when it must run;
        ``stamp``: the rules' stamp, when the caller read it already."""
        remembered = self._remembered_for(body)
        if remembered is None:
            return None
        if not remembered[1] or remembered[1] != (rules_stamp() if stamp is None else stamp):
            return None
        done = remembered[2]
        return replace(
            done,
            created=0,
            updated=0,
            deleted=0,
            unchanged=done.created + done.updated + done.unchanged,
            created_names=(),
            updated_names=(),
            deleted_names=(),
        )

    def _remembered_for(self, body: bytes) -> tuple[bytes, str, ImportResult] | None:
        """What was remembered, read once, when ``body`` is the last replace's."""
        remembered = self._remembered
        return remembered if remembered is not None and remembered[0] == self.digest(body) else None

    @staticmethod
    def digest(body: bytes) -> bytes:
        return hashlib.blake2b(body, digest_size=16).digest()


def rules_stamp() -> str:
    """The rules' part of the stamp (a session's script changes the other part)."""
    return ruleset_stamp().partition(":")[0]


last_replace = LastReplace()


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("Accept", "")
    return "application/json" in accept or request.query_params.get("format") == "json"


# -- the ruleset's versions ------------------------------------------------------------


class YAMLRenderer(BaseRenderer):
    """A fixture document as YAML (``?format=yaml``, or ``Accept: application/yaml``)."""

    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        from staticagents.document.files import dump_fixture

        return dump_fixture(data).encode()


class CountedPagination(CursorPagination):
    """DRF's cursor pagination with the total count beside the links, and cursors whose
    position must be a row's number: a hand-made one could hold anything."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 1000
    count: int

    def decode_cursor(self, request: Request) -> Cursor | None:
        cursor = super().decode_cursor(request)
        position = cursor.position if cursor is not None else None
        if position is not None and not _is_row_id(position):
            raise NotFound(self.invalid_cursor_message)
        return cursor

    def get_paginated_response(self, data: Any) -> Response:
        return Response(
            {
                "count": self.count,
                "next": self.get_next_link(),
                "previous": self.get_previous_link(),
                "results": data,
            }
        )


class VersionPagination(CountedPagination):
    """Newest first by number; a cursor stays stable while new versions arrive."""

    ordering = "-number"

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        self.count = queryset.count()  # at most STATIC_AGENTS_VERSIONS_KEEP
        return super().paginate_queryset(queryset, request, view)


def _version(number: str) -> RulesetVersion:
    version = ruleset_version(int(number)) if _is_row_id(number) else None
    if version is None:
        raise NotFound(f"no version {number} is kept")
    return version


class VersionsView(ControlView):
    """``GET`` the kept versions, newest first: number, when, by whom, what changed."""

    needs = {"GET": ("view_rulesetversion",)}
    CREATED_AT = serializers.DateTimeField()

    def get(self, request: Request) -> Response:
        reject_unknown_params(request, {"cursor", "page_size"})
        versions = ruleset_versions().values("number", "created_at", "by", "what")
        paginator = VersionPagination()
        page = paginator.paginate_queryset(versions, request, self)
        for version in page:
            version["created_at"] = self.CREATED_AT.to_representation(version["created_at"])
        return paginator.get_paginated_response(page)


class VersionView(ControlView):
    """``GET`` a version's ruleset document: JSON, or YAML with ``?format=yaml``."""

    needs = {"GET": ("view_rulesetversion",)}
    renderer_classes = [JSONRenderer, YAMLRenderer]

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        known = [renderer.format for renderer in self.renderer_classes]
        chosen = request.query_params.get("format")
        if chosen is not None and chosen not in known:  # DRF would answer 404
            problem = f"unknown format: one of {', '.join(known)}"
            raise serializers.ValidationError(
                {"format": serializers.ErrorDetail(problem, "invalid")}
            )
        return super().perform_content_negotiation(request, force)

    def get(self, request: Request, number: str) -> Response:
        reject_unknown_params(request, {"format"})
        return Response(_version(number).document())


class VersionDiffView(ControlView):
    """``GET`` what a version changed, against the version before it (``against``; 0: an
    empty ruleset; null with ``changes`` null: that version is no longer kept)."""

    needs = {"GET": ("view_rulesetversion",)}

    def get(self, request: Request, number: str) -> Response:
        version = _version(number)
        against, diff = version_changes(version)
        changes = diff.as_dict() if diff is not None else None
        return Response({"number": version.number, "against": against, "changes": changes})


class VersionRestoreView(ControlView):
    """``POST``: the rules become that version's (a fixture replace, itself a new version)."""

    needs = {"POST": ("add_rule", "change_rule", "delete_rule")}  # the rules are replaced

    def post(self, request: Request, number: str) -> Response:
        version = _version(number)
        with background_work():
            made = restore_version(number=version.number, by=writer(request))
        return Response({"restored": version.number, "version": made})


def require(request: Request, needed: tuple[str, ...], what: str) -> None:
    """A staff user without the permissions ``needed`` may not do ``what`` (403)."""
    user = request.user
    if isinstance(user, ControlClient):
        return
    if not user.has_perms([f"staticagents.{codename}" for codename in needed]):
        raise PermissionDenied(f"{what} needs the permission(s) {', '.join(needed)}")


# -- upstreams and modes ------------------------------------------------------------


class UpstreamsView(ControlView):
    """The fixture's ``upstreams`` and ``modes``: ``GET``, ``PUT`` (replace both).

    Only the name of each key's environment variable travels here, never a key.
    """

    needs = {
        "GET": ("view_upstream",),
        "PUT": ("add_upstream", "change_upstream", "delete_upstream"),
    }

    def get(self, request: Request) -> Response:
        upstreams, modes = stored_upstreams()
        return Response({"upstreams": upstreams, "modes": modes})

    def put(self, request: Request) -> Response:
        from staticagents.document import schema

        upstreams, modes = schema.validate_upstreams(request.data)
        set_upstreams(upstreams=upstreams, modes=modes, by=writer(request))
        return self.get(request)


# -- journal, sessions, counters ----------------------------------------------------


class JournalPagination(CountedPagination):
    """Newest first by id; a cursor stays stable while new entries arrive.

    A page ends early once its bodies and queries reach ``PAGE_BYTES`` (it
    holds one entry at least): the page is chosen from the entries' ids and
    sizes alone, then only its entries are read whole.
    """

    ordering = "-id"
    PAGE_BYTES = 8 * 1024 * 1024
    has_next: bool  # set by DRF's paginate_queryset, and here when a page ends early
    has_previous: bool

    def paginate_queryset(self, queryset: Any, request: Request, view: Any = None) -> Any:
        # The page is chosen from ids and sizes alone; its entries are read whole after.
        page: list[dict[str, Any]] | None = super().paginate_queryset(
            queryset.values("id", "size"), request, view
        )
        if page is None:
            return None
        # A first page with nothing after it holds every entry: no query to count them.
        whole = self.cursor is None and not self.has_next
        self.count = len(page) if whole else queryset.count()
        # Going back (a previous link), the entries next to the cursor end the page.
        backwards = self.cursor is not None and self.cursor.reverse
        kept = _within(reversed(page) if backwards else page, self.PAGE_BYTES)
        if kept < len(page):  # the links then lead on from the entries kept
            if backwards:
                beyond, page = page[len(page) - kept - 1], page[len(page) - kept :]
                self.has_previous, self.previous_position = True, self.position_of(beyond)
            else:
                beyond, page = page[kept], page[:kept]
                self.has_next, self.next_position = True, self.position_of(beyond)
            self.page = page
        rows = {row["id"]: row for row in queryset.filter(pk__in=[entry["id"] for entry in page])}
        return [rows[entry["id"]] for entry in page if entry["id"] in rows]

    def position_of(self, entry: dict[str, Any]) -> str:
        """The cursor position of ``entry`` (its id, as the ordering says)."""
        position: str = self._get_position_from_instance(entry, self.ordering)
        return position


def _is_row_id(text: str) -> bool:
    """Digits naming a row of a bigint key (a longer number would overflow the query)."""
    return is_ascii_number(text) and len(text) <= 19 and int(text) < 2**63


def _within(entries: Iterable[dict[str, Any]], ceiling: int) -> int:
    """How many of the first ``entries`` fit in ``ceiling`` bytes (one at least)."""
    kept = total = 0
    for entry in entries:
        total += entry["size"]
        if kept and total > ceiling:
            break
        kept += 1
    return kept


class JournalView(ControlView):
    """``GET`` entries, newest first, filtered; ``DELETE`` clears all or ``?session=``."""

    needs = {"GET": ("view_journalentry",), "DELETE": ("delete_journalentry",)}

    class FilterSerializer(serializers.Serializer):
        session = serializers.CharField(required=False)
        dialect = serializers.ChoiceField(DIALECTS, required=False)
        agent_type = serializers.CharField(required=False)
        rule = serializers.CharField(required=False)
        outcome = serializers.ChoiceField([o for o, _ in JournalEntry.OUTCOMES], required=False)
        fallback = serializers.BooleanField(required=False, allow_null=True, default=None)
        contains = serializers.CharField(required=False, trim_whitespace=False)

    # The columns of an entry, read as values: a ModelSerializer would inspect the model
    # again on every request, which cost more than the query.
    FIELDS = ("id", "created_at", *JournalEntry.API_FIELDS)
    CREATED_AT = serializers.DateTimeField()

    def get(self, request: Request) -> Response:
        filters = self.FilterSerializer(data=request.query_params)
        known = set(filters.fields) | {"cursor", "page_size"}
        reject_unknown_params(request, known)
        filters.is_valid(raise_exception=True)
        entries = journal_entries(**filters.validated_data).values(*self.FIELDS)
        paginator = JournalPagination()
        page = paginator.paginate_queryset(entries, request, self)
        for entry in page:
            entry["created_at"] = self.CREATED_AT.to_representation(entry["created_at"])
            entry["body_truncated"] = body_truncated(entry["body"], entry["body_bytes"])
        return paginator.get_paginated_response(page)

    def delete(self, request: Request) -> Response:
        return Response({"deleted": clear_journal(session=session_param(request))})


def body_truncated(body: str, body_bytes: int) -> bool:
    """Whether ``body`` holds only the first bytes of a body ``body_bytes`` long."""
    return body_bytes > (len(body) if body.isascii() else len(body.encode()))


SCRIPT_KEYS = ("responses", "on_exhausted")


def script_document(data: Any) -> dict[str, Any]:
    """A session's script (``{"responses": [...], "on_exhausted": ...}``), validated as the
    responses of a rule."""
    if not isinstance(data, dict):
        raise DocumentInvalid([FieldError("", "a script must be a JSON object", "type")])
    unknown = [FieldError(k, "unknown key", "unknown_key") for k in data if k not in SCRIPT_KEYS]
    if unknown:
        raise DocumentInvalid(unknown)
    if "responses" not in data:
        raise DocumentInvalid([FieldError("responses", "a script needs responses", "required")])
    from staticagents.document import schema

    return schema.validate_part(schema.RuleSpec, {"name": SessionScript.RULE_NAME, **data})


class SessionView(ControlView):
    """One session: ``GET`` its script; ``PUT`` a script (``{"responses": [...],
    "on_exhausted": "error"}``) to start it afresh with that script; ``DELETE`` to start
    it afresh (sequence positions, fail-first counts, journal and script go)."""

    def get(self, request: Request, key: str) -> Response:
        return Response({"session": key, "script": session_script(key)})

    def put(self, request: Request, key: str) -> Response:
        script = script_document(request.data)
        reset = reset_session(session=key, script=script)
        active_ruleset()  # this process's snapshot takes the script now, not at the next reply
        return Response({"session": key, **reset})

    needs = {
        "GET": ("view_sessionscript",),
        "PUT": ("add_sessionscript", "delete_sessioncounter", "delete_journalentry"),
        "DELETE": ("delete_sessioncounter", "delete_journalentry"),
    }

    def delete(self, request: Request, key: str) -> Response:
        return Response({"session": key, **reset_session(session=key)})


class CountersView(ControlView):
    """``GET`` what the service saw, overall or ``?session=``; ``DELETE`` resets it."""

    needs = {"GET": ("view_journalentry",), "DELETE": ("change_journalentry",)}

    def get(self, request: Request) -> Response:
        return Response(journal_counters(session=session_param(request)))

    def delete(self, request: Request) -> Response:
        session = session_param(request)
        reset_counters(session=session)
        return Response(journal_counters(session=session))


# -- explain ----------------------------------------------------------------------


class ExplainView(ControlView):
    """``POST`` an inquiry: the rule that would answer, and why each rule before it did not."""

    needs = {"POST": ("view_rule",)}  # reads the rules, changes nothing

    class InputSerializer(serializers.Serializer):
        query = serializers.CharField(allow_blank=True, trim_whitespace=False)
        agent_type = serializers.CharField(default="router")
        context = serializers.DictField(required=False, allow_null=True, default=None)
        model = serializers.CharField(allow_blank=True, default="")
        system = serializers.CharField(allow_blank=True, trim_whitespace=False, default="")
        dialect = serializers.ChoiceField(DIALECTS, default="galaxy")
        turn = serializers.IntegerField(min_value=1, default=1)
        tool_result = serializers.CharField(
            allow_null=True, allow_blank=True, trim_whitespace=False, default=None
        )

        def to_internal_value(self, data: Any) -> Any:
            """The fields' values; unknown keys are errors too, reported with the others."""
            error = serializers.ErrorDetail("unknown key", "unknown_key")
            errors: dict[str, Any] = {key: [error] for key in data if key not in self.fields}
            try:
                value = super().to_internal_value(data)
            except serializers.ValidationError as exc:
                errors.update(exc.detail)
            if errors:
                raise serializers.ValidationError(errors)
            return value

    def post(self, request: Request) -> Response:
        if not isinstance(request.data, dict):
            raise serializers.ValidationError("an inquiry must be a JSON object")
        given = self.InputSerializer(data=request.data)
        given.is_valid(raise_exception=True)
        ruleset = active_ruleset()
        inquiry = Inquiry(**given.validated_data)
        verdicts = explain_inquiry(ruleset, inquiry)
        answering = verdicts[-1].rule if verdicts and verdicts[-1].matched else None
        target = ruleset.routing.target(inquiry.agent_type)
        return Response(
            {
                "rule": answering,
                "fallback": answering is None,
                "mode": ruleset.routing.mode(inquiry.agent_type),
                "upstream": target.upstream.name if target is not None else None,
                "routing": ruleset.routing.describe(inquiry.agent_type),
                "verdicts": [verdict.as_dict() for verdict in verdicts],
            }
        )


class ControlNotFoundView(ControlView):
    """Any other path under /control/: a 404 in the control API's error shape."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        raise NotFound(f"no control endpoint at {request.path}")
