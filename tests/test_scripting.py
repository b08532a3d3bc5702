"""Scripted conversations through the real app: sequences, fail-first, sessions, templates.

Sequence positions and fail-first counts are database rows that advance
atomically; the last test proves it with two worker processes and 100
concurrent requests against one script.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.conftest import free_port
from tests.conftest import galaxy_query as ask

ROOT = Path(__file__).resolve().parents[1]
LoadRules = Callable[[Any], dict[str, Any]]


def content_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    text: str = response.json()["response"]["content"]
    return text


def openai_client(live_url: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{live_url}/v1",
        api_key="sk-test",
        max_retries=0,
        default_headers={"X-Static-Session": session},
    )


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_a_three_step_script_calls_a_tool_then_answers_then_is_exhausted(
    live_url: str, load_rules: LoadRules
) -> None:
    load_rules(
        {
            "rules": [
                {
                    "name": "weather",
                    "match": {"query": "weather"},
                    "responses": [
                        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                        {"content": "It is sunny in Paris.", "thinking": "The tool said sun."},
                    ],
                    "on_exhausted": "error",
                }
            ]
        }
    )
    client = openai_client(live_url, "three-step")
    question = {"role": "user", "content": "What is the weather in Paris?"}

    first = client.chat.completions.create(
        model="static", messages=[question], tools=[WEATHER_TOOL]
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    history: list[Any] = [
        question,
        {"role": "assistant", "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"sky": "clear"}'},
    ]
    second = client.chat.completions.create(model="static", messages=history, tools=[WEATHER_TOOL])
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "It is sunny in Paris."

    with pytest.raises(openai.APIStatusError) as exhausted:
        client.chat.completions.create(model="static", messages=history, tools=[WEATHER_TOOL])
    assert exhausted.value.status_code == 500
    assert "Script exhausted" in str(exhausted.value)


def test_turn_and_tool_result_predicates_steer_a_conversation(
    live_url: str, load_rules: LoadRules
) -> None:
    load_rules(
        {
            "rules": [
                {
                    "name": "after-tool",
                    "match": {"tool_result": "clear"},
                    "response": {"content": "Tool said: $tool_result", "template": True},
                },
                {"name": "second-turn", "match": {"turn": 2}, "response": {"content": "Again?"}},
                {"name": "first", "response": {"content": "Hello."}},
            ]
        }
    )
    client = openai_client(live_url, "predicates")
    hello = [{"role": "user", "content": "hi"}]
    assert client.chat.completions.create(model="m", messages=hello).choices[0].message.content == (
        "Hello."
    )
    twice: list[Any] = [*hello, {"role": "assistant", "content": "Hello."}, *hello]
    again = client.chat.completions.create(model="m", messages=twice)
    assert again.choices[0].message.content == "Again?"
    tool_call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    after: list[Any] = [
        *hello,
        {"role": "assistant", "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": "c1", "content": "clear sky"},
    ]
    result = client.chat.completions.create(model="m", messages=after)
    assert result.choices[0].message.content == "Tool said: clear sky"


def test_fail_first_fails_each_distinct_question_afresh(
    live_url: str, load_rules: LoadRules
) -> None:
    error = {"status": 503, "type": "overloaded", "message": "try again"}
    load_rules(
        {
            "rules": [
                {
                    "name": "flaky",
                    "match": {"contains": "flaky"},
                    "response": {
                        "content": "Answered.",
                        "fail_first": 2,
                        "error": error,
                        "retry_after": 1,
                    },
                }
            ]
        }
    )
    for question in ("flaky question one", "flaky question two"):
        for _ in range(2):
            failed = ask(live_url, question, session="flaky")
            assert failed.status_code == 503
            assert failed.headers["retry-after"] == "1"
            assert failed.json()["err_msg"] == "try again"
        assert content_of(ask(live_url, question, session="flaky")) == "Answered."
    assert content_of(ask(live_url, "flaky question one", session="flaky")) == "Answered."
    # Another session has its own counts.
    assert ask(live_url, "flaky question one", session="other").status_code == 503


def test_fail_first_without_an_error_fails_with_a_default_503(
    live_url: str, load_rules: LoadRules
) -> None:
    load_rules({"rules": [{"name": "flaky", "response": {"content": "ok", "fail_first": 1}}]})
    failed = ask(live_url, "anything")
    assert failed.status_code == 503
    assert content_of(ask(live_url, "anything")) == "ok"


def test_two_sessions_keep_their_own_positions(live_url: str, load_rules: LoadRules) -> None:
    steps = [{"content": "one"}, {"content": "two"}, {"content": "three"}]
    load_rules({"rules": [{"name": "count", "responses": steps}]})
    assert content_of(ask(live_url, "next", session="a")) == "one"
    assert content_of(ask(live_url, "next", session="a")) == "two"
    assert content_of(ask(live_url, "next", session="b")) == "one"
    assert content_of(ask(live_url, "next", session="a")) == "three"
    assert content_of(ask(live_url, "next", session="a")) == "three"  # repeat_last
    assert content_of(ask(live_url, "next", session="b")) == "two"
    assert content_of(ask(live_url, "next")) == "one"  # the global session


def test_a_one_reply_script_that_errors_when_exhausted_fails_the_second_time(
    live_url: str, load_rules: LoadRules
) -> None:
    load_rules(
        {"rules": [{"name": "once", "responses": [{"content": "only"}], "on_exhausted": "error"}]}
    )
    assert content_of(ask(live_url, "q", session="once")) == "only"
    second = ask(live_url, "q", session="once")
    assert second.status_code == 500
    assert second.json()["error_type"] == "script_exhausted"


def test_a_template_fills_in_the_inquiry(live_url: str, load_rules: LoadRules) -> None:
    template = "$query / $agent_type / $session / turn $turn / $unknown"
    load_rules({"rules": [{"name": "echo", "response": {"content": template, "template": True}}]})
    reply = content_of(ask(live_url, "ping", session="tpl"))
    assert reply == "ping / router / tpl / turn 1 / $unknown"


# -- two worker processes, one script -----------------------------------------------------

RACE_STEPS = 100


def race_fixture(path: Path) -> Path:
    steps = [{"content": f"position {n}"} for n in range(1, RACE_STEPS + 1)]
    rule = {"name": "race", "responses": steps, "on_exhausted": "error"}
    path.write_text(yaml.safe_dump({"rules": [rule]}))
    return path


class Served:
    """``manage.py serve`` in a subprocess; its output is drained so it never blocks."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            args, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self.drain = threading.Thread(target=self._read, daemon=True)
        self.drain.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, count: int = 1, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.output.count(text) < count:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"serve never printed {text!r} x{count}:\n{self.output}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[tuple[str, Served]]:
    """serve with two workers on a fresh SQLite file, the script imported by the command.

    The import runs while the workers boot: they notice the new rules by the
    ruleset version, as they would notice any edit.
    """
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'race.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "project.settings",
    }
    env.pop("STATIC_AGENTS_CONTROL_TOKEN", None)
    manage = [sys.executable, str(ROOT / "manage.py")]
    port = free_port()
    args = ["serve", "--workers", "2", "--port", str(port), "--log-level", "info"]
    served = Served([*manage, *args], env)
    try:
        served.wait_for("serving on")  # migrated: the command can import now
        imported = subprocess.run(
            [*manage, "import_fixture", str(race_fixture(tmp_path / "race.yml"))],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert "1 rule(s) created" in imported.stdout, imported.stderr
        served.wait_for("Started server process", count=2)  # both workers accept
        yield f"http://127.0.0.1:{port}", served
    finally:
        served.stop()


async def race(url: str, count: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=count)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:
        payload = {"query": "go", "agent_type": "router"}
        headers = {"X-Static-Session": "race"}
        requests = [
            client.post("/api/ai/agents/query", json=payload, headers=headers) for _ in range(count)
        ]
        return await asyncio.gather(*requests)


def test_a_hundred_concurrent_requests_on_two_workers_each_get_their_own_position(
    two_workers: tuple[str, Served],
) -> None:
    url, served = two_workers
    responses = asyncio.run(race(url, RACE_STEPS))
    assert [r.status_code for r in responses] == [200] * RACE_STEPS, responses[0].text
    positions = sorted(int(content_of(r).split()[-1]) for r in responses)
    assert positions == list(range(1, RACE_STEPS + 1))  # each once: none twice, none skipped

    exhausted = httpx.post(
        f"{url}/api/ai/agents/query",
        json={"query": "go", "agent_type": "router"},
        headers={"X-Static-Session": "race"},
    )
    assert exhausted.status_code == 500
    assert exhausted.json()["error_type"] == "script_exhausted"

    # serve created the control token on first start and printed it once.
    [token] = [
        line.rsplit(" ", 1)[-1].strip()
        for line in served.lines
        if line.startswith("Control API token")
    ]
    auth = {"Authorization": f"Bearer {token}"}
    counters = httpx.get(f"{url}/control/counters", params={"session": "race"}, headers=auth)
    assert counters.json()["requests"] == RACE_STEPS + 1  # N requests, N journal entries
    assert counters.json()["rules"] == {"race": RACE_STEPS + 1}
    assert "database is locked" not in served.output
