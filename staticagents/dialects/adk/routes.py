"""Google ADK REST routes, as ``adk api_server`` serves them, on the lean reply routes.

``GET /list-apps`` lists an app per agent type; sessions live under
``/apps/{app}/users/{user}/sessions[/{id}]``; ``POST /run`` answers with a list
of events and ``POST /run_sse`` with ``data: {event}`` frames. The app name is
the agent type; the session id is the session key (unless ``X-Static-Session``
is sent). A run on a session that does not exist creates it, like
``adk api_server --auto_create_session``. Bad requests get FastAPI's error shape,
``{"detail": ...}``: a list of problems with a 422, a message otherwise.
"""

from __future__ import annotations

import time
import uuid
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.urls import path

from staticagents.core.replies import Reply
from staticagents.core.timing import TimedFrame
from staticagents.dialects.adk import sessions as adk_sessions
from staticagents.dialects.adk import wire as adk
from staticagents.dialects.adk.sessions import Run, StoredSession, start_run
from staticagents.replying.journal import journal
from staticagents.replying.snapshot import active_ruleset
from staticagents.serving import access
from staticagents.serving.route import ReplyRoute, RequestRejected, sse
from staticagents.serving.stream import paced

DEFAULT_AGENT_TYPE = "router"


class AdkRejected(RequestRejected):
    """A rejection whose FastAPI ``detail`` is a list of problems, not one message."""

    def __init__(self, status: int, invalid: adk.InvalidRequest) -> None:
        super().__init__(status, str(invalid), "validation_error")
        self.detail = invalid.detail


class AdkRoute(ReplyRoute):
    """Method dispatch and FastAPI's error body for every ADK route."""

    methods: tuple[str, ...] = ()
    key_sources = access.ADK  # x-goog-api-key, as Google's clients send it (or Bearer)

    def error_body(self, rejection: RequestRejected) -> Any:
        return {"detail": getattr(rejection, "detail", rejection.message)}

    async def respond(self, body: bytes) -> None:
        method = self.scope["method"]
        if method not in self.methods:
            raise RequestRejected(405, "Method Not Allowed", "method_not_allowed")
        try:
            await getattr(self, method.lower())(body)
        except adk.InvalidRequest as invalid:
            raise AdkRejected(422, invalid) from None

    @property
    def route_kwargs(self) -> dict[str, str]:
        return dict(self.scope["url_route"]["kwargs"])

    def query_flag(self, name: str) -> bool:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        return query.get(name, ["false"])[-1].lower() in ("1", "true", "yes", "on")


# -- apps and sessions ---------------------------------------------------------------


def agent_types() -> list[str]:
    """Every agent type the rules name, plus the default one (the router)."""
    return sorted({*active_ruleset().agent_types, DEFAULT_AGENT_TYPE})


class ListAppsRoute(AdkRoute):
    methods: tuple[str, ...] = ("GET",)

    async def get(self, body: bytes) -> None:
        names = await database_sync_to_async(agent_types)()
        if self.query_flag("detailed"):
            await self.send_json(200, {"apps": [adk.app_info(name) for name in names]})
        else:
            await self.send_json(200, names)


def session_body(session: StoredSession) -> dict[str, Any]:
    return adk.session_body(
        session_id=session.session_id,
        app=session.app,
        user=session.user,
        state=session.state,
        events=session.events,
        last_update_time=session.last_update_time,
    )


class SessionsRoute(AdkRoute):
    """``/apps/{app}/users/{user}/sessions``: list (GET) and create (POST)."""

    methods: tuple[str, ...] = ("GET", "POST")

    async def get(self, body: bytes) -> None:
        sessions = await database_sync_to_async(adk_sessions.list_sessions)(**self.route_kwargs)
        await self.send_json(200, [session_body(s) for s in sessions])

    async def post(self, body: bytes) -> None:
        request = adk.parse_optional_body(body, adk.CreateSessionRequest)
        fields: dict[str, Any] = {}
        if request is not None:
            fields = {
                "session_id": request.session_id,
                "state": request.state,
                "events": request.events or (),
            }
        route = self.route_kwargs
        await self.create(app=route["app"], user=route["user"], **fields)

    async def create(self, *, app: str, user: str, **fields: Any) -> None:
        try:
            session = await database_sync_to_async(adk_sessions.create_session)(
                app=app, user=user, **fields
            )
        except adk_sessions.SessionExists:
            raise RequestRejected(
                409, f"Session already exists: {fields.get('session_id')}", "conflict"
            ) from None
        await self.send_json(200, session_body(session))


