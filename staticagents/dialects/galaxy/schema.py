"""The OpenAPI description of Galaxy's agent and chat API (served at ``/api/schema/``)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from pydantic import BaseModel

from staticagents.dialects.galaxy import wire as galaxy
from staticagents.openapi import (
    BOOLEAN,
    INTEGER,
    MESSAGE,
    NUMBER,
    OBJECT,
    STRING,
    Schema,
    array,
    describe,
    model_schema,
    nullable,
    obj,
    shared,
)

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
