"""Embeddings as OpenAI and Gemini speak them: the request parsers and the body renderers.

Pure: no Django, no I/O. Both APIs come down to an ``EmbeddingRequest``: the
model, and the texts to embed, each with the dimensions its vector must have
(a Gemini batch may ask different ones per text) and the context rules see.
Requests are read as the APIs read them (unknown keys ignored; Gemini's
camelCase or snake_case), and refused naming the field (``input[2]``,
``requests[0].content.parts``).

* OpenAI, ``POST /v1/embeddings``: ``input`` is a string, an array of strings,
  one token array or an array of token arrays (at most 2,048 inputs); a token
  array is embedded (and matched) as its numbers joined by spaces.
  ``dimensions`` and ``encoding_format`` (``float``, or ``base64``: little-endian
  float32, which the ``openai`` SDK asks for and decodes by default).
* Gemini, ``models/{model}:embedContent`` (one ``content``) and
  ``:batchEmbedContents`` (``requests``, at most 100): the text parts of a
  content, joined by newlines; ``outputDimensionality``; ``taskType`` and
  ``title`` reach rules as context fields ``task_type`` and ``title``.

Without a requested size, a vector has its model's published size
(``default_dimensions``). The vectors themselves are ``core.embeddings``'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from staticagents.core.embeddings import MAX_DIMENSIONS, base64_vector, reply_vector
from staticagents.core.inquiry import Inquiry
from staticagents.core.replies import Reply, ReplyError
from staticagents.core.values import value_class
from staticagents.dialects.llm.wire import (
    InvalidRequest,
    joined,
    objects,
    optional,
    required,
    type_name,
)

DIALECT = "embeddings"
OPENAI, GEMINI = "openai", "gemini"
MAX_OPENAI_INPUTS = 2048
MAX_GEMINI_REQUESTS = 100
ENCODINGS = ("float", "base64")
# A model's own vector size where its provider publishes one (first matching prefix wins).
MODEL_DIMENSIONS = (
    ("text-embedding-3-large", 3072),
    ("text-embedding-3-small", 1536),
    ("text-embedding-ada-002", 1536),
    ("gemini-embedding", 3072),
    ("text-embedding-00", 768),
    ("embedding-001", 768),
)
PROVIDER_DIMENSIONS = {OPENAI: 1536, GEMINI: 768}
# Gemini's fields read in either spelling, as Google's JSON parser reads them.
CAMEL_CASE = {
    "output_dimensionality": "outputDimensionality",
    "task_type": "taskType",
    "title": "title",
}


@value_class
class EmbeddingItem:
    """One text to embed, at ``dimensions``, with what rules see beside it."""

    text: str
    dimensions: int
    context: Mapping[str, Any]


@value_class
class EmbeddingRequest:
    model: str
    items: tuple[EmbeddingItem, ...]
    encoding: str = "float"  # OpenAI's encoding_format

    def inquiries(
        self, *, agent_type: str, session: str, headers: Mapping[str, str]
    ) -> list[Inquiry]:
        """One inquiry per text, in the ``embeddings`` dialect."""
        return [
            Inquiry(
                query=item.text,
                agent_type=agent_type,
                context=item.context,
                model=self.model,
                dialect=DIALECT,
                session=session,
                headers=headers,
            )
            for item in self.items
        ]


def default_dimensions(model: str, provider: str) -> int:
    """The size of ``model``'s vectors when a request asks for none."""
    name = model.rsplit("/", 1)[-1]
    for prefix, dimensions in MODEL_DIMENSIONS:
        if name.startswith(prefix):
            return dimensions
    return PROVIDER_DIMENSIONS[provider]


def _dimensions(payload: Mapping[str, Any], key: str, path: str = "") -> int | None:
    value: int | None = optional(payload, key, int, path)
    if value is not None and not 1 <= value <= MAX_DIMENSIONS:
        raise InvalidRequest(f"{path}{key}", f"must be from 1 to {MAX_DIMENSIONS}, not {value}")
    return value


