"""Access: reply routes open by default, keyed by STATIC_AGENTS_API_KEYS; the admin and CSRF.

With keys configured, each dialect takes a key where its clients send it and
refuses others with its own 401 (the official SDKs raise AuthenticationError).
Keys never come back: not in an error message, not in a log, not in the
journal.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import websockets.sync.client as ws_client
from websockets.exceptions import ConnectionClosed

from staticagents.models import JournalEntry
from staticagents.serving import access
from tests.conftest import CONTROL_TOKEN

KEY = "sk-static-agents-right-key-1"
OTHER_KEY = "sk-static-agents-right-key-2"
WRONG = "sk-static-agents-WRONG-key"
RULES = {
    "rules": [
        {"name": "boom", "match": {"contains": "#boom"}, "response": {"error": {"status": 503}}},
        {"name": "hello", "response": {"content": "hello from the rules"}},
    ]
}
OPENAI_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ADK_RUN = {
    "appName": "router",
    "userId": "u",
    "sessionId": "s",
    "newMessage": {"role": "user", "parts": [{"text": "hi"}]},
}


@pytest.fixture
def open_url(live_url: str, load_rules: Callable[[Any], Any]) -> str:
    load_rules(RULES)
    return live_url


@pytest.fixture
def keyed_url(open_url: str, settings: Any) -> str:
    """The service with two keys configured (read per request, so no restart)."""
    settings.STATIC_AGENTS_API_KEYS = [KEY, OTHER_KEY]
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    return open_url


# -- open by default ------------------------------------------------------------------------


def test_without_keys_configured_any_key_or_none_is_accepted(open_url: str) -> None:
    client = openai.OpenAI(base_url=f"{open_url}/v1", api_key="anything-at-all", max_retries=0)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "hello from the rules"
    assert httpx.post(f"{open_url}/api/ai/agents/query", json={"query": "hi"}).status_code == 200
    assert httpx.post(f"{open_url}/run", json=ADK_RUN).status_code == 200


# -- OpenAI -----------------------------------------------------------------------------------


def test_openai_sdk_with_a_wrong_key_gets_authentication_error(keyed_url: str) -> None:
    client = openai.OpenAI(base_url=f"{keyed_url}/v1", api_key=WRONG, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as raised:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["code"] == "invalid_api_key"
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("Incorrect API key provided")
    assert WRONG not in str(raised.value.response.text)


def test_openai_sdk_with_either_configured_key_is_answered(keyed_url: str) -> None:
    for key in (KEY, OTHER_KEY):
        client = openai.OpenAI(base_url=f"{keyed_url}/v1", api_key=key, max_retries=0)
        reply = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert reply.choices[0].message.content == "hello from the rules"
        assert next(m.id for m in client.models.list()) == "static-agents"


def test_openai_without_a_key_is_told_how_to_send_one(keyed_url: str) -> None:
    response = httpx.post(f"{keyed_url}/v1/chat/completions", json=OPENAI_BODY)
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["code"] is None
    assert "Authorization: Bearer <key>" in error["message"]


def test_openai_streaming_with_a_wrong_key_fails_before_any_event(keyed_url: str) -> None:
    client = openai.OpenAI(base_url=f"{keyed_url}/v1", api_key=WRONG, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )


def test_the_responses_routes_take_an_openai_key_and_refuse_others_as_openai_does(
    keyed_url: str,
) -> None:
    wrong = openai.OpenAI(base_url=f"{keyed_url}/v1", api_key=WRONG, max_retries=0)
    for call in (
        lambda: wrong.responses.create(model="m", input="hi"),
        lambda: wrong.responses.create(model="m", input="hi", stream=True),
        lambda: wrong.responses.retrieve("resp_1"),
        lambda: wrong.responses.delete("resp_1"),
    ):
        with pytest.raises(openai.AuthenticationError) as raised:
            call()
        assert raised.value.body["code"] == "invalid_api_key"  # type: ignore[index]
    right = openai.OpenAI(base_url=f"{keyed_url}/v1", api_key=KEY, max_retries=0)
    response = right.responses.create(model="m", input="hi")
    assert response.output_text == "hello from the rules"
    assert right.responses.retrieve(response.id).id == response.id


# -- Anthropic --------------------------------------------------------------------------------


def test_anthropic_sdk_with_a_wrong_key_gets_authentication_error(keyed_url: str) -> None:
    client = anthropic.Anthropic(base_url=keyed_url, api_key=WRONG, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as raised:
        client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    body = raised.value.body
    assert isinstance(body, dict)
    assert body["type"] == "error"
    assert body["error"]["type"] == "authentication_error"
    assert WRONG not in raised.value.response.text


def test_anthropic_sdk_with_a_key_as_x_api_key_or_bearer_is_answered(keyed_url: str) -> None:
    for client in (
        anthropic.Anthropic(base_url=keyed_url, api_key=KEY, max_retries=0),
        anthropic.Anthropic(base_url=keyed_url, auth_token=OTHER_KEY, max_retries=0),
    ):
        message = client.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
        assert message.content[0].text == "hello from the rules"  # type: ignore[union-attr]
        assert next(m.id for m in client.models.list()) == "static-agents"


def test_the_model_list_refuses_the_anthropic_sdk_in_its_own_shape(keyed_url: str) -> None:
    client = anthropic.Anthropic(base_url=keyed_url, api_key=WRONG, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as raised:
        client.models.list()
    assert raised.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


# -- Google ADK ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{"x-goog-api-key": KEY}, {"Authorization": f"Bearer {OTHER_KEY}"}],
    ids=["x-goog-api-key", "bearer"],
)
def test_adk_routes_take_a_google_style_key_or_bearer(
    keyed_url: str, headers: dict[str, str]
) -> None:
    assert httpx.post(f"{keyed_url}/run", json=ADK_RUN, headers=headers).status_code == 200
    assert httpx.get(f"{keyed_url}/list-apps", headers=headers).status_code == 200


def test_adk_routes_refuse_a_wrong_key_in_fastapis_shape(keyed_url: str) -> None:
    for method, path in [("POST", "/run"), ("POST", "/run_sse"), ("GET", "/list-apps")]:
        response = httpx.request(
            method, f"{keyed_url}{path}", json=ADK_RUN, headers={"x-goog-api-key": WRONG}
        )
        assert response.status_code == 401
        assert response.json()["detail"].startswith("Incorrect API key provided")


# -- Galaxy -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "params"),
    [
        ({"x-api-key": KEY}, {}),
        ({}, {"key": OTHER_KEY}),
        ({"Authorization": f"Bearer {KEY}"}, {}),
    ],
    ids=["x-api-key", "key-parameter", "bearer"],
)
def test_galaxy_routes_take_galaxys_key_header_or_parameter(
    keyed_url: str, headers: dict[str, str], params: dict[str, str]
) -> None:
    url = f"{keyed_url}/api"
    query = httpx.post(
        f"{url}/ai/agents/query", json={"query": "hi"}, headers=headers, params=params
    )
    assert query.status_code == 200
    assert query.json()["response"]["content"] == "hello from the rules"
    stream = httpx.post(f"{url}/chat/stream", json={"query": "hi"}, headers=headers, params=params)
    assert stream.status_code == 200
    assert "event: result" in stream.text
    assert httpx.get(f"{url}/chat/history", headers=headers, params=params).status_code == 200


def test_galaxy_routes_refuse_without_a_key_in_galaxys_shape(keyed_url: str) -> None:
    for method, path in [
        ("GET", "/api/configuration"),
        ("POST", "/api/ai/agents/query"),
        ("POST", "/api/chat"),
        ("POST", "/api/chat/stream"),
        ("GET", "/api/chat/history"),
    ]:
        response = httpx.request(method, f"{keyed_url}{path}", json={"query": "hi"})
        assert response.status_code == 401, path
        body = response.json()
        assert body["err_code"] == 401001, path
        assert "x-api-key header" in body["err_msg"] and "key query parameter" in body["err_msg"]
        wrong = httpx.request(
            method, f"{keyed_url}{path}", json={"query": "hi"}, params={"key": WRONG}
        )
        assert wrong.status_code == 401
        assert wrong.json()["err_msg"].startswith("Incorrect API key provided"), path


def test_the_schema_stays_public_when_keys_are_required(keyed_url: str) -> None:
    assert httpx.get(f"{keyed_url}/api/schema/").status_code == 200


# -- WebSocket ----------------------------------------------------------------------------------


def ws_url(live_url: str, query: str = "") -> str:
    return live_url.replace("http://", "ws://") + "/ws/chat/" + query


def test_a_websocket_without_a_key_gets_a_401_event_and_close_4401(keyed_url: str) -> None:
    for query in ("", f"?api_key={WRONG}"):
        with ws_client.connect(ws_url(keyed_url, query), open_timeout=5) as socket:
            event = json.loads(socket.recv(timeout=5))
            assert event["type"] == "error"
            assert event["error"]["status"] == 401
            assert event["error"]["type"] == "authentication_error"
            assert WRONG not in event["error"]["message"]
            with pytest.raises(ConnectionClosed):
                socket.recv(timeout=5)
            assert socket.close_code == 4401


@pytest.mark.parametrize(
    ("query", "headers"),
    [(f"?api_key={KEY}", {}), ("", {"Authorization": f"Bearer {OTHER_KEY}"})],
    ids=["api_key-parameter", "bearer"],
)
def test_a_websocket_with_a_key_is_answered(
    keyed_url: str, query: str, headers: dict[str, str]
) -> None:
    with ws_client.connect(
        ws_url(keyed_url, query), additional_headers=headers, open_timeout=5
    ) as socket:
        socket.send(json.dumps({"query": "hi"}))
        events = [json.loads(socket.recv(timeout=5))]
        while events[-1]["type"] != "done":
            events.append(json.loads(socket.recv(timeout=5)))
        result = next(e for e in events if e["type"] == "result")
        assert result["response"]["content"] == "hello from the rules"


# -- keys are compared in constant time, and never repeated -----------------------------------


def test_keys_match_exactly_and_every_configured_key_is_compared(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No early exit: the time taken does not tell which key (or how much of one) matched."""
    settings.STATIC_AGENTS_API_KEYS = [KEY, OTHER_KEY, "third"]
    compared = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(access.hmac, "compare_digest", spy)
    keys = access.configured_keys()
    assert access.key_matches(KEY, keys)
    assert compared == [(32, 32)] * 3  # digests: equal lengths, whatever the keys' lengths
    for near_miss in (KEY[:-1], KEY + "x", KEY.upper(), f" {KEY}", ""):
        assert not access.key_matches(near_miss, keys)


