"""The Galaxy dialect on its own: parsing requests and rendering replies, no database."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import compile_ruleset
from staticagents.core.replies import Reply, ReplyError, Timing, build_reply
from staticagents.dialects.galaxy import wire as galaxy
from staticagents.dialects.galaxy.wire import GalaxyRequestInvalid, StoredMessage


def body(payload: Any) -> bytes:
    return orjson.dumps(payload)


def reply(**fields: Any) -> Reply:
    base: dict[str, Any] = {"content": "Hi there", "confidence": "high", "agent_type": "router"}
    return Reply(**{**base, **fields})


# -- parsing ---------------------------------------------------------------------------


def test_chat_request_reads_query_context_and_exchange_id() -> None:
    request = galaxy.parse_chat_request(
        body({"query": "Hello", "context": {"page_id": "p1"}, "exchange_id": "12"}),
        {"agent_type": "router"},
    )
    assert request == galaxy.ChatRequest("Hello", "router", {"page_id": "p1"}, 12, routed=False)


def test_chat_request_turns_a_string_context_into_context_type_like_galaxy() -> None:
    request = galaxy.parse_chat_request(body({"query": "q", "context": "tool_error"}), {})
    assert request.context == {"context_type": "tool_error"}


def test_chat_request_takes_the_query_parameter_when_the_body_has_none() -> None:
    request = galaxy.parse_chat_request(b"", {"query": "from the url", "agent_type": "router"})
    assert request.query == "from the url"


def test_chat_request_without_any_query_reports_none_rather_than_failing() -> None:
    assert galaxy.parse_chat_request(body({"context": "x"}), {}).query is None
    assert galaxy.parse_chat_request(body({"query": ""}), {}).query is None


def test_auto_routes_to_the_router_or_to_the_page_assistant_for_a_page() -> None:
    plain = galaxy.parse_chat_request(body({"query": "q"}), {"agent_type": "auto"})
    page = galaxy.parse_chat_request(body({"query": "q", "page_id": "abc"}), {})
    assert (plain.agent_type, plain.routed) == ("router", True)
    assert (page.agent_type, page.context["page_id"]) == ("page_assistant", "abc")
    assert galaxy.resolve_agent_type("custom_tool", {"page_id": "x"}) == "custom_tool"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (body({"query": 5}), "'query'"),
        (body({"query": "q", "exchange_id": "abc"}), "'exchange_id'"),
        (body({"query": "q", "exchange_id": True}), "'exchange_id'"),
        (body({"query": "q", "context": [1]}), "'context'"),
    ],
)
def test_malformed_chat_bodies_are_refused_naming_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(GalaxyRequestInvalid) as refused:
        galaxy.parse_chat_request(raw, {})
    assert refused.value.status == 400
    assert message in refused.value.message
    assert refused.value.body()["err_code"] == galaxy.INVALID_PARAMETER


def test_a_missing_required_field_uses_galaxys_missing_parameter_code() -> None:
    with pytest.raises(GalaxyRequestInvalid) as refused:
        galaxy.parse_body(galaxy.AgentQueryBody, body({"agent_type": "router"}))
    assert refused.value.body()["err_code"] == galaxy.MISSING_PARAMETER
    assert "'query'" in refused.value.message
    assert refused.value.body()["validation_errors"][0]["loc"] == ["query"]


def test_unknown_fields_are_ignored_as_galaxy_ignores_them() -> None:
    payload = galaxy.parse_body(galaxy.AgentQueryBody, body({"query": "q", "temperature": 1}))
    assert payload.query == "q"


def test_a_bad_entry_in_a_list_is_named_by_its_index() -> None:
    with pytest.raises(GalaxyRequestInvalid) as refused:
        galaxy.parse_body(galaxy.BatchDeleteBody, body({"ids": [1, 2.5]}))
    assert "'ids[1]'" in refused.value.message


def test_error_analysis_context_merges_details_and_the_job() -> None:
    payload = galaxy.parse_body(
        galaxy.ErrorAnalysisBody, body({"query": "q", "job_id": "f2db", "error_details": {"x": 1}})
    )
    assert galaxy.error_analysis_context(payload) == {"x": 1, "job_id": "f2db"}


def test_the_session_is_the_header_else_the_exchange_else_global() -> None:
    def session(headers: dict[str, str], exchange: int | None) -> str:
        return galaxy.galaxy_inquiry(
            query="q", agent_type="router", context=None, headers=headers, conversation_id=exchange
        ).session

    assert session({"x-static-session": "run-1"}, 7) == "run-1"
    assert session({}, 7) == "7"
    assert session({}, None) == "global"


def test_an_inquiry_carries_galaxys_dialect_turn_and_context() -> None:
    inquiry = galaxy.galaxy_inquiry(
        query="q", agent_type="router", context={"a": 1}, headers={}, turn=3
    )
    assert (inquiry.dialect, inquiry.turn, inquiry.context) == ("galaxy", 3, {"a": 1})


# -- rendering -------------------------------------------------------------------------


def test_agent_response_has_galaxys_fields_and_fills_suggestion_defaults() -> None:
    suggestion = {"action_type": "documentation", "description": "Read", "confidence": "low"}
    rendered = galaxy.render_agent_response(reply(suggestions=(suggestion,), reasoning="why"))
    assert list(rendered) == [
        "content",
        "confidence",
        "agent_type",
        "suggestions",
        "metadata",
        "reasoning",
    ]
    assert rendered["suggestions"] == [{**suggestion, "parameters": {}, "priority": 1}]
    assert rendered["reasoning"] == "why"


def test_static_backend_is_the_last_metadata_key_and_cannot_be_overridden() -> None:
    rendered = galaxy.render_agent_response(
        reply(metadata={"static_backend": False, "tool_id": "t"}), {"exchange_id": 4}
    )
    assert list(rendered["metadata"].items()) == [
        ("tool_id", "t"),
        ("exchange_id", 4),
        ("static_backend", True),
    ]


def test_a_rule_rendered_through_the_core_keeps_galaxys_defaults() -> None:
    ruleset = compile_ruleset(
        stamp="s",
        rules=[{"name": "r", "match": {"agent_type": "router"}, "response": {}}],
        defaults={"confidence": "low"},
        fallback={"content": "fallback text"},
    )
    inquiry = Inquiry(query="q", agent_type="router")
    rendered = galaxy.render_agent_response(build_reply(ruleset, inquiry, ruleset.rules[0]))
    assert rendered == {
        "content": "fallback text",
        "confidence": "low",
        "agent_type": "router",
        "suggestions": [],
        "metadata": {"static_backend": True},
        "reasoning": None,
    }


def test_chat_response_reports_success_with_error_code_zero() -> None:
    rendered = galaxy.render_chat_response(reply(), exchange_id=3, processing_time=0.5)
    assert rendered["response"] == "Hi there"
    assert (rendered["error_code"], rendered["error_message"]) == (0, "")
    assert rendered["agent_response"]["content"] == "Hi there"
    assert (rendered["exchange_id"], rendered["processing_time"]) == (3, 0.5)


def test_chat_response_reports_a_scripted_error_in_the_body() -> None:
    failed = reply(content="", error=ReplyError(503, "overloaded", "Try later"))
    rendered = galaxy.render_chat_response(failed, exchange_id=None, processing_time=0.1)
    assert (rendered["error_code"], rendered["error_message"]) == (503, "Try later")
    assert rendered["agent_response"] is None


def test_a_scripted_error_elsewhere_uses_galaxys_error_body() -> None:
    assert galaxy.scripted_error_body(ReplyError(429, "rate_limit", "Slow down")) == {
        "err_msg": "Slow down",
        "err_code": 429000,
        "error_type": "rate_limit",
    }


def test_the_agent_list_is_sorted_with_one_entry_per_type() -> None:
    listing = galaxy.render_agent_list(["router", "custom_tool"])
    assert [a["agent_type"] for a in listing["agents"]] == ["custom_tool", "router"]
    assert listing["total_count"] == 2
    assert set(listing["agents"][0]) == {
        "agent_type",
        "name",
        "description",
        "enabled",
        "model",
        "specialties",
        "backend",
        "upstream",
    }
    assert listing["agents"][0]["backend"] == "static"


def test_exchange_messages_split_each_turn_into_user_and_assistant_entries() -> None:
    messages = [
        StoredMessage("user", "q1", None, "t1"),
        StoredMessage("assistant", "a1", {"agent_type": "router"}, "t1"),
        StoredMessage("user", "q2", None, "t2"),
        StoredMessage("assistant", "a2", {"agent_type": "unknown"}, "t2"),
    ]
    entries = galaxy.render_exchange_messages(messages, feedback=1)
    assert [(e["role"], e["content"]) for e in entries] == [
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
        ("assistant", "a2"),
    ]
    assert [e.get("feedback") for e in entries if e["role"] == "assistant"] == [1, None]
    assert entries[1]["agent_type"] == "router"
    item = galaxy.render_history_item(9, "router", messages, None)
    assert (item["query"], item["response"], item["message_count"]) == ("q1", "a1", 2)


def test_a_stream_sends_progress_then_the_text_on_its_schedule() -> None:
    timed = reply(content="one two three", timing=Timing(first_delay_ms=100, word_delay_ms=50))
    events = list(galaxy.stream_events(timed, agent_type="router", routed=True))
    assert [(e.event, e.payload.get("step"), e.payload.get("status")) for e in events] == [
        ("progress", "routing", "completed"),
        ("progress", "responding", "running"),
        ("delta", "responding", None),
        ("delta", "responding", None),
        ("delta", "responding", None),
        ("progress", "responding", "completed"),
    ]
    deltas = [e for e in events if e.event == "delta"]
    assert "".join(e.payload["content"] for e in deltas) == "one two three"
    assert [e.at for e in deltas] == pytest.approx([0.1, 0.15, 0.2])
    assert events[-1].at == pytest.approx(0.2)


def test_a_failing_reply_ends_its_progress_as_failed() -> None:
    failed = reply(content="", error=ReplyError(500, "api_error", "boom"))
    events = list(galaxy.stream_events(failed, agent_type="router", routed=False))
    assert events[-1].data["status"] == "failed"
    assert all(e.data["step"] != "routing" for e in events)


def test_the_stream_ends_with_one_result_then_done() -> None:
    events = galaxy.missing_query_events("router")
    assert [e.event for e in events] == ["progress", "result", "done"]
    assert events[1].data["error_code"] == 400
