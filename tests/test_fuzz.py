"""Hostile input, generated: hypothesis on the dialect parsers and routes, schemathesis on the API.

* Every dialect parser, given any JSON value (or any bytes), returns its parsed
  request or raises its own invalid-request error, never anything else.
* Generated bodies sent to the dialect routes of the running service get an
  answer or a 4xx in the dialect's shape, never a 5xx.
* schemathesis generates requests from the OpenAPI schema the service serves
  (/api/schema/), valid and invalid, for Galaxy's API and the control API, and
  checks every response: no server error, and status, content type and body
  as the schema declares them.

Each test prints how many cases it tried and how many got a server error (run
with ``-s`` to see the tally). Example counts are bounded to keep the file
well under 30 seconds.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from staticagents.dialects.adk import wire as adk
from staticagents.dialects.anthropic import wire as anthropic
from staticagents.dialects.embeddings import wire as embeddings
from staticagents.dialects.galaxy import wire as galaxy
from staticagents.dialects.gemini import wire as gemini
from staticagents.dialects.llm.wire import InvalidRequest
from staticagents.dialects.openai import wire as openai
from staticagents.dialects.responses import wire as responses
from staticagents.dialects.websocket import wire as websocket
from staticagents.serving.route import RequestRejected, parse_json_object
from tests.conftest import CONTROL_TOKEN

# Deeply nested generated values have long reprs; hypothesis warns when it builds one.
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")

PARSER_EXAMPLES = 250
ROUTE_EXAMPLES = 100
SCHEMA_EXAMPLES = 200
FUZZ = settings(
    deadline=None,
    database=None,  # nothing written into the checkout
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="session")
def tally() -> Iterator[Counter[str]]:
    """Cases tried and server errors, per test; printed once, when the session ends.

    Session-wide because pytest-django runs this module's database tests after
    the others, so a module-wide tally would be printed in two halves.
    """
    counts: Counter[str] = Counter()
    yield counts
    tried = sum(n for key, n in counts.items() if key.endswith(" tried"))
    errors = sum(n for key, n in counts.items() if key.endswith(" 5xx"))
    print("\ngenerated hostile inputs:")
    for key, n in sorted(counts.items()):
        print(f"  {key}: {n}")
    print(f"  total: {tried} tried, {errors} got a 5xx")


# -- JSON, near the shapes the dialects expect -------------------------------------------------

KEYS = [
    "model", "messages", "role", "content", "type", "text", "stream", "stream_options",
    "include_usage", "tools", "function", "custom", "name", "tool_call_id", "metadata",
    "max_tokens", "system", "thinking", "tool_use_id", "id", "input", "query", "agent_type",
    "context", "session", "request_id", "tool_result", "exchange_id", "page_id", "ids",
    "appName", "userId", "sessionId", "newMessage", "parts", "functionCall",
    "functionResponse", "response", "args", "streaming", "stateDelta", "state_delta",
    "customMetadata", "invocationId", "thought", "events", "author", "save_exchange",
    "job_id", "error_details", "entity_context", "regenerate", "contents",
    "systemInstruction", "functionDeclarations", "generationConfig", "thinkingConfig",
    "includeThoughts", "generateContentRequest", "dimensions", "encoding_format",
    "requests", "outputDimensionality", "taskType", "title",
    "instructions", "call_id", "output", "arguments", "summary", "previous_response_id",
    "store", "temperature",
]  # fmt: skip
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["user", "assistant", "system", "tool", "text", "tool_result", "model"])
)
NAMES = st.sampled_from(KEYS) | st.text(max_size=6)
ANY_JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(NAMES, inner, max_size=6),
    max_leaves=30,
)


def near(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the expected shape, one time in sixteen anything at all.

    Rarely enough that a request often gets past its top level to the parts
    below, where the parsers have the most to get wrong.
    """
    return st.integers(0, 15).flatmap(lambda roll: strategy if roll else ANY_JSON)


def shaped(required: dict[str, Any], optional: dict[str, Any]) -> st.SearchStrategy[Any]:
    return near(st.fixed_dictionaries(required, optional=optional))


