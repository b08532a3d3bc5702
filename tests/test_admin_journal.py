"""The journal in the admin: list, filters, an entry's page, and a rule made from an entry."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from staticagents.core.inquiry import Inquiry
from staticagents.models import JournalEntry, Rule
from staticagents.replying.answer import answer_inquiry

pytestmark = pytest.mark.django_db

JOURNAL = "/admin/staticagents/journalentry/"
RULES = """
rules:
  - name: greet
    match: {agent_type: router, query: "(?i)^hello"}
    response: {content: "Hello there"}
  - name: gemini-only
    match: {dialect: gemini, contains: "weather"}
    response: {content: "Sunny"}
  - name: errors
    match: {agent_type: error_analysis}
    response: {content: "Look at line 3"}
fallback: {content: "Nothing matched."}
"""


@pytest.fixture(autouse=True)
def rules(load_rules: Callable[[Any], Any]) -> None:
    load_rules(RULES)


def ask(query: str, *, dialect: str = "openai", agent_type: str = "router", **body: Any) -> int:
    """Answer an inquiry as a reply route does; return its journal entry's id."""
    payload = {"model": "m", "messages": [{"role": "user", "content": query}], **body}
    inquiry = Inquiry(query=query, agent_type=agent_type, dialect=dialect, model="m")
    answer = answer_inquiry(inquiry, route="/v1/chat/completions", body=json.dumps(payload))
    assert answer.entry_id is not None
    return answer.entry_id


def listed(client: Client, **params: Any) -> list[int]:
    response = client.get(JOURNAL, params)
    assert response.status_code == 200
    return [entry.pk for entry in response.context["cl"].result_list]


def test_the_list_is_newest_first_and_filters_by_outcome(admin_client: Client) -> None:
    hello, missed, error = ask("hello"), ask("what now?"), ask("boom", agent_type="error_analysis")
    assert listed(admin_client) == [error, missed, hello]
    assert listed(admin_client, outcome="fallback") == [missed]
    assert listed(admin_client, outcome="answered") == [error, hello]
    JournalEntry.objects.filter(pk=hello).update(outcome="cancelled")
    assert listed(admin_client, outcome="cancelled") == [hello]


def test_the_list_filters_by_dialect_agent_type_rule_and_session_and_searches_the_query(
    admin_client: Client,
) -> None:
    hello, weather = ask("hello"), ask("weather today", dialect="gemini")
    error = ask("boom", agent_type="error_analysis")
    JournalEntry.objects.filter(pk=hello).update(session="s-1")
    assert listed(admin_client, dialect="gemini") == [weather]
    assert listed(admin_client, agent_type="error_analysis") == [error]
    assert listed(admin_client, rule="greet") == [hello]
    assert listed(admin_client, session="s-1") == [hello]
    assert listed(admin_client, q="today") == [weather]


def test_the_list_reads_no_body_and_counts_at_most_a_bounded_slice(admin_client: Client) -> None:
    for i in range(30):
        ask(f"question {i}")
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(JOURNAL, {"outcome": "fallback", "_facets": "1"}).content.decode()
    entries = [q["sql"] for q in queries.captured_queries if "journalentry" in q["sql"]]
    counts = [sql for sql in entries if "COUNT(" in sql.upper()]
    assert counts and all("LIMIT" in sql.upper() for sql in counts)  # never the whole table
    assert not any('"body"' in sql for sql in entries)
    assert len(entries) <= 6  # the same few queries, whatever the page holds
    assert "question 29" in page


def test_the_journal_cannot_be_added_to_changed_or_deleted_in_the_admin(
    admin_client: Client,
) -> None:
    entry = ask("hello")
    assert admin_client.get(f"{JOURNAL}add/").status_code == 403
    assert admin_client.post(f"{JOURNAL}{entry}/delete/", {"post": "yes"}).status_code == 403
    admin_client.post(f"{JOURNAL}{entry}/change/", {"query": "changed"})
    assert JournalEntry.objects.get(pk=entry).query == "hello"


def test_an_entry_shows_its_body_masked_credentials_and_answering_rule(
    admin_client: Client,
) -> None:
    inquiry = Inquiry(query="hello", headers={"authorization": "Bearer sk-secret", "x-a": "1"})
    entry = answer_inquiry(inquiry, route="/api/ai/agents/query", body='{"query": "hello"}')
    page = admin_client.get(f"{JOURNAL}{entry.entry_id}/change/").content.decode()
    assert "&quot;query&quot;: &quot;hello&quot;" in page
    assert "Bearer ***" in page and "sk-secret" not in page
    greet = Rule.objects.get(name="greet")
    assert f'<a href="/admin/staticagents/rule/{greet.pk}/change/" class="answering-rule">' in page


def test_a_fallback_entry_shows_why_each_rule_did_not_answer(admin_client: Client) -> None:
    entry = ask("weather today")
    response = admin_client.get(f"{JOURNAL}{entry}/change/")
    page = response.content.decode()
    assert "Today no rule answers it: the fallback replies." in page
    rows = re.findall(r"<tr><td><a href=\"[^\"]+\">([-\w]+)</a></td><td>(\w+)</td>", page)
    assert rows == [("greet", "query"), ("gemini-only", "dialect"), ("errors", "agent_type")]