def server_log(caplog: pytest.LogCaptureFixture) -> str:
    """What the service logged (the test's own httpx client logs the URLs it requests)."""
    records = [r for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))]
    assert records, "the service logs 4xx and 5xx responses: something must be captured"
    return "\n".join(f"{r.getMessage()} {r.args} {r.exc_text or ''}" for r in records)


def test_refusals_never_repeat_the_key(keyed_url: str) -> None:
    secret = "sk-never-repeat-me-12345"
    bodies = [
        httpx.post(
            f"{keyed_url}/v1/chat/completions",
            json=OPENAI_BODY,
            headers={"Authorization": f"Bearer {secret}"},
        ).text,
        httpx.post(
            f"{keyed_url}/v1/messages",
            json={**OPENAI_BODY, "max_tokens": 5},
            headers={"x-api-key": secret},
        ).text,
        httpx.post(f"{keyed_url}/run", json=ADK_RUN, headers={"x-goog-api-key": secret}).text,
        httpx.post(f"{keyed_url}/api/chat", json={"query": "hi"}, params={"key": secret}).text,
    ]
    for body in bodies:
        assert "Incorrect API key provided" in body
        assert secret not in body and secret[:10] not in body


def test_neither_a_401_nor_a_scripted_error_logs_or_journals_the_key(
    keyed_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret_wrong = "sk-wrong-and-secret-0001"
    httpx.post(
        f"{keyed_url}/v1/chat/completions",
        json=OPENAI_BODY,
        headers={"Authorization": f"Bearer {secret_wrong}"},
    )
    httpx.post(f"{keyed_url}/api/ai/agents/query", json={"query": "hi"}, params={"key": WRONG})
    # Django (which logs its 4xx) still serves the route's other methods.
    httpx.get(f"{keyed_url}/api/ai/agents/query", params={"key": WRONG})
    failed = httpx.post(
        f"{keyed_url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "#boom"}]},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert failed.status_code == 503
    galaxy = httpx.post(
        f"{keyed_url}/api/ai/agents/query", json={"query": "#boom"}, params={"key": OTHER_KEY}
    )
    assert galaxy.status_code == 503
    logged = server_log(caplog)
    for secret in (secret_wrong, WRONG, KEY, OTHER_KEY, CONTROL_TOKEN):
        assert secret not in logged
    entries = list(JournalEntry.objects.values("headers", "route", "body"))
    assert len(entries) == 2  # the refused requests were never answered, so never journaled
    journal = json.dumps(entries)
    for secret in (KEY, OTHER_KEY):
        assert secret not in journal
    assert any(e["headers"].get("authorization") == "Bearer ***" for e in entries)
    assert all("key=" not in e["route"] for e in entries)  # Galaxy's ?key= is not the route


def test_a_refused_control_token_is_not_repeated_or_logged(
    keyed_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong_token = "control-token-that-is-wrong-42"
    response = httpx.get(
        f"{keyed_url}/control/rules", headers={"Authorization": f"Bearer {wrong_token}"}
    )
    assert response.status_code == 401
    assert wrong_token not in response.text
    assert wrong_token not in server_log(caplog)


# -- the admin: a staff login, and CSRF stays on ----------------------------------------------


@pytest.fixture
def staff(live_url: str, django_user_model: Any, settings: Any) -> Iterator[dict[str, str]]:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from django.contrib.auth.models import Permission

    curator = django_user_model.objects.create_user(
        "curator", password="s3cret-pass", is_staff=True
    )
    # What a curator of rules is given in the admin; without it the control API says 403.
    curator.user_permissions.set(Permission.objects.filter(codename__endswith="_rule"))
    yield {"username": "curator", "password": "s3cret-pass"}


def login_form(client: httpx.Client) -> str:
    """The login page's CSRF token (the csrftoken cookie is set beside it)."""
    page = client.get("/admin/login/")
    assert page.status_code == 200
    found = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def test_the_admin_needs_a_staff_login(live_url: str, staff: dict[str, str]) -> None:
    with httpx.Client(base_url=live_url) as client:
        assert client.get("/admin/").status_code == 302
        token = login_form(client)
        client.post("/admin/login/?next=/admin/", data={**staff, "csrfmiddlewaretoken": token})
        assert client.get("/admin/").status_code == 200


def test_an_admin_post_without_a_csrf_token_is_refused(
    live_url: str, staff: dict[str, str]
) -> None:
    with httpx.Client(base_url=live_url) as client:
        login_form(client)  # the csrftoken cookie is there; the form field is not
        refused = client.post("/admin/login/", data=staff)
        assert refused.status_code == 403
        assert "CSRF" in refused.text
        assert client.get("/admin/").status_code == 302  # not logged in
        token = login_form(client)
        client.post("/admin/login/", data={**staff, "csrfmiddlewaretoken": token})
        assert client.get("/admin/").status_code == 200
        # Logged in, a change without the token is refused too.
        add = client.post("/admin/staticagents/rule/add/", data={"name": "sneaky"})
        assert add.status_code == 403


def test_the_control_api_with_a_staff_session_still_needs_the_csrf_token(
    live_url: str, staff: dict[str, str]
) -> None:
    with httpx.Client(base_url=live_url) as client:
        token = login_form(client)
        client.post("/admin/login/", data={**staff, "csrfmiddlewaretoken": token})
        assert client.get("/control/rules").status_code == 200
        refused = client.post("/control/rules", json={"response": {"content": "x"}})
        assert refused.status_code == 403
        assert "CSRF" in refused.json()["errors"][0]["message"]
        accepted = client.post(
            "/control/rules",
            json={"response": {"content": "x"}},
            headers={"X-CSRFToken": client.cookies["csrftoken"], "Referer": live_url + "/admin/"},
        )
        assert accepted.status_code == 201
