"""Galaxy's agent and chat API (DESIGN section 3), served through DRF.

The reply POSTs (the agent routes and ``/api/chat``) are answered on the event
loop by the lean routes of ``routes.py``; these views still describe them (the
API schema), take their other methods, and answer them alike when called
directly: both parse, answer and render through the wire module and
``exchanges``.

Every route keeps Galaxy's error contract rather than the project-wide one:
``/api/chat`` reports failures inside a ChatResponse with HTTP 200; the other
routes answer an HTTP status with ``{"err_msg", "err_code"}``. Bodies are read
and validated here (never through ``request.data``), so a malformed body is a
400 naming the field, whatever content type the client declared.
"""

from __future__ import annotations

import logging
import time

from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework.exceptions import APIException
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from staticagents.core.numbers import is_ascii_number
from staticagents.dialects.galaxy import exchanges as chat_exchanges
from staticagents.dialects.galaxy import wire as galaxy
from staticagents.dialects.galaxy.exchanges import ExchangeNotFound
from staticagents.dialects.galaxy.wire import GalaxyRequestInvalid
from staticagents.replying.answer import answer_inquiry
from staticagents.replying.journal import journal
from staticagents.replying.snapshot import active_ruleset
from staticagents.serving import access

log = logging.getLogger(__name__)


class ApiKeyRequired(BasePermission):
    """With ``STATIC_AGENTS_API_KEYS`` set, a request carries a key: x-api-key, ?key= or Bearer."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        refusal = access.check_key(
            access.GALAXY, request_headers(request), request.META.get("QUERY_STRING", "")
        )
        if refusal is not None:
            raise GalaxyRequestInvalid(
                refusal.message, status=401, err_code=galaxy.AUTHENTICATION_FAILED
            )
        return True


class GalaxyView(APIView):
    """Base of the Galaxy routes: Galaxy's error bodies for everything that goes wrong."""

    permission_classes = [ApiKeyRequired]

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, GalaxyRequestInvalid):
            return Response(exc.body(), status=exc.status)
        if isinstance(exc, RequestDataTooBig):  # Django raises it when request.body is read
            return Response(galaxy.error_body(413, f"Request body too large: {exc}"), status=413)
        if isinstance(exc, ExchangeNotFound):
            body = {"err_msg": str(exc), "err_code": galaxy.OBJECT_NOT_FOUND}
            return Response(body, status=404)
        if isinstance(exc, Http404):
            return Response(galaxy.error_body(404, "Not found"), status=404)
        if isinstance(exc, APIException):
            return Response(galaxy.error_body(exc.status_code, str(exc.detail)), exc.status_code)
        log.exception("Galaxy route %s failed", self.request.path)
        return Response(galaxy.error_body(500, "internal error in Static Agents"), status=500)


def request_headers(request: Request) -> dict[str, str]:
    return {name.lower(): value for name, value in request.headers.items()}


def exchange_id_from_path(value: str) -> int:
    return galaxy.parse_exchange_id(value, where="exchange_id (in the path)")


class ConfigurationView(GalaxyView):
    def get(self, request: Request) -> Response:
        return Response(galaxy.render_configuration(active_ruleset().routing))


class AgentListView(GalaxyView):
    def get(self, request: Request) -> Response:
        ruleset = active_ruleset()
        return Response(galaxy.render_agent_list(ruleset.agent_types, ruleset.routing))


class AgentView(GalaxyView):
    """An agent route: parse, answer and render through the wire module, as the lean
    reply route does (``routes.AgentRoute``), so both answer alike."""

    route = galaxy.AGENT_QUERY

    def post(self, request: Request) -> Response:
        started = time.perf_counter()
        agent = galaxy.parse_agent_request(self.route, request.body)
        inquiry = galaxy.galaxy_inquiry(
            query=agent.query,
            agent_type=agent.agent_type,
            context=agent.context,
            headers=request_headers(request),
        )
        reply = answer_inquiry(inquiry, route=request.path, body=request.body).reply
        exchange_id = None
        if galaxy.saves_exchange(agent, reply):
            saved = galaxy.render_agent_response(reply)
            job = chat_exchanges.save_turn_job(inquiry, reply.content, saved)
            exchange_id = journal.run_now(job)
        took = time.perf_counter() - started
        status, body, headers = galaxy.render_agent_reply(agent, reply, took, exchange_id)
        return Response(body, status, headers=headers or None)


