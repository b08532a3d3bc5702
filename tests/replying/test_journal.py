"""The request journal: every inquiry recorded exactly, credentials masked, filtered,
paged, cleared and pruned by its cap."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from django.db import connection

from staticagents.core.inquiry import Inquiry
from staticagents.models import JournalEntry
from staticagents.replying.answer import answer_inquiry
from staticagents.replying.journal import JournalWriter, prune_interval
from tests.conftest import galaxy_query as ask

LoadRules = Callable[[Any], dict[str, Any]]
RULES = {
    "rules": [
        {"name": "greeting", "match": {"query": "(?i)hello"}, "response": {"content": "Hi!"}},
        {
            "name": "broken",
            "match": {"contains": "broken"},
            "response": {"error": {"status": 502, "message": "upstream down"}},
        },
        {
            "name": "tools-only",
            "match": {"agent_type": "custom_tool", "context": {"tool_id": "."}},
            "response": {"content": "a tool"},
        },
    ],
    "fallback": {"content": "I do not know."},
}
SECRETS = ("sk-galaxy-secret", "key-secret", "cookie-secret", "sk-openai-secret")


def journal(control: httpx.Client, **params: Any) -> dict[str, Any]:
    response = control.get("/journal", params=params)
    assert response.status_code == 200, response.text
    page: dict[str, Any] = response.json()
    return page


def test_the_journal_holds_exactly_the_requests_sent_with_credentials_masked(
    control: httpx.Client, live_url: str, load_rules: LoadRules
) -> None:
    load_rules(RULES)
    credentials = {
        "Authorization": "Bearer sk-galaxy-secret",
        "X-API-Key": "key-secret",
        "Cookie": "sessionid=cookie-secret",
        "X-Static-Session": "masked",
    }
    sent = [
        {"query": "hello there", "agent_type": "router", "context": {}},
        {"query": "is it broken?", "agent_type": "router"},
        {"query": "what now", "agent_type": "router", "context": {"page_id": 7}},
    ]
    for body in sent:
        httpx.post(f"{live_url}/api/ai/agents/query", json=body, headers=credentials)
    llm = openai.OpenAI(
        base_url=f"{live_url}/v1",
        api_key="sk-openai-secret",
        max_retries=0,
        default_headers={"X-Static-Session": "masked"},
    )
    llm.chat.completions.create(model="m", messages=[{"role": "user", "content": "hello"}])

    page = journal(control, session="masked")
    assert page["count"] == 4
    entries = list(reversed(page["results"]))  # the journal lists newest first
    assert [json.loads(e["body"]) for e in entries[:3]] == sent
    assert [e["query"] for e in entries] == ["hello there", "is it broken?", "what now", "hello"]
    assert [e["dialect"] for e in entries] == ["galaxy"] * 3 + ["openai"]
    assert [(e["rule"], e["outcome"], e["status"]) for e in entries] == [
        ("greeting", "answered", 200),
        ("broken", "error", 502),
        (None, "answered", 200),
        ("greeting", "answered", 200),
    ]
    galaxy_headers = entries[0]["headers"]
    assert galaxy_headers["authorization"] == "Bearer ***"
    assert galaxy_headers["x-api-key"] == "***"
    assert galaxy_headers["cookie"] == "***"
    assert galaxy_headers["x-static-session"] == "masked"
    assert entries[3]["headers"]["authorization"] == "Bearer ***"
    everything = control.get("/journal", params={"session": "masked"}).text
    assert not [secret for secret in SECRETS if secret in everything]


def test_an_entry_for_the_fallback_says_why_nothing_matched(
    control: httpx.Client, live_url: str, load_rules: LoadRules
) -> None:
    load_rules(RULES)
    ask(live_url, "good evening", agent_type="custom_tool", context={"page_id": 3})
    [entry] = journal(control)["results"]
    assert entry["rule"] is None
    verdicts = {v["rule"]: (v["predicate"], v["reason"]) for v in entry["diagnosis"]}
    assert verdicts == {
        "greeting": ("query", "query 'good evening' does not match /(?i)hello/"),
        "broken": ("contains", "query does not contain 'broken'"),
        "tools-only": ("context", "context has no field 'tool_id'"),
    }


def test_answered_entries_carry_no_diagnosis(
    control: httpx.Client, live_url: str, load_rules: LoadRules
) -> None:
    load_rules(RULES)
    ask(live_url, "hello")
    assert journal(control)["results"][0]["diagnosis"] is None


def test_filters_narrow_the_journal(
    control: httpx.Client, live_url: str, load_rules: LoadRules
) -> None:
    load_rules(RULES)
    ask(live_url, "hello", session="one")
    ask(live_url, "broken", session="one")
    ask(live_url, "a tool", session="two", agent_type="custom_tool", context={"tool_id": "x"})
    ask(live_url, "nothing", session="two", context={"Marker": "Case"})

    def queries(**params: Any) -> list[str]:
        return [e["query"] for e in journal(control, **params)["results"]]

    assert queries(session="one") == ["broken", "hello"]
    assert queries(agent_type="custom_tool") == ["a tool"]
    assert queries(rule="greeting") == ["hello"]
    assert queries(outcome="error") == ["broken"]
    assert queries(fallback="true") == ["nothing"]
    assert queries(dialect="galaxy", session="two") == ["nothing", "a tool"]
    assert queries(dialect="openai") == []
    assert queries(contains='"Marker"') == ["nothing"]
    assert queries(contains='"marker"') == []  # the text must occur as written
    errors = control.get("/journal", params={"outcome": "lost", "dialect": "smoke"}).json()
    assert {e["path"] for e in errors["errors"]} == {"outcome", "dialect"}


def test_the_journal_is_newest_first_and_paged_by_cursor(
    control: httpx.Client, live_url: str, load_rules: LoadRules
) -> None:
    load_rules(RULES)
    for n in range(5):
        ask(live_url, f"question {n}")
    first = journal(control, page_size=2)
    assert first["count"] == 5
    assert [e["query"] for e in first["results"]] == ["question 4", "question 3"]
    ask(live_url, "question 5")  # a new entry does not shift the pages already cut
    second = control.get(first["next"]).json()
    assert [e["query"] for e in second["results"]] == ["question 2", "question 1"]
    third = control.get(second["next"]).json()
    assert [e["query"] for e in third["results"]] == ["question 0"]
    assert third["next"] is None


def test_clearing_the_journal_all_or_one_session(
    control: httpx.Client, live_url: str, load_rules: LoadRules
) -> None:
    load_rules(RULES)
    for session in ("keep", "drop", "drop"):
        ask(live_url, "hello", session=session)
    assert control.delete("/journal", params={"session": "drop"}).json() == {"deleted": 2}
    assert [e["session"] for e in journal(control)["results"]] == ["keep"]
    assert control.delete("/journal").json() == {"deleted": 1}
    assert journal(control)["count"] == 0


def test_a_client_that_leaves_a_stream_is_recorded_as_cancelled(
    control: httpx.Client, live_url: str, load_rules: LoadRules
) -> None:
    words = " ".join(f"word{n}" for n in range(200))
    slow = {"content": words, "stream": {"word_delay_ms": 20}}
    load_rules({"rules": [{"name": "slow", "response": slow}]})
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    headers = {"X-Static-Session": "leaver"}
    with httpx.stream(
        "POST", f"{live_url}/v1/chat/completions", json=body, headers=headers
    ) as stream:
        next(stream.iter_lines())  # the stream has started; now leave
    deadline = time.monotonic() + 5
    while journal(control, session="leaver")["results"][0]["outcome"] != "cancelled":
        assert time.monotonic() < deadline, "the entry was never marked cancelled"
        time.sleep(0.05)
    counters = control.get("/counters", params={"session": "leaver"}).json()
    assert (counters["requests"], counters["cancelled"]) == (1, 1)


def test_each_response_id_names_its_own_entry_when_many_share_a_commit(
    control: httpx.Client, live_url: str, load_rules: LoadRules
) -> None:
    """Concurrent requests are journaled by the same group commits; every id still fits."""
    load_rules(RULES)

    def ask_openai(n: int) -> tuple[str, str]:
        body = {"model": "m", "messages": [{"role": "user", "content": f"hello {n}"}]}
        response = httpx.post(f"{live_url}/v1/chat/completions", json=body, timeout=30)
        return f"hello {n}", response.json()["id"].removeprefix("chatcmpl-static")

    with ThreadPoolExecutor(max_workers=16) as pool:
        answered = list(pool.map(ask_openai, range(200)))
    entries = {e["id"]: e["query"] for e in journal(control, page_size=500)["results"]}
    assert len(entries) >= 200
    assert all(entries[int(entry_id)] == query for query, entry_id in answered)


# -- the reply path, without HTTP -----------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_n_answers_make_n_entries(load_rules: LoadRules) -> None:
    load_rules(RULES)
    for n in range(30):
        answer_inquiry(Inquiry(f"hello {n}", session="count"), route="/test", body=b"{}")
    assert JournalEntry.objects.filter(session="count").count() == 30


@pytest.mark.django_db(transaction=True)
def test_the_journal_is_pruned_to_its_cap(load_rules: LoadRules, settings: Any) -> None:
    settings.STATIC_AGENTS_JOURNAL_MAX = 10
    load_rules(RULES)
    for n in range(25):
        answer_inquiry(Inquiry(f"hello {n}"), route="/test", body=b"{}")
    kept = list(JournalEntry.objects.order_by("id").values_list("query", flat=True))
    assert kept == [f"hello {n}" for n in range(15, 25)]


def test_the_served_journal_is_pruned_to_its_cap_as_it_commits(
    live_url: str, load_rules: LoadRules, settings: Any
) -> None:
    # The reply routes' journal prunes in its own commit: once a reply is back,
    # the journal already holds only the newest entries.
    settings.STATIC_AGENTS_JOURNAL_MAX = 10
    load_rules(RULES)
    with httpx.Client(base_url=live_url) as http:
        for n in range(25):
            body = {"model": "static", "messages": [{"role": "user", "content": f"hello {n}"}]}
            assert http.post("/v1/chat/completions", json=body).status_code == 200
            kept = list(JournalEntry.objects.order_by("id").values_list("query", flat=True))
            assert kept == [f"hello {k}" for k in range(max(0, n - 9), n + 1)]


def test_pruning_runs_rarely_under_a_large_cap() -> None:
    assert prune_interval(100_000) == 300
    assert prune_interval(20_000) == 200
    assert prune_interval(10) == 1
    assert prune_interval(0) == 1


CREDENTIAL_HEADERS = {
    # The names the journal once stored verbatim, and others that name a credential.
    "openai-api-key": "sk-a",
    "anthropic-api-key": "sk-b",
    "x-auth-token": "tok-c",
    "x-access-token": "tok-d",
    "x-amz-security-token": "tok-e",
    "authorization-token": "tok-f",
    "api_key": "sk-g",
    "x-client-secret": "sec-h",
    "x-db-password": "pw-i",
    "proxy-authorization": "Basic pw-j",
}


def test_every_header_named_like_a_credential_is_masked_in_the_journal(
    control: httpx.Client, live_url: str, load_rules: LoadRules
) -> None:
    load_rules(RULES)
    headers = {**CREDENTIAL_HEADERS, "X-Static-Session": "named", "X-Trace": "kept"}
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
    assert httpx.post(f"{live_url}/v1/chat/completions", json=body, headers=headers).is_success

    (entry,) = journal(control, session="named")["results"]
    recorded = entry["headers"]
    assert {name: recorded[name] for name in CREDENTIAL_HEADERS} == {
        **dict.fromkeys(CREDENTIAL_HEADERS, "***"),
        "proxy-authorization": "Basic ***",
    }
    assert recorded["x-trace"] == "kept"
    everything = control.get("/journal", params={"session": "named"}).text
    assert not [value for value in CREDENTIAL_HEADERS.values() if value.split()[-1] in everything]


# -- bounded in bytes -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_entry_keeps_the_first_bytes_of_a_long_body_and_its_whole_length(
    load_rules: LoadRules, settings: Any
) -> None:
    settings.STATIC_AGENTS_JOURNAL_BODY_BYTES = 10
    load_rules(RULES)
    answer_inquiry(Inquiry("héllo wörld, a long question"), route="/test", body="é" * 40)
    entry = JournalEntry.objects.get()
    assert entry.body == "é" * 5 and entry.body_bytes == 80  # cut between characters
    assert entry.query == "héllo wö" and entry.size == 10 + 10


@pytest.mark.django_db(transaction=True)
def test_the_journal_is_pruned_to_its_byte_budget(load_rules: LoadRules, settings: Any) -> None:
    settings.STATIC_AGENTS_JOURNAL_MAX_BYTES = 1000
    load_rules(RULES)
    for n in range(30):
        answer_inquiry(Inquiry(f"hello {n:02}"), route="/test", body="x" * 92)  # 100 bytes each
    kept = list(JournalEntry.objects.order_by("id").values_list("query", flat=True))
    assert kept == [f"hello {n:02}" for n in range(20, 30)]


def _loop_entry(n: int, body_bytes: int = 92) -> dict[str, Any]:
    return {
        "dialect": "openai",
        "route": "/t",
        "session": "s",
        "agent_type": "a",
        "outcome": "answered",
        "query": f"hello {n:02}",  # 8 bytes: with the body, 100
        "body": "x" * body_bytes,
    }


@pytest.mark.django_db(transaction=True)
def test_a_file_busy_as_the_loops_connection_opens_is_no_error(monkeypatch: Any) -> None:
    """The loop's own connection sets its pragmas without waiting for a lock: when the
    file is busy then (a service's first reply, as its other connections open it), that
    request's row goes through the thread, and the next one opens the connection."""
    from staticagents.replying import journal as journal_module

    real, opened = journal_module.connect_sqlite, []

    def busy_once(db: Any, **options: Any) -> sqlite3.Connection:
        opened.append(db)
        if len(opened) == 1:
            raise sqlite3.OperationalError("database is locked")
        return real(db, **options)

    monkeypatch.setattr(journal_module, "connect_sqlite", busy_once)
    writer = JournalWriter()

    async def write() -> tuple[int | None, int | None, bool]:
        first = await writer.record(_loop_entry(0))
        second = await writer.record(_loop_entry(1))
        return first, second, writer._on_loop() is not None

    try:
        first, second, on_loop = asyncio.run(write())
    finally:
        writer.close()
    assert first is not None and second == first + 1
    assert on_loop and len(opened) == 2  # the loop's connection, once the file was free
    queries = JournalEntry.objects.order_by("id").values_list("query", flat=True)
    assert list(queries) == ["hello 00", "hello 01"]


@pytest.mark.django_db(transaction=True)
def test_the_loops_journal_is_pruned_to_its_byte_budget_commit_after_commit(
    settings: Any,
) -> None:
    """The loop's writer counts the bytes at its first prune and bounds them after from
    the entries leaving and coming: the journal stays the newest entries within budget,
    each commit, also when another connection deletes entries meanwhile."""
    settings.STATIC_AGENTS_JOURNAL_MAX_BYTES = 1000
    writer = JournalWriter()

    table = JournalEntry._meta.db_table
    reader = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)

    def kept() -> list[str]:
        return [query for (query,) in reader.execute(f"SELECT query FROM {table} ORDER BY id")]

    async def write() -> None:
        present: list[str] = []  # the newest entries that fit in 1,000 bytes: 10 of 100
        for n in range(30):
            await writer.record(_loop_entry(n))
            present = [*present, f"hello {n:02}"][-10:]
            assert kept() == present
            if n == 14:  # entries gone behind the writer's back only lower its bound
                reader.execute(f"DELETE FROM {table} WHERE query = 'hello 12'")
                present.remove("hello 12")
        # One entry over the budget on its own leaves only itself and what fits beside it.
        await writer.record(_loop_entry(30, body_bytes=792))
        assert kept() == ["hello 28", "hello 29", "hello 30"]

    try:
        asyncio.run(write())
    finally:
        writer.close()
        reader.close()


