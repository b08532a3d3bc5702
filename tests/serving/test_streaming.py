"""Streaming behaviour shared by the model dialects: timing, chunking, disconnects, cut-offs."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import anthropic
import httpx
import openai
import pytest

from staticagents.core.timing import TimedFrame
from staticagents.models import JournalEntry

WORDS = " ".join(f"w{i}" for i in range(1, 21))
RULES: dict[str, Any] = {
    "defaults": {"stream": {"chunk": 5}},
    "rules": [
        {
            "name": "slow",
            "match": {"contains": "#slow"},
            "response": {"content": WORDS, "stream": {"chunk": "word", "word_delay_ms": 50}},
        },
        {
            "name": "timed",
            "match": {"contains": "#timed"},
            "response": {
                "content": "a b c d e",
                "stream": {"chunk": "word", "first_delay_ms": 30, "word_delay_ms": 10},
            },
        },
        {
            "name": "chars",
            "match": {"contains": "#chars"},
            "response": {"content": "abc de", "stream": {"chunk": "char"}},
        },
        {"name": "plain", "match": {"contains": "#plain"}, "response": {"content": "abcdefghijkl"}},
        {
            "name": "echo",
            "response": {
                "template": True,
                "content": "$query",
                "stream": {"chunk": "word", "word_delay_ms": 2},
            },
        },
    ],
}
CHAT = "/v1/chat/completions"


@pytest.fixture
def rules(live_url: str, load_rules: Callable[[Any], Any]) -> str:
    load_rules(RULES)
    return live_url


def oai(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)


def ant(base: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key="x", max_retries=0)


def ask(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def streamed_text(base: str, query: str) -> list[str]:
    stream = oai(base).chat.completions.create(model="m", messages=ask(query), stream=True)
    return [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]


def wait_for_outcome(outcome: str, timeout: float = 3.0) -> JournalEntry:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = JournalEntry.objects.order_by("-id").first()
        if entry is not None and entry.outcome == outcome:
            return entry
        time.sleep(0.02)
    raise AssertionError(f"no journal entry became {outcome!r}: {entry and entry.outcome}")


# -- timing and chunking -------------------------------------------------------------------


def test_chunks_never_arrive_before_their_scripted_time(rules: str) -> None:
    started = time.monotonic()
    arrivals = []
    stream = oai(rules).chat.completions.create(model="m", messages=ask("#timed"), stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic() - started)
    scripted = [0.030, 0.040, 0.050, 0.060, 0.070]
    assert len(arrivals) == 5
    assert all(arrived >= due for arrived, due in zip(arrivals, scripted, strict=True))
    # Nor long after: a generous bound on the rest of the script (40 ms), widened to the
    # lateness the same run measured on the first chunk (a busy machine's, not the script's).
    slack = max(1.9, arrivals[0] - scripted[0])
    assert arrivals[-1] - arrivals[0] < scripted[-1] - scripted[0] + slack, arrivals


def test_the_rule_the_defaults_and_the_server_setting_choose_the_chunks(
    rules: str, live_url: str, load_rules: Callable[[Any], Any], settings: Any
) -> None:
    assert streamed_text(rules, "#chars") == ["a", "b", "c", " ", "d", "e"]
    assert streamed_text(rules, "#plain") == ["abcde", "fghij", "kl"]  # defaults.stream.chunk
    settings.STATIC_AGENTS_WORD_DELAY_MS = 40
    load_rules({"rules": [{"response": {"content": "one two three"}}]})  # a fresh snapshot
    started = time.monotonic()
    assert streamed_text(live_url, "x") == ["one ", "two ", "three"]
    assert time.monotonic() - started >= 0.08  # two gaps of the server's 40 ms


def test_concurrent_streams_each_get_their_own_whole_answer(rules: str) -> None:
    client = openai.AsyncOpenAI(base_url=f"{rules}/v1", api_key="x", max_retries=0)

    async def one(index: int) -> str:
        words = " ".join(f"s{index}-{n}" for n in range(8))
        stream = await client.chat.completions.create(model="m", messages=ask(words), stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    async def many() -> list[str]:
        return await asyncio.gather(*(one(i) for i in range(30)))

    answers = asyncio.run(many())
    assert answers == [" ".join(f"s{i}-{n}" for n in range(8)) for i in range(30)]


# -- leaving early and running too long --------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, {"model": "m", "messages": ask("#slow"), "stream": True}),
        ("/v1/messages", {"model": "m", "max_tokens": 9, "messages": ask("#slow"), "stream": True}),
    ],
)
def test_a_client_that_leaves_mid_stream_is_journaled_as_cancelled(
    rules: str, path: str, body: dict[str, Any]
) -> None:
    with httpx.Client(base_url=rules, timeout=5) as client:
        with client.stream("POST", path, json=body) as response:
            lines = response.iter_lines()
            first = next(line for line in lines if "w1" in line)
        assert "w1" in first
    # Had the stream run to its end, the entry would stay "answered".
    assert wait_for_outcome("cancelled").rule == "slow"


def test_closing_an_sdk_stream_cancels_it_too(rules: str) -> None:
    stream = oai(rules).chat.completions.create(model="m", messages=ask("#slow"), stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    stream.close()
    assert wait_for_outcome("cancelled").dialect == "openai"


def test_the_maximum_duration_cuts_an_openai_stream_off(rules: str, settings: Any) -> None:
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.12
    received = []
    stream = oai(rules).chat.completions.create(model="m", messages=ask("#slow"), stream=True)
    with pytest.raises(openai.APIError, match=r"maximum stream duration of 0\.12 s"):
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
    assert received == ["w1 ", "w2 ", "w3 "]  # due at 0, 50 and 100 ms
    assert wait_for_outcome("cut_off").rule == "slow"


def test_the_maximum_duration_cuts_an_anthropic_stream_off(rules: str, settings: Any) -> None:
    settings.STATIC_AGENTS_MAX_STREAM_SECONDS = 0.12
    with (
        pytest.raises(anthropic.APIStatusError) as raised,
        ant(rules).messages.stream(model="m", max_tokens=9, messages=ask("#slow")) as stream,
    ):
        pieces = []
        for text in stream.text_stream:
            pieces.append(text)
    assert pieces == ["w1 ", "w2 ", "w3 "]
    assert raised.value.body["error"]["type"] == "timeout_error"  # type: ignore[index]
    assert wait_for_outcome("cut_off").dialect == "anthropic"


async def test_a_client_that_leaves_while_the_answer_is_worked_out_is_journaled_as_cancelled(
    transactional_db: None,
) -> None:
    from channels.db import database_sync_to_async
    from channels.testing import ApplicationCommunicator

    from staticagents.models import JournalEntry
    from staticagents.serving.route import ReplyRoute

    entry = await database_sync_to_async(JournalEntry.objects.create)(
        dialect="openai",
        route="/v1/chat/completions",
        session="s",
        agent_type="router",
        outcome="answered",
    )
    started, released = asyncio.Event(), asyncio.Event()
    finished: list[str] = []

    class SlowAnswer(ReplyRoute):
        async def respond(self, body: bytes) -> None:
            async def work() -> int:
                started.set()
                await released.wait()  # the answer phase, still running when the client leaves
                finished.append("work")
                return entry.pk

            await self.answering(work(), lambda pk: pk)
            finished.append("replied")  # never: the client has gone
            await self.send_json(200, {})

    scope = {"type": "http", "method": "POST", "path": "/slow", "headers": []}
    client = ApplicationCommunicator(SlowAnswer.as_asgi(), scope)
    await client.send_input({"type": "http.request", "body": b"{}"})
    await asyncio.wait_for(started.wait(), 5)
    await client.send_input({"type": "http.disconnect"})
    await asyncio.sleep(0.05)
    released.set()  # the work was not cancelled: it finishes, and its entry is marked
    await client.wait(timeout=5)
    assert finished == ["work"]
    assert await client.receive_nothing()
    outcome = await database_sync_to_async(lambda: JournalEntry.objects.get(pk=entry.pk).outcome)()
    assert outcome == "cancelled"


# -- a loop with no room for more streams -------------------------------------------------


class Jam:
    """Keeps the running loop later than the pacer allows, for as long as it runs: every
    wake-up due in a millisecond comes 5 ms late. Nothing is faked: it is a loop with more
    work than it can do on time."""

    def __init__(self) -> None:
        from staticagents.serving.pacer import ALWAYS_RUNNING, pacer

        self.pacer = pacer(asyncio.get_running_loop())
        self.always = [self.pacer.begin() for _ in range(ALWAYS_RUNNING)]
        self.task = asyncio.create_task(self.jam())

    @classmethod
    async def start(cls) -> Jam:
        """A jam, once the pacer has seen the loop late."""
        from staticagents.serving.pacer import BEHIND_SECONDS

        jam = cls()
        while jam.pacer.late <= BEHIND_SECONDS:
            await asyncio.sleep(0.001)
        return jam

    async def jam(self) -> None:
        while True:
            woke = self.pacer.until(self.pacer.loop.time() + 0.001)
            time.sleep(0.005)
            await woke

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        for place in self.always:
            self.pacer.end(place)


def paced_route(entry_id: int, frames: list[TimedFrame]) -> Any:
    from staticagents.serving.route import ReplyRoute

    class Paced(ReplyRoute):
        async def respond(self, body: bytes) -> None:
            self.entry_id = entry_id
            await self.start_sse()
            await self.send_paced(frames, closing=b"end")

    return Paced.as_asgi()


async def journal_entry() -> int:
    from channels.db import database_sync_to_async

    entry = await database_sync_to_async(JournalEntry.objects.create)(
        dialect="openai", route=CHAT, session="s", agent_type="router", outcome="answered"
    )
    return int(entry.pk)


async def test_a_stream_waits_to_begin_while_the_loop_is_late_then_keeps_its_script(
    transactional_db: None,
) -> None:
    from channels.testing import ApplicationCommunicator

    frames = [TimedFrame(0.0, b"a"), TimedFrame(0.03, b"b"), TimedFrame(0.06, b"c")]
    scope = {"type": "http", "method": "POST", "path": "/paced", "headers": []}
    jam = await Jam.start()
    client = ApplicationCommunicator(paced_route(await journal_entry(), frames), scope)
    await client.send_input({"type": "http.request", "body": b"{}"})
    assert (await client.receive_output(5))["status"] == 200  # the head goes out at once
    assert await client.receive_nothing(0.1)  # no frame while the loop is late
    assert len(jam.pacer.held) == 1
    loop = asyncio.get_running_loop()
    jam_ending = loop.time()  # the held stream cannot begin before this
    await jam.stop()
    arrivals, bodies = [], []
    while True:
        message = await client.receive_output(5)
        arrivals.append(loop.time())
        bodies.append(message["body"])
        if not message.get("more_body"):
            break
    assert b"".join(bodies) == b"data: a\n\ndata: b\n\ndata: c\n\nend"
    # The script's clock starts when the stream begins, after the jam: every frame arrives at
    # its offset from there or later. Had it started early, all would be due, and sent together,
    # at once. (A busy machine only makes them later, and may send due frames in one message.)
    for arrival, body in zip(arrivals, bodies, strict=True):
        last_frame = max(
            (frame.at for frame in frames if b"data: " + frame.data in body), default=0.0
        )
        assert arrival - jam_ending >= last_frame, (arrivals, bodies, jam_ending)
    assert jam.pacer.running == 0


async def test_a_client_that_leaves_a_held_stream_gives_up_its_place(
    transactional_db: None,
) -> None:
    from channels.db import database_sync_to_async
    from channels.testing import ApplicationCommunicator

    entry_id = await journal_entry()
    scope = {"type": "http", "method": "POST", "path": "/paced", "headers": []}
    jam = await Jam.start()
    client = ApplicationCommunicator(paced_route(entry_id, [TimedFrame(0.0, b"a")]), scope)
    await client.send_input({"type": "http.request", "body": b"{}"})
    assert (await client.receive_output(5))["status"] == 200
    assert await client.receive_nothing(0.05)  # held: no frame
    assert len(jam.pacer.held) == 1
    await client.send_input({"type": "http.disconnect"})
    await client.wait(timeout=5)
    await jam.stop()
    assert jam.pacer.running == 0 and all(waiter.done() for waiter, _ in jam.pacer.held)
    outcome = await database_sync_to_async(lambda: JournalEntry.objects.get(pk=entry_id).outcome)()
    assert outcome == "cancelled"
