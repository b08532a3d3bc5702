"""The kit's hot control calls answer as the views do, with or without the lean path."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from typing import Any

import httpx
import pytest
from django.test import Client

from staticagents.control.lean import lean_on_loop, lean_response
from staticagents.core.inquiry import Inquiry
from staticagents.core.matching import match_inquiry
from staticagents.document.files import load_fixture
from staticagents.models import JournalEntry, Rule, RulesetVersion, SessionScript
from staticagents.replying.journal import journal
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


def test_a_host_django_refuses_takes_the_views_path_whatever_it_allowed_before(
    hop: Any, settings: Any
) -> None:
    request = scope("GET", "/control/journal", b"session=mine", authorization=TOKEN)
    assert lean_response(request, b"") is not None
    settings.ALLOWED_HOSTS = ["service.example"]
    assert lean_response(request, b"") is None
    lean, django = both(hop, request)
    assert lean[0]["status"] == 400
    same(lean, django)
    allowed = scope(
        "GET", "/control/journal", b"session=mine", authorization=TOKEN, host=b"service.example"
    )
    allowed["headers"] = allowed["headers"][1:]
    assert lean_response(allowed, b"") is not None
    doubled = scope(  # Django joins the two: no host it allows
        "GET", "/control/journal", b"session=mine", authorization=TOKEN, host=b"service.example"
    )
    doubled["headers"][0] = (b"host", b"service.example")
    assert lean_response(doubled, b"") is None
    same(*both(hop, doubled))


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


# -- on the event loop (a SQLite file: the test database is one) ------------------------


@pytest.fixture
def loop_hop(transactional_db: None, settings: Any) -> Any:
    """The control API's server, its lean calls tried on the event loop; the test's
    writes are committed, so the loop's own connection sees them."""
    from django.db import connection

    from staticagents.replying.database import sqlite_file

    if sqlite_file(connection) is None:  # test_another_database_... runs on any
        pytest.skip("the event loop has a connection of its own only to a SQLite file")
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    from staticagents.asgi import http_application

    return http_application


def on_loop(request: Any, body: bytes = b"") -> Any:
    return asyncio.run(lean_on_loop(request, body))


def test_the_kit_calls_on_the_loop_are_the_views_own(loop_hop: Any) -> None:
    entry("mine", "before the script")
    put = scope("PUT", "/control/sessions/mine", body=SCRIPT, authorization=TOKEN)
    lean = on_loop(put, SCRIPT)
    assert lean is not None  # answered on the loop
    entry("mine", "before the script")
    same(lean, loop_hop.through_django(put, SCRIPT))
    assert json.loads(lean[1]) == {"session": "mine", "counters": 0, "journal": 1}

    for n in range(3):
        entry("mine", f"question {n}")
    for query in (b"session=mine&page_size=1000", b"session=mine", b"session=nobody"):
        read = scope("GET", "/control/journal", query, authorization=TOKEN, accept=b"*/*")
        lean = on_loop(read)
        assert lean is not None
        same(lean, loop_hop.through_django(read, b""))
    longer = scope("GET", "/control/journal", b"session=mine&page_size=2", authorization=TOKEN)
    assert on_loop(longer) is None  # more than a page: the paginator's, on a thread

    delete = scope("DELETE", "/control/sessions/mine", authorization=TOKEN)
    lean = on_loop(delete)
    assert lean is not None
    assert json.loads(lean[1]) == {"session": "mine", "counters": 0, "journal": 3}
    assert not SessionScript.objects.filter(session="mine").exists()
    for n in range(3):
        entry("mine", f"question {n}")
    same(lean, loop_hop.through_django(delete, b""))
    for refused in (b"Bearer wrong", b"Basic x"):
        assert on_loop(scope("DELETE", "/control/sessions/x", authorization=refused)) is None


