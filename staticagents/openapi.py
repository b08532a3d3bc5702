"""The OpenAPI description of the DRF routes (Galaxy's API and the control API).

drf-spectacular serves it at ``/api/schema/``. The views read their bodies
themselves (through pydantic models or a raw read), so it cannot guess them;
each view is described here, with drf-spectacular's view extensions, rather
than in decorators spread over the view modules. Request bodies come from the
same pydantic models that validate them, so the description cannot drift from
what the views accept. Every error is declared with its route's error shape;
the fuzz tests (tests/test_fuzz.py) hold the service to it.
"""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiViewExtension
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from pydantic import BaseModel

from staticagents.control import views as control
from staticagents.dialects.galaxy import wire as galaxy
from staticagents.document import schema as fixture_schema

Schema = dict[str, Any]
COMPONENT_PREFIX = "Fixture"  # pydantic's models, beside drf-spectacular's own components


# -- small schema builders ----------------------------------------------------------------


def obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None) -> Schema:
    return {
        "type": "object",
        "required": list(required),
        "properties": {**required, **(optional or {})},
    }


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
NUMBER: Schema = {"type": "number"}
BOOLEAN: Schema = {"type": "boolean"}
OBJECT: Schema = {"type": "object"}
MESSAGE = obj({"message": STRING})


def model_schema(model: type[BaseModel]) -> Schema:
    """A pydantic model's JSON schema, its nested models pointing at components."""
    found = model.model_json_schema(
        ref_template=f"#/components/schemas/{COMPONENT_PREFIX}{{model}}"
    )
    found.pop("$defs", None)
    return found


def pydantic_components() -> dict[str, Schema]:
    """The fixture schema's models, as components (added by ``add_components``)."""
    found = fixture_schema.RuleSpec.model_json_schema(
        ref_template=f"#/components/schemas/{COMPONENT_PREFIX}{{model}}"
    )
    components = {f"{COMPONENT_PREFIX}{name}": s for name, s in found.pop("$defs", {}).items()}
    components[f"{COMPONENT_PREFIX}RuleSpec"] = found
    return components


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


# Shapes used by many operations: components, added by ``add_components``.
SHARED: dict[str, Schema] = {}


def shared(name: str, schema: Schema) -> Schema:
    SHARED[name] = schema
    return ref(name)


