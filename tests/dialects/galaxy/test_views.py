"""Galaxy's agent and chat API through the real ASGI app: answers, exchanges, errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from staticagents.models import ChatExchange, JournalEntry

Load = Callable[[Any], dict[str, Any]]

RULES: dict[str, Any] = {
    "defaults": {"confidence": "low"},
    "rules": [
        {
            "name": "flaky",
            "match": {"query": "#flaky"},
            "response": {
                "error": {"status": 503, "type": "overloaded", "message": "Busy, retry"},
                "retry_after": 2,
            },
        },
        {
            "name": "greeting",
            "match": {"agent_type": "router", "query": "(?i)hello"},
            "response": {"content": "Hello from the router", "confidence": "high"},
        },
        {
            "name": "page-help",
            "match": {"agent_type": "page_assistant", "context": {"page_id": "."}},
            "response": {"content": "Editing your page", "reasoning": "a page was open"},
        },
        {
            "name": "tool-run",
            "match": {"agent_type": "custom_tool"},
            "response": {
                "content": "Run it",
                "metadata": {"tool_id": "cat1", "static_backend": False},
                "suggestions": [
                    {
                        "action_type": "tool_run",
                        "description": "Run cat",
                        "parameters": {"tool_id": "cat1"},
                        "confidence": "medium",
                    }
                ],
            },
        },
        {
            "name": "job-errors",
            "match": {"agent_type": "error_analysis", "context": {"job_id": "^job-"}},
            "response": {"content": "The job ran out of memory"},
        },
        {
            "name": "second-turn",
            "match": {"agent_type": "router", "turn": 2},
            "response": {"content": "Turn two, you said: $query", "template": True},
        },
        {
            "name": "remembers",
            "match": {"agent_type": "router", "context": {"conversation_history": "first words"}},
            "response": {"content": "I remember your first words"},
        },
        {"name": "router-default", "match": {"agent_type": "router"}, "response": {}},
    ],
    "fallback": {"content": "No rule for that", "agent_type": "unknown"},
}


@pytest.fixture
def api(live_url: str, load_rules: Load) -> Iterator[httpx.Client]:
    load_rules(RULES)
    with httpx.Client(base_url=live_url, timeout=10) as client:
        yield client


def query(api: httpx.Client, text: str, agent_type: str = "auto", **extra: Any) -> dict[str, Any]:
    response = api.post(
        "/api/ai/agents/query", json={"query": text, "agent_type": agent_type, **extra}
    )
    assert response.status_code == 200, response.text
    return response.json()["response"]


def chat(
    api: httpx.Client, text: str | None, agent_type: str = "auto", **body: Any
) -> dict[str, Any]:
    payload = {"query": text, **body} if text is not None else body
    response = api.post(f"/api/chat?agent_type={agent_type}", json=payload)
    assert response.status_code == 200, response.text
    return response.json()


# -- configuration and the registry ------------------------------------------------------


def test_configuration_reports_a_static_llm(api: httpx.Client) -> None:
    config = api.get("/api/configuration").json()
    assert config["llm_api_configured"] is True
    assert config["llm_registry_type"] == "static"


def test_the_registry_lists_each_agent_type_a_rule_names_sorted(api: httpx.Client) -> None:
    listing = api.get("/api/ai/agents").json()
    types = [agent["agent_type"] for agent in listing["agents"]]
    assert types == ["custom_tool", "error_analysis", "page_assistant", "router"]
    assert listing["total_count"] == 4
    assert all(agent["enabled"] is True for agent in listing["agents"])


# -- /api/ai/agents/query: Galaxy's static-backend behaviours --------------------------------


def test_a_query_is_answered_by_the_first_matching_rule(api: httpx.Client) -> None:
    answer = query(api, "Hello there", "router")
    assert answer["content"] == "Hello from the router"
    assert (answer["confidence"], answer["agent_type"]) == ("high", "router")


def test_the_query_route_reports_its_processing_time(api: httpx.Client) -> None:
    response = api.post("/api/ai/agents/query", json={"query": "Hello"}).json()
    assert isinstance(response["processing_time"], float)


def test_auto_routes_to_the_router(api: httpx.Client) -> None:
    assert query(api, "hello")["content"] == "Hello from the router"


def test_auto_with_a_page_routes_to_the_page_assistant(api: httpx.Client) -> None:
    answer = query(api, "anything", context={"page_id": "f2db41e1fa331b3e"})
    assert answer["content"] == "Editing your page"
    assert answer["reasoning"] == "a page was open"


def test_an_empty_response_takes_the_fallback_content_and_default_confidence(
    api: httpx.Client,
) -> None:
    answer = query(api, "what is a dataset?", "router")
    assert answer["content"] == "No rule for that"
    assert answer["confidence"] == "low"  # defaults.confidence
    assert answer["agent_type"] == "router"  # the requested type
    assert answer["reasoning"] is None


def test_an_agent_type_no_rule_serves_gets_the_fallback(api: httpx.Client) -> None:
    answer = query(api, "recommend a tool", "tool_recommendation")
    assert (answer["content"], answer["agent_type"]) == ("No rule for that", "unknown")


def test_every_answer_carries_the_static_backend_flag_last(api: httpx.Client) -> None:
    answer = query(api, "x", "custom_tool")
    assert list(answer["metadata"].items()) == [("tool_id", "cat1"), ("static_backend", True)]


def test_context_rules_fail_closed_without_context(api: httpx.Client) -> None:
    assert query(api, "why?", "error_analysis")["content"] == "No rule for that"
    assert query(api, "why?", "error_analysis", context={})["content"] == "No rule for that"
    with_job = query(api, "why?", "error_analysis", context={"job_id": "job-7"})
    assert with_job["content"] == "The job ran out of memory"
    wrong_job = query(api, "why?", "error_analysis", context={"job_id": "7"})
    assert wrong_job["content"] == "No rule for that"


def test_suggestions_come_back_with_galaxys_defaults(api: httpx.Client) -> None:
    [suggestion] = query(api, "x", "custom_tool")["suggestions"]
    assert suggestion == {
        "action_type": "tool_run",
        "description": "Run cat",
        "parameters": {"tool_id": "cat1"},
        "confidence": "medium",
        "priority": 1,
    }


def test_the_query_is_journaled_as_a_galaxy_inquiry(api: httpx.Client) -> None:
    api.post(
        "/api/ai/agents/query",
        json={"query": "Hello journal", "agent_type": "router"},
        headers={"X-Static-Session": "journal-test", "Authorization": "Bearer secret"},
    )
    entry = JournalEntry.objects.get(session="journal-test")
    assert (entry.dialect, entry.rule, entry.route) == (
        "galaxy",
        "greeting",
        "/api/ai/agents/query",
    )
    assert "secret" not in str(entry.headers)


# -- error-analysis and custom-tool -----------------------------------------------------------


def test_error_analysis_answers_a_bare_agent_response_with_the_job_in_context(
    api: httpx.Client,
) -> None:
    response = api.post(
        "/api/ai/agents/error-analysis",
        json={"query": "My job failed", "job_id": "job-42", "error_details": {"exit_code": 1}},
    )
    assert response.status_code == 200
    answer = response.json()
    assert answer["content"] == "The job ran out of memory"
    assert answer["agent_type"] == "error_analysis"
    assert answer["metadata"] == {"static_backend": True}


def test_custom_tool_answers_a_bare_agent_response(api: httpx.Client) -> None:
    answer = api.post("/api/ai/agents/custom-tool", json={"query": "make a tool"}).json()
    assert (answer["content"], answer["agent_type"]) == ("Run it", "custom_tool")


def test_save_exchange_keeps_the_turn_and_names_it_in_metadata(api: httpx.Client) -> None:
    answer = api.post(
        "/api/ai/agents/custom-tool", json={"query": "make a tool", "save_exchange": True}
    ).json()
    exchange_id = answer["metadata"]["exchange_id"]
    assert list(answer["metadata"])[-1] == "static_backend"
    messages = api.get(f"/api/chat/exchange/{exchange_id}/messages").json()
    assert [m["content"] for m in messages] == ["make a tool", "Run it"]


# -- /api/chat and its exchanges ----------------------------------------------------------------


def test_chat_answers_a_chat_response_and_saves_the_exchange(api: httpx.Client) -> None:
    result = chat(api, "Hello!")
    assert result["response"] == "Hello from the router"
    assert (result["error_code"], result["error_message"]) == (0, "")
    assert result["agent_response"]["metadata"]["static_backend"] is True
    assert isinstance(result["processing_time"], float)
    exchange = ChatExchange.objects.get(pk=result["exchange_id"])
    assert exchange.agent_type == "router"


def test_chat_without_a_query_answers_200_with_error_code_400(api: httpx.Client) -> None:
    result = chat(api, None, context="tool_error")
    assert (result["error_code"], result["error_message"]) == (400, "No query provided")
    assert result["agent_response"] is None
    assert ChatExchange.objects.count() == 0


def test_chat_takes_the_query_from_the_url_too(api: httpx.Client) -> None:
    response = api.post("/api/chat", params={"query": "hello from the url"})
    assert response.json()["response"] == "Hello from the router"


def test_a_continued_exchange_passes_its_history_and_turn(api: httpx.Client) -> None:
    first = chat(api, "first words")
    second = chat(api, "and now?", exchange_id=first["exchange_id"])
    assert second["response"] == "Turn two, you said: and now?"
    assert second["exchange_id"] == first["exchange_id"]
    third = chat(api, "do you remember?", exchange_id=str(first["exchange_id"]))
    assert third["response"] == "I remember your first words"


def test_continuing_an_unknown_exchange_answers_200_with_error_code_404(api: httpx.Client) -> None:
    result = chat(api, "hello", exchange_id=999999)
    assert result["error_code"] == 404
    assert "999999" in result["error_message"]


def test_exchange_messages_list_user_and_assistant_entries(api: httpx.Client) -> None:
    first = chat(api, "Hello one", "router")
    chat(api, "two", "router", exchange_id=first["exchange_id"])
    messages = api.get(f"/api/chat/exchange/{first['exchange_id']}/messages").json()
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "Hello one"),
        ("assistant", "Hello from the router"),
        ("user", "two"),
        ("assistant", "Turn two, you said: two"),
    ]
    assert messages[1]["agent_type"] == "router"
    assert messages[1]["agent_response"]["confidence"] == "high"
    assert all(m["timestamp"] for m in messages)


def test_messages_of_an_unknown_exchange_are_an_empty_list(api: httpx.Client) -> None:
    response = api.get("/api/chat/exchange/424242/messages")
    assert (response.status_code, response.json()) == (200, [])


def test_history_lists_conversations_newest_first_with_their_first_turn(api: httpx.Client) -> None:
    older = chat(api, "Hello old")
    newer = chat(api, "Hello new")
    chat(api, "again", exchange_id=newer["exchange_id"])
    history = api.get("/api/chat/history").json()
    assert [item["id"] for item in history] == [newer["exchange_id"], older["exchange_id"]]
    assert history[0]["query"] == "Hello new"
    assert history[0]["response"] == "Hello from the router"
    assert history[0]["message_count"] == 2
    assert history[0]["feedback"] is None
    assert len(api.get("/api/chat/history", params={"limit": 1}).json()) == 1


def test_history_with_a_session_header_shows_only_that_sessions_chats(api: httpx.Client) -> None:
    mine = api.post("/api/chat", json={"query": "Hello"}, headers={"X-Static-Session": "mine"})
    chat(api, "Hello from someone else")
    listed = api.get("/api/chat/history", headers={"X-Static-Session": "mine"}).json()
    assert [item["id"] for item in listed] == [mine.json()["exchange_id"]]


def test_feedback_is_a_bare_zero_or_one(api: httpx.Client) -> None:
    exchange_id = chat(api, "Hello")["exchange_id"]
    response = api.put(f"/api/chat/exchange/{exchange_id}/feedback", json=1)
    assert response.json() == {"message": "Feedback saved", "feedback": 1}
    assert api.get("/api/chat/history").json()[0]["feedback"] == 1
    messages = api.get(f"/api/chat/exchange/{exchange_id}/messages").json()
    assert messages[1]["feedback"] == 1
    refused = api.put(f"/api/chat/exchange/{exchange_id}/feedback", json=2)
    assert refused.status_code == 400
    assert "0" in refused.json()["err_msg"] and "1" in refused.json()["err_msg"]
    missing = api.put("/api/chat/exchange/999999/feedback", json=0)
    assert missing.status_code == 404
    assert missing.json()["err_code"] == 404001


def test_an_exchange_can_be_deleted(api: httpx.Client) -> None:
    exchange_id = chat(api, "Hello")["exchange_id"]
    assert api.delete(f"/api/chat/exchange/{exchange_id}").json() == {"message": "Deleted"}
    assert api.get(f"/api/chat/exchange/{exchange_id}/messages").json() == []
    assert api.delete(f"/api/chat/exchange/{exchange_id}").status_code == 404


def test_exchanges_can_be_deleted_in_a_batch(api: httpx.Client) -> None:
    ids = [chat(api, f"Hello {n}")["exchange_id"] for n in range(3)]
    response = api.put("/api/chat/exchanges/batch/delete", json={"ids": [ids[0], str(ids[1])]})
    assert response.json() == {"message": "Deleted 2 exchanges"}
    assert [item["id"] for item in api.get("/api/chat/history").json()] == [ids[2]]


def test_clearing_the_history_removes_every_conversation(api: httpx.Client) -> None:
    first = chat(api, "Hello")
    chat(api, "more", exchange_id=first["exchange_id"])
    chat(api, "Hello again")
    cleared = api.delete("/api/chat/history").json()
    assert cleared == {"message": "Cleared 2 chat exchanges with 3 messages"}
    assert api.get("/api/chat/history").json() == []


# -- the error contract --------------------------------------------------------------------------


def test_a_scripted_error_on_chat_is_http_200_with_error_code(api: httpx.Client) -> None:
    result = chat(api, "#flaky please")
    assert (result["error_code"], result["error_message"]) == (503, "Busy, retry")
    assert result["agent_response"] is None
    assert ChatExchange.objects.count() == 0  # as in Galaxy, a failed turn is not saved


def test_a_scripted_error_on_the_agent_routes_is_that_status_with_a_clear_body(
    api: httpx.Client,
) -> None:
    for route in ("/api/ai/agents/query", "/api/ai/agents/custom-tool"):
        response = api.post(route, json={"query": "#flaky please"})
        assert response.status_code == 503
        assert response.json() == {
            "err_msg": "Busy, retry",
            "err_code": 503000,
            "error_type": "overloaded",
        }
        assert response.headers["retry-after"] == "2"


@pytest.mark.parametrize(
    ("method", "route", "content", "named"),
    [
        ("POST", "/api/ai/agents/query", b"{oops", "not valid JSON"),
        ("POST", "/api/ai/agents/query", b"[]", "JSON object"),
        ("POST", "/api/ai/agents/query", b'{"query": ["a"]}', "'query'"),
        ("POST", "/api/ai/agents/query", b'{"query": "q", "context": "x"}', "'context'"),
        ("POST", "/api/ai/agents/query", b"{}", "'query'"),
        ("POST", "/api/ai/agents/error-analysis", b'{"job_id": 1}', "'query'"),
        (
            "POST",
            "/api/ai/agents/error-analysis",
            b'{"query": "q", "error_details": 3}',
            "'error_details'",
        ),
        ("POST", "/api/ai/agents/custom-tool", b'{"query": 1}', "'query'"),
        ("POST", "/api/chat", b"{oops", "not valid JSON"),
        ("POST", "/api/chat", b'{"query": 42}', "'query'"),
        ("POST", "/api/chat", b'{"query": "q", "exchange_id": "nope"}', "'exchange_id'"),
        ("PUT", "/api/chat/exchanges/batch/delete", b'{"ids": "1"}', "'ids'"),
        ("PUT", "/api/chat/exchanges/batch/delete", b"{}", "'ids'"),
        ("PUT", "/api/chat/exchange/1/feedback", b"{oops", "not valid JSON"),
        ("PUT", "/api/chat/exchange/abc/feedback", b"1", "exchange_id"),
        ("GET", "/api/chat/exchange/abc/messages", b"", "exchange_id"),
        ("GET", "/api/chat/history?limit=lots", b"", "'limit'"),
    ],
)
def test_malformed_requests_get_a_400_naming_what_is_wrong(
    api: httpx.Client, method: str, route: str, content: bytes, named: str
) -> None:
    response = api.request(
        method, route, content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 400, response.text
    body = response.json()
    assert named in body["err_msg"]
    assert body["err_code"] in (400003, 400008)


def test_a_wrong_method_gets_galaxys_error_body(api: httpx.Client) -> None:
    response = api.get("/api/ai/agents/query")
    assert response.status_code == 405
    assert "GET" in response.json()["err_msg"]