# -- OpenAI ------------------------------------------------------------------------------


def parse_openai_request(payload: Mapping[str, Any]) -> EmbeddingRequest:
    """Read a ``POST /v1/embeddings`` body, or raise InvalidRequest naming the field."""
    model: str = required(payload, "model", str)
    texts = openai_texts(payload)
    dimensions = _dimensions(payload, "dimensions") or default_dimensions(model, OPENAI)
    encoding = optional(payload, "encoding_format", str) or "float"
    if encoding not in ENCODINGS:
        raise InvalidRequest("encoding_format", f"must be 'float' or 'base64', not {encoding!r}")
    context = {"model": model, "dimensions": dimensions}
    items = tuple(EmbeddingItem(text, dimensions, context) for text in texts)
    return EmbeddingRequest(model=model, items=items, encoding=encoding)


def openai_texts(payload: Mapping[str, Any]) -> list[str]:
    """The texts of ``input``: a string, strings, a token array or token arrays."""
    if "input" not in payload:
        raise InvalidRequest("input", "field required")
    given = payload["input"]
    if isinstance(given, str):
        return [_text(given, "input")]
    if not isinstance(given, list):
        raise InvalidRequest(
            "input",
            "must be a string, an array of strings or an array of token arrays, "
            f"not {type_name(given)}",
        )
    if not given:
        raise InvalidRequest("input", "must not be an empty array")
    if len(given) > MAX_OPENAI_INPUTS:
        raise InvalidRequest("input", f"at most {MAX_OPENAI_INPUTS} inputs, not {len(given)}")
    if _is_token(given[0]):
        return [_token_text(given, "input")]
    if not isinstance(given[0], str | list):
        message = f"must be a string, a token or a token array, not {type_name(given[0])}"
        raise InvalidRequest("input[0]", message)
    kind = list if isinstance(given[0], list) else str
    texts = []
    for index, item in enumerate(given):
        where = f"input[{index}]"
        if not isinstance(item, kind):
            expected = "a token array" if kind is list else "a string"
            raise InvalidRequest(where, f"must be {expected} like input[0], not {type_name(item)}")
        texts.append(_token_text(item, where) if kind is list else _text(item, where))
    return texts


def _text(text: str, where: str) -> str:
    if not text:
        raise InvalidRequest(where, "must not be an empty string")
    return text


def _is_token(item: Any) -> bool:
    return isinstance(item, int) and not isinstance(item, bool)


def _token_text(tokens: list[Any], where: str) -> str:
    """A token array as the text the service embeds and matches: its numbers, space-separated."""
    if not tokens:
        raise InvalidRequest(where, "must not be an empty token array")
    for index, token in enumerate(tokens):
        if not _is_token(token) or token < 0:
            shown = token if _is_token(token) else type_name(token)
            message = f"must be a token (an integer of 0 or more), not {shown}"
            raise InvalidRequest(f"{where}[{index}]", message)
    return " ".join(map(str, tokens))


