"""Upstreams and modes: the fixture's sections, their storage, the control API and the admin."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from staticagents.core import routing
from staticagents.core.inquiry import Inquiry
from staticagents.core.routing import compile_routing
from staticagents.document.files import dump_fixture, load_fixture
from staticagents.document.terms import DocumentInvalid
from staticagents.models import AgentMode, Upstream
from staticagents.proxying.client import failure_of
from staticagents.proxying.wire import StreamReader, translated_request
from staticagents.selectors import export_document
from staticagents.services import import_fixture
from tests.conftest import CONTROL_TOKEN
from tests.control.test_views import CSRF, session_cookies, staff_with

UPSTREAMS = """\
rules:
  - name: hello
    response: {content: hi}
upstreams:
  - name: real
    dialect: openai
    base_url: https://models.example/v1
    api_key_env: REAL_MODEL_KEY
    model: gpt-4o
    timeout: 30
    headers: {OpenAI-Organization: org-1}
    record_model: true
  - name: claude
    dialect: anthropic
    base_url: http://127.0.0.1:9/
    api_key_env: CLAUDE_KEY
modes:
  default: record_on_miss
  upstream: claude
  agent_types:
    coder: {mode: proxy, upstream: real}
    router: {mode: static}
"""


def errors_of(text: str) -> list[str]:
    with pytest.raises(DocumentInvalid) as raised:
        load_fixture(text, "f.yml")
    return raised.value.lines()


# -- the fixture ------------------------------------------------------------------------


def test_upstreams_and_modes_validate_into_a_routing() -> None:
    document = load_fixture(UPSTREAMS)
    routes = compile_routing(document["upstreams"], document["modes"])
    assert routes.mode("router") == "static" and routes.target("router") is None
    coder = routes.target("coder")
    assert coder is not None and (coder.mode, coder.upstream.name) == ("proxy", "real")
    assert coder.upstream.headers == {"OpenAI-Organization": "org-1"}
    other = routes.target("anything")
    assert other is not None and (other.mode, other.upstream.name) == ("record_on_miss", "claude")
    assert routes.mixed
    assert routes.describe("coder") == "agent type 'coder' is proxied to upstream 'real'"
    assert not compile_routing([], {}).mixed


def test_a_literal_key_is_refused_with_its_path_and_line() -> None:
    text = UPSTREAMS.replace("api_key_env: REAL_MODEL_KEY", "api_key_env: sk-live-abc123")
    [error] = errors_of(text)
    assert error.startswith("f.yml:8: upstreams[0].api_key_env: must name the environment")
    assert "sk-live-abc123" not in error


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("https://models.example/v1", "file:///etc/passwd"), "upstreams[0].base_url: must be an"),
        (("https://models.example/v1", "https://u:p@h/v1"), "must not hold credentials"),
        (("dialect: openai", "dialect: gemini"), "upstreams[0].dialect: Input should be"),
        (("timeout: 30", "timeout: 0"), "upstreams[0].timeout: Input should be greater than 0"),
        (("{OpenAI-Organization: org-1}", "{Authorization: Bearer x}"), "carry a credential"),
        (("upstream: claude", "upstream: nowhere"), "modes.upstream: unknown upstream 'nowhere'"),
        (("mode: proxy, upstream: real", "mode: proxi"), "modes.agent_types.coder.mode"),
        (("record_model: true", "record_modle: true"), "did you mean 'record_model'?"),
    ],
)
def test_a_wrong_upstream_or_mode_is_named(change: tuple[str, str], expected: str) -> None:
    errors = errors_of(UPSTREAMS.replace(*change))
    assert any(expected in error for error in errors), errors


def test_a_mode_that_cannot_tell_its_upstream_is_an_error() -> None:
    text = UPSTREAMS.replace("  upstream: claude\n", "")
    assert errors_of(text) == [
        "f.yml:18: modes.default: mode 'record_on_miss' needs an upstream: "
        "name one ('real', 'claude')"
    ]


# -- stored, exported, imported -----------------------------------------------------------


@pytest.mark.django_db
def test_upstreams_and_modes_survive_an_export_and_an_import() -> None:
    import_fixture(document=load_fixture(UPSTREAMS))
    exported = export_document()
    assert exported["upstreams"][0] == {
        "name": "real",
        "dialect": "openai",
        "base_url": "https://models.example/v1",
        "api_key_env": "REAL_MODEL_KEY",
        "model": "gpt-4o",
        "timeout": 30.0,
        "headers": {"OpenAI-Organization": "org-1"},
        "record_model": True,
    }
    assert exported["modes"] == load_fixture(UPSTREAMS)["modes"]
    again = load_fixture(dump_fixture(exported))
    result = import_fixture(document=again)
    assert result.created == result.updated == result.deleted == 0
    assert export_document() == exported


@pytest.mark.django_db
def test_a_fixture_without_upstreams_keeps_them_and_empty_ones_clear_them() -> None:
    import_fixture(document=load_fixture(UPSTREAMS))
    import_fixture(document=load_fixture("rules: []"))
    assert Upstream.objects.count() == 2 and AgentMode.objects.count() == 3
    import_fixture(document=load_fixture("rules: []\nupstreams: []\nmodes: {}"))
    assert not Upstream.objects.exists() and not AgentMode.objects.exists()
    assert "upstreams" not in export_document()


# -- the control API ------------------------------------------------------------------------


def test_the_control_api_reads_and_replaces_upstreams(control: httpx.Client) -> None:
    body = {
        "upstreams": [
            {"name": "u", "dialect": "anthropic", "base_url": "http://h", "api_key_env": "K"}
        ],
        "modes": {"agent_types": {"coder": {"mode": "proxy"}}},
    }
    stored = control.put("/upstreams", json=body)
    assert stored.status_code == 200, stored.text
    body["upstreams"][0]["timeout"] = 60.0  # stored with its default
    assert stored.json() == body
    assert control.get("/upstreams").json() == body
    explained = control.post("/explain", json={"query": "x", "agent_type": "coder"}).json()
    assert explained["routing"] == "agent type 'coder' is proxied to upstream 'u'"
    assert (explained["mode"], explained["upstream"]) == ("proxy", "u")
    wrong = control.put("/upstreams", json={"upstreams": [{**body["upstreams"][0], "x": 1}]})
    assert wrong.status_code == 400
    assert wrong.json()["errors"][0]["path"] == "upstreams[0].x"
    wrong = control.put("/upstreams", json={"modes": {"agent_types": {"c": {"mode": "proxy"}}}})
    assert wrong.status_code == 400
    assert wrong.json()["errors"][0]["path"] == "modes.agent_types.c.mode"
    assert control.get("/upstreams").json() == body  # nothing changed


def test_only_staff_with_the_upstream_permissions_may_set_upstreams(
    live_url: str, settings: Any, django_user_model: Any
) -> None:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    body = {"upstreams": [], "modes": {"default": "static"}}
    headers = {"X-CSRFToken": CSRF, "Referer": live_url}
    rules_only = staff_with(
        django_user_model, "curator", "view_rule", "add_rule", "change_rule", "delete_rule"
    )
    allowed = staff_with(
        django_user_model,
        "ops",
        "view_upstream",
        "add_upstream",
        "change_upstream",
        "delete_upstream",
    )
    cookies = {**session_cookies(rules_only), "csrftoken": CSRF}
    refused = httpx.put(
        f"{live_url}/control/upstreams", json=body, cookies=cookies, headers=headers
    )
    assert refused.status_code == 403
    fixture = "rules: []\nupstreams: []\n"
    refused_fixture = httpx.put(
        f"{live_url}/control/fixture", content=fixture, cookies=cookies, headers=headers
    )
    assert refused_fixture.status_code == 403, refused_fixture.text
    anonymous = httpx.put(f"{live_url}/control/upstreams", json=body)
    assert anonymous.status_code == 401
    cookies = {**session_cookies(allowed), "csrftoken": CSRF}
    done = httpx.put(f"{live_url}/control/upstreams", json=body, cookies=cookies, headers=headers)
    assert done.status_code == 200, done.text


# -- the admin ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_admin_adds_an_upstream_and_refuses_a_literal_key(admin_client: Any) -> None:
    form = {
        "name": "real",
        "dialect": "openai",
        "base_url": "https://models.example/v1",
        "api_key_env": "sk-proj-123abc",
        "timeout": "60",
    }
    refused = admin_client.post("/admin/staticagents/upstream/add/", form)
    assert refused.status_code == 200
    assert "never the key itself" in refused.content.decode()
    assert not Upstream.objects.exists()
    saved = admin_client.post("/admin/staticagents/upstream/add/", {**form, "api_key_env": "K"})
    assert saved.status_code == 302
    assert export_document()["upstreams"] == [
        {
            "name": "real",
            "dialect": "openai",
            "base_url": "https://models.example/v1",
            "api_key_env": "K",
            "timeout": 60.0,
        }
    ]


@pytest.mark.django_db
def test_the_admin_keeps_modes_consistent_with_the_upstreams(admin_client: Any) -> None:
    import_fixture(document=load_fixture(UPSTREAMS))
    claude = Upstream.objects.get(name="claude")
    page = admin_client.get(f"/admin/staticagents/upstream/{claude.pk}/delete/")
    assert page.status_code == 403  # the default mode needs it
    unknown = admin_client.post(
        "/admin/staticagents/agentmode/add/", {"agent_type": "x", "mode": "proxy", "upstream": "no"}
    )
    assert "unknown upstream" in unknown.content.decode()
    added = admin_client.post(
        "/admin/staticagents/agentmode/add/",
        {"agent_type": "writer", "mode": "record", "upstream": "real"},
    )
    assert added.status_code == 302
    assert export_document()["modes"]["agent_types"]["writer"] == {
        "mode": "record",
        "upstream": "real",
    }


# -- the wire, pure -----------------------------------------------------------------------


def test_a_translated_request_carries_the_query_and_the_system_prompt() -> None:
    inquiry = Inquiry(query="why?", system="Be brief.")
    assert translated_request("openai", inquiry, "m") == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "why?"},
        ],
        "stream": False,
    }
    assert translated_request("anthropic", Inquiry(query="why?"), "m") == {
        "model": "m",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "why?"}],
    }


def test_a_stream_read_in_arbitrary_slices_keeps_each_chunks_time() -> None:
    events = (
        b'event: message_start\ndata: {"type":"message_start","message":{"usage":'
        b'{"input_tokens":5,"output_tokens":0}}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"Hello "}}\n\n'
        b'event: content_block_start\ndata: {"type":"content_block_start","index":1,'
        b'"content_block":{"type":"tool_use","id":"t1","name":"lookup","input":{}}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,'
        b'"delta":{"type":"input_json_delta","partial_json":"{\\"a\\": "}}\n\n'
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,'
        b'"delta":{"type":"input_json_delta","partial_json":"1}"}}\n\n'
        b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":'
        b'"tool_use"},"usage":{"output_tokens":9}}\n\n'
    )
    reader = StreamReader("anthropic")
    cut = events.index(b"Hello") + 2
    reader.feed(events[:cut], 0.5)  # an event split across two reads
    reader.feed(events[cut:], 1.25)
    relayed = reader.relayed()
    assert relayed.content == "Hello "
    assert relayed.chunks == ((1.25, "Hello "),)
    assert relayed.tool_calls == ({"id": "t1", "name": "lookup", "arguments": {"a": 1}},)
    assert relayed.finish_reason == "tool_use"
    assert relayed.usage == {"input_tokens": 5, "output_tokens": 9}
    assert relayed.reply_finish_reason("anthropic") == "tool_calls"


def test_an_upstream_error_that_echoes_the_key_is_relayed_with_the_key_masked() -> None:
    upstream = routing.Upstream(name="u", dialect="openai", base_url="http://h/v1", api_key_env="K")
    echoed = httpx.Response(
        401,
        json={"error": {"message": "Incorrect API key: sk-real-1", "type": "invalid_request"}},
        headers={"retry-after-ms": "1500"},
    )
    failure = failure_of(upstream, echoed, "sk-real-1", 0.1)
    assert failure.body is not None and b"sk-real-1" not in failure.body
    assert failure.message == "Incorrect API key: ***"
    assert (failure.status, failure.retry_after) == (401, 1.5)
    html = failure_of(upstream, httpx.Response(502, text="<html>bad gateway</html>"), "k", 0.1)
    assert html.body is None  # not an error the client's SDK could read: the dialect's own
    assert html.message == "upstream 'u' answered 502"


@pytest.mark.django_db
def test_the_try_page_says_when_an_upstream_answers_the_agent_type(admin_client: Any) -> None:
    import_fixture(document=load_fixture(UPSTREAMS))
    page = admin_client.get(
        "/admin/staticagents/rule/try/",
        {"query": "hi", "agent_type": "coder", "dialect": "galaxy", "turn": 1},
    )
    assert (
        "Agent type &#x27;coder&#x27; is proxied to upstream &#x27;real&#x27;"
        in page.content.decode()
    )
    static = admin_client.get(
        "/admin/staticagents/rule/try/",
        {"query": "hi", "agent_type": "router", "dialect": "galaxy", "turn": 1},
    )
    assert 'id="try-answered-by"' in static.content.decode()
    assert 'id="try-routing"' not in static.content.decode()
