"""The Gemini reply routes, under ``/v1beta`` (google-genai 2.x) and ``/v1`` (3.x).

``POST models/{model}:generateContent``, ``:streamGenerateContent`` (``data:``
frames with ``?alt=sse``, else one JSON array sent element by element) and
``:countTokens``; ``GET models`` and ``GET models/{model}``. Each also answers
under an ``/agents/{agent_type}/`` prefix. The model in the path picks the
agent type as a requested model does for OpenAI (``GET models`` lists one per
type). ``GET /v1/models`` is OpenAI's and Anthropic's listing too: a Google
client (its key header, its library header, or ``?key=``) gets Gemini's.

The patterns claim only these methods: ``model_method(name)`` builds the
pattern of another method on a model (``:embedContent``), whose route is listed
beside these in ``staticagents/asgi.py``; a method no route serves falls
through to Google's 404 (``serving/fallback.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl

import orjson
from django.urls import URLPattern, re_path

from staticagents.core.replies import Reply
from staticagents.core.timing import TimedFrame
from staticagents.dialects.gemini import wire as gemini
from staticagents.dialects.llm.routes import AGENT_PREFIX, ModelReplyRoute, retry_headers
from staticagents.dialects.llm.wire import Envelope, InvalidRequest
from staticagents.replying.snapshot import current_ruleset
from staticagents.serving import access
from staticagents.serving.pacer import pacer
from staticagents.serving.route import (
    Receive,
    RequestRejected,
    Scope,
    Send,
    parse_json_object,
)
from staticagents.serving.stream import CutOff, send_paced

VERSION = r"(?:v1beta|v1)/"
JSON_STREAM_TYPE = (b"content-type", b"application/json; charset=UTF-8")


def model_method(method: str) -> str:
    """The path pattern of ``POST …/models/{model}:{method}``, under both versions."""
    return rf"{AGENT_PREFIX}{VERSION}models/(?P<model>[^/:]+):{method}$"


class GeminiRoute(ModelReplyRoute):
    """Google's error shape, its key sources and its answers to a refused key."""

    dialect = "gemini"
    key_sources = access.GEMINI

    def error_body(self, rejection: RequestRejected) -> Any:
        """Google's error; a ``code`` on the rejection is the reason of an ``ErrorInfo`` detail."""
        status = rejection.kind if rejection.kind in gemini.CANONICAL_CODES else None
        details = gemini.key_error_details(rejection.code) if rejection.code else ()
        return gemini.error_body(rejection.status, rejection.message, status, details)

    def key_refusal(self, refusal: access.Refusal) -> RequestRejected:
        """Google's answers: 403 without a key, 400 API_KEY_INVALID for a wrong API key,
        401 for a wrong bearer token."""
        if refusal.reason == access.MISSING:
            return RequestRejected(403, refusal.message, "PERMISSION_DENIED")
        if "x-goog-api-key" in self.request_headers or self.query("key") is not None:
            message = f"API key not valid. Please pass a valid API key. {refusal.message}"
            return RequestRejected(400, message, "INVALID_ARGUMENT", code="API_KEY_INVALID")
        return RequestRejected(401, refusal.message, "UNAUTHENTICATED")

    def query(self, name: str) -> str | None:
        """The last value of a query parameter, or None."""
        raw = self.scope.get("query_string", b"").decode("latin-1")
        values = [value for key, value in parse_qsl(raw) if key == name]
        return values[-1] if values else None

    @property
    def model(self) -> str:
        """The model the path names (``gemini-2.5-flash`` of ``models/gemini-2.5-flash:…``)."""
        model: str = self.scope["url_route"]["kwargs"]["model"]
        return model

    def read(self, body: bytes) -> dict[str, Any]:
        """The JSON object a method on a model is posted with."""
        self.require_method("POST")
        return parse_json_object(body)


class GenerateContentRoute(GeminiRoute):
    """``POST models/{model}:generateContent``: one ``GenerateContentResponse``."""

    async def respond(self, body: bytes) -> None:
        payload = self.read(body)
        try:
            generation = gemini.parse_generate_request(payload, self.model)
        except InvalidRequest as invalid:
            raise RequestRejected(400, invalid.message, param=invalid.param) from None
        answer = await self.answer(generation.conversation, body)
        reply, envelope = answer.reply, self.envelope(answer, self.model)
        headers = self.request_id_headers(envelope)
        if reply.error is not None:
            headers += retry_headers(reply.retry_after)
            error = gemini.scripted_error_body(reply.error, reply.retry_after)
            await self.send_json(reply.error.status, error, headers)
        else:
            await self.send_reply(reply, envelope, generation.include_thoughts, headers)

    async def send_reply(
        self,
        reply: Reply,
        envelope: Envelope,
        include_thoughts: bool,
        headers: list[tuple[bytes, bytes]],
    ) -> None:
        body = gemini.response_body(reply, envelope, include_thoughts=include_thoughts)
        await self.send_json(200, body, headers)


