"""Scale-out on real engines: PostgreSQL, Redis and several worker processes.

These tests start `manage.py serve` as real processes (two workers, or two
separate servers sharing one database, as two machines would) against the
PostgreSQL and Redis servers named by STATIC_AGENTS_TEST_POSTGRES_URL and
STATIC_AGENTS_TEST_REDIS_URL (`.ci/run` starts both). Without them the tests
are skipped locally and fail under CI.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bench.servers import Server, serve
from tests.control.test_consistent_reads import reads_during_imports

POSTGRES = os.environ.get("STATIC_AGENTS_TEST_POSTGRES_URL", "")
REDIS = os.environ.get("STATIC_AGENTS_TEST_REDIS_URL", "")
TOKEN = "scale-out-token"
CONTROL = {"Authorization": f"Bearer {TOKEN}"}

if not (POSTGRES and REDIS):
    if os.environ.get("CI"):
        raise RuntimeError("CI must provide STATIC_AGENTS_TEST_POSTGRES_URL and _REDIS_URL")
    pytest.skip("PostgreSQL/Redis not configured for scale-out tests", allow_module_level=True)


@pytest.fixture
def database() -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    import psycopg

    name = f"sa_scale_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = POSTGRES.rsplit("/", 1)[0] + "/" + name
    yield url
    with psycopg.connect(POSTGRES, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fixture_file(tmp_path: Path, document: dict[str, Any], name: str = "rules.yml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def server(database: str, fixture: Path | None, *, workers: int = 2) -> Server:
    return serve(
        f"serve x{workers}",
        database_url=database,
        fixture=fixture,
        workers=workers,
        env={"REDIS_URL": REDIS, "STATIC_AGENTS_CONTROL_TOKEN": TOKEN},
    )


def chat(query: str) -> dict[str, Any]:
    return {"model": "static", "messages": [{"role": "user", "content": query}]}


async def ask_all(url: str, queries: list[str], session: str) -> list[httpx.Response]:
    """Send every query at once, each on its own connection."""
    limits = httpx.Limits(max_connections=len(queries), max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        return await asyncio.gather(
            *(
                client.post(
                    "/v1/chat/completions", json=chat(q), headers={"X-Static-Session": session}
                )
                for q in queries
            )
        )


def text_of(response: httpx.Response) -> str:
    return str(response.json()["choices"][0]["message"]["content"])


def journal(url: str, **filters: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    next_url: str | None = f"{url}/control/journal"
    params: dict[str, str] | None = {**filters, "page_size": "500"}
    while next_url:
        page = httpx.get(next_url, params=params, headers=CONTROL, timeout=30).json()
        entries.extend(page["results"])
        next_url, params = page.get("next"), None
    return entries


def test_concurrent_requests_get_exact_gap_free_positions_and_fail_counts(
    database: str, tmp_path: Path
) -> None:
    steps = 200
    document = {
        "rules": [
            {
                "name": "script",
                "match": {"contains": "next step"},
                "responses": [{"content": f"step {i}"} for i in range(1, steps + 1)],
                "on_exhausted": "error",
            },
            {
                "name": "flaky",
                "match": {"contains": "flaky"},
                "response": {"content": "recovered", "fail_first": 3},
            },
        ]
    }
    with server(database, fixture_file(tmp_path, document)) as live:
        script = asyncio.run(ask_all(live.url, [f"next step {i}" for i in range(steps)], "s1"))
        # 50 distinct questions, 4 attempts each: exactly 3 failures per question.
        flaky_queries = [f"flaky question {i % 50}" for i in range(200)]
        flaky = asyncio.run(ask_all(live.url, flaky_queries, "s1"))
        extra = httpx.post(
            f"{live.url}/v1/chat/completions",
            json=chat("next step again"),
            headers={"X-Static-Session": "s1"},
        )
        entries = journal(live.url, session="s1")

    assert sorted(text_of(r) for r in script) == sorted(f"step {i}" for i in range(1, steps + 1))
    assert extra.status_code == 500  # the script is exhausted: nothing was skipped or repeated
    outcomes = Counter((q, r.status_code) for q, r in zip(flaky_queries, flaky, strict=True))
    for i in range(50):
        assert outcomes[(f"flaky question {i}", 503)] == 3
        assert outcomes[(f"flaky question {i}", 200)] == 1
    assert len(entries) == steps + 200 + 1  # the journal holds exactly the requests sent


def test_an_edit_through_the_control_api_is_seen_by_every_server_at_once(
    database: str, tmp_path: Path
) -> None:
    document = {"rules": [{"name": "greeting", "response": {"content": "old answer"}}]}
    fixture = fixture_file(tmp_path, document)
    # The second server shares the database: another machine behind the same address.
    with server(database, fixture, workers=1) as first, server(database, None) as second:
        for live in (first, second):
            assert (
                text_of(httpx.post(f"{live.url}/v1/chat/completions", json=chat("hi")))
                == "old answer"
            )
        patch = httpx.patch(
            f"{first.url}/control/rules/greeting",
            headers=CONTROL,
            json={"response": {"content": "new answer"}},
        )
        assert patch.status_code == 200, patch.text
        answers = [
            text_of(r)
            for live in (second, first)
            for r in asyncio.run(ask_all(live.url, ["hi"] * 20, "edit"))
        ]
    assert set(answers) == {"new answer"}


def test_a_stored_response_is_continued_read_and_deleted_through_another_server(
    database: str, tmp_path: Path
) -> None:
    """The Responses API's store lives in the database: any worker continues what one answered."""
    document = {
        "rules": [
            {
                "name": "call",
                "match": {"tool_result": False},
                "response": {"tool_calls": [{"name": "lookup", "id": "call_1"}]},
            },
            {
                "name": "report",
                "match": {"tool_result": True},
                "response": {"template": True, "content": "$query: $tool_result"},
            },
        ]
    }
    fixture = fixture_file(tmp_path, document)
    with server(database, fixture, workers=1) as first, server(database, None) as second:
        asked = httpx.post(f"{first.url}/v1/responses", json={"model": "m", "input": "weather?"})
        response_id = asked.json()["id"]
        output = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
        follow_up = httpx.post(
            f"{second.url}/v1/responses",
            json={"model": "m", "previous_response_id": response_id, "input": [output]},
        )
        assert follow_up.json()["output"][0]["content"][0]["text"] == "weather?: sunny"
        assert httpx.get(f"{second.url}/v1/responses/{response_id}").json() == asked.json()
        assert httpx.delete(f"{first.url}/v1/responses/{response_id}").status_code == 200
        assert httpx.get(f"{second.url}/v1/responses/{response_id}").status_code == 404


