"""Answering a session's script: each request gets its own step, on the event loop."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from staticagents.replying import answer

QUESTION = {"model": "m", "messages": [{"role": "user", "content": "next?"}]}


def test_a_script_advances_on_the_loop_without_a_thread(
    control: httpx.Client, live_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the counters took a thread")

    monkeypatch.setattr(answer.counter_threads, "run", no_thread)
    control.put("/sessions/loop", json={"responses": [{"content": "one"}, {"content": "two"}]})
    headers = {"X-Static-Session": "loop"}
    url = f"{live_url}/v1/chat/completions"
    answers = [httpx.post(url, json=QUESTION, headers=headers) for _ in range(3)]
    assert [a.json()["choices"][0]["message"]["content"] for a in answers[:2]] == ["one", "two"]
    assert answers[2].status_code == 500 and "Script exhausted" in answers[2].text


def test_concurrent_requests_of_a_session_each_get_their_own_step(
    control: httpx.Client, live_url: str
) -> None:
    steps = [{"content": f"step {i}"} for i in range(30)]
    control.put("/sessions/busy", json={"responses": steps})

    async def ask_all() -> list[str]:
        async with httpx.AsyncClient(base_url=live_url, timeout=30) as client:
            replies = await asyncio.gather(
                *(
                    client.post(
                        "/v1/chat/completions", json=QUESTION, headers={"X-Static-Session": "busy"}
                    )
                    for _ in steps
                )
            )
        return [r.json()["choices"][0]["message"]["content"] for r in replies]

    assert sorted(asyncio.run(ask_all())) == sorted(step["content"] for step in steps)
