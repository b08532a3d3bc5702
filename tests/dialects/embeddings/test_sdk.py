"""Embeddings through real clients: the openai SDK, google-genai and LangChain's OpenAIEmbeddings.

The service runs as the pytest plugin runs it (a subprocess); every client
carries the test's session, so the journal read through ``static_agents`` is
this test's alone. The retrieval tests put a LangChain vector store on the
service and script which document a query lands next to.
"""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_openai import OpenAIEmbeddings

from staticagents.core.embeddings import cosine, embed_text
from staticagents.testing.assertions import assert_no_credentials
from staticagents.testing.client import StaticAgentsClient

API_KEY = "sk-embeddings-secret-0123456789"
GOOGLE_KEY = "AIzaSy-not-a-real-google-key-0123456"
REFUNDS = "Refunds are processed within five business days."
OFFICE = "Our office is open Monday to Friday, nine to five."
SHIPPING = "Parcels ship within Europe in three days."
DOCUMENTS = [REFUNDS, OFFICE, SHIPPING]
EMBEDDINGS = {"dialect": "embeddings"}
RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "money-back",
            "match": {**EMBEDDINGS, "query": "(?i)money back"},
            "response": {"embedding_like": REFUNDS},
        },
        {
            "name": "shipping-doc",
            "match": {**EMBEDDINGS, "contains": "within Europe"},
            "response": {"embedding": [1, 0, 0]},
        },
        {
            "name": "parcel-query",
            "match": {**EMBEDDINGS, "contains": "parcel"},
            "response": {"embedding": [0.9, 0.1, 0]},
        },
        {
            "name": "asked-as-query",
            "match": {**EMBEDDINGS, "context": {"task_type": "^RETRIEVAL_QUERY$"}},
            "response": {"embedding_like": OFFICE},
        },
        {
            "name": "pinned",
            "match": {**EMBEDDINGS, "contains": "#pinned"},
            "response": {"embedding": [0, 3, 4]},
        },
        {
            "name": "too-wide",
            "match": {**EMBEDDINGS, "contains": "#wide"},
            "response": {"embedding": [1, 2, 3, 4, 5]},
        },
        {
            "name": "flaky",
            "match": {**EMBEDDINGS, "contains": "#flaky"},
            "response": {"fail_first": 1, "retry_after": 0.01},
        },
        {
            "name": "down",
            "match": {"contains": "#down"},
            "response": {
                "error": {"status": 503, "type": "overloaded", "message": "Vectors are down"}
            },
        },
        {"name": "chat", "match": {"dialect": "openai"}, "response": {"content": "a chat answer"}},
    ]
}

pytestmark = pytest.mark.static_agents_fixture(RULES)


@pytest.fixture
def client(openai_base_url: str, static_agents_headers: dict[str, str]) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=openai_base_url,
        api_key=API_KEY,
        max_retries=0,
        default_headers=static_agents_headers,
    )


@pytest.fixture
def gemini(gemini_base_url: str, static_agents_headers: dict[str, str]) -> genai.Client:
    return gemini_client(gemini_base_url, static_agents_headers)


def gemini_client(url: str, headers: dict[str, str], api_version: str = "v1beta") -> genai.Client:
    options = genai_types.HttpOptions(base_url=url, api_version=api_version, headers=headers)
    return genai.Client(api_key=GOOGLE_KEY, http_options=options)


def unit_length(vector: list[float]) -> bool:
    return math.isclose(math.hypot(*vector), 1.0, rel_tol=1e-6)


# -- the openai SDK ---------------------------------------------------------------------------


def test_a_string_gets_its_models_size_decoded_from_base64_by_default(
    client: openai.OpenAI,
) -> None:
    """The SDK asks for base64 unless told otherwise, and decodes it: the same numbers."""
    result = client.embeddings.create(model="text-embedding-3-small", input="hello world")
    [item] = result.data
    assert item.index == 0 and item.object == "embedding"
    assert item.embedding == embed_text("hello world", 1536)
    assert unit_length(item.embedding)
    assert result.model == "text-embedding-3-small"
    assert result.usage.prompt_tokens == 2 and result.usage.total_tokens == 2
    assert result._request_id is not None and result._request_id.startswith("req_static")


