"""The OpenAI reply routes: ``POST /v1/chat/completions`` and ``GET /v1/models``.

Both also answer under an ``/agents/{agent_type}/`` prefix, so a client whose
``base_url`` is ``http://host/agents/router/v1`` talks to the router's rules.
"""

from __future__ import annotations

from typing import Any

from django.urls import re_path

from staticagents.core.timing import TimedFrame
from staticagents.dialects.anthropic import wire as anthropic
from staticagents.dialects.llm.routes import (
    AGENT_PREFIX,
    ModelReplyRoute,
    retry_headers,
)
from staticagents.dialects.openai import wire as openai
from staticagents.replying.snapshot import current_ruleset
from staticagents.serving import access
from staticagents.serving.route import RequestRejected


class ChatCompletionsRoute(ModelReplyRoute):
    dialect = "openai"
    id_prefix = "chatcmpl-"

    async def respond(self, body: bytes) -> None:
        self.require_method("POST")
        conversation = self.parse(openai.parse_chat_request, body)
        if await self.forwarded(conversation, body):
            return
        answer = await self.answer(conversation, body)
        reply, envelope = answer.reply, self.envelope(answer, conversation.model)
        headers = self.request_id_headers(envelope)
        if reply.error is not None:
            headers += retry_headers(reply.retry_after)
            await self.send_json(
                reply.error.status, openai.scripted_error_body(reply.error), headers
            )
        elif not conversation.stream:
            await self.send_json(200, openai.completion_body(reply, envelope), headers)
        else:
            events = openai.stream_events(reply, envelope, include_usage=conversation.include_usage)
            await self.stream(events, headers, closing=openai.DONE, cut_off=openai.cut_off_event)

    def error_body(self, rejection: RequestRejected) -> Any:
        return openai.error_body(rejection.message, rejection.kind, rejection.param, rejection.code)

    def key_refusal(self, refusal: access.Refusal) -> RequestRejected:
        return openai_key_refusal(refusal)

    def fault_frame(self, at: float) -> TimedFrame:
        return openai.fault_event(at)


def openai_key_refusal(refusal: access.Refusal) -> RequestRejected:
    """OpenAI's 401: an invalid_request_error, coded invalid_api_key for a wrong key."""
    code = "invalid_api_key" if refusal.reason == access.INVALID else None
    return RequestRejected(401, refusal.message, "invalid_request_error", code=code)


class ModelsRoute(ModelReplyRoute):
    """One model per agent type, plus the default; in Anthropic's shape for its SDK."""

    key_sources = access.MODELS

    async def respond(self, body: bytes) -> None:
        self.require_method("GET")
        agent_types = (await current_ruleset()).agent_types
        if self.from_anthropic:
            await self.send_json(200, anthropic.models_body(agent_types))
        else:
            await self.send_json(200, openai.models_body(agent_types))

    @property
    def from_anthropic(self) -> bool:
        return "anthropic-version" in self.request_headers

    def error_body(self, rejection: RequestRejected) -> Any:
        if self.from_anthropic:
            return anthropic.error_body(rejection.message, rejection.kind)
        return openai.error_body(rejection.message, rejection.kind, rejection.param, rejection.code)

    def key_refusal(self, refusal: access.Refusal) -> RequestRejected:
        if self.from_anthropic:
            return super().key_refusal(refusal)
        return openai_key_refusal(refusal)


http_routes = [
    re_path(AGENT_PREFIX + r"v1/chat/completions/?$", ChatCompletionsRoute.as_asgi()),
    re_path(AGENT_PREFIX + r"v1/models/?$", ModelsRoute.as_asgi()),
]