def test_the_same_fixture_again_on_the_loop_is_the_views_own(
    loop_hop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    put = scope("PUT", "/control/fixture", b"session=mine", body=FIXTURE, authorization=TOKEN)
    assert on_loop(put, FIXTURE) is None  # a first replace: the view's work, on a thread
    loop_hop.respond(put, FIXTURE)
    entry("mine", "before the fixture")
    lean = on_loop(put, FIXTURE)
    assert lean is not None
    assert not JournalEntry.objects.filter(session="mine").exists()  # started afresh
    entry("mine", "before the fixture")
    same(lean, loop_hop.through_django(put, FIXTURE))
    entry("mine", "before another fixture")
    changed = FIXTURE.replace(b"Hi", b"Hello")
    other = scope("PUT", "/control/fixture", b"session=mine", body=changed, authorization=TOKEN)

    def no_statement(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a fixture the loop cannot answer ran a statement there")

    monkeypatch.setattr(journal, "run_on_loop", no_statement)
    assert on_loop(other, changed) is None  # the thread's, declined before any statement
    assert JournalEntry.objects.filter(session="mine").exists()  # nothing done


def test_the_first_script_is_read_on_the_thread_which_imports_the_fixture_schema(
    loop_hop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    import staticagents.document

    # As in a service that has validated nothing yet (its start does not import the schema).
    monkeypatch.delitem(sys.modules, "staticagents.document.schema")
    monkeypatch.delattr(staticagents.document, "schema")
    put = scope("PUT", "/control/sessions/mine", body=SCRIPT, authorization=TOKEN)
    assert on_loop(put, SCRIPT) is None  # the loop is not held by the import
    assert lean_response(put, SCRIPT) is not None  # the thread reads it
    assert "staticagents.document.schema" in sys.modules
    assert on_loop(put, SCRIPT) is not None  # and the loop reads the next ones


def test_a_stored_token_is_read_on_the_loop(loop_hop: Any, settings: Any) -> None:
    from staticagents.services import rotate_control_token

    settings.STATIC_AGENTS_CONTROL_TOKEN = ""
    token = rotate_control_token()
    mine = f"Bearer {token}".encode()
    read = scope("GET", "/control/journal", b"session=mine", authorization=mine)
    assert on_loop(read) is not None
    assert on_loop(scope("GET", "/control/journal", b"session=mine", authorization=TOKEN)) is None


def test_a_busy_file_sends_a_write_to_the_thread_and_never_holds_the_loop(
    loop_hop: Any, django_db_blocker: Any
) -> None:
    from django.db import connection

    entry("mine", "kept while the file is busy")
    holder = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's write under way
    try:
        put = scope("PUT", "/control/sessions/mine", body=SCRIPT, authorization=TOKEN)
        assert on_loop(put, SCRIPT) is None  # at once: the thread waits for the lock instead
        read = scope("GET", "/control/journal", b"session=mine", authorization=TOKEN)
        assert on_loop(read) is not None  # a read takes no lock
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert JournalEntry.objects.filter(session="mine").count() == 1
    assert not SessionScript.objects.filter(session="mine").exists()


def test_a_kit_test_takes_no_thread_hop_on_sqlite(
    loop_hop: Any, control: Any, live_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from staticagents.replying import snapshot

    control.put("/fixture", content=FIXTURE, headers={"Content-Type": "application/json"})

    async def no_thread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a kit call took the control thread")

    monkeypatch.setattr(loop_hop, "lean", lean_on_loop)
    monkeypatch.setattr(loop_hop.threads, "run", no_thread)
    ask = {"model": "m", "messages": [{"role": "user", "content": "hello?"}]}
    url = f"{live_url}/v1/chat/completions"
    for test in range(3):
        session = f"kit-{test}"
        script = {"responses": [{"content": f"scripted {test}"}]}
        assert control.put(f"/sessions/{session}", json=script).status_code == 200
        # The snapshot took the script as it is: nothing to rebuild at the reply.
        assert snapshot._snapshot is not None and session in snapshot._snapshot.scripts
        assert snapshot._snapshot.stamp == snapshot.ruleset_stamp()
        answers = [httpx.post(url, json=ask, headers={"X-Static-Session": session})]
        answers.append(httpx.post(url, json=ask, headers={"X-Static-Session": session}))
        assert answers[0].json()["choices"][0]["message"]["content"] == f"scripted {test}"
        # A reply leaves once its journal row is committed: the read sees every answer.
        journal = control.get("/journal", params={"session": session}).json()
        assert [e["outcome"] for e in journal["results"]] == ["error", "answered"]
        assert control.delete(f"/sessions/{session}").json()["journal"] == 2
        fixture = control.put(
            "/fixture",
            params={"session": session},
            content=FIXTURE,
            headers={"Content-Type": "application/json"},
        )
        assert fixture.json()["unchanged"] == 1
        assert (
            httpx.post(url, json=ask, headers={"X-Static-Session": session}).json()["choices"][0][
                "message"
            ]["content"]
            == "Hi"
        )
        journal = control.get("/journal", params={"session": session}).json()
        assert [e["query"] for e in journal["results"]] == ["hello?"]
    assert session not in snapshot.active_ruleset().scripts


def test_another_database_leaves_the_calls_to_the_thread(
    transactional_db: None, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from staticagents.replying import journal

    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    monkeypatch.setattr(journal, "sqlite_file", lambda db: None)  # as on PostgreSQL
    put = scope("PUT", "/control/sessions/mine", body=SCRIPT, authorization=TOKEN)
    assert on_loop(put, SCRIPT) is None
    assert on_loop(scope("GET", "/control/journal", b"session=mine", authorization=TOKEN)) is None
    assert not SessionScript.objects.filter(session="mine").exists()
    assert lean_response(put, SCRIPT) is not None  # the thread answers it lean


def test_a_big_session_is_left_to_the_thread_not_the_loop(
    loop_hop: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from staticagents.control import lean

    monkeypatch.setattr(lean, "LOOP_ROWS", 2)
    for n in range(3):
        entry("mine", f"question {n}")
    delete = scope("DELETE", "/control/sessions/mine", authorization=TOKEN)
    assert on_loop(delete) is None
    put = scope("PUT", "/control/sessions/mine", body=SCRIPT, authorization=TOKEN)
    assert on_loop(put, SCRIPT) is None
    read = scope("GET", "/control/journal", b"session=mine", authorization=TOKEN)
    assert on_loop(read) is not None  # three small entries
    JournalEntry.objects.filter(session="mine").update(size=100)
    monkeypatch.setattr(lean, "LOOP_BYTES", 250)
    assert on_loop(read) is None
    assert lean_response(read, b"") is not None  # the thread reads a whole page lean
    assert JournalEntry.objects.filter(session="mine").count() == 3
    entry("other", "one")
    assert on_loop(scope("DELETE", "/control/sessions/other", authorization=TOKEN)) is not None