def test_a_list_gets_one_vector_per_text_in_order(client: openai.OpenAI) -> None:
    result = client.embeddings.create(model="text-embedding-3-large", input=DOCUMENTS)
    assert [item.index for item in result.data] == [0, 1, 2]
    assert [len(item.embedding) for item in result.data] == [3072] * 3
    assert result.data[1].embedding == embed_text(OFFICE, 3072)


def test_dimensions_are_honoured(client: openai.OpenAI) -> None:
    result = client.embeddings.create(
        model="text-embedding-3-small", input=["one text", "two texts"], dimensions=256
    )
    assert [len(item.embedding) for item in result.data] == [256, 256]
    assert all(unit_length(item.embedding) for item in result.data)


def test_float_and_base64_carry_the_same_numbers(client: openai.OpenAI) -> None:
    floats = client.embeddings.create(
        model="m", input="same numbers", dimensions=64, encoding_format="float"
    )
    raw = client.embeddings.create(
        model="m", input="same numbers", dimensions=64, encoding_format="base64"
    )
    encoded = raw.data[0].embedding
    assert isinstance(encoded, str)  # asked for explicitly, the SDK leaves it as sent
    decoded = list(struct.unpack("<64f", base64.b64decode(encoded)))
    assert floats.data[0].embedding == decoded == embed_text("same numbers", 64)


def test_token_arrays_are_embedded_as_their_numbers(client: openai.OpenAI) -> None:
    result = client.embeddings.create(model="m", input=[[15339, 1917], [9906]], dimensions=32)
    assert result.data[0].embedding == embed_text("15339 1917", 32)
    assert result.data[1].embedding == embed_text("9906", 32)
    assert result.usage.prompt_tokens == 3


def test_the_same_text_gives_the_same_vector_and_other_texts_others(
    client: openai.OpenAI,
) -> None:
    def vector(text: str) -> list[float]:
        return client.embeddings.create(model="m", input=text, dimensions=128).data[0].embedding

    assert vector("stable text") == vector("stable text")
    assert vector("stable text") != vector("Stable text")
    assert cosine(vector("stable text"), vector("stable texts")) > 0.8


async def test_the_async_client_gets_the_same_vectors(
    openai_base_url: str, static_agents_headers: dict[str, str]
) -> None:
    client = openai.AsyncOpenAI(
        base_url=openai_base_url, api_key=API_KEY, default_headers=static_agents_headers
    )
    result = await client.embeddings.create(model="m", input=["a", "b"], dimensions=16)
    assert [item.embedding for item in result.data] == [embed_text(t, 16) for t in "ab"]


def test_a_pinned_vector_is_padded_to_the_size_asked(client: openai.OpenAI) -> None:
    three = client.embeddings.create(model="m", input="#pinned", dimensions=3).data[0]
    assert three.embedding == pytest.approx([0.0, 0.6, 0.8])
    padded = client.embeddings.create(model="m", input="#pinned").data[0].embedding
    assert len(padded) == 1536 and padded[:3] == three.embedding and not any(padded[3:])


def test_a_pinned_vector_wider_than_asked_is_a_400_naming_the_rule(
    client: openai.OpenAI, static_agents: StaticAgentsClient
) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model="m", input=["fine", "#wide"], dimensions=4)
    assert "rule 'too-wide' pins a vector of 5 dimensions" in raised.value.message
    [entry] = static_agents.requests(dialect="embeddings")
    assert (entry.outcome, entry.status, entry.rule) == ("error", 400, "too-wide")


