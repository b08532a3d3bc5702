"""The embeddings reply routes: OpenAI's ``POST /v1/embeddings`` and Gemini's
``models/{model}:embedContent`` and ``:batchEmbedContents`` (under ``/v1beta`` and ``/v1``).

Each also answers under an ``/agents/{agent_type}/`` prefix. The Gemini routes
take Google's keys and answer Google's errors as the Gemini dialect's routes do. Every text of a
request is an inquiry in the ``embeddings`` dialect, matched on its own; the
request is journaled once (``replying.batch``). The first text whose rule
scripts an error fails the whole request, in the API's own error shape.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson
from django.urls import re_path

from staticagents.core.embeddings import TEXT_WINDOW
from staticagents.core.inquiry import session_key
from staticagents.core.replies import Reply
from staticagents.dialects.embeddings import wire
from staticagents.dialects.gemini import wire as gemini
from staticagents.dialects.gemini.routes import GeminiRoute, model_method
from staticagents.dialects.llm.routes import AGENT_PREFIX, ModelReplyRoute, retry_headers
from staticagents.dialects.llm.wire import InvalidRequest, choose_agent_type
from staticagents.dialects.openai import wire as openai
from staticagents.dialects.openai.routes import openai_key_refusal
from staticagents.replying.batch import BatchAnswer, aanswer_inquiries
from staticagents.replying.snapshot import current_ruleset
from staticagents.serving import access
from staticagents.serving.route import RequestRejected, parse_json_object

# Work (characters read plus components written) above which the vectors are
# computed and rendered in a thread, so that a large request does not hold the event loop.
THREAD_WORK = 50_000
T = TypeVar("T")


class EmbeddingsRoute(ModelReplyRoute):
    """Parse, answer each text, then send the vectors or the first scripted error."""

    dialect = wire.DIALECT

    async def respond(self, body: bytes) -> None:
        self.require_method("POST")
        request = self.read_request(parse_json_object(body))
        answer = await self.answering(self.answer_texts(request, body), lambda a: a.entry_id)
        failure = answer.failure
        if failure is not None and failure.error is not None:
            headers = retry_headers(failure.retry_after)
            await self.send_json(failure.error.status, self.failure_body(failure), headers)
            return
        payload = await off_the_loop_if_large(request, lambda: self.rendered(request, answer))
        await self.send_json(200, payload, self.id_headers(answer))

    def rendered(self, request: wire.EmbeddingRequest, answer: BatchAnswer) -> orjson.Fragment:
        """The answer's body, rendered: each text's vector, and the usage."""
        replies = answer.replies
        vectors = [wire.item_vector(i, r) for i, r in zip(request.items, replies, strict=True)]
        return orjson.Fragment(
            orjson.dumps(self.body(request, vectors, wire.prompt_tokens(replies)))
        )

    def read_request(self, payload: Mapping[str, Any]) -> wire.EmbeddingRequest:
        try:
            return self.parser(payload)
        except InvalidRequest as invalid:
            raise RequestRejected(400, invalid.message, param=invalid.param) from None

    async def answer_texts(self, request: wire.EmbeddingRequest, body: bytes) -> BatchAnswer:
        headers = self.request_headers
        ruleset = await current_ruleset()
        agent_type = choose_agent_type(
            prefix=self.route_kwargs.get("agent_type"),
            header=headers.get("x-agent-type"),
            model=request.model,
            known=ruleset.agent_types,
        )
        inquiries = request.inquiries(
            agent_type=agent_type, session=session_key(headers), headers=headers
        )
        return await aanswer_inquiries(
            inquiries,
            route=self.scope.get("path", ""),
            body=body,
            ruleset=ruleset,
            settle=lambda index, reply: wire.check_pin(request.items[index], reply),
        )

    @property
    def route_kwargs(self) -> Mapping[str, str]:
        kwargs: Mapping[str, str] = self.scope.get("url_route", {}).get("kwargs", {})
        return kwargs

    def id_headers(self, answer: BatchAnswer) -> list[tuple[bytes, bytes]]:
        return []

    # -- to implement ----------------------------------------------------------------

    def parser(self, payload: Mapping[str, Any]) -> wire.EmbeddingRequest:
        raise NotImplementedError

    def body(
        self, request: wire.EmbeddingRequest, vectors: Sequence[list[float]], tokens: int
    ) -> Any:
        raise NotImplementedError

    def failure_body(self, reply: Reply) -> Any:
        raise NotImplementedError


class OpenAIEmbeddingsRoute(EmbeddingsRoute):
    def parser(self, payload: Mapping[str, Any]) -> wire.EmbeddingRequest:
        return wire.parse_openai_request(payload)

    def body(
        self, request: wire.EmbeddingRequest, vectors: Sequence[list[float]], tokens: int
    ) -> Any:
        return wire.openai_body(request, vectors, tokens)

    def failure_body(self, reply: Reply) -> Any:
        assert reply.error is not None
        return openai.scripted_error_body(reply.error)

    def id_headers(self, answer: BatchAnswer) -> list[tuple[bytes, bytes]]:
        """A request id the SDK reads (``_request_id``); it names the journal entry."""
        suffix = f"static{answer.entry_id}" if answer.entry_id else uuid.uuid4().hex[:24]
        return [(b"x-request-id", f"req_{suffix}".encode())]

    def error_body(self, rejection: RequestRejected) -> Any:
        return openai.error_body(rejection.message, rejection.kind, rejection.param, rejection.code)

    def key_refusal(self, refusal: access.Refusal) -> RequestRejected:
        return openai_key_refusal(refusal)


class GeminiEmbedRoute(EmbeddingsRoute, GeminiRoute):
    """``:embedContent``: one content, one embedding; Google's errors and keys (``GeminiRoute``)."""

    def parser(self, payload: Mapping[str, Any]) -> wire.EmbeddingRequest:
        return wire.parse_gemini_request(payload, self.model)

    def body(
        self, request: wire.EmbeddingRequest, vectors: Sequence[list[float]], tokens: int
    ) -> Any:
        return wire.gemini_single_body(vectors[0], tokens)

    def failure_body(self, reply: Reply) -> Any:
        assert reply.error is not None
        return gemini.scripted_error_body(reply.error, reply.retry_after)


class GeminiBatchEmbedRoute(GeminiEmbedRoute):
    """``:batchEmbedContents``: one embedding per request (google-genai's only way)."""

    def parser(self, payload: Mapping[str, Any]) -> wire.EmbeddingRequest:
        return wire.parse_gemini_batch(payload, self.model)

    def body(
        self, request: wire.EmbeddingRequest, vectors: Sequence[list[float]], tokens: int
    ) -> Any:
        return wire.gemini_body(vectors, tokens)


async def off_the_loop_if_large(request: wire.EmbeddingRequest, work: Callable[[], T]) -> T:
    """``work()``, in a thread when the request is large (``THREAD_WORK``)."""
    size = sum(min(len(item.text), TEXT_WINDOW) + item.dimensions for item in request.items)
    if size <= THREAD_WORK:
        return work()
    return await asyncio.to_thread(work)


http_routes: list[Any] = [
    re_path(AGENT_PREFIX + r"v1/embeddings/?$", OpenAIEmbeddingsRoute.as_asgi()),
    re_path(model_method("embedContent"), GeminiEmbedRoute.as_asgi()),
    re_path(model_method("batchEmbedContents"), GeminiBatchEmbedRoute.as_asgi()),
]
