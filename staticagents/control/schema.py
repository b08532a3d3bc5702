"""The OpenAPI description of the control API (served at ``/api/schema/``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from staticagents.control import views as control
from staticagents.openapi import (
    BOOLEAN,
    INTEGER,
    OBJECT,
    RULE_REF,
    STRING,
    Schema,
    array,
    describe,
    nullable,
    obj,
    shared,
)

# -- the control API's shapes -----------------------------------------------------------------

CONTROL_ERROR = shared(
    "ControlErrors",
    obj(
        {
            "errors": array(
                obj({"path": STRING, "message": STRING, "code": STRING}, {"line": INTEGER})
            )
        }
    ),
)
CONTROL_ERRORS = {
    "4XX": OpenApiResponse(CONTROL_ERROR, description="refused: every error, with its path"),
}
RULES = obj({"rules": array(OBJECT)})
SESSION = OpenApiParameter("session", str, description="just this session")
FRESH_SESSION = OpenApiParameter("session", str, description="a session to start afresh too")
COUNTERS = obj(
    {
        "session": nullable(STRING),
        "requests": INTEGER,
        "rules": {"type": "object", "additionalProperties": INTEGER},
        "fallbacks": INTEGER,
        "errors": INTEGER,
        "failed_first": INTEGER,
    }
)
IMPORT_RESULT = obj(
    {
        "created": INTEGER,
        "updated": INTEGER,
        "deleted": INTEGER,
        "unchanged": INTEGER,
        "dry_run": BOOLEAN,
        "warnings": array(STRING),
    }
)
FIXTURE_BODY = {
    "application/yaml": STRING,
    "application/json": OBJECT,
}


def control_operation(
    response: Schema | None, status: int = 200, media_type: str = "application/json", **extra: Any
) -> Any:
    """One operation; ``response`` may map media types to schemas when there are several."""
    responses: dict[Any, Any] = {**CONTROL_ERRORS}
    if response is None:
        responses[status] = None
    else:
        answers = response if media_type == "*" else {media_type: response}
        responses.update({(status, kind): schema for kind, schema in answers.items()})
    return extend_schema(responses=responses, tags=["control"], **extra)


CONTROL = "staticagents.control.views."
describe(
    CONTROL + "RulesView",
    get=control_operation(
        RULES,
        parameters=[
            OpenApiParameter(
                "recorded",
                {"type": "string", "enum": list(control.RECORDED_FILTERS)},
                description="only the rules recorded from a real model: not yet reviewed, "
                "reviewed, or all of them",
            )
        ],
    ),
    post=control_operation(
        OBJECT,
        201,
        request={"application/json": RULE_REF},
        parameters=[
            OpenApiParameter(
                "place",
                str,
                description="auto (default: before the first rule that would shadow it, else "
                "last), top, end, or before:<rule name>",
            )
        ],
    ),
)
describe(
    CONTROL + "RuleView",
    get=control_operation(OBJECT, operation_id="control_rule_get"),
    put=control_operation(OBJECT, request={"application/json": RULE_REF}),
    patch=control_operation(OBJECT, request={"application/merge-patch+json": OBJECT}),
    delete=control_operation(None, 204),
)
describe(
    CONTROL + "ReorderRulesView",
    post=control_operation(
        obj({"rules": array(STRING)}),
        request={"application/json": {**array(STRING), "minItems": 1}},
    ),
)
describe(
    CONTROL + "DefaultsView",
    get=control_operation(OBJECT),
    put=control_operation(OBJECT, request={"application/json": OBJECT}),
    patch=control_operation(OBJECT, request={"application/merge-patch+json": OBJECT}),
)
describe(
    CONTROL + "FixtureView",
    get=control_operation(
        {"application/yaml": OBJECT, "application/json": OBJECT},  # a fixture document
        media_type="*",
        parameters=[OpenApiParameter("format", {"type": "string", "enum": ["json"]})],
    ),
    put=control_operation(
        IMPORT_RESULT,
        request=FIXTURE_BODY,
        parameters=[OpenApiParameter("dry_run", bool), FRESH_SESSION],
    ),
    post=control_operation(
        IMPORT_RESULT,
        request=FIXTURE_BODY,
        parameters=[OpenApiParameter("dry_run", bool), FRESH_SESSION],
    ),
)
JOURNAL_PAGE = obj(
    {
        "count": INTEGER,
        "next": nullable(STRING),
        "previous": nullable(STRING),
        "results": array(OBJECT),
    }
)
describe(
    CONTROL + "JournalView",
    get=control_operation(
        JOURNAL_PAGE,
        parameters=[
            control.JournalView.FilterSerializer,
            OpenApiParameter("cursor", str),
            OpenApiParameter("page_size", {"type": "integer", "minimum": 1}),
        ],
    ),
    delete=control_operation(obj({"deleted": INTEGER}), parameters=[SESSION]),
)
VERSION_SUMMARY = obj({"number": INTEGER, "created_at": STRING, "by": STRING, "what": STRING})
VERSION_PAGE = obj(
    {
        "count": INTEGER,
        "next": nullable(STRING),
        "previous": nullable(STRING),
        "results": array(VERSION_SUMMARY),
    }
)
FIELD_CHANGES = array(obj({"field": STRING, "old": {}, "new": {}}))
VERSION_DIFF = obj(
    {
        "number": INTEGER,
        "against": nullable(INTEGER),
        "changes": nullable(
            obj(
                {
                    "defaults": FIELD_CHANGES,
                    "fallback": FIELD_CHANGES,
                    "rules": array(
                        obj(
                            {
                                "name": STRING,
                                "change": {
                                    "type": "string",
                                    "enum": ["added", "removed", "changed", "moved"],
                                },
                                "fields": FIELD_CHANGES,
                            }
                        )
                    ),
                }
            )
        ),
    }
)
describe(
    CONTROL + "VersionsView",
    get=control_operation(
        VERSION_PAGE,
        parameters=[
            OpenApiParameter("cursor", str),
            OpenApiParameter("page_size", {"type": "integer", "minimum": 1}),
        ],
    ),
)
describe(
    CONTROL + "VersionView",
    get=control_operation(
        {"application/json": OBJECT, "application/yaml": OBJECT},  # a fixture document
        media_type="*",
        parameters=[OpenApiParameter("format", {"type": "string", "enum": ["json", "yaml"]})],
    ),
)
describe(CONTROL + "VersionDiffView", get=control_operation(VERSION_DIFF))
describe(
    CONTROL + "VersionRestoreView",
    post=control_operation(obj({"restored": INTEGER, "version": nullable(INTEGER)})),
)
SESSION_RESET = obj({"session": STRING, "counters": INTEGER, "journal": INTEGER})
SCRIPT = obj(
    {"responses": {**array(OBJECT), "minItems": 1}},
    {"on_exhausted": {"type": "string", "enum": ["error", "repeat_last"]}},
)
describe(
    CONTROL + "SessionView",
    get=control_operation(obj({"session": STRING, "script": nullable(OBJECT)})),
    put=control_operation(SESSION_RESET, request={"application/json": SCRIPT}),
    delete=control_operation(SESSION_RESET),
)
describe(
    CONTROL + "CountersView",
    get=control_operation(COUNTERS, parameters=[SESSION]),
    delete=control_operation(COUNTERS, parameters=[SESSION]),
)
describe(
    CONTROL + "ExplainView",
    post=control_operation(
        obj(
            {
                "rule": nullable(STRING),
                "fallback": BOOLEAN,
                "mode": STRING,
                "upstream": nullable(STRING),
                "routing": STRING,
                "verdicts": array(OBJECT),
            }
        ),
        request=control.ExplainView.InputSerializer,
    ),
)
UPSTREAMS = obj({"upstreams": array(OBJECT), "modes": OBJECT})
describe(
    CONTROL + "UpstreamsView",
    get=control_operation(UPSTREAMS),
    put=control_operation(UPSTREAMS, request={"application/json": UPSTREAMS}),
)


class ControlTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = CONTROL + "ControlTokenAuthentication"
    name = "controlToken"

    def get_security_definition(self, auto_schema: Any) -> Schema:
        return {"type": "http", "scheme": "bearer"}


class StaffSessionScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = CONTROL + "StaffSessionAuthentication"
    name = "staffSession"

    def get_security_definition(self, auto_schema: Any) -> Schema:
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}