@pytest.mark.django_db(transaction=True)
def test_the_loops_journal_is_pruned_to_its_cap_within_a_large_budget(settings: Any) -> None:
    settings.STATIC_AGENTS_JOURNAL_MAX = 10
    writer = JournalWriter()

    async def write() -> None:
        for n in range(25):
            await writer.record(_loop_entry(n))
        # A larger cap, then a smaller budget: the bound holds across both.
        settings.STATIC_AGENTS_JOURNAL_MAX = 20
        await writer.record(_loop_entry(25))
        settings.STATIC_AGENTS_JOURNAL_MAX_BYTES = 500
        await writer.record(_loop_entry(26))

    try:
        asyncio.run(write())
    finally:
        writer.close()
    kept = list(JournalEntry.objects.order_by("id").values_list("query", flat=True))
    assert kept == [f"hello {n:02}" for n in range(22, 27)]


def test_a_journal_page_stops_at_its_byte_ceiling_and_leads_on_both_ways(
    control: httpx.Client, live_url: str, load_rules: LoadRules, monkeypatch: Any
) -> None:
    from staticagents.control.views import JournalPagination

    monkeypatch.setattr(JournalPagination, "PAGE_BYTES", 1000)
    load_rules(RULES)
    for n in range(7):
        ask(live_url, f"question {n} " + "x" * 150)  # about 400 bytes of body and query each
    first = journal(control, page_size=5)
    assert [e["query"][:10] for e in first["results"]] == ["question 6", "question 5"]
    assert all(e["body_truncated"] is False for e in first["results"])
    second = control.get(first["next"]).json()
    assert [e["query"][:10] for e in second["results"]] == ["question 4", "question 3"]
    back = control.get(second["previous"]).json()
    assert [e["query"][:10] for e in back["results"]] == ["question 6", "question 5"]


@pytest.mark.django_db(transaction=True)
def test_pruning_gives_the_space_back_to_the_file_system(settings: Any) -> None:
    """On the loop's writer (a SQLite file, auto_vacuum set by the migrations): 20 MB of
    bodies, then a budget of 2 MB; the file shrinks back."""
    name = connection.settings_dict["NAME"]
    writer = JournalWriter()
    entry = {"dialect": "openai", "route": "/t", "session": "s", "agent_type": "a"}

    async def write(count: int) -> None:
        for _ in range(count):
            await writer.record({**entry, "outcome": "answered", "body": "x" * 1_000_000})
        await asyncio.sleep(0.5)  # the free pages go back a few at a time

    def file_size() -> int:
        with sqlite3.connect(name) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return os.path.getsize(name)

    try:
        asyncio.run(write(20))
        assert file_size() > 20_000_000
        settings.STATIC_AGENTS_JOURNAL_MAX_BYTES = 2_000_000
        asyncio.run(write(1))
    finally:
        writer.close()
    assert JournalEntry.objects.count() == 2
    assert file_size() < 5_000_000