def test_a_scripted_error_fails_the_request_in_openais_shape(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as raised:
        client.embeddings.create(model="m", input=["fine", "#down"])
    assert raised.value.status_code == 503
    assert raised.value.body == {
        "message": "Vectors are down",
        "type": "overloaded",
        "param": None,
        "code": None,
    }


def test_a_flaky_rule_fails_first_and_the_sdk_retries(
    openai_base_url: str, static_agents_headers: dict[str, str], static_agents: StaticAgentsClient
) -> None:
    client = openai.OpenAI(
        base_url=openai_base_url,
        api_key=API_KEY,
        max_retries=2,
        default_headers=static_agents_headers,
    )
    result = client.embeddings.create(model="m", input="#flaky once", dimensions=8)
    assert result.data[0].embedding == embed_text("#flaky once", 8)
    outcomes = [entry.outcome for entry in static_agents.requests()]
    assert outcomes == ["failed_first", "answered"]


def test_an_invalid_request_is_a_400_naming_the_field(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model="m", input="x", dimensions=0)
    assert raised.value.message.endswith(" - dimensions: must be from 1 to 4096, not 0")
    assert raised.value.body["param"] == "dimensions"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError, match=r"input\[1\]: must not be an empty string"):
        client.embeddings.create(model="m", input=["x", ""])


def test_each_request_is_journaled_once_with_its_texts_and_rules(
    client: openai.OpenAI, static_agents: StaticAgentsClient
) -> None:
    client.embeddings.create(model="m", input=["plain", "money back?", "#pinned", "plain"])
    [entry] = static_agents.requests()
    assert (entry.dialect, entry.route, entry.outcome) == (
        "embeddings",
        f"/sessions/{static_agents.session}/v1/embeddings",
        "answered",
    )
    assert entry.query == "plain\nmoney back?\n#pinned\nplain"
    assert entry.rule == "money-back,pinned"
    assert entry.headers["authorization"] == "Bearer ***"
    assert_no_credentials([entry], secrets=[API_KEY])
    assert static_agents.explain("#pinned", dialect="embeddings").rule == "pinned"


def test_the_dialect_predicate_keeps_chat_rules_and_embedding_rules_apart(
    client: openai.OpenAI, static_agents: StaticAgentsClient
) -> None:
    chat = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "#pinned"}]
    )
    assert chat.choices[0].message.content == "a chat answer"
    vector = client.embeddings.create(model="m", input="a chat question", dimensions=8)
    assert vector.data[0].embedding == embed_text("a chat question", 8)
    assert [e.rule for e in static_agents.requests()] == ["chat", None]


def test_the_agent_prefix_chooses_the_agent_type(
    static_agents: StaticAgentsClient, static_agents_headers: dict[str, str]
) -> None:
    client = openai.OpenAI(
        base_url=f"{static_agents.base_url}/agents/coder/v1",
        api_key=API_KEY,
        default_headers=static_agents_headers,
    )
    client.embeddings.create(model="m", input="typed", dimensions=8)
    [entry] = static_agents.requests()
    assert (entry.agent_type, entry.route) == ("coder", "/agents/coder/v1/embeddings")


# -- google-genai -----------------------------------------------------------------------------


def test_genai_embeds_one_content_at_its_models_size(gemini: genai.Client) -> None:
    result = gemini.models.embed_content(model="gemini-embedding-001", contents="hello world")
    assert result.embeddings is not None
    [embedding] = result.embeddings
    assert embedding.values == embed_text("hello world", 3072)
    small = gemini.models.embed_content(model="text-embedding-004", contents="hello world")
    assert small.embeddings is not None and len(small.embeddings[0].values or []) == 768


def test_genai_embeds_several_contents_with_output_dimensionality(gemini: genai.Client) -> None:
    config = genai_types.EmbedContentConfig(output_dimensionality=64)
    texts = ["first text", "second text", "third text"]
    result = gemini.models.embed_content(
        model="gemini-embedding-001", contents=texts, config=config
    )
    assert result.embeddings is not None
    assert [e.values for e in result.embeddings] == [embed_text(t, 64) for t in texts]


