"""The embeddings wire: requests read as OpenAI and Gemini read them, bodies as their SDKs want."""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest

from staticagents.core.embeddings import embed_text
from staticagents.core.replies import Reply, ReplyError, Usage
from staticagents.dialects.embeddings import wire
from staticagents.dialects.llm.wire import InvalidRequest

# -- OpenAI requests -----------------------------------------------------------------------------


def texts_of(payload: dict[str, Any]) -> list[str]:
    return [item.text for item in wire.parse_openai_request(payload).items]


def test_input_may_be_a_string_strings_a_token_array_or_token_arrays() -> None:
    assert texts_of({"model": "m", "input": "one"}) == ["one"]
    assert texts_of({"model": "m", "input": ["one", "two"]}) == ["one", "two"]
    assert texts_of({"model": "m", "input": [1, 2, 3]}) == ["1 2 3"]
    assert texts_of({"model": "m", "input": [[1, 2], [3]]}) == ["1 2", "3"]


def test_the_size_is_the_requests_else_the_models_else_the_providers() -> None:
    def size(**fields: Any) -> int:
        return wire.parse_openai_request({"input": "x", **fields}).items[0].dimensions

    assert size(model="text-embedding-3-small", dimensions=12) == 12
    assert size(model="text-embedding-3-large") == 3072
    assert size(model="text-embedding-ada-002") == 1536
    assert size(model="gemini-embedding-001") == 3072  # Gemini's OpenAI-compatible endpoint
    assert size(model="nomic-embed-text", dimensions=None) == 1536


def test_an_openai_request_reaches_rules_with_its_model_and_size() -> None:
    request = wire.parse_openai_request(
        {"model": "m", "input": ["a", "b"], "dimensions": 8, "encoding_format": "base64"}
    )
    assert request.encoding == "base64"
    [first, second] = request.inquiries(agent_type="router", session="s", headers={})
    assert (first.query, second.query) == ("a", "b")
    assert first.dialect == "embeddings" and first.model == "m"
    assert first.context == {"model": "m", "dimensions": 8}


OPENAI_REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"input": "x"}, "model: field required"),
    ({"model": "m"}, "input: field required"),
    ({"model": "m", "input": 5}, "input: must be a string, an array of strings"),
    ({"model": "m", "input": ""}, "input: must not be an empty string"),
    ({"model": "m", "input": []}, "input: must not be an empty array"),
    ({"model": "m", "input": ["a"] * 2049}, "input: at most 2048 inputs, not 2049"),
    ({"model": "m", "input": ["a", 5]}, "input[1]: must be a string like input[0], not a number"),
    ({"model": "m", "input": ["a", ""]}, "input[1]: must not be an empty string"),
    ({"model": "m", "input": [None]}, "input[0]: must be a string, a token or a token array"),
    ({"model": "m", "input": [[1], "a"]}, "input[1]: must be a token array like input[0]"),
    ({"model": "m", "input": [[1], []]}, "input[1]: must not be an empty token array"),
    (
        {"model": "m", "input": [1, -2]},
        "input[1]: must be a token (an integer of 0 or more), not -2",
    ),
    (
        {"model": "m", "input": [1, True]},
        "input[1]: must be a token (an integer of 0 or more), not a",
    ),
    ({"model": "m", "input": [[1, "a"]]}, "input[0][1]: must be a token"),
    ({"model": "m", "input": "x", "dimensions": 0}, "dimensions: must be from 1 to 4096, not 0"),
    ({"model": "m", "input": "x", "dimensions": 4097}, "dimensions: must be from 1 to 4096"),
    ({"model": "m", "input": "x", "dimensions": "8"}, "dimensions: must be an integer"),
    ({"model": "m", "input": "x", "dimensions": 8.5}, "dimensions: must be an integer"),
    ({"model": "m", "input": "x", "encoding_format": "hex"}, "encoding_format: must be 'float'"),
    ({"model": "m", "input": "x", "encoding_format": 1}, "encoding_format: must be a string"),
]


@pytest.mark.parametrize(("payload", "message"), OPENAI_REFUSALS)
def test_an_openai_request_is_refused_naming_the_field(
    payload: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRequest) as raised:
        wire.parse_openai_request(payload)
    assert raised.value.message.startswith(message), raised.value.message


def test_unknown_openai_keys_and_nulls_are_ignored() -> None:
    request = wire.parse_openai_request(
        {"model": "m", "input": "x", "user": "u", "dimensions": None, "encoding_format": None}
    )
    assert request.encoding == "float" and request.items[0].dimensions == 1536


# -- Gemini requests -----------------------------------------------------------------------------


def content(*texts: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text} for text in texts]}


def test_a_gemini_content_is_its_text_parts_joined_by_newlines() -> None:
    request = wire.parse_gemini_request({"content": content("a", "b")}, "gemini-embedding-001")
    [item] = request.items
    assert (item.text, item.dimensions) == ("a\nb", 3072)
    assert item.context == {"model": "gemini-embedding-001", "dimensions": 3072}


def test_gemini_fields_are_read_in_camel_or_snake_case() -> None:
    camel = {"content": content("x"), "taskType": "RETRIEVAL_QUERY", "outputDimensionality": 8}
    snake = {"content": content("x"), "task_type": "RETRIEVAL_QUERY", "output_dimensionality": 8}
    for payload in (camel, snake):
        [item] = wire.parse_gemini_request({**payload, "title": "T"}, "text-embedding-004").items
        assert item.dimensions == 8
        assert item.context == {
            "model": "text-embedding-004",
            "task_type": "RETRIEVAL_QUERY",
            "title": "T",
            "dimensions": 8,
        }