# Text a client would send (lone surrogates are not UTF-8: ANY_JSON has those).
TEXT = near(st.text(st.characters(exclude_categories=["Cs"]), max_size=12))
OPENAI_PART = shaped({"type": near(st.sampled_from(["text", "image_url"]))}, {"text": TEXT})
OPENAI_MESSAGE = shaped(
    {
        "role": near(st.sampled_from(openai.ROLES)),
        "content": near(st.one_of(TEXT, st.lists(OPENAI_PART, max_size=3))),
    },
    {"tool_call_id": TEXT},
)
OPENAI_TOOL = shaped(
    {"type": near(st.sampled_from(["function", "custom"]))},
    {"function": shaped({"name": TEXT}, {}), "custom": shaped({"name": TEXT}, {})},
)
OPENAI_REQUEST = shaped(
    {"model": TEXT, "messages": near(st.lists(OPENAI_MESSAGE, min_size=1, max_size=4))},
    {
        "stream": near(st.booleans()),
        "stream_options": shaped({}, {"include_usage": near(st.booleans())}),
        "tools": near(st.lists(OPENAI_TOOL, max_size=2)),
        "metadata": ANY_JSON,
    },
)
RESPONSES_PART = shaped(
    {"type": near(st.sampled_from(["input_text", "output_text", "input_image"]))},
    {"text": TEXT},
)
RESPONSES_CONTENT = near(st.one_of(TEXT, st.lists(RESPONSES_PART, max_size=3)))
RESPONSES_ITEM = st.one_of(
    shaped(
        {"role": near(st.sampled_from(responses.ROLES)), "content": RESPONSES_CONTENT},
        {"type": near(st.just("message"))},
    ),
    shaped(
        {"type": near(st.just("function_call")), "call_id": TEXT, "name": TEXT},
        {"arguments": TEXT},
    ),
    shaped(
        {"type": near(st.just("function_call_output")), "call_id": TEXT},
        {"output": RESPONSES_CONTENT},
    ),
    shaped({"type": near(st.just("reasoning"))}, {"summary": ANY_JSON, "id": TEXT}),
)
RESPONSES_REQUEST = shaped(
    {"model": TEXT},
    {
        "input": near(st.one_of(TEXT, st.lists(RESPONSES_ITEM, max_size=4))),
        "instructions": TEXT,
        "stream": near(st.booleans()),
        "store": near(st.booleans()),
        "tools": near(st.lists(shaped({"type": TEXT}, {"name": TEXT}), max_size=2)),
        "temperature": ANY_JSON,
        "metadata": ANY_JSON,
    },
)
ANTHROPIC_BLOCK = shaped(
    {"type": near(st.sampled_from(["text", "tool_result", "tool_use", "image"]))},
    {"text": TEXT, "tool_use_id": TEXT, "id": TEXT, "name": TEXT, "content": near(TEXT)},
)
ANTHROPIC_REQUEST = shaped(
    {
        "model": TEXT,
        "max_tokens": near(st.integers(min_value=0, max_value=10_000)),
        "messages": near(
            st.lists(
                shaped(
                    {
                        "role": near(st.sampled_from(anthropic.ROLES)),
                        "content": near(st.one_of(TEXT, st.lists(ANTHROPIC_BLOCK, max_size=3))),
                    },
                    {},
                ),
                min_size=1,
                max_size=4,
            )
        ),
    },
    {"system": ANY_JSON, "tools": near(st.lists(shaped({"name": TEXT}, {}), max_size=2))},
)
ADK_PART = shaped(
    {"text": TEXT},
    {
        "thought": near(st.booleans()),
        "functionCall": shaped({}, {"id": TEXT, "name": TEXT, "args": ANY_JSON}),
        "functionResponse": shaped({}, {"id": TEXT, "name": TEXT, "response": ANY_JSON}),
    },
)
ADK_CONTENT = shaped({"parts": near(st.lists(ADK_PART, min_size=1, max_size=3))}, {"role": TEXT})
ADK_RUN = shaped(
    {"userId": TEXT, "sessionId": TEXT, "newMessage": ADK_CONTENT},
    {
        "appName": TEXT,
        "streaming": near(st.booleans()),
        "stateDelta": ANY_JSON,
        "customMetadata": ANY_JSON,
    },
)
ADK_EVENTS = near(
    st.lists(
        shaped({"author": near(st.sampled_from(["user", "router"])), "content": ADK_CONTENT}, {}),
        max_size=3,
    )
)
GEMINI_CONTENT = shaped(
    {"parts": near(st.lists(ADK_PART, min_size=1, max_size=3))},
    {"role": near(st.sampled_from(gemini.ROLES))},
)
GEMINI_REQUEST = shaped(
    {"contents": near(st.lists(GEMINI_CONTENT, min_size=1, max_size=4))},
    {
        "systemInstruction": near(shaped({"parts": near(st.lists(ADK_PART, max_size=2))}, {})),
        "tools": near(
            st.lists(
                shaped({}, {"functionDeclarations": near(st.lists(shaped({"name": TEXT}, {})))}),
                max_size=2,
            )
        ),
        "generationConfig": shaped(
            {}, {"thinkingConfig": shaped({}, {"includeThoughts": near(st.booleans())})}
        ),
        "safetySettings": ANY_JSON,
        "toolConfig": ANY_JSON,
    },
)
WEBSOCKET_MESSAGE = shaped(
    {"query": TEXT},
    {"agent_type": TEXT, "context": ANY_JSON, "session": TEXT, "request_id": ANY_JSON},
)
GALAXY_CHAT = shaped(
    {},
    {
        "query": TEXT,
        "context": ANY_JSON,
        "exchange_id": ANY_JSON,
        "page_id": ANY_JSON,
        "entity_context": ANY_JSON,
    },
)
TOKENS = st.lists(st.integers(min_value=-2, max_value=100_000), max_size=4)
SIZE = near(st.integers(min_value=-1, max_value=300) | st.sampled_from([4096, 4097]))
OPENAI_EMBEDDINGS = shaped(
    {
        "model": TEXT,
        "input": near(st.one_of(TEXT, st.lists(TEXT, max_size=4), TOKENS, st.lists(TOKENS))),
    },
    {"dimensions": SIZE, "encoding_format": near(st.sampled_from(["float", "base64"]))},
)
GEMINI_EMBED = shaped(
    {"content": ADK_CONTENT},
    {"outputDimensionality": SIZE, "taskType": TEXT, "title": TEXT, "model": TEXT},
)
GEMINI_BATCH = shaped({"requests": near(st.lists(GEMINI_EMBED, min_size=1, max_size=3))}, {})