@pytest.mark.parametrize("api_version", ["v1beta", "v1"])
def test_genai_is_answered_under_either_api_version(
    static_agents: StaticAgentsClient,
    gemini_base_url: str,
    static_agents_headers: dict[str, str],
    api_version: str,
) -> None:
    client = gemini_client(gemini_base_url, static_agents_headers, api_version)
    config = genai_types.EmbedContentConfig(output_dimensionality=8)
    result = client.models.embed_content(model="gemini-embedding-001", contents="v", config=config)
    assert result.embeddings is not None and len(result.embeddings[0].values or []) == 8
    [entry] = static_agents.requests()
    route = f"/{api_version}/models/gemini-embedding-001:batchEmbedContents"
    assert entry.route == f"/sessions/{static_agents.session}{route}"
    assert entry.headers["x-goog-api-key"] == "***"
    assert_no_credentials([entry], secrets=[GOOGLE_KEY])


def test_genai_task_type_reaches_rules_as_context(gemini: genai.Client) -> None:
    config = genai_types.EmbedContentConfig(task_type="RETRIEVAL_QUERY", output_dimensionality=32)
    result = gemini.models.embed_content(
        model="gemini-embedding-001", contents="When can I call?", config=config
    )
    assert result.embeddings is not None
    assert result.embeddings[0].values == embed_text(OFFICE, 32)


async def test_genai_async_client(gemini: genai.Client) -> None:
    config = genai_types.EmbedContentConfig(output_dimensionality=16)
    result = await gemini.aio.models.embed_content(
        model="gemini-embedding-001", contents=["x", "y"], config=config
    )
    assert result.embeddings is not None
    assert [e.values for e in result.embeddings] == [embed_text("x", 16), embed_text("y", 16)]


def test_genai_gets_a_scripted_error_in_googles_shape(gemini: genai.Client) -> None:
    with pytest.raises(genai_errors.ServerError) as raised:
        gemini.models.embed_content(model="gemini-embedding-001", contents="#down")
    assert raised.value.code == 503
    assert raised.value.status == "UNAVAILABLE"
    assert raised.value.message == "Vectors are down"


def test_genai_gets_an_invalid_request_as_a_400_naming_the_field(gemini: genai.Client) -> None:
    config = genai_types.EmbedContentConfig(output_dimensionality=5000)
    with pytest.raises(genai_errors.ClientError) as raised:
        gemini.models.embed_content(model="gemini-embedding-001", contents="x", config=config)
    assert raised.value.code == 400 and raised.value.status == "INVALID_ARGUMENT"
    assert raised.value.message == (
        "requests[0].outputDimensionality: must be from 1 to 4096, not 5000"
    )


# -- LangChain: retrieval on the service ---------------------------------------------------------


@pytest.fixture
def store(openai_base_url: str, static_agents_headers: dict[str, str]) -> InMemoryVectorStore:
    embeddings = OpenAIEmbeddings(
        model="text-embedding-3-small",
        base_url=openai_base_url,
        api_key=API_KEY,  # type: ignore[arg-type]
        default_headers=static_agents_headers,
        check_embedding_ctx_length=False,  # send the texts, not tiktoken's token arrays
    )
    assert embeddings.embed_query(REFUNDS) == embed_text(REFUNDS, 1536)
    return InMemoryVectorStore.from_texts(DOCUMENTS, embeddings)


def nearest(store: InMemoryVectorStore, query: str) -> str:
    return store.similarity_search(query, k=1)[0].page_content


def test_without_a_rule_the_document_sharing_the_most_wording_wins(
    store: InMemoryVectorStore,
) -> None:
    assert nearest(store, "Is the office open on Monday?") == OFFICE
    assert nearest(store, "how are refunds processed") == REFUNDS


def test_an_embedding_like_rule_lands_a_query_on_the_chosen_document(
    store: InMemoryVectorStore,
) -> None:
    """Nothing in the words ties "money back" to refunds: the rule does."""
    [(document, score)] = store.similarity_search_with_score("I want my money back", k=1)
    assert document.page_content == REFUNDS
    assert score == pytest.approx(1.0)


def test_pinned_vectors_on_both_sides_script_the_nearest_neighbour(
    store: InMemoryVectorStore, static_agents: StaticAgentsClient
) -> None:
    assert nearest(store, "Where is my parcel?") == SHIPPING
    rules = [entry.rule for entry in static_agents.requests(dialect="embeddings")]
    assert "shipping-doc" in rules[1] and rules[-1] == "parcel-query"