def test_a_gemini_batch_has_one_item_per_request_each_with_its_own_size() -> None:
    requests = [
        {"model": "models/m", "content": content("a"), "outputDimensionality": 4},
        {"model": "models/m", "content": content("b")},
    ]
    request = wire.parse_gemini_batch({"requests": requests}, "m")
    assert [(i.text, i.dimensions) for i in request.items] == [("a", 4), ("b", 768)]


GEMINI_REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({}, "requests: field required"),
    ({"requests": {}}, "requests: must be an array"),
    ({"requests": []}, "requests: must hold at least one request"),
    ({"requests": [5]}, "requests[0]: must be an object, not a number"),
    ({"requests": [{"content": content("x")}] * 101}, "requests: at most 100 requests"),
    ({"requests": [{}]}, "requests[0].content: field required"),
    ({"requests": [{"content": {}}]}, "requests[0].content.parts: field required"),
    ({"requests": [{"content": {"parts": "x"}}]}, "requests[0].content.parts: must be an array"),
    ({"requests": [{"content": content()}]}, "requests[0].content.parts: must hold some text"),
    ({"requests": [{"content": content("")}]}, "requests[0].content.parts: must hold some text"),
    (
        {"requests": [{"content": {"parts": [{"inlineData": {}}]}}]},
        "requests[0].content.parts[0]: only text parts can be embedded",
    ),
    ({"requests": [{"content": {"parts": [{"text": 5}]}}]}, "requests[0].content.parts[0].text"),
    (
        {"requests": [{"content": content("x"), "outputDimensionality": 0}]},
        "requests[0].outputDimensionality: must be from 1 to 4096, not 0",
    ),
    (
        {"requests": [{"content": content("x"), "output_dimensionality": "8"}]},
        "requests[0].output_dimensionality: must be an integer",
    ),
    ({"requests": [{"content": content("x"), "taskType": 1}]}, "requests[0].taskType"),
    ({"requests": [{"content": content("x"), "model": 1}]}, "requests[0].model"),
]


@pytest.mark.parametrize(("payload", "message"), GEMINI_REFUSALS)
def test_a_gemini_request_is_refused_naming_the_field(
    payload: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidRequest) as raised:
        wire.parse_gemini_batch(payload, "m")
    assert raised.value.message.startswith(message), raised.value.message


# -- bodies -------------------------------------------------------------------------------------


def test_the_openai_body_lists_the_vectors_as_floats_or_base64() -> None:
    vectors = [embed_text("a", 4), embed_text("b", 4)]
    floats = wire.parse_openai_request({"model": "m", "input": ["a", "b"], "dimensions": 4})
    body = wire.openai_body(floats, vectors, 2)
    assert body == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": vectors[0]},
            {"object": "embedding", "index": 1, "embedding": vectors[1]},
        ],
        "model": "m",
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
    }
    encoded = wire.EmbeddingRequest(model="m", items=floats.items, encoding="base64")
    data = wire.openai_body(encoded, vectors, 2)["data"]
    assert [list(struct.unpack("<4f", base64.b64decode(d["embedding"]))) for d in data] == vectors


def test_the_gemini_bodies() -> None:
    usage = {"promptTokenCount": 3, "totalTokenCount": 3}
    assert wire.gemini_single_body([1.0], 3) == {
        "embedding": {"values": [1.0]},
        "usageMetadata": usage,
    }
    assert wire.gemini_body([[1.0], [0.0]], 3) == {
        "embeddings": [{"values": [1.0]}, {"values": [0.0]}],
        "usageMetadata": usage,
    }


# -- vectors ------------------------------------------------------------------------------------


def reply(**fields: Any) -> Reply:
    return Reply(content="", confidence="medium", agent_type="router", **fields)


def test_a_pin_wider_than_the_request_becomes_a_400_naming_the_rule() -> None:
    item = wire.EmbeddingItem("x", 2, {})
    pinned = reply(embedding=(1.0, 2.0, 3.0), rule="wide")
    failed = wire.check_pin(item, pinned)
    assert failed.outcome == "error" and failed.error is not None
    assert failed.error.status == 400
    assert failed.error.message.startswith("rule 'wide' pins a vector of 3 dimensions")
    assert "the fallback pins" in wire.check_pin(item, reply(embedding=(1.0,) * 3)).error.message  # type: ignore[union-attr]
    fits = reply(embedding=(1.0, 2.0))
    assert wire.check_pin(item, fits) is fits
    scripted = reply(embedding=(1.0,) * 3, error=ReplyError(503, "t", "m"))
    assert wire.check_pin(item, scripted) is scripted


def test_each_item_gets_its_pin_its_likeness_or_its_own_vector() -> None:
    item = wire.EmbeddingItem("mine", 4, {})
    assert wire.item_vector(item, reply(embedding=(0.0, 2.0))) == [0.0, 1.0, 0.0, 0.0]
    assert wire.item_vector(item, reply(embedding_like="other")) == embed_text("other", 4)
    assert wire.item_vector(item, reply()) == embed_text("mine", 4)


def test_the_prompt_tokens_add_up_each_texts_input_tokens() -> None:
    replies = [reply(usage=Usage(3, 0)), reply(usage=Usage(4, 9))]
    assert wire.prompt_tokens(replies) == 7