def new_rule_link(client: Client, entry: int) -> str:
    page = client.get(f"{JOURNAL}{entry}/change/").content.decode()
    [link] = re.findall(r'<a href="([^"]+)" class="button create-rule">', page)
    return link.replace("&amp;", "&")


def test_create_rule_prefills_the_agent_type_an_anchored_query_and_the_dialect_that_mattered(
    admin_client: Client,
) -> None:
    # "gemini-only" would have answered it but for its dialect: the dialect mattered.
    link = new_rule_link(admin_client, ask("weather (today)?", dialect="openai"))
    assert urlsplit(link).path == "/admin/staticagents/rule/add/"
    form = admin_client.get(link).context["adminform"].form
    assert form.initial["match_agent_type"] == "router"
    assert form.initial["match_query"] == r"^weather \(today\)\?$"
    assert re.search(form.initial["match_query"], "weather (today)?")
    assert form.initial["match_dialect"] == "openai"
    link = new_rule_link(admin_client, ask("something else"))
    assert "match_dialect" not in dict(parse_qsl(urlsplit(link).query))


def add_rule(client: Client, link: str, content: str) -> Any:
    values = dict(parse_qsl(urlsplit(link).query))
    form = {
        "name": values["name"],
        "enabled": "on",
        "match_agent_type": values["match_agent_type"],
        "match_query": values["match_query"],
        "match_dialect": values.get("match_dialect", ""),
        "responses-TOTAL_FORMS": "1",
        "responses-INITIAL_FORMS": "0",
        "responses-0-position": "0",
        "responses-0-content": content,
    }
    response = client.post(link, form, follow=True)
    assert response.status_code == 200
    return response


def test_a_rule_created_from_an_entry_answers_the_same_request_next_time(
    admin_client: Client,
) -> None:
    # "errors" answers every error_analysis question: the new rule must go before it.
    entry = ask("KeyError in foo", agent_type="error_analysis")
    response = add_rule(admin_client, new_rule_link(admin_client, entry), "Check the key")
    names = list(Rule.objects.order_by("position").values_list("name", flat=True))
    assert names == ["greet", "gemini-only", f"from-journal-{entry}", "errors"]
    assert "before “errors”, so it answers that request" in response.content.decode()
    inquiry = Inquiry(query="KeyError in foo", agent_type="error_analysis", dialect="openai")
    again = answer_inquiry(inquiry, route="/v1/chat/completions")
    assert (again.reply.rule, again.reply.content) == (f"from-journal-{entry}", "Check the key")


def test_a_rule_created_from_a_fallback_entry_goes_last_and_answers_it(
    admin_client: Client,
) -> None:
    entry = ask("nobody knows")
    add_rule(admin_client, new_rule_link(admin_client, entry), "Now I know")
    assert Rule.objects.order_by("position").last().name == f"from-journal-{entry}"  # type: ignore[union-attr]
    again = answer_inquiry(Inquiry(query="nobody knows", dialect="openai"), route="/")
    assert again.reply.content == "Now I know"


def test_the_system_prompt_in_the_stored_body_decides_where_the_rule_goes(
    admin_client: Client, load_rules: Callable[[Any], Any]
) -> None:
    load_rules(
        "rules:\n"
        "  - {name: terse, match: {system: terse}, response: {content: short}}\n"
        "  - {name: greet, match: {query: hello}, response: {content: hi}}\n"
    )
    entry = ask(
        "hello",
        messages=[{"role": "system", "content": "be terse"}, {"role": "user", "content": "hello"}],
    )
    add_rule(admin_client, new_rule_link(admin_client, entry), "Hello, tersely")
    names = list(Rule.objects.order_by("position").values_list("name", flat=True))
    assert names[0] == f"from-journal-{entry}"


def test_a_user_without_view_permission_cannot_read_the_journal(
    client: Client, settings: Any
) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    ask("hello")
    User.objects.create_user("clerk", password="pw", is_staff=True)
    client.login(username="clerk", password="pw")
    assert client.get(JOURNAL).status_code == 403


def test_a_request_to_an_unknown_route_offers_no_rule(admin_client: Client) -> None:
    entry = JournalEntry.objects.create(
        dialect="openai",
        route="/v1/nowhere",
        session="global",
        agent_type="",
        outcome="unknown_route",
    )
    page = admin_client.get(f"{JOURNAL}{entry.pk}/change/").content.decode()
    assert "unknown_route" in page and "create-rule" not in page


def test_a_filter_offers_recent_values_and_takes_any_other_from_the_url(
    admin_client: Client,
) -> None:
    entries = [ask(f"q{i}") for i in range(25)]
    for i, entry in enumerate(entries):
        JournalEntry.objects.filter(pk=entry).update(session=f"s-{i:02}")
    response = admin_client.get(JOURNAL)
    [sessions] = [f for f in response.context["cl"].filter_specs if f.parameter_name == "session"]
    offered = [value for value, _ in sessions.lookup_choices]
    assert len(offered) == 20 and "s-24" in offered and "s-00" not in offered
    assert listed(admin_client, session="s-00") == [entries[0]]
