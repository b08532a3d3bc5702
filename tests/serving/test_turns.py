"""The turnstile spreads a burst of request starts over turns of the loop, in order."""

from __future__ import annotations

import asyncio

from staticagents.serving.turns import Turnstile


async def admit(turnstile: Turnstile) -> None:
    """As the reply path does: wait only when the turnstile hands back a ticket."""
    ticket = turnstile.ticket()
    if ticket is not None:
        await ticket


async def burst(turnstile: Turnstile, requests: int) -> tuple[list[int], list[int]]:
    """Start ``requests`` at once; the order they were admitted in, and the turn of each."""
    loop = asyncio.get_running_loop()
    turn = 0

    def count_turns() -> None:
        nonlocal turn
        turn += 1
        loop.call_soon(count_turns)

    order: list[int] = []
    turns: list[int] = []

    async def request(number: int) -> None:
        await admit(turnstile)
        order.append(number)
        turns.append(turn)

    loop.call_soon(count_turns)
    await asyncio.gather(*(request(n) for n in range(requests)))
    return order, turns


async def test_a_burst_is_admitted_a_few_per_turn_in_arrival_order() -> None:
    order, turns = await burst(Turnstile(asyncio.get_running_loop(), per_turn=4), 10)
    assert order == list(range(10))
    per_turn = [turns.count(t) for t in sorted(set(turns))]
    assert per_turn == [4, 4, 2]


async def test_a_request_cancelled_while_waiting_gives_up_its_place() -> None:
    turnstile = Turnstile(asyncio.get_running_loop(), per_turn=1)
    admitted: list[str] = []

    async def request(name: str) -> None:
        await admit(turnstile)
        admitted.append(name)
        if name == "first":
            waiting["gone"].cancel()  # leaves while queued behind "first"

    waiting = {name: asyncio.ensure_future(request(name)) for name in ("first", "gone", "kept")}
    await asyncio.wait_for(asyncio.gather(*waiting.values(), return_exceptions=True), timeout=1)
    assert admitted == ["first", "kept"]
    assert waiting["gone"].cancelled() and not turnstile.waiting


async def test_requests_under_the_limit_never_wait_for_a_turn() -> None:
    turnstile = Turnstile(asyncio.get_running_loop(), per_turn=8)
    _, turns = await burst(turnstile, 8)
    assert len(set(turns)) == 1