class StreamGenerateContentRoute(GenerateContentRoute):
    """``POST models/{model}:streamGenerateContent``: SSE with ``?alt=sse``, else a JSON array.

    A stream that would outlast the maximum duration ends with Google's error
    object in its place (``DEADLINE_EXCEEDED``), which google-genai raises.
    """

    async def send_reply(
        self,
        reply: Reply,
        envelope: Envelope,
        include_thoughts: bool,
        headers: list[tuple[bytes, bytes]],
    ) -> None:
        chunks = gemini.stream_chunks(reply, envelope, include_thoughts=include_thoughts)
        if self.query("alt") == "sse":
            await self.start_sse(headers)
            stopped = await self.send_chunks(chunks, gemini.sse_chunks, b"")
            if stopped is not None:
                cut_off = TimedFrame(stopped.limit, gemini.cut_off_body(stopped.limit))
                await self.end_stream(gemini.sse_chunks([cut_off]))
            return
        await self.start_json_stream(headers)
        array = gemini.ArrayChunks()
        stopped = await self.send_chunks(chunks, array, gemini.ARRAY_END)
        if stopped is not None:
            await self.end_stream(
                array.ending_with(orjson.dumps(gemini.cut_off_body(stopped.limit)))
            )

    async def send_chunks(
        self,
        chunks: Iterable[TimedFrame],
        render: Callable[[list[TimedFrame]], bytes],
        closing: bytes,
    ) -> CutOff | None:
        """Send the chunks on their schedule in Gemini's framing; a ``CutOff`` if cut off."""
        sent = await send_paced(
            chunks,
            render,
            self.send_chunk,
            finish=self.closer(closing),
            entry_id=self.entry_id,
            timer=pacer(self.loop),
            fault=self.fault,
            error_frame=self.fault_frame,
        )
        return await self.unless_faulted(sent)

    def fault_frame(self, at: float) -> TimedFrame:
        return TimedFrame(at, gemini.fault_body())

    async def start_json_stream(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.watch()  # a stream lasts: a client that leaves it stops it
        await self.send_start(200, [JSON_STREAM_TYPE, *headers])


class CountTokensRoute(GeminiRoute):
    """``POST models/{model}:countTokens``: the prompt's word estimate; no rule is consulted."""

    async def respond(self, body: bytes) -> None:
        payload = self.read(body)
        try:
            total = gemini.prompt_tokens(payload)
        except InvalidRequest as invalid:
            raise RequestRejected(400, invalid.message, param=invalid.param) from None
        await self.send_json(200, gemini.count_tokens_body(total))


class ModelsRoute(GeminiRoute):
    """``GET models``: the default model and one per agent type; ``GET models/{model}``: any."""

    async def respond(self, body: bytes) -> None:
        self.require_method("GET")
        model = self.scope["url_route"]["kwargs"].get("model")
        if model is not None:
            await self.send_json(200, gemini.model_body(model))
        else:
            agent_types = (await current_ruleset()).agent_types
            await self.send_json(200, gemini.models_body(agent_types))


def shared_models_listing(other: Any) -> URLPattern:
    """``GET /v1/models``, shared with ``other`` (OpenAI's and Anthropic's listing).

    A Google client gets Gemini's list; any other client, ``other``'s.
    """
    other_route = getattr(other, "handler_class", other)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        headers = {name.decode("latin-1").lower(): "" for name, _ in scope.get("headers", [])}
        google = gemini.is_google_client(headers, scope.get("query_string", b""))
        await (ModelsRoute if google else other_route)(scope, send).run(receive)

    view: Any = app  # Django's URL patterns are typed for views; the reply router calls ASGI apps
    pattern: URLPattern = re_path(AGENT_PREFIX + r"v1/models/?$", view)
    return pattern


http_routes = [
    re_path(model_method("generateContent"), GenerateContentRoute.as_asgi()),
    re_path(model_method("streamGenerateContent"), StreamGenerateContentRoute.as_asgi()),
    re_path(model_method("countTokens"), CountTokensRoute.as_asgi()),
    re_path(AGENT_PREFIX + r"v1beta/models/?$", ModelsRoute.as_asgi()),
    re_path(AGENT_PREFIX + VERSION + r"models/(?P<model>[^/:]+)/?$", ModelsRoute.as_asgi()),
]