def test_adk_sessions_and_galaxy_exchanges_continue_through_another_server(
    database: str, tmp_path: Path
) -> None:
    """A run's session and a chat's exchange are written in the journal's rounds: on
    PostgreSQL too, any worker continues what another began."""
    document = {
        "rules": [
            {
                "name": "second",
                "match": {"turn": 2},
                "response": {"template": True, "content": "turn two: $query"},
            },
            {"name": "first", "response": {"content": "turn one"}},
        ]
    }
    fixture = fixture_file(tmp_path, document)

    def run(url: str, text: str) -> httpx.Response:
        message = {"role": "user", "parts": [{"text": text}]}
        body = {
            "appName": "router",
            "userId": "u",
            "sessionId": "s1",
            "newMessage": message,
            "stateDelta": {"topic": text},
        }
        return httpx.post(f"{url}/run", json=body, timeout=30)

    with server(database, fixture, workers=1) as first, server(database, None) as second:
        assert run(first.url, "hello").json()[0]["content"]["parts"][0]["text"] == "turn one"
        again = run(second.url, "and again")
        assert again.json()[0]["content"]["parts"][0]["text"] == "turn two: and again"
        session = httpx.get(f"{first.url}/apps/router/users/u/sessions/s1").json()
        assert [event["author"] for event in session["events"]] == ["user", "router"] * 2
        assert session["state"] == {"topic": "and again"}

        opened = httpx.post(f"{first.url}/api/chat?agent_type=router", json={"query": "hi"})
        exchange_id = opened.json()["exchange_id"]
        follow_up = httpx.post(
            f"{second.url}/api/chat?agent_type=router",
            json={"query": "more", "exchange_id": exchange_id},
        ).json()
        assert (follow_up["response"], follow_up["exchange_id"]) == ("turn two: more", exchange_id)
        messages = httpx.get(f"{first.url}/api/chat/exchange/{exchange_id}/messages").json()
        assert [m["content"] for m in messages] == ["hi", "turn one", "more", "turn two: more"]
        missing = httpx.post(
            f"{second.url}/api/chat?agent_type=router", json={"query": "x", "exchange_id": 999999}
        ).json()
        assert missing["error_code"] == 404


