"""The OpenAI Responses routes: ``POST /v1/responses``, ``GET``/``DELETE /v1/responses/{id}``.

All three also answer under an ``/agents/{agent_type}/`` prefix, as the chat
route does. A response is stored (unless the request says ``store: false``)
before its first byte leaves, so a follow-up naming it as
``previous_response_id`` finds it on any worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from channels.db import database_sync_to_async
from django.urls import re_path

from staticagents.core.timing import TimedFrame
from staticagents.dialects.llm.routes import AGENT_PREFIX, ModelReplyRoute, retry_headers
from staticagents.dialects.llm.wire import Envelope, InvalidRequest
from staticagents.dialects.openai import wire as openai
from staticagents.dialects.openai.routes import openai_key_refusal
from staticagents.dialects.responses import store
from staticagents.dialects.responses import wire as responses
from staticagents.dialects.responses.wire import Item, ResponsesRequest
from staticagents.serving import access
from staticagents.serving.route import (
    RequestRejected,
    StreamFaulted,
    parse_json_object,
    sse_frames,
)


class ResponsesApiRoute(ModelReplyRoute):
    """OpenAI's error shape and key refusal, for every Responses route."""

    dialect = "responses"
    id_prefix = "resp_"

    def error_body(self, rejection: RequestRejected) -> Any:
        return openai.error_body(rejection.message, rejection.kind, rejection.param, rejection.code)

    def key_refusal(self, refusal: access.Refusal) -> RequestRejected:
        return openai_key_refusal(refusal)


class ResponsesRoute(ResponsesApiRoute):
    """``POST /v1/responses``: a response object, or its typed events."""

    sent = 0  # the events of the stream sent so far

    async def respond(self, body: bytes) -> None:
        self.require_method("POST")
        request = self.read(body)
        history = await self.history(request.previous_response_id)
        answer = await self.answer(request.conversation(history), body)
        reply, envelope = answer.reply, self.envelope(answer, request.model)
        headers = self.request_id_headers(envelope)
        if reply.error is not None:
            headers += retry_headers(reply.retry_after)
            error = openai.scripted_error_body(reply.error)
            await self.send_json(reply.error.status, error, headers)
            return
        final = responses.response_body(reply, envelope, request)
        if request.store:
            items = [*history, *request.items, *responses.conversation_items(reply)]
            await store.keep_response(envelope.id, final, items)
        if not request.stream:
            await self.send_json(200, final, headers)
            return
        frames = responses.stream_events(reply, envelope, request)
        await self.stream_response(frames, envelope, request, headers)

    def read(self, body: bytes) -> ResponsesRequest:
        try:
            return responses.parse_responses_request(parse_json_object(body))
        except InvalidRequest as invalid:
            raise RequestRejected(400, invalid.message, param=invalid.param) from None

    async def history(self, previous_response_id: str | None) -> list[Item]:
        """The stored conversation that ``previous_response_id`` names (none: empty)."""
        if previous_response_id is None:
            return []
        items: list[Item] | None = await database_sync_to_async(store.conversation_of)(
            previous_response_id
        )
        if items is None:
            raise RequestRejected(
                400,
                f"Previous response with id {previous_response_id!r} not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return items

    async def stream_response(
        self,
        frames: Iterable[TimedFrame],
        envelope: Envelope,
        request: ResponsesRequest,
        headers: Sequence[tuple[bytes, bytes]],
    ) -> None:
        """Send the typed events on their schedule. A stream the maximum duration cuts
        off ends with ``response.failed``; one that a scripted fault fails ends as the
        fault says (``serving/stream.py``). Either way the stored response is failed."""
        await self.start_sse(headers)
        try:
            stopped = await self.send_paced(frames, closing=b"")
        except StreamFaulted:
            await self.record_failure(envelope, request, responses.FAULT_MESSAGE)
            raise
        if stopped is not None:
            message = responses.cut_off_message(stopped.limit)
            frame = await self.record_failure(envelope, request, message, self.sent)
            await self.end_stream(sse_frames([frame]))

    def render_frames(self, frames: list[TimedFrame]) -> bytes:
        self.sent += len(frames)
        return sse_frames(frames)

    def fault_frame(self, at: float) -> TimedFrame:
        """An ``error_event`` fault: the stream's ``error`` event, numbered after those sent."""
        return responses.error_event(at, responses.FAULT_MESSAGE, self.sent)

    async def record_failure(
        self, envelope: Envelope, request: ResponsesRequest, message: str, sequence: int = 0
    ) -> TimedFrame:
        """The ``response.failed`` event numbered ``sequence``; the stored response, failed."""
        failed, frame = responses.failed_event(envelope, request, message, sequence)
        if request.store:
            await database_sync_to_async(store.replace_body)(envelope.id, failed)
        return frame


class StoredResponseRoute(ResponsesApiRoute):
    """``GET /v1/responses/{id}`` (the stored response) and ``DELETE`` (forget it)."""

    async def respond(self, body: bytes) -> None:
        method = self.scope.get("method", "")
        response_id: str = self.scope["url_route"]["kwargs"]["response_id"]
        if method == "GET":
            stored = await database_sync_to_async(store.stored_body)(response_id)
            if stored is None:
                raise self.not_found(response_id)
            await self.send_json(200, stored)
        elif method == "DELETE":
            if not await database_sync_to_async(store.delete_response)(response_id):
                raise self.not_found(response_id)
            await self.send_json(200, responses.deleted_body(response_id))
        else:
            path = self.scope.get("path", "")
            raise RequestRejected(
                405, f"method {method} is not allowed on {path}: use GET or DELETE"
            )

    @staticmethod
    def not_found(response_id: str) -> RequestRejected:
        return RequestRejected(404, f"Response with id {response_id!r} not found.")


http_routes = [
    re_path(AGENT_PREFIX + r"v1/responses/?$", ResponsesRoute.as_asgi()),
    re_path(
        AGENT_PREFIX + r"v1/responses/(?P<response_id>[^/]+)/?$", StoredResponseRoute.as_asgi()
    ),
]