def json_bytes(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """The value as a body; sometimes any bytes at all."""
    encoded = strategy.map(lambda value: json.dumps(value).encode())
    return st.one_of(encoded, encoded, encoded, st.binary(max_size=64))


# -- the parsers ---------------------------------------------------------------------------------


def parser_test(
    name: str,
    strategy: st.SearchStrategy[Any],
    parse: Callable[[Any], Any],
    invalid: type[Exception] | tuple[type[Exception], ...],
    tally: Counter[str],
) -> None:
    """Run ``parse`` on generated input: a result or ``invalid``; anything else fails the test."""

    @settings(FUZZ, max_examples=PARSER_EXAMPLES)
    @given(value=strategy)
    def run(value: Any) -> None:
        tally[f"{name} parser tried"] += 1
        try:
            parse(value)
        except invalid:
            tally[f"{name} parser refused"] += 1

    run()


def test_the_openai_parser_returns_a_conversation_or_its_invalid_request(
    tally: Counter[str],
) -> None:
    def parse(body: bytes) -> Any:
        return openai.parse_chat_request(parse_json_object(body))

    parser_test(
        "openai", json_bytes(OPENAI_REQUEST), parse, (InvalidRequest, RequestRejected), tally
    )


def test_the_responses_parser_returns_a_request_or_its_invalid_request(
    tally: Counter[str],
) -> None:
    def parse(body: bytes) -> Any:
        return responses.parse_responses_request(parse_json_object(body)).conversation()

    parser_test(
        "responses", json_bytes(RESPONSES_REQUEST), parse, (InvalidRequest, RequestRejected), tally
    )


def test_the_anthropic_parser_returns_a_conversation_or_its_invalid_request(
    tally: Counter[str],
) -> None:
    def parse(body: bytes) -> Any:
        return anthropic.parse_messages_request(parse_json_object(body))

    parser_test(
        "anthropic", json_bytes(ANTHROPIC_REQUEST), parse, (InvalidRequest, RequestRejected), tally
    )


def test_the_gemini_parsers_return_a_request_or_their_invalid_request(
    tally: Counter[str],
) -> None:
    def parse(body: bytes) -> Any:
        payload = parse_json_object(body)
        gemini.prompt_tokens(payload)
        return gemini.parse_generate_request(payload, "m")

    parser_test(
        "gemini", json_bytes(GEMINI_REQUEST), parse, (InvalidRequest, RequestRejected), tally
    )


def test_the_adk_parser_returns_a_run_or_its_invalid_request(tally: Counter[str]) -> None:
    def parse(value: tuple[bytes, Any]) -> Any:
        body, history = value
        run = adk.parse_body(body, adk.RunRequest)
        message = adk.read_message(run.new_message)
        # Stored events come from clients too: a session is created with any list of objects.
        events = [e for e in history if isinstance(e, dict)] if isinstance(history, list) else []
        return adk.read_turn(message, adk.UserTurns().after(events))

    strategy = st.tuples(json_bytes(ADK_RUN), ADK_EVENTS)
    parser_test("adk run", strategy, parse, adk.InvalidRequest, tally)


def test_the_adk_session_parsers_return_a_request_or_their_invalid_request(
    tally: Counter[str],
) -> None:
    def parse(body: bytes) -> Any:
        adk.parse_optional_body(body, adk.CreateSessionRequest)
        adk.parse_state(body)
        return adk.parse_body(body, adk.UpdateSessionRequest)

    strategy = json_bytes(
        shaped(
            {}, {"sessionId": TEXT, "state": ANY_JSON, "events": ADK_EVENTS, "stateDelta": ANY_JSON}
        )
    )
    parser_test("adk sessions", strategy, parse, adk.InvalidRequest, tally)


def test_the_embeddings_parsers_return_a_request_or_their_invalid_request(
    tally: Counter[str],
) -> None:
    parsers = [
        embeddings.parse_openai_request,
        lambda payload: embeddings.parse_gemini_request(payload, "m"),
        lambda payload: embeddings.parse_gemini_batch(payload, "m"),
    ]

    def parse(body: bytes) -> Any:
        """Each body goes to every parser: shaped for one of them, hostile to the others."""
        for parser in parsers:
            try:
                parser(parse_json_object(body))
            except (InvalidRequest, RequestRejected):
                tally["embeddings parser refused"] += 1

    strategy = json_bytes(OPENAI_EMBEDDINGS | GEMINI_EMBED | GEMINI_BATCH)
    parser_test("embeddings", strategy, parse, (), tally)


def test_the_websocket_parser_returns_a_message_or_message_invalid(tally: Counter[str]) -> None:
    def parse(body: bytes) -> Any:
        try:
            text = body.decode()
        except UnicodeDecodeError:
            return websocket.parse_message(None, body)  # a binary frame
        return websocket.parse_message(text)

    parser_test("websocket", json_bytes(WEBSOCKET_MESSAGE), parse, websocket.MessageInvalid, tally)


def test_the_galaxy_parsers_return_a_request_or_galaxy_request_invalid(
    tally: Counter[str],
) -> None:
    params = st.dictionaries(
        st.sampled_from(["agent_type", "query", "job_id", "x"]), st.text(max_size=8), max_size=3
    )

    def parse(value: tuple[bytes, dict[str, str]]) -> Any:
        body, query = value
        for model in (galaxy.AgentQueryBody, galaxy.ErrorAnalysisBody, galaxy.CustomToolBody):
            try:
                payload = galaxy.parse_body(model, body)
            except galaxy.GalaxyRequestInvalid:
                continue
            if isinstance(payload, galaxy.ErrorAnalysisBody):
                galaxy.error_analysis_context(payload)
        try:
            batch = galaxy.parse_body(galaxy.BatchDeleteBody, body)
            for index, item in enumerate(batch.ids):
                galaxy.parse_exchange_id(item, where=f"ids[{index}]")
        except galaxy.GalaxyRequestInvalid:
            pass
        return galaxy.parse_chat_request(body, query)

    strategy = st.tuples(json_bytes(GALAXY_CHAT), params)
    parser_test("galaxy", strategy, parse, galaxy.GalaxyRequestInvalid, tally)


# -- the dialect routes, over HTTP ---------------------------------------------------------------

ROUTES: list[tuple[str, st.SearchStrategy[Any], Callable[[Any], bool]]] = [
    ("/v1/chat/completions", OPENAI_REQUEST, lambda body: "message" in body["error"]),
    ("/v1/responses", RESPONSES_REQUEST, lambda body: "message" in body["error"]),
    ("/v1/messages", ANTHROPIC_REQUEST, lambda body: body["type"] == "error"),
    ("/run", ADK_RUN, lambda body: "detail" in body),
    (
        "/v1beta/models/m:streamGenerateContent",
        GEMINI_REQUEST,
        lambda body: body["error"]["status"].isupper(),
    ),
    ("/v1/embeddings", OPENAI_EMBEDDINGS, lambda body: "message" in body["error"]),
    (
        "/v1beta/models/m:batchEmbedContents",
        GEMINI_BATCH,
        lambda body: body["error"]["status"].isupper(),
    ),
    (
        "/v1/models/m:embedContent",
        GEMINI_EMBED,
        lambda body: body["error"]["status"].isupper(),
    ),
    ("/api/chat/stream", GALAXY_CHAT, lambda body: isinstance(body["err_code"], int)),
    ("/api/chat", GALAXY_CHAT, lambda body: isinstance(body["err_code"], int)),
    ("/api/ai/agents/query", GALAXY_CHAT, lambda body: isinstance(body["err_code"], int)),
]


@pytest.mark.parametrize(("path", "strategy", "in_shape"), ROUTES, ids=[r[0] for r in ROUTES])
def test_generated_bodies_get_an_answer_or_a_4xx_in_the_dialects_shape(
    live_url: str,
    tally: Counter[str],
    path: str,
    strategy: st.SearchStrategy[Any],
    in_shape: Callable[[Any], bool],
) -> None:
    with httpx.Client(base_url=live_url, timeout=10) as client:

        @settings(FUZZ, max_examples=ROUTE_EXAMPLES)
        @given(body=json_bytes(strategy))
        def run(body: bytes) -> None:
            tally[f"{path} route tried"] += 1
            response = client.post(path, content=body, headers={"content-type": "application/json"})
            tally[f"{path} route 5xx"] += response.status_code >= 500
            assert response.status_code < 500, (body[:300], response.text[:300])
            if response.status_code >= 400:
                assert in_shape(response.json()), response.text[:300]

        run()


# -- schemathesis, against the served OpenAPI schema ----------------------------------------------

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def schema_test(
    live_url: str, prefix: str, headers: dict[str, str], tally: Counter[str]
) -> Counter[int]:
    """Valid and invalid requests for every operation under ``prefix``; every check holds."""
    schema = schemathesis.openapi.from_url(f"{live_url}/api/schema/?format=json")
    operations = schema.include(path_regex=f"^{prefix}")
    strategy = st.one_of(
        operations.as_strategy(GenerationMode.POSITIVE),
        operations.as_strategy(GenerationMode.NEGATIVE),
    )
    statuses: Counter[int] = Counter()

    @settings(FUZZ, max_examples=SCHEMA_EXAMPLES)
    @given(case=strategy)
    def run(case: schemathesis.Case) -> None:
        response = case.call(base_url=live_url, headers=headers)
        statuses[response.status_code] += 1
        tally[f"{prefix} schemathesis tried"] += 1
        tally[f"{prefix} schemathesis 5xx"] += response.status_code >= 500
        case.validate_response(response, checks=CHECKS)

    run()
    return statuses


def test_schemathesis_finds_no_server_error_or_schema_violation_in_galaxys_api(
    live_url: str, tally: Counter[str]
) -> None:
    statuses = schema_test(live_url, "/api/", {}, tally)
    assert statuses[200] and any(400 <= s < 500 for s in statuses), statuses


def test_schemathesis_finds_no_server_error_or_schema_violation_in_the_control_api(
    live_url: str, settings: Any, tally: Counter[str]
) -> None:
    """Rules the fuzzing creates stay here: Galaxy's test above runs on an empty database."""
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    statuses = schema_test(
        live_url, "/control/", {"Authorization": f"Bearer {CONTROL_TOKEN}"}, tally
    )
    assert statuses[200] and any(400 <= s < 500 for s in statuses), statuses