class SessionRoute(SessionsRoute):
    """``/apps/{app}/users/{user}/sessions/{session_id}``: get, create, update, delete."""

    methods: tuple[str, ...] = ("GET", "POST", "PATCH", "DELETE")

    async def get(self, body: bytes) -> None:
        session = await database_sync_to_async(adk_sessions.get_session)(**self.route_kwargs)
        if session is None:
            raise RequestRejected(404, "Session not found", "not_found")
        await self.send_json(200, session_body(session))

    async def post(self, body: bytes) -> None:
        # ADK's older create-with-id route: the body, if any, is the initial state.
        state = adk.parse_state(body)
        await self.create(**self.route_kwargs, state=state)

    async def patch(self, body: bytes) -> None:
        request = adk.parse_body(body, adk.UpdateSessionRequest)
        ids = adk.EventIds(f"p-{uuid.uuid4()}", str(uuid.uuid4()), time.time(), "user")
        event = adk.envelope(ids, request.state_delta)
        session = await database_sync_to_async(adk_sessions.update_state)(
            **self.route_kwargs, state_delta=request.state_delta, event=event
        )
        if session is None:
            raise RequestRejected(404, "Session not found", "not_found")
        await self.send_json(200, session_body(session))

    async def delete(self, body: bytes) -> None:
        await database_sync_to_async(adk_sessions.delete_session)(**self.route_kwargs)
        await self.send_json(200, None)


# -- runs -------------------------------------------------------------------------------


class RunRoute(AdkRoute):
    """``POST /run``: every event of the run, as one JSON list."""

    methods: tuple[str, ...] = ("POST",)

    async def begin(self, body: bytes) -> Run:
        request = adk.parse_body(body, adk.RunRequest)
        headers = self.request_headers
        app = request.app_name or headers.get("x-agent-type", "").strip()
        if not app:
            raise RequestRejected(400, "app_name is required: name the agent type as appName")
        work = start_run(
            request,
            app=app,
            headers=headers,
            route=self.scope["path"],
            body=body,
            save_final=self.final_with_entry,
            loop=self.loop,
        )
        run: Run = await self.answering(work, lambda run: run.answer.entry_id)
        return run

    @staticmethod
    def final_with_entry(reply: Reply) -> bool:
        """Whether the final event is saved with the journal entry (one commit a run)."""
        return True

    async def post(self, body: bytes) -> None:
        run = await self.begin(body)
        assert run.final is not None  # saved with the entry
        await self.send_json(200, [run.final])


class RunSseRoute(RunRoute):
    """``POST /run_sse``: ``data: {event}`` frames; partial text deltas when ``streaming``."""

    run_ids: adk.EventIds  # the run's, for a scripted fault's error event

    @staticmethod
    def final_with_entry(reply: Reply) -> bool:
        # A stream due all at once is saved before it is sent; a paced one may be cut
        # off, so its final event is known only at its end (``finish``).
        return reply.fault is None and not paced(reply.timing)

    async def post(self, body: bytes) -> None:
        run = await self.begin(body)
        reply = run.answer.reply
        if run.final is not None:
            # Due all at once, no fault (no delays scripted): recorded first (with the
            # journal entry), then the whole stream in one write, rendered in one piece.
            await self.send_stream_whole(
                adk.sse_body_at_once(reply, run.ids, run.final, streaming=run.streaming)
            )
            return
        events = adk.sse_events(reply, run.ids, streaming=run.streaming)
        self.fault, self.run_ids = reply.fault, run.ids
        await self.start_sse()
        stopped = await self.send_paced(events)
        if stopped is None:
            await self.finish(run, adk.final_event(run.answer.reply, run.ids))
        else:
            cut_off = adk.cut_off_event(run.ids, stopped.limit)
            await self.finish(run, cut_off, sse(cut_off))

    def fault_frame(self, at: float) -> TimedFrame:
        return TimedFrame(at, adk.fault_event(self.run_ids))

    async def finish(self, run: Run, final: dict[str, Any], tail: bytes = b"") -> None:
        # Only the final event joins the session (as in ADK, partials never do), and
        # before the response ends, so a client reading the session next finds it.
        await journal.run(adk_sessions.AppendEvents(run.session_pk, [final]))
        await self.end_stream(tail)


SESSIONS = "apps/<str:app>/users/<str:user>/sessions"

http_routes = [
    path("list-apps", ListAppsRoute.as_asgi()),
    path(SESSIONS, SessionsRoute.as_asgi()),
    path(f"{SESSIONS}/<str:session_id>", SessionRoute.as_asgi()),
    path("run", RunRoute.as_asgi()),
    path("run_sse", RunSseRoute.as_asgi()),
]
