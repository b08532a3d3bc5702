"""Routes under /api/: Galaxy's agent and chat API (``/api/chat/stream`` is a Channels route;
the schema, ``/api/schema/``, is ``staticagents.urls``'s)."""

from __future__ import annotations

from django.urls import URLPattern, path

from staticagents.dialects.galaxy import views as galaxy

urlpatterns: list[URLPattern] = [
    path("configuration", galaxy.ConfigurationView.as_view()),
    path("ai/agents", galaxy.AgentListView.as_view()),
    path("ai/agents/query", galaxy.AgentQueryView.as_view()),
    path("ai/agents/error-analysis", galaxy.ErrorAnalysisView.as_view()),
    path("ai/agents/custom-tool", galaxy.CustomToolView.as_view()),
    path("chat", galaxy.ChatView.as_view()),
    path("chat/history", galaxy.ChatHistoryView.as_view()),
    path("chat/exchanges/batch/delete", galaxy.BatchDeleteView.as_view()),
    path("chat/exchange/<str:exchange_id>", galaxy.ExchangeView.as_view()),
    path("chat/exchange/<str:exchange_id>/messages", galaxy.ExchangeMessagesView.as_view()),
    path("chat/exchange/<str:exchange_id>/feedback", galaxy.ExchangeFeedbackView.as_view()),
]