class AgentQueryView(AgentView):
    """``POST /api/ai/agents/query``: ``{query, agent_type, context}``."""

    route = galaxy.AGENT_QUERY


class ErrorAnalysisView(AgentView):
    """``POST /api/ai/agents/error-analysis``: ``{query, job_id, error_details}``."""

    route = galaxy.ERROR_ANALYSIS


class CustomToolView(AgentView):
    """``POST /api/ai/agents/custom-tool``: ``{query, context}``."""

    route = galaxy.CUSTOM_TOOL


class ChatView(GalaxyView):
    """``POST /api/chat?agent_type=…``: always HTTP 200 once the body parses (Galaxy's contract)."""

    def post(self, request: Request) -> Response:
        started = time.perf_counter()
        chat = galaxy.parse_chat_request(request.body, request.query_params)
        if chat.query is None:
            return Response(galaxy.missing_query_response())
        try:
            turn = chat_exchanges.answer_chat_turn(
                chat,
                headers=request_headers(request),
                route=request.path,
                body=request.body,
                started=started,
            )
        except ExchangeNotFound as missing:
            return Response(galaxy.chat_failure(404, str(missing), exchange_id=missing.exchange_id))
        return Response(chat_exchanges.finish_chat_turn(turn))


class ChatHistoryView(GalaxyView):
    """``GET`` lists conversations, ``DELETE`` clears them (X-Static-Session: just its own)."""

    def get(self, request: Request) -> Response:
        limit = history_limit(request.query_params.get("limit"))
        session = request_headers(request).get("x-static-session") or None
        return Response(chat_exchanges.chat_history(session=session, limit=limit))

    def delete(self, request: Request) -> Response:
        session = request_headers(request).get("x-static-session") or None
        count, turns = chat_exchanges.clear_history(session=session)
        return Response({"message": f"Cleared {count} chat exchanges with {turns} messages"})


def history_limit(value: str | None) -> int:
    if value is None or value == "":
        return 50
    if not is_ascii_number(value) or int(value) < 1:
        raise GalaxyRequestInvalid(
            f"Invalid value for 'limit': {value!r} is not a positive integer"
        )
    return int(value)


class ExchangeMessagesView(GalaxyView):
    def get(self, request: Request, exchange_id: str) -> Response:
        return Response(chat_exchanges.exchange_messages(exchange_id_from_path(exchange_id)))


class ExchangeFeedbackView(GalaxyView):
    """``PUT /api/chat/exchange/{id}/feedback`` with a bare ``0`` or ``1`` body."""

    def put(self, request: Request, exchange_id: str) -> Response:
        pk = exchange_id_from_path(exchange_id)
        feedback = galaxy.load_json(request.body)
        if type(feedback) is not int or feedback not in (0, 1):
            raise GalaxyRequestInvalid(
                f"Invalid feedback {feedback!r}: the body must be 0 (negative) or 1 (positive)"
            )
        chat_exchanges.set_feedback(pk, feedback)
        return Response({"message": "Feedback saved", "feedback": feedback})


class ExchangeView(GalaxyView):
    def delete(self, request: Request, exchange_id: str) -> Response:
        chat_exchanges.delete_exchange(exchange_id_from_path(exchange_id))
        return Response({"message": "Deleted"})


class BatchDeleteView(GalaxyView):
    """``PUT /api/chat/exchanges/batch/delete`` with ``{"ids": [...]}``."""

    def put(self, request: Request) -> Response:
        payload = galaxy.parse_body(galaxy.BatchDeleteBody, request.body)
        ids = [
            galaxy.parse_exchange_id(value, where=f"ids[{i}]")
            for i, value in enumerate(payload.ids)
        ]
        count = chat_exchanges.delete_exchanges(ids)
        return Response({"message": f"Deleted {count} exchanges"})
