"""The kit's hot control calls answer as the views do, with or without the lean path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from staticagents.control.lean import lean_response
from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import match_inquiry
from staticagents.document.files import load_fixture
from staticagents.models import JournalEntry, Rule, RulesetVersion
from staticagents.replying.snapshot import active_ruleset
from staticagents.selectors import export_document
from tests.conftest import CONTROL_TOKEN

TOKEN = f"Bearer {CONTROL_TOKEN}".encode()
SCRIPT = json.dumps({"responses": [{"content": "hi"}, {"content": "bye"}]}).encode()


@pytest.fixture
def hop(db: None, settings: Any) -> Any:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    from staticagents.asgi import http_application

    return http_application


def scope(method: str, path: str, query: bytes = b"", body: bytes = b"", **headers: bytes) -> Any:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", headers.pop("content_type", b"application/json")),
            (b"content-length", str(len(body)).encode()),
            *((name.replace("_", "-").encode(), value) for name, value in headers.items()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


def entry(session: str, query: str) -> None:
    JournalEntry.objects.create(
        session=session,
        dialect="openai",
        route="/v1/chat/completions",
        agent_type="router",
        query=query,
        body=json.dumps({"q": query}),
        body_bytes=len(query) + 8,
        outcome="answered",
        rule="greet",
        headers={"x": "y"},
    )


def both(hop: Any, request: Any, body: bytes = b"") -> tuple[Any, Any]:
    """The response the service sends, and the one Django's path alone gives."""
    return hop.respond(request, body), hop.through_django(request, body)


def same(a: Any, b: Any) -> None:
    (start_a, body_a), (start_b, body_b) = a, b
    assert start_a["status"] == start_b["status"]
    assert sorted(start_a["headers"]) == sorted(start_b["headers"])
    assert json.loads(body_a) == json.loads(body_b)
    assert body_a == body_b


def test_a_journal_read_is_the_views_own(hop: Any) -> None:
    for n in range(3):
        entry("mine", f"question {n}")
    entry("other", "not mine")
    for query in (b"session=mine&page_size=1000", b"session=mine", b"session=nobody"):
        request = scope("GET", "/control/journal", query, authorization=TOKEN, accept=b"*/*")
        assert lean_response(request, b"") is not None  # served lean
        lean, django = both(hop, request)
        same(lean, django)
    assert len(json.loads(lean[1])["results"]) == 0
    full = json.loads(
        hop.respond(scope("GET", "/control/journal", b"session=mine", authorization=TOKEN), b"")[1]
    )
    assert [e["query"] for e in full["results"]] == ["question 2", "question 1", "question 0"]


@pytest.mark.parametrize(
    ("query", "headers"),
    [
        (b"session=mine&page_size=2", {"authorization": TOKEN}),  # more than a page
        (b"session=mine&page_size=0", {"authorization": TOKEN}),
        (b"session=mine&bogus=1", {"authorization": TOKEN}),
        (b"session=&page_size=5", {"authorization": TOKEN}),
        (b"session=%20mine", {"authorization": TOKEN}),
        (b"session=mine", {"authorization": b"Bearer wrong"}),
        (b"session=mine", {}),
        (b"session=mine", {"authorization": TOKEN, "accept": b"text/html"}),
    ],
)
def test_other_journal_reads_take_the_views_path(hop: Any, query: bytes, headers: Any) -> None:
    for n in range(3):
        entry("mine", f"question {n}")
    request = scope("GET", "/control/journal", query, **headers)
    assert lean_response(request, b"") is None
    same(*both(hop, request))


def test_a_script_install_is_the_views_own(hop: Any) -> None:
    entry("mine", "before the script")
    lean = hop.respond(
        scope("PUT", "/control/sessions/mine", body=SCRIPT, authorization=TOKEN), SCRIPT
    )
    entry("mine", "before the script")
    django = hop.through_django(
        scope("PUT", "/control/sessions/mine/", body=SCRIPT, authorization=TOKEN), SCRIPT
    )
    same(lean, django)
    assert json.loads(lean[1]) == {"session": "mine", "counters": 0, "journal": 1}
    read = hop.respond(scope("GET", "/control/sessions/mine", authorization=TOKEN), b"")
    assert json.loads(read[1])["script"]["responses"] == [{"content": "hi"}, {"content": "bye"}]