def add_components(result: Schema, **kwargs: Any) -> Schema:
    """drf-spectacular postprocessing hook (settings SPECTACULAR_SETTINGS)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(pydantic_components())
    schemas.update(SHARED)
    return result


RULE_REF = ref(f"{COMPONENT_PREFIX}RuleSpec")


# -- Galaxy's shapes ------------------------------------------------------------------------

GALAXY_ERROR = shared(
    "GalaxyError", obj({"err_msg": STRING, "err_code": INTEGER}, {"error_type": STRING})
)
GALAXY_ERRORS = {
    "4XX": OpenApiResponse(GALAXY_ERROR, description="refused, in Galaxy's error shape"),
    "5XX": OpenApiResponse(GALAXY_ERROR, description="a rule's scripted error (never our own)"),
}
SUGGESTION = obj(
    {
        "action_type": STRING,
        "description": STRING,
        "parameters": OBJECT,
        "confidence": STRING,
        "priority": INTEGER,
    }
)
AGENT_RESPONSE = shared(
    "AgentResponse",
    obj(
        {
            "content": STRING,
            "confidence": STRING,
            "agent_type": STRING,
            "suggestions": array(SUGGESTION),
            "metadata": OBJECT,
            "reasoning": nullable(STRING),
        }
    ),
)
CHAT_RESPONSE = obj(
    {
        "response": STRING,
        "error_code": INTEGER,
        "error_message": STRING,
        "agent_response": nullable(AGENT_RESPONSE),
        "exchange_id": nullable(INTEGER),
        "processing_time": nullable(NUMBER),
    }
)
EXCHANGE_ID = OpenApiParameter(
    "exchange_id", str, OpenApiParameter.PATH, description="an exchange id (digits)"
)


def galaxy_operation(
    request: type[BaseModel] | Schema | None, response: Schema, **extra: Any
) -> Any:
    body = request if not isinstance(request, type) else model_schema(request)
    return extend_schema(
        request={"application/json": body} if body is not None else None,
        responses={200: response, **GALAXY_ERRORS},
        tags=["galaxy"],
        auth=[],
        **extra,
    )


class _Described(OpenApiViewExtension):  # type: ignore[no-untyped-call]
    """A view extension that wraps the target view in ``extend_schema_view(**methods)``."""

    methods: dict[str, Any] = {}

    def view_replacement(self) -> type:
        view = cast(type, self.target_class)  # drf-spectacular has imported the dotted path
        # The view's own docstring only: a base class's says nothing about this route.
        own = {"__doc__": view.__dict__.get("__doc__") or ""}
        described: type = extend_schema_view(**self.methods)(type(view.__name__, (view,), own))
        return described


def describe(target: str, **methods: Any) -> None:
    """Describe the view class at dotted path ``target``, one ``extend_schema`` per method."""
    name = target.rsplit(".", 1)[-1] + "Description"
    type(name, (_Described,), {"target_class": target, "methods": methods})


GALAXY = "staticagents.dialects.galaxy.views."
describe(
    GALAXY + "ConfigurationView",
    get=galaxy_operation(None, obj({"llm_api_configured": BOOLEAN, "llm_registry_type": STRING})),
)
describe(
    GALAXY + "AgentListView",
    get=galaxy_operation(None, obj({"agents": array(OBJECT), "total_count": INTEGER})),
)
describe(
    GALAXY + "AgentQueryView",
    post=galaxy_operation(
        galaxy.AgentQueryBody, obj({"response": AGENT_RESPONSE, "processing_time": NUMBER})
    ),
)
describe(
    GALAXY + "ErrorAnalysisView", post=galaxy_operation(galaxy.ErrorAnalysisBody, AGENT_RESPONSE)
)
describe(GALAXY + "CustomToolView", post=galaxy_operation(galaxy.CustomToolBody, AGENT_RESPONSE))
describe(
    GALAXY + "ChatView",
    post=galaxy_operation(
        galaxy.ChatBody,
        CHAT_RESPONSE,
        parameters=[OpenApiParameter("agent_type", str, description="default: auto")],
    ),
)
describe(
    GALAXY + "ChatHistoryView",
    get=galaxy_operation(
        None,
        array(OBJECT),
        parameters=[OpenApiParameter("limit", {"type": "integer", "minimum": 1})],
    ),
    delete=galaxy_operation(None, MESSAGE),
)
describe(
    GALAXY + "ExchangeMessagesView",
    get=galaxy_operation(None, array(OBJECT), parameters=[EXCHANGE_ID]),
)
describe(
    GALAXY + "ExchangeFeedbackView",
    put=galaxy_operation(
        {"type": "integer", "enum": [0, 1]},
        obj({"message": STRING, "feedback": INTEGER}),
        parameters=[EXCHANGE_ID],
    ),
)
describe(GALAXY + "ExchangeView", delete=galaxy_operation(None, MESSAGE, parameters=[EXCHANGE_ID]))
describe(GALAXY + "BatchDeleteView", put=galaxy_operation(galaxy.BatchDeleteBody, MESSAGE))


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
    {"created": INTEGER, "updated": INTEGER, "deleted": INTEGER, "dry_run": BOOLEAN}
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
    get=control_operation(RULES),
    post=control_operation(OBJECT, 201, request={"application/json": RULE_REF}),
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
    CONTROL + "FixtureView",
    get=control_operation(
        {"application/yaml": OBJECT, "application/json": OBJECT},  # a fixture document
        media_type="*",
        parameters=[OpenApiParameter("format", {"type": "string", "enum": ["json"]})],
    ),
    put=control_operation(
        IMPORT_RESULT,
        request=FIXTURE_BODY,
        parameters=[OpenApiParameter("dry_run", bool)],
    ),
    post=control_operation(
        IMPORT_RESULT,
        request=FIXTURE_BODY,
        parameters=[OpenApiParameter("dry_run", bool)],
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
describe(
    CONTROL + "SessionView",
    delete=control_operation(obj({"session": STRING, "counters": INTEGER, "journal": INTEGER})),
)
describe(
    CONTROL + "CountersView",
    get=control_operation(COUNTERS, parameters=[SESSION]),
    delete=control_operation(COUNTERS, parameters=[SESSION]),
)
describe(
    CONTROL + "ExplainView",
    post=control_operation(
        obj({"rule": nullable(STRING), "fallback": BOOLEAN, "verdicts": array(OBJECT)}),
        request=control.ExplainView.InputSerializer,
    ),
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
