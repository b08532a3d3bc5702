"""The live journal over a real WebSocket client: /control/journal/live on the live server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect

from staticagents.replying import live
from tests.conftest import CONTROL_TOKEN

RULES: dict[str, Any] = {
    "rules": [
        {"name": "greet", "match": {"contains": "hello"}, "response": {"content": "hi there"}},
        {
            "name": "slow",
            "match": {"contains": "slowly"},
            "response": {"content": " ".join(["word"] * 40), "stream": {"word_delay_ms": 2_500}},
        },
    ],
    "fallback": {"content": "no idea"},
}


@pytest.fixture
def service(live_url: str, settings: Any, load_rules: Callable[[Any], Any]) -> str:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    load_rules(RULES)
    return live_url


def socket_url(base: str, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return (
        base.replace("http://", "ws://") + "/control/journal/live" + (f"?{query}" if query else "")
    )


async def next_event(socket: ClientConnection, kind: str | None = None) -> dict[str, Any]:
    while True:
        event: dict[str, Any] = json.loads(await asyncio.wait_for(socket.recv(), 5))
        if kind is None or event["type"] == kind:
            return event


def chat(base: str, query: str, session: str, **body: Any) -> httpx.Response:
    message = {"model": "m", "messages": [{"role": "user", "content": query}], **body}
    return httpx.post(
        f"{base}/v1/chat/completions", json=message, headers={"X-Static-Session": session}
    )


async def test_an_entry_reaches_a_subscriber_once_committed(service: str) -> None:
    async with connect(socket_url(service, token=CONTROL_TOKEN)) as socket:
        hello = await next_event(socket)
        assert hello == {"type": "subscribed", "filters": {}, "available": True}
        await asyncio.to_thread(chat, service, "hello there", "s-live")
        entry = (await next_event(socket, "entry"))["entry"]
    assert (entry["session"], entry["rule"], entry["outcome"]) == ("s-live", "greet", "answered")
    assert entry["query"] == "hello there" and entry["dialect"] == "openai"
    listed = httpx.get(
        f"{service}/control/journal",
        params={"session": "s-live"},
        headers={"Authorization": f"Bearer {CONTROL_TOKEN}"},
    ).json()["results"]
    assert [e["id"] for e in listed] == [entry["id"]]


async def test_filters_choose_the_session_and_the_fallbacks(service: str) -> None:
    url = socket_url(service, token=CONTROL_TOKEN, session="mine", fallbacks="true")
    async with connect(url) as socket:
        assert (await next_event(socket))["filters"] == {"session": "mine", "fallbacks": True}
        for query, session in [("hello", "mine"), ("what?", "other"), ("what now?", "mine")]:
            await asyncio.to_thread(chat, service, query, session)
        entry = (await next_event(socket, "entry"))["entry"]
        assert (entry["query"], entry["rule"]) == ("what now?", None)


@pytest.mark.parametrize(
    ("params", "headers", "code"),
    [
        ({}, {}, 4401),
        ({"token": "wrong"}, {}, 4401),
        ({}, {"Authorization": "Bearer wrong"}, 4401),
        ({"token": CONTROL_TOKEN, "colour": "red"}, {}, 4400),
        ({"token": CONTROL_TOKEN, "outcome": "happy"}, {}, 4400),
        ({"token": CONTROL_TOKEN, "ruleset": "true", "session": "s"}, {}, 4400),
        ({"token": CONTROL_TOKEN, "ruleset": "maybe"}, {}, 4400),
    ],
)
async def test_a_socket_without_credentials_or_with_a_bad_filter_is_refused(
    service: str, params: dict[str, str], headers: dict[str, str], code: int
) -> None:
    async with connect(socket_url(service, **params), additional_headers=headers) as socket:
        event = await next_event(socket)
        assert event["type"] == "error"
        await socket.wait_closed()
    assert socket.close_code == code


async def test_the_token_may_come_in_the_authorization_header(service: str) -> None:
    headers = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    async with connect(socket_url(service), additional_headers=headers) as socket:
        assert (await next_event(socket))["type"] == "subscribed"


async def test_a_session_reset_ends_its_open_stream_at_once_with_its_ending(service: str) -> None:
    """40 words 2.5 s apart take 100 s (the client would give up after 30 s of silence);
    the reset ends the stream at once with the rest of its words and its ending."""
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "slowly"}]}
    headers = {"X-Static-Session": "to-reset"}
    control = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    async with (
        httpx.AsyncClient(base_url=service, timeout=30) as client,
        client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response,
    ):
        lines = response.aiter_lines()
        first = await anext(lines)
        assert first.startswith("data: ")
        reset = await client.delete("/control/sessions/to-reset", headers=control)
        assert reset.status_code == 200
        rest = [line async for line in lines if line]
    assert rest[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in [first, *rest[:-1]]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.split() == ["word"] * 40


async def test_a_ruleset_change_is_announced_with_its_version(
    service: str, load_rules: Callable[[Any], Any]
) -> None:
    control = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    async with connect(socket_url(service, token=CONTROL_TOKEN)) as socket:
        await next_event(socket)
        patched = await asyncio.to_thread(
            httpx.patch,
            f"{service}/control/rules/greet",
            headers=control,
            json={"response": {"content": "hello again"}},
        )
        assert patched.status_code == 200, patched.text
        event = await next_event(socket, "ruleset")
    assert isinstance(event["version"], int) and event["version"] >= 2


def test_a_slow_subscriber_loses_the_oldest_events_and_is_told_how_many() -> None:
    from staticagents.serving.metrics import LIVE_DROPPED

    counted = LIVE_DROPPED.labels("subscriber")._value.get()
    subscription = live.Subscription(live.Filters(), limit=3)
    for n in range(5):
        subscription.offer({"type": "entry", "entry": {"id": n}})
    events = asyncio.run(subscription.next_events())
    assert LIVE_DROPPED.labels("subscriber")._value.get() == counted + 2
    assert events[0] == {"type": "dropped", "count": 2}
    assert [e["entry"]["id"] for e in events[1:]] == [2, 3, 4]


def test_group_names_are_valid_for_any_key() -> None:
    from channels.layers import BaseChannelLayer

    layer = BaseChannelLayer()
    for key in ["", "a b/c", "é" * 300, "session:with:colons"]:
        assert layer.require_valid_group_name(live.session_group(key))
        assert layer.require_valid_group_name(live.agent_type_group(key))
    assert live.session_group("a") != live.session_group("b")


def staff_cookie(*permissions: str) -> str:
    from django.contrib.auth.models import Permission, User
    from django.test import Client

    user = User.objects.create_user("watcher", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=permissions))
    browser = Client()
    browser.force_login(user)
    return f"sessionid={browser.cookies['sessionid'].value}"


@pytest.mark.parametrize(
    ("permissions", "same_origin", "expected"),
    [
        (("view_journalentry",), True, "subscribed"),
        ((), True, 4403),
        (("view_journalentry",), False, 4401),  # another site's page: its cookie counts not
        (("view_rule",), True, 4403),
    ],
)
async def test_a_staff_session_follows_with_the_journal_permission_from_the_same_host(
    service: str, permissions: tuple[str, ...], same_origin: bool, expected: str | int
) -> None:
    await follow_as_staff(service, permissions, same_origin, expected, {})


@pytest.mark.parametrize(
    ("permissions", "expected"), [(("view_rule",), "subscribed"), (("view_journalentry",), 4403)]
)
async def test_the_ruleset_alone_is_followed_with_the_rules_view_permission(
    service: str, permissions: tuple[str, ...], expected: str | int
) -> None:
    await follow_as_staff(service, permissions, True, expected, {"ruleset": "true"})


async def follow_as_staff(
    service: str,
    permissions: tuple[str, ...],
    same_origin: bool,
    expected: str | int,
    params: dict[str, str],
) -> None:
    from asgiref.sync import sync_to_async

    cookie = await sync_to_async(staff_cookie)(*permissions)
    origin = service if same_origin else "http://elsewhere.example"
    headers = {"Cookie": cookie, "Origin": origin}
    async with connect(socket_url(service, **params), additional_headers=headers) as socket:
        event = await next_event(socket)
        if expected == "subscribed":
            assert event["type"] == "subscribed"
            return
        assert event["type"] == "error"
        await socket.wait_closed()
    assert socket.close_code == expected


async def test_a_session_reset_ends_its_websocket_reply_with_its_done_event(service: str) -> None:
    chat_url = service.replace("http://", "ws://") + "/ws/chat/"
    control = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    async with connect(chat_url, additional_headers={"X-Static-Session": "ws-reset"}) as socket:
        await socket.send(json.dumps({"query": "slowly"}))
        events = [await next_event(socket)]
        async with httpx.AsyncClient(base_url=service) as client:
            reset = await client.delete("/control/sessions/ws-reset", headers=control)
            assert reset.status_code == 200
        while events[-1]["type"] not in ("done", "error"):
            events.append(await next_event(socket))
    assert events[-1]["type"] == "done"
    text = "".join(e["text"] for e in events if e["type"] == "delta")
    assert text.split() == ["word"] * 40


async def test_an_outcome_changed_later_reaches_subscribers_as_an_update(service: str) -> None:
    """A stream the client leaves is marked ``cancelled`` after its entry was published."""
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "slowly"}]}
    headers = {"X-Static-Session": "leaves"}
    async with connect(socket_url(service, token=CONTROL_TOKEN, session="leaves")) as socket:
        await next_event(socket, "subscribed")
        async with (
            httpx.AsyncClient(base_url=service, timeout=30) as client,
            client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response,
        ):
            await anext(response.aiter_lines())
        entry = (await next_event(socket, "entry"))["entry"]
        update = await next_event(socket, "update")
    assert entry["outcome"] == "answered"
    assert update == {"type": "update", "id": entry["id"], "outcome": "cancelled"}


def test_the_prefix_is_the_setting_or_a_hash_of_the_default_database(settings: Any) -> None:
    from django.db import connections

    db = connections["default"].settings_dict
    derived = live.prefix()
    assert derived.startswith("sa-") and len(derived) == 15
    assert live.session_group("k").startswith(derived + ".session.")
    original = db["NAME"]
    try:
        db["NAME"] = "another-database"
        assert live.prefix() != derived
    finally:
        db["NAME"] = original
    settings.STATIC_AGENTS_LIVE_PREFIX = "staging-1"
    assert live.prefix() == "staging-1"
    assert live.Filters().group() == "staging-1.all"
    assert live.Filters(fallbacks=True).group() == "staging-1.fallbacks"


async def test_a_ruleset_subscriber_gets_versions_and_no_entries(
    service: str, load_rules: Callable[[Any], Any]
) -> None:
    control = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    async with connect(socket_url(service, token=CONTROL_TOKEN, ruleset="true")) as socket:
        assert (await next_event(socket))["filters"] == {"ruleset": True}
        await asyncio.to_thread(chat, service, "hello there", "unseen")
        patched = await asyncio.to_thread(
            httpx.patch,
            f"{service}/control/rules/greet",
            headers=control,
            json={"response": {"content": "hello again"}},
        )
        assert patched.status_code == 200, patched.text
        event = await next_event(socket)  # the entry came first, and was not sent
    assert event["type"] == "ruleset"