@pytest.mark.parametrize(
    ("path", "body", "headers"),
    [
        ("/control/sessions/mine", b"{}", {"authorization": TOKEN}),
        ("/control/sessions/mine", b"[1]", {"authorization": TOKEN}),
        ("/control/sessions/mine", b'{"responses": [], "x": 1}', {"authorization": TOKEN}),
        ("/control/sessions/mine", b"{nope", {"authorization": TOKEN}),
        ("/control/sessions/mine", SCRIPT, {"authorization": b"Bearer wrong"}),
        ("/control/sessions/mine", SCRIPT, {}),
        ("/control/sessions/a%20b", SCRIPT, {"authorization": TOKEN}),
        ("/control/sessions/mine", SCRIPT, {"authorization": TOKEN, "content_type": b"text/plain"}),
    ],
)
def test_other_script_installs_take_the_views_path(
    hop: Any, path: str, body: bytes, headers: Any
) -> None:
    request = scope("PUT", path, body=body, **headers)
    assert lean_response(request, body) is None
    same(*both(hop, request, body))


def test_a_staff_session_takes_the_views_path(hop: Any, django_user_model: Any) -> None:
    staff = django_user_model.objects.create_user("ops", password="x", is_staff=True)
    client = Client()
    client.force_login(staff)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    read = scope("GET", "/control/journal", b"session=mine", cookie=cookie)
    assert lean_response(read, b"") is None
    lean, django = both(hop, read)
    same(lean, django)
    assert lean[0]["status"] == 403  # a staff user without the journal's permission
    put = scope("PUT", "/control/sessions/mine", body=SCRIPT, cookie=cookie, authorization=TOKEN)
    assert lean_response(put, SCRIPT) is None


FIXTURE = json.dumps(
    {"rules": [{"name": "greet", "match": {"contains": "hello"}, "response": {"content": "Hi"}}]}
).encode()


def put_fixture(body: bytes, query: bytes = b"session=mine") -> Any:
    return scope("PUT", "/control/fixture", query, body=body, authorization=TOKEN)


def test_the_same_fixture_again_is_the_views_own(hop: Any) -> None:
    put = put_fixture(FIXTURE)
    first = lean_response(put, FIXTURE)  # a first replace, served lean too
    assert first is not None and json.loads(first[1])["created"] == 1
    entry("mine", "before the fixture")
    assert lean_response(put, FIXTURE) is not None  # served lean (the session started afresh)
    entry("mine", "before the fixture")
    lean = hop.respond(put, FIXTURE)
    entry("mine", "before the fixture")
    same(lean, hop.through_django(put, FIXTURE))
    assert json.loads(lean[1])["unchanged"] == 1
    assert not JournalEntry.objects.filter(session="mine").exists()  # started afresh
    for query in (b"", b"session=mine&dry_run=1", b"session=%20"):
        assert lean_response(put_fixture(FIXTURE, query), FIXTURE) is None


def test_a_fixture_with_one_rule_changed_is_the_views_own(hop: Any) -> None:
    changed = FIXTURE.replace(b"Hi", b"Hello")
    answers, kept = [], []
    for respond in (lean_response, hop.through_django):
        hop.through_django(put_fixture(FIXTURE), FIXTURE)
        entry("mine", "before the fixture")
        answers.append(respond(put_fixture(changed), changed))
        version = RulesetVersion.objects.order_by("-number")[0]
        kept.append((version.by, version.what, version.document()))
        assert not JournalEntry.objects.filter(session="mine").exists()  # started afresh
    same(*answers)
    assert json.loads(answers[0][1])["updated_names"] == ["greet"]
    assert kept[0] == kept[1] and kept[0][:2] == ("control API", "imported 1 rule (replace)")
    assert kept[0][2] == export_document()
    reply = match_inquiry(active_ruleset(), Inquiry(query="hello"))
    assert reply is not None and reply.responses == ({"content": "Hello"},)


@pytest.mark.parametrize(
    "body",
    [
        b"{nope",
        b"rules: [",
        b'{"rules": [{"name": "greet", "respons": {}}]}',
        b'{"rules": [], "rules": []}',
        b'{"version": 2, "rules": []}',
    ],
)
def test_a_fixture_the_view_refuses_takes_the_views_path(hop: Any, body: bytes) -> None:
    hop.respond(put_fixture(FIXTURE), FIXTURE)
    assert lean_response(put_fixture(body), body) is None
    lean, django = both(hop, put_fixture(body), body)
    same(lean, django)
    assert lean[0]["status"] == 400
    assert Rule.objects.get().digest == Rule.digest_of(load_fixture(FIXTURE)["rules"][0])