def test_a_fixture_replaced_under_traffic_is_seen_whole_or_not_at_all(
    database: str, tmp_path: Path
) -> None:
    def version(tag: str, confidence: str) -> dict[str, Any]:
        # Every part of the document says which version it is: a reply mixing
        # two versions (rules of one, defaults or fallback of the other) shows.
        return {
            "defaults": {"confidence": confidence},
            "rules": [
                {
                    "name": f"{tag}-{i}",
                    "match": {"contains": f"{tag}-only-{i}"},
                    "response": {"content": f"{tag} rule"},
                }
                for i in range(200)
            ]
            + [
                {
                    "name": f"{tag}-answer",
                    "match": {"contains": "question"},
                    "response": {"content": f"{tag}", "metadata": {"version": tag}},
                }
            ],
            "fallback": {"content": f"{tag} fallback"},
        }

    v1, v2 = version("v1", "low"), version("v2", "high")
    with server(database, fixture_file(tmp_path, v1)) as live:

        async def traffic() -> list[tuple[str, str]]:
            seen = []
            async with httpx.AsyncClient(base_url=live.url, timeout=60) as client:
                for _ in range(150):
                    body = {"query": "a question", "agent_type": "router"}
                    response = await client.post("/api/ai/agents/query", json=body)
                    assert response.status_code == 200, response.text
                    reply = response.json()
                    seen.append((reply["response"]["content"], reply["response"]["confidence"]))
            return seen

        async def replace_repeatedly() -> None:
            async with httpx.AsyncClient(base_url=live.url, headers=CONTROL, timeout=60) as c:
                for i in range(10):
                    text = yaml.safe_dump(v2 if i % 2 == 0 else v1)
                    response = await c.put(
                        "/control/fixture",
                        content=text,
                        headers={"Content-Type": "application/yaml"},
                    )
                    assert response.status_code == 200, response.text

        async def both() -> list[tuple[str, str]]:
            results = await asyncio.gather(traffic(), traffic(), traffic(), replace_repeatedly())
            return [pair for result in results[:3] for pair in result]

        seen = asyncio.run(both())
    assert set(seen) <= {("v1", "low"), ("v2", "high")}
    assert {content for content, _ in seen} == {"v1", "v2"}


def test_a_killed_worker_loses_no_acknowledged_journal_entry(database: str, tmp_path: Path) -> None:
    document = {"rules": [{"name": "echo", "response": {"content": "$query", "template": True}}]}
    fixture = fixture_file(tmp_path, document)
    acknowledged: list[str] = []
    live = server(database, fixture).start()
    try:

        async def traffic(worker: int) -> None:
            async with httpx.AsyncClient(base_url=live.url, timeout=10) as client:
                for i in range(10_000):
                    query = f"request {worker}-{i}"
                    try:
                        response = await client.post("/v1/chat/completions", json=chat(query))
                    except httpx.HTTPError:
                        return
                    if response.status_code == 200:
                        acknowledged.append(query)

        async def kill_after_a_while() -> None:
            while len(acknowledged) < 300:
                await asyncio.sleep(0.01)
            assert live.process is not None
            os.killpg(live.process.pid, signal.SIGKILL)

        async def run() -> None:
            await asyncio.gather(kill_after_a_while(), *(traffic(w) for w in range(8)))

        asyncio.run(run())
    finally:
        live.stop()
    restarted = server(database, fixture_file(tmp_path, document, "same.yml"))
    with restarted:
        recorded = {entry["query"] for entry in journal(restarted.url)}
    assert len(acknowledged) >= 300
    missing = [q for q in acknowledged if q not in recorded]
    assert missing == [], f"{len(missing)} acknowledged requests are not in the journal"


def test_the_service_reconnects_after_the_database_drops_its_connections(
    database: str, tmp_path: Path
) -> None:
    import psycopg

    document = {"rules": [{"name": "echo", "response": {"content": "pong"}}]}
    with server(database, fixture_file(tmp_path, document)) as live:
        assert text_of(httpx.post(f"{live.url}/v1/chat/completions", json=chat("ping"))) == "pong"
        name = database.rsplit("/", 1)[1]
        with psycopg.connect(POSTGRES, autocommit=True) as admin:
            dropped = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchone()
        assert dropped and dropped[0] >= 1
        statuses = [
            httpx.post(f"{live.url}/v1/chat/completions", json=chat("ping")).status_code
            for _ in range(20)
        ]
    assert statuses == [200] * 20


def test_listings_and_exports_never_see_half_an_import_on_postgresql(database: str) -> None:
    with server(database, None) as live:
        reads, failures = reads_during_imports(live.url, CONTROL)
    assert reads > 0
    assert not failures, failures[:10]