def openai_body(
    request: EmbeddingRequest, vectors: Sequence[Sequence[float]], prompt_tokens: int
) -> dict[str, Any]:
    """The ``list`` of ``embedding`` objects, in the input's order, with the usage."""
    base64 = request.encoding == "base64"
    return {
        "object": "list",
        "data": [
            {
                "object": "embedding",
                "index": index,
                "embedding": base64_vector(vector) if base64 else vector,
            }
            for index, vector in enumerate(vectors)
        ],
        "model": request.model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


# -- Gemini ------------------------------------------------------------------------------


def parse_gemini_request(payload: Mapping[str, Any], model: str) -> EmbeddingRequest:
    """Read a ``models/{model}:embedContent`` body (one content)."""
    return EmbeddingRequest(model=model, items=(_gemini_item(payload, model, ""),))


def parse_gemini_batch(payload: Mapping[str, Any], model: str) -> EmbeddingRequest:
    """Read a ``models/{model}:batchEmbedContents`` body (``requests``, in order)."""
    requests = objects(required(payload, "requests", list), "requests")
    if not requests:
        raise InvalidRequest("requests", "must hold at least one request")
    if len(requests) > MAX_GEMINI_REQUESTS:
        raise InvalidRequest(
            "requests", f"at most {MAX_GEMINI_REQUESTS} requests in one batch, not {len(requests)}"
        )
    items = tuple(
        _gemini_item(request, model, f"requests[{index}].")
        for index, request in enumerate(requests)
    )
    return EmbeddingRequest(model=model, items=items)


def _gemini_item(payload: Mapping[str, Any], model: str, path: str) -> EmbeddingItem:
    optional(payload, "model", str, path)  # each batch request names its model; the URL's counts
    content = required(payload, "content", dict, path)
    size = _dimensions(payload, _key(payload, "output_dimensionality"), path)
    context: dict[str, Any] = {"model": model}
    for field in ("task_type", "title"):
        value = optional(payload, _key(payload, field), str, path)
        if value is not None:
            context[field] = value
    context["dimensions"] = dimensions = size or default_dimensions(model, GEMINI)
    return EmbeddingItem(_content_text(content, f"{path}content"), dimensions, context)


def _key(payload: Mapping[str, Any], field: str) -> str:
    """The key ``field`` is sent under: camelCase (google-genai's), else snake_case."""
    camel = CAMEL_CASE[field]
    return camel if payload.get(camel) is not None else field


def _content_text(content: Mapping[str, Any], path: str) -> str:
    """The text of a content: its text parts, joined by newlines; other parts are refused."""
    parts = objects(required(content, "parts", list, f"{path}."), f"{path}.parts")
    texts = []
    for index, part in enumerate(parts):
        where = f"{path}.parts[{index}]"
        if "text" not in part:
            raise InvalidRequest(where, "only text parts can be embedded by this service")
        texts.append(required(part, "text", str, f"{where}."))
    text = joined(texts)
    if not text:
        raise InvalidRequest(f"{path}.parts", "must hold some text to embed")
    return text


def gemini_body(vectors: Sequence[Sequence[float]], prompt_tokens: int) -> dict[str, Any]:
    """``:batchEmbedContents``: one embedding per request, in order."""
    return {
        "embeddings": [{"values": vector} for vector in vectors],
        "usageMetadata": _usage_metadata(prompt_tokens),
    }


def gemini_single_body(vector: Sequence[float], prompt_tokens: int) -> dict[str, Any]:
    """``:embedContent``: the one embedding."""
    return {"embedding": {"values": vector}, "usageMetadata": _usage_metadata(prompt_tokens)}


def _usage_metadata(prompt_tokens: int) -> dict[str, int]:
    return {"promptTokenCount": prompt_tokens, "totalTokenCount": prompt_tokens}


# -- vectors -----------------------------------------------------------------------------


def check_pin(item: EmbeddingItem, reply: Reply) -> Reply:
    """``reply``, or a 400 when the vector it pins is longer than the request asks for."""
    pinned = reply.embedding
    if reply.error is not None or pinned is None or len(pinned) <= item.dimensions:
        return reply
    rule = f"rule {reply.rule!r}" if reply.rule is not None else "the fallback"
    message = (
        f"{rule} pins a vector of {len(pinned)} dimensions, and the request asks for "
        f"{item.dimensions}: pin at most {item.dimensions} values (fewer are zero-padded)"
    )
    error = ReplyError(400, "invalid_request_error", message)
    return replace(reply, error=error, outcome="error")


def item_vector(item: EmbeddingItem, reply: Reply) -> list[float]:
    """The vector ``item`` gets from its reply (see ``core.embeddings.reply_vector``)."""
    return reply_vector(
        item.text, item.dimensions, pinned=reply.embedding, like=reply.embedding_like
    )


def prompt_tokens(replies: Sequence[Reply]) -> int:
    """The request's usage: each text's input tokens (its words, or the rule's ``usage``)."""
    return sum(reply.usage.input_tokens for reply in replies)
