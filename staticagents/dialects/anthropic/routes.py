"""The Anthropic reply route: ``POST /v1/messages``.

It also answers under an ``/agents/{agent_type}/`` prefix, so a client whose
``base_url`` is ``http://host/agents/router`` talks to the router's rules.
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
from staticagents.serving import access
from staticagents.serving.route import RequestRejected


class MessagesRoute(ModelReplyRoute):
    dialect = "anthropic"
    id_prefix = "msg_"
    request_id_header = b"request-id"
    key_sources = access.ANTHROPIC  # x-api-key, as the SDK sends it (or Bearer)

    async def respond(self, body: bytes) -> None:
        self.require_method("POST")
        conversation = self.parse(anthropic.parse_messages_request, body)
        if await self.forwarded(conversation, body):
            return
        answer = await self.answer(conversation, body)
        reply, envelope = answer.reply, self.envelope(answer, conversation.model)
        headers = self.request_id_headers(envelope)
        if reply.error is not None:
            headers += retry_headers(reply.retry_after)
            error = anthropic.scripted_error_body(reply.error)
            await self.send_json(reply.error.status, error, headers)
        elif not conversation.stream:
            await self.send_json(200, anthropic.message_body(reply, envelope), headers)
        else:
            events = anthropic.stream_events(reply, envelope)
            await self.stream(events, headers, cut_off=anthropic.cut_off_event)

    def error_body(self, rejection: RequestRejected) -> Any:
        return anthropic.error_body(rejection.message, rejection.kind)

    def fault_frame(self, at: float) -> TimedFrame:
        return anthropic.fault_event(at)


http_routes = [re_path(AGENT_PREFIX + r"v1/messages/?$", MessagesRoute.as_asgi())]
