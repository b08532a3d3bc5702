"""The live journal across processes: real Redis as the Channels layer, several workers.

Like tests/test_scale_out.py, these start `manage.py serve` against the PostgreSQL
and Redis servers named by STATIC_AGENTS_TEST_POSTGRES_URL and
STATIC_AGENTS_TEST_REDIS_URL. Two servers of one worker each, sharing the database
and Redis, are two workers whose roles are known (which of one server's workers
takes a connection is the kernel's choice); `serve --workers 2` is tested too.
The Redis that is stopped mid-test is a private redis-server on a free port.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from bench.servers import serve
from staticagents.testing.client import StaticAgentsClient
from tests.conftest import free_port
from tests.test_scale_out import REDIS, TOKEN, chat, database, fixture_file, server

__all__ = ["database"]  # the fixture, for pytest

RULES = {
    "rules": [
        {
            "name": "slow",
            "match": {"contains": "slowly"},
            "response": {"content": " ".join(["word"] * 40), "stream": {"word_delay_ms": 2_500}},
        },
        {"name": "echo", "response": {"template": True, "content": "$query"}},
    ]
}
CONTROL = {"Authorization": f"Bearer {TOKEN}"}
DROPPED_WHILE_DOWN = 'static_agents_live_dropped_total{where="publish"}'


def live_url(base: str, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"token": TOKEN, **params}.items())
    return f"{base.replace('http://', 'ws://')}/control/journal/live?{query}"


async def next_event(
    socket: ClientConnection, kind: str | None, timeout: float = 10
) -> dict[str, Any]:
    while True:
        event: dict[str, Any] = json.loads(await asyncio.wait_for(socket.recv(), timeout))
        if kind is None or event["type"] == kind:
            return event


def ask(base: str, query: str, session: str) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/chat/completions", json=chat(query), headers={"X-Static-Session": session}
    )


def test_an_entry_answered_by_one_worker_reaches_a_subscriber_on_the_other(
    database: str, tmp_path: Path
) -> None:
    fixture = fixture_file(tmp_path, RULES)
    with server(database, fixture, workers=1) as first, server(database, None, workers=1) as second:

        async def run() -> dict[str, Any]:
            async with connect(live_url(first.url, session="across")) as socket:
                assert (await next_event(socket, "subscribed"))["available"] is True
                answered = await asyncio.to_thread(
                    ask, second.url, "from the other worker", "across"
                )
                assert answered.status_code == 200
                return (await next_event(socket, "entry"))["entry"]

        entry = asyncio.run(run())
    assert (entry["query"], entry["rule"], entry["session"]) == (
        "from the other worker",
        "echo",
        "across",
    )


def test_every_entry_of_two_workers_reaches_the_client_s_wait_for(
    database: str, tmp_path: Path
) -> None:
    with server(database, fixture_file(tmp_path, RULES), workers=2) as live:
        client = StaticAgentsClient(live.url, token=TOKEN)
        queries = [f"question {n}" for n in range(20)]

        async def send_all() -> None:
            await asyncio.gather(
                *(asyncio.to_thread(ask, live.url, q, client.session) for q in queries)
            )

        got: list[str] = []

        def wait_all() -> None:
            for query in queries:
                got.append(client.expect_request(query, timeout=10).query)

        asyncio.run(send_all())
        wait_all()
        client.close()
    assert sorted(got) == sorted(queries)


def test_a_session_reset_ends_a_stream_held_by_the_other_worker(
    database: str, tmp_path: Path
) -> None:
    """40 words 2.5 s apart take 100 s; the reset through the other server ends the
    stream at once, with the rest of its words and [DONE]."""
    fixture = fixture_file(tmp_path, RULES)
    with server(database, fixture, workers=1) as first, server(database, None, workers=1) as second:

        async def run() -> list[str]:
            headers = {"X-Static-Session": "held"}
            body = {**chat("slowly please"), "stream": True}
            async with (
                httpx.AsyncClient(timeout=30) as client,
                client.stream(
                    "POST", f"{first.url}/v1/chat/completions", json=body, headers=headers
                ) as response,
            ):
                lines = response.aiter_lines()
                seen = [await anext(lines)]
                reset = await client.delete(f"{second.url}/control/sessions/held", headers=CONTROL)
                assert reset.status_code == 200, reset.text
                seen += [line async for line in lines if line]
            return seen

        lines = asyncio.run(run())
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.split() == ["word"] * 40


async def rest(lines: Any) -> list[str]:
    return [line async for line in lines if line]


def seen(event: dict[str, Any]) -> str | None:
    """The query of an entry event, the session of a reset."""
    return event.get("entry", {}).get("query") or event.get("session")


def sqlite_server(path: Path, fixture: Path | None) -> Any:
    env = {"REDIS_URL": REDIS, "STATIC_AGENTS_CONTROL_TOKEN": TOKEN}
    return serve("serve sqlite", database_url=f"sqlite:///{path}", fixture=fixture, env=env)


def test_two_services_sharing_redis_but_not_their_database_never_hear_each_other(
    tmp_path: Path,
) -> None:
    """Each service's groups carry a prefix of its own (a hash of its database): one's
    entries, session resets and announcements never reach the other's subscribers,
    nor end its streams."""
    fixture = fixture_file(tmp_path, RULES)
    with (
        sqlite_server(tmp_path / "one.sqlite3", fixture) as one,
        sqlite_server(tmp_path / "two.sqlite3", fixture) as two,
    ):

        async def run() -> tuple[list[dict[str, Any]], list[str], bool]:
            headers = {"X-Static-Session": "held"}
            body = {**chat("slowly please"), "stream": True}
            async with (
                connect(live_url(one.url)) as socket,
                httpx.AsyncClient(timeout=30) as client,
                client.stream(
                    "POST", f"{one.url}/v1/chat/completions", json=body, headers=headers
                ) as response,
            ):
                lines = response.aiter_lines()
                await anext(lines)
                reader = asyncio.ensure_future(rest(lines))  # the stream's words, 2.5 s apart
                await next_event(socket, "subscribed")
                # On the other service: an entry, a reset of the same session, a new version.
                assert (await asyncio.to_thread(ask, two.url, "elsewhere", "held")).is_success
                other = await client.delete(f"{two.url}/control/sessions/held", headers=CONTROL)
                assert other.status_code == 200, other.text
                patch = {"response": {"content": "changed"}}
                changed = await client.patch(
                    f"{two.url}/control/rules/echo", json=patch, headers=CONTROL
                )
                assert changed.status_code == 200, changed.text
                # Then on this one: what its subscriber hears is its own.
                assert (await asyncio.to_thread(ask, one.url, "here", "mine")).is_success
                mine = await client.delete(f"{one.url}/control/sessions/marker", headers=CONTROL)
                assert mine.status_code == 200, mine.text
                heard: list[dict[str, Any]] = []
                # (An announcement goes at once, an entry within ``live.FLUSH_SECONDS``.)
                while not ({"here", "marker"} <= {seen(event) for event in heard}):
                    heard.append(await next_event(socket, None))
                still_open = not reader.done()
                reader.cancel()
            kinds = [event["type"] for event in heard]
            return heard, kinds, still_open

        heard, kinds, still_open = asyncio.run(run())
    entries = [event["entry"]["query"] for event in heard if event["type"] == "entry"]
    assert entries == ["slowly please", "here"]
    assert "ruleset" not in kinds
    assert [e for e in heard if e["type"] == "session_reset"] == [
        {"type": "session_reset", "session": "marker"}
    ]
    assert still_open  # the other service's reset of "held" ended nothing here


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is needed to stop Redis in the middle of a test")
    redis = PrivateRedis(free_port(), tmp_path)
    redis.start()
    yield redis
    redis.stop()


class PrivateRedis:
    """A redis-server of this test's own, to stop and start again on the same port."""

    def __init__(self, port: int, directory: Path) -> None:
        self.port = port
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        for _ in range(500):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.1):
                    return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("redis-server exited at start") from None
                subprocess.run(["sleep", "0.02"], check=True)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def test_redis_stopped_mid_test_loses_no_reply_and_the_feed_recovers(
    database: str, tmp_path: Path, private_redis: PrivateRedis
) -> None:
    fixture = fixture_file(tmp_path, RULES)
    env = {"REDIS_URL": private_redis.url, "STATIC_AGENTS_CONTROL_TOKEN": TOKEN}
    with serve("serve x2", database_url=database, fixture=fixture, workers=2, env=env) as live:

        async def run() -> tuple[list[int], dict[str, Any]]:
            async with connect(live_url(live.url, session="outage")) as socket:
                assert (await next_event(socket, "subscribed"))["available"] is True
                await asyncio.to_thread(ask, live.url, "before", "outage")
                assert (await next_event(socket, "entry"))["entry"]["query"] == "before"
                private_redis.stop()
                statuses = [
                    (await asyncio.to_thread(ask, live.url, f"during {n}", "outage")).status_code
                    for n in range(20)
                ]
                await next_event(socket, "unavailable")
                private_redis.start()
                await next_event(socket, "available", timeout=30)
                await asyncio.to_thread(ask, live.url, "after", "outage")
                return statuses, (await next_event(socket, "entry"))["entry"]

        statuses, after = asyncio.run(run())
        metrics = httpx.get(f"{live.url}/metrics", headers=CONTROL).text
        journal = httpx.get(
            f"{live.url}/control/journal",
            params={"session": "outage", "page_size": "100"},
            headers=CONTROL,
        ).json()["results"]
    assert statuses == [200] * 20
    dropped = [line for line in metrics.splitlines() if line.startswith(DROPPED_WHILE_DOWN)]
    assert dropped and float(dropped[0].split()[-1]) >= 1  # entries answered meanwhile
    assert after["query"] == "after"
    queries = sorted(entry["query"] for entry in journal)
    assert queries == sorted(["before", "after", *(f"during {n}" for n in range(20))])
