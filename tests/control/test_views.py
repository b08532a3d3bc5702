"""The control API (/control/): authentication, rules, fixtures, sessions, counters, explain.

Driven over HTTP against the real ASGI app; every error must come back as
``{"errors": [{path, message, code}]}`` with a 4xx.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from staticagents.models import ControlToken, Rule, RulesetState
from staticagents.services import ensure_control_token
from tests.conftest import CONTROL_TOKEN
from tests.conftest import galaxy_query as ask

GREETING = {"name": "greeting", "match": {"query": "(?i)hello"}, "response": {"content": "Hi!"}}
SCRIPT = {
    "name": "script",
    "match": {"contains": "weather"},
    "responses": [{"tool_calls": [{"name": "forecast"}]}, {"content": "Sunny."}],
    "on_exhausted": "error",
}


def errors_of(response: httpx.Response) -> list[dict[str, Any]]:
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("application/json")
    errors: list[dict[str, Any]] = response.json()["errors"]
    assert errors and all({"path", "message", "code"} <= set(e) for e in errors)
    return errors


def rule_names(control: httpx.Client) -> list[str]:
    return [rule["name"] for rule in control.get("/rules").json()["rules"]]


# -- authentication ---------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Token {CONTROL_TOKEN}"}],
    ids=["no-token", "wrong-token", "wrong-scheme"],
)
def test_requests_without_the_token_get_401_and_change_nothing(
    control: httpx.Client, live_url: str, headers: dict[str, str]
) -> None:
    control.post("/rules", json=GREETING)
    attempts = [
        httpx.get(f"{live_url}/control/rules", headers=headers),
        httpx.delete(f"{live_url}/control/rules/greeting", headers=headers),
        httpx.put(f"{live_url}/control/fixture", content="rules: []", headers=headers),
        httpx.delete(f"{live_url}/control/journal", headers=headers),
    ]
    for response in attempts:
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert errors_of(response)[0]["code"] in ("not_authenticated", "authentication_failed")
    assert rule_names(control) == ["greeting"]


def test_the_token_serve_created_is_accepted_when_none_is_configured(
    live_url: str, settings: Any
) -> None:
    settings.STATIC_AGENTS_CONTROL_TOKEN = ""
    token = ensure_control_token("")
    assert token is not None
    assert ensure_control_token("") is None  # created once, then only its digest is kept
    assert ControlToken.objects.get().digest != token
    good = httpx.get(f"{live_url}/control/rules", headers={"Authorization": f"Bearer {token}"})
    bad = httpx.get(f"{live_url}/control/rules", headers={"Authorization": "Bearer nope"})
    assert good.status_code == 200
    assert bad.status_code == 401


def test_a_configured_token_needs_no_stored_one(live_url: str, settings: Any) -> None:
    settings.STATIC_AGENTS_CONTROL_TOKEN = "configured"
    assert ensure_control_token("configured") is None
    assert not ControlToken.objects.exists()
    ok = httpx.get(f"{live_url}/control/counters", headers={"Authorization": "Bearer configured"})
    assert ok.status_code == 200


def session_cookies(user: Any) -> dict[str, str]:
    from django.test import Client

    browser = Client()
    browser.force_login(user)
    return {"sessionid": browser.cookies["sessionid"].value}


CSRF = "a" * 32  # a CSRF secret, sent as the cookie and as the header


def staff_with(django_user_model: Any, name: str, *codenames: str) -> Any:
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user(name, password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return user


def test_a_staff_session_is_accepted_and_other_sessions_are_not(
    live_url: str, settings: Any, django_user_model: Any
) -> None:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    staff = staff_with(django_user_model, "ops", "view_journalentry")
    plain = django_user_model.objects.create_user("visitor", password="x")
    for user, expected in ((staff, 200), (plain, 401)):
        response = httpx.get(f"{live_url}/control/counters", cookies=session_cookies(user))
        assert response.status_code == expected, response.text


def test_a_staff_user_without_permissions_may_neither_read_nor_write(
    live_url: str, settings: Any, django_user_model: Any, load_rules: Any
) -> None:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    load_rules({"rules": [{"name": "kept", "response": {"content": "hi"}}]})
    cookies = session_cookies(staff_with(django_user_model, "nobody"))
    csrf = {"X-CSRFToken": CSRF}
    cookies_csrf = {**cookies, "csrftoken": CSRF}
    attempts = [
        httpx.get(f"{live_url}/control/rules", cookies=cookies),
        httpx.get(f"{live_url}/control/journal", cookies=cookies),
        httpx.post(
            f"{live_url}/control/rules",
            json={"name": "new", "response": {"content": "x"}},
            cookies=cookies_csrf,
            headers={**csrf, "Referer": live_url},
        ),
        httpx.delete(
            f"{live_url}/control/rules/kept",
            cookies=cookies_csrf,
            headers={**csrf, "Referer": live_url},
        ),
        httpx.delete(
            f"{live_url}/control/journal",
            cookies=cookies_csrf,
            headers={**csrf, "Referer": live_url},
        ),
    ]

    assert [response.status_code for response in attempts] == [403] * 5
    messages = [response.json()["errors"][0]["message"] for response in attempts]
    assert all("needs the permission" in message for message in messages), messages
    assert "view_rule" in messages[0]
    assert list(Rule.objects.values_list("name", flat=True)) == ["kept"]


def test_a_staff_user_may_do_what_their_model_permissions_allow(
    live_url: str, settings: Any, django_user_model: Any, load_rules: Any
) -> None:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    load_rules({"rules": [{"name": "kept", "response": {"content": "hi"}}]})
    reader = session_cookies(staff_with(django_user_model, "reader", "view_rule"))
    writer = {
        **session_cookies(staff_with(django_user_model, "writer", "view_rule", "add_rule")),
        "csrftoken": CSRF,
    }
    headers = {"X-CSRFToken": CSRF, "Referer": live_url}
    new_rule = {"name": "new", "response": {"content": "x"}}

    assert httpx.get(f"{live_url}/control/rules", cookies=reader).status_code == 200
    reader_post = httpx.post(
        f"{live_url}/control/rules",
        json=new_rule,
        cookies={**reader, "csrftoken": CSRF},
        headers=headers,
    )
    assert reader_post.status_code == 403
    created = httpx.post(
        f"{live_url}/control/rules", json=new_rule, cookies=writer, headers=headers
    )
    assert created.status_code == 201, created.text
    deleting = httpx.delete(f"{live_url}/control/rules/new", cookies=writer, headers=headers)
    assert deleting.status_code == 403  # adding is not deleting
    assert set(Rule.objects.values_list("name", flat=True)) == {"kept", "new"}


# -- rules --------------------------------------------------------------------------


def test_rules_are_created_read_replaced_patched_and_deleted(control: httpx.Client) -> None:
    created = control.post("/rules", json=GREETING)
    assert created.status_code == 201
    assert created.json() == GREETING
    assert created.headers["location"].endswith("/control/rules/greeting")
    assert control.get("/rules/greeting").json() == GREETING

    replaced = control.put("/rules/greeting", json={"response": {"content": "Hey"}})
    assert replaced.json() == {"name": "greeting", "response": {"content": "Hey"}}

    patched = control.patch(
        "/rules/greeting", json={"enabled": False, "match": {"agent_type": "router"}}
    )
    assert patched.json() == {
        "name": "greeting",
        "enabled": False,
        "match": {"agent_type": "router"},
        "response": {"content": "Hey"},
    }
    to_script = control.patch("/rules/greeting", json={"responses": SCRIPT["responses"]})
    assert "response" not in to_script.json()
    assert to_script.json()["responses"] == SCRIPT["responses"]

    assert control.delete("/rules/greeting").status_code == 204
    assert control.get("/rules/greeting").status_code == 404
    assert rule_names(control) == []


@pytest.mark.parametrize("pattern", ["(a|a)*$", "(\\w+\\s?)+$", "(.*a){20}"])
def test_a_rule_whose_regex_backtracks_super_linearly_is_refused(
    control: httpx.Client, pattern: str
) -> None:
    rule = {"name": "slow", "match": {"query": pattern}, "response": {"content": "x"}}
    response = control.post("/rules", json=rule)
    assert response.status_code == 400
    [error] = errors_of(response)
    assert (error["path"], error["code"]) == ("match.query", "slow_regex")
    assert rule_names(control) == []


@pytest.mark.parametrize("pattern", ["(a+)++$", "(?>a+)+$"])
def test_a_possessive_or_atomic_regex_is_accepted(control: httpx.Client, pattern: str) -> None:
    rule = {"name": "safe", "match": {"query": pattern}, "response": {"content": "x"}}
    assert control.post("/rules", json=rule).status_code == 201


def test_an_edited_rule_answers_at_once(control: httpx.Client, live_url: str) -> None:
    control.post("/rules", json=GREETING)
    assert ask(live_url, "hello").json()["response"]["content"] == "Hi!"
    control.patch("/rules/greeting", json={"response": {"content": "Hello again"}})
    assert ask(live_url, "hello").json()["response"]["content"] == "Hello again"


def test_a_rule_holding_what_no_renderer_can_send_is_refused_naming_the_path(
    control: httpx.Client,
) -> None:
    deep: Any = 1
    for _ in range(100):
        deep = [deep]
    bad = {
        "name": "unsendable",
        "match": {"turn": 2**63},
        "response": {
            "metadata": {"deep": deep, "big": 2**64 - 1, "fine": 2**63},
            "fail_first": 2**63,
            "usage": {"input_tokens": 2**63},
        },
    }
    errors = {e["path"]: e for e in errors_of(control.post("/rules", json=bad))}
    deep_paths = [path for path in errors if path.startswith("response.metadata.deep[0]")]
    assert len(deep_paths) == 1 and "nested deeper than 64" in errors[deep_paths[0]]["message"]
    assert {"match.turn", "response.fail_first", "response.usage.input_tokens"} <= set(errors)
    assert not any(
        p.startswith(("response.metadata.big", "response.metadata.fine")) for p in errors
    )
    assert rule_names(control) == []


def test_rule_errors_name_their_path_like_an_import_does(control: httpx.Client) -> None:
    bad = {
        "name": "bad name",
        "match": {"querry": "x", "query": "(unclosed"},
        "response": {"confidence": "certain"},
    }
    errors = {e["path"]: e for e in errors_of(control.post("/rules", json=bad))}
    assert errors["match.querry"]["message"] == "unknown key (did you mean 'query'?)"
    assert errors["match.querry"]["code"] == "unknown_key"
    assert "invalid regex" in errors["match.query"]["message"]
    assert "slug" in errors["name"]["message"]
    assert "response.confidence" in errors
    assert rule_names(control) == []


def test_a_rule_needs_exactly_one_form_of_reply(control: httpx.Client) -> None:
    errors = errors_of(control.post("/rules", json={"name": "empty"}))
    assert "exactly one of 'response' or 'responses'" in errors[0]["message"]


def test_duplicate_and_missing_rule_names_are_clear_errors(control: httpx.Client) -> None:
    control.post("/rules", json=GREETING)
    duplicate = errors_of(control.post("/rules", json=GREETING))
    assert duplicate == [
        {"path": "name", "message": "a rule named 'greeting' exists", "code": "duplicate"}
    ]
    missing = control.put("/rules/nothing", json={"response": {}})
    assert missing.status_code == 404
    assert errors_of(missing)[0]["message"] == "no rule named 'nothing'"


def test_an_unnamed_rule_is_named_as_an_import_would_name_it(control: httpx.Client) -> None:
    control.post("/rules", json=GREETING)
    created = control.post("/rules", json={"match": {"agent_type": "router"}, "response": {}})
    assert created.json()["name"] == "router-2"


def test_reorder_puts_the_named_rules_first(control: httpx.Client, live_url: str) -> None:
    for name in ("a", "b", "c"):
        rule = {"name": name, "response": {"content": name}}
        assert control.post("/rules?place=end", json=rule).status_code == 201
    assert ask(live_url, "anything").json()["response"]["content"] == "a"
    reordered = control.post("/rules/reorder", json=["c", "b"])
    assert reordered.json() == {"rules": ["c", "b", "a"]}
    assert rule_names(control) == ["c", "b", "a"]
    assert ask(live_url, "anything").json()["response"]["content"] == "c"


def test_reorder_rejects_unknown_and_repeated_names(control: httpx.Client) -> None:
    control.post("/rules", json=GREETING)
    errors = errors_of(control.post("/rules/reorder", json=["greeting", "ghost", "greeting"]))
    assert {(e["path"], e["code"]) for e in errors} == {("[1]", "not_found"), ("[2]", "duplicate")}
    assert errors_of(control.post("/rules/reorder", json={"names": ["greeting"]}))


# -- fixtures -----------------------------------------------------------------------


def test_fixture_exports_yaml_by_default_and_json_on_request(control: httpx.Client) -> None:
    control.post("/rules", json=GREETING)
    as_yaml = control.get("/fixture")
    assert as_yaml.headers["content-type"].startswith("application/yaml")
    assert yaml.safe_load(as_yaml.text)["rules"] == [GREETING]
    as_json = control.get("/fixture", headers={"Accept": "application/json"})
    assert as_json.json()["rules"] == [GREETING]
    assert as_json.json() == yaml.safe_load(as_yaml.text)


def test_fixture_put_replaces_and_post_merges(control: httpx.Client) -> None:
    control.post("/rules", json=GREETING)
    replaced = control.put("/fixture", content=yaml.safe_dump({"rules": [SCRIPT]}))
    assert replaced.json() == {
        "created": 1,
        "updated": 0,
        "deleted": 1,
        "unchanged": 0,
        "dry_run": False,
        "warnings": [],
        "created_names": ["script"],
        "updated_names": [],
        "deleted_names": ["greeting"],
    }
    assert rule_names(control) == ["script"]
    merged = control.post("/fixture", content=json.dumps({"rules": [GREETING]}))
    assert merged.json()["created"] == 1
    assert rule_names(control) == ["script", "greeting"]


def test_putting_a_fixture_again_rewrites_only_what_changed(control: httpx.Client) -> None:
    control.put("/fixture", content=yaml.safe_dump({"rules": [GREETING, SCRIPT]}))
    ids = dict(Rule.objects.values_list("name", "id"))
    version = RulesetState.objects.get().version

    again = control.put("/fixture", content=yaml.safe_dump({"rules": [GREETING, SCRIPT]}))
    assert again.json()["unchanged"] == 2
    assert (again.json()["created"], again.json()["updated"], again.json()["deleted"]) == (0, 0, 0)
    assert RulesetState.objects.get().version == version  # nothing to rebuild

    changed = {**SCRIPT, "responses": [{"content": "Rainy."}]}
    swapped = control.put("/fixture", content=yaml.safe_dump({"rules": [changed, GREETING]}))
    assert (swapped.json()["updated"], swapped.json()["unchanged"]) == (1, 1)
    assert RulesetState.objects.get().version == version + 1
    assert dict(Rule.objects.values_list("name", "id")) == ids  # the rows stayed
    assert rule_names(control) == ["script", "greeting"]
    assert control.get("/rules/script").json()["responses"] == [{"content": "Rainy."}]


def test_putting_a_fixture_with_a_session_starts_that_session_afresh(
    control: httpx.Client, live_url: str
) -> None:
    control.post("/rules", json=GREETING)
    ask(live_url, "hello", session="a")
    ask(live_url, "hello", session="b")
    control.put("/fixture?session=a", content=yaml.safe_dump({"rules": [GREETING]}))
    sessions = [e["session"] for e in control.get("/journal").json()["results"]]
    assert sessions == ["b"]


def test_fixture_dry_run_changes_nothing(control: httpx.Client) -> None:
    result = control.put("/fixture?dry_run=true", content=yaml.safe_dump({"rules": [SCRIPT]}))
    assert result.json()["dry_run"] is True
    assert rule_names(control) == []


def test_a_bad_fixture_reports_every_error_with_its_path_and_changes_nothing(
    control: httpx.Client,
) -> None:
    control.post("/rules", json=GREETING)
    text = (
        "version: 1\n"
        "rules:\n"
        "  - name: one\n"
        "    match:\n"
        "      querry: hello\n"
        "    response:\n"
        "      content: hi\n"
        "  - name: two\n"
        "    response:\n"
        "      confidence: certain\n"
    )
    errors = errors_of(control.put("/fixture", content=text))
    by_path = {e["path"]: e for e in errors}
    assert set(by_path) == {"rules[0].match.querry", "rules[1].response.confidence"}
    assert by_path["rules[0].match.querry"]["line"] == 5
    assert rule_names(control) == ["greeting"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "a fixture must be a mapping, not an empty document"),
        ("rules: [", "invalid YAML"),
        ("version: 2\nrules: []\n", "unsupported version 2"),
    ],
)
def test_unreadable_fixtures_are_400s(control: httpx.Client, body: str, message: str) -> None:
    assert message in errors_of(control.put("/fixture", content=body))[0]["message"]


# -- the ADK test-agent format --------------------------------------------------------

ADK_FIXTURE = {
    "version": 1,
    "replies": {
        "P-17": {"text": "The answer to P-17.", "word_delay_ms": 0},
        "P-18": {"tool": "lookup", "text": "Looked it up."},
        "P-19": {"error": "model overloaded", "fail_first": 1, "text": "Recovered."},
    },
}


def test_the_adk_fixture_is_accepted_as_contains_rules(
    control: httpx.Client, live_url: str
) -> None:
    imported = control.put("/fixture", content=json.dumps(ADK_FIXTURE))
    assert imported.status_code == 200, imported.text
    rules = control.get("/rules").json()["rules"]
    assert [r["match"] for r in rules] == [
        {"contains": "P-17"},
        {"contains": "P-18"},
        {"contains": "P-19"},
    ]
    assert rules[1]["responses"][0] == {"tool_calls": [{"name": "lookup"}]}
    answer = ask(live_url, "Please solve problem P-17 for me")
    assert answer.json()["response"]["content"] == "The answer to P-17."
    flaky = ask(live_url, "P-19?", session="adk")
    assert flaky.status_code == 500  # a scripted error's default status
    assert flaky.json()["err_msg"] == "model overloaded"
    assert ask(live_url, "P-19?", session="adk").json()["response"]["content"] == "Recovered."


def test_the_import_command_detects_the_adk_fixture(tmp_path: Path, db: None) -> None:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(ADK_FIXTURE))
    call_command("import_fixture", str(path))
    assert list(Rule.objects.values_list("name", flat=True)) == ["P-17", "P-18", "P-19"]


def test_an_unknown_adk_member_is_an_error_naming_it(control: httpx.Client) -> None:
    fixture = {"version": 1, "replies": {"P-1": {"text": "x", "colour": "red"}}}
    errors = errors_of(control.put("/fixture", content=json.dumps(fixture)))
    assert errors == [
        {"path": "replies.P-1.colour", "message": "unknown key", "code": "unknown_key", "line": 1}
    ]


def test_overlapping_adk_ids_are_an_error_naming_both(control: httpx.Client) -> None:
    fixture = {"version": 1, "replies": {"P-1": {"text": "a"}, "P-10": {"text": "b"}}}
    [error] = errors_of(control.put("/fixture", content=json.dumps(fixture)))
    assert error["code"] == "overlap"
    assert "'P-1'" in error["message"] and "'P-10'" in error["message"]


@pytest.mark.parametrize("version", [2, "1", True, None])
def test_an_adk_version_other_than_1_is_an_error(control: httpx.Client, version: object) -> None:
    fixture = {"version": version, "replies": {"P-1": {"text": "a"}}}
    [error] = errors_of(control.put("/fixture", content=json.dumps(fixture)))
    assert error["path"] == "version"
    assert "unsupported version" in error["message"]


def test_adk_member_types_are_checked_at_their_own_path(tmp_path: Path, db: None) -> None:
    fixture = {"replies": {"P-1": {"text": 5, "word_delay_ms": -1, "tool": {"args": {}}}}}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(fixture))
    with pytest.raises(CommandError) as caught:
        call_command("import_fixture", str(path))
    message = str(caught.value)
    for where in ("replies.P-1.text", "replies.P-1.word_delay_ms", "replies.P-1.tool.args"):
        assert where in message
    assert not Rule.objects.exists()


# -- sessions, counters, explain -------------------------------------------------------


def test_the_journal_counts_every_entry_on_every_page(control: httpx.Client, live_url: str) -> None:
    for question in ("one", "two", "three"):
        ask(live_url, question, session="paged")
    whole = control.get("/journal?session=paged&page_size=5").json()
    first = control.get("/journal?session=paged&page_size=2").json()
    second = control.get(first["next"]).json()
    assert [page["count"] for page in (whole, first, second)] == [3, 3, 3]
    queries = [e["query"] for e in first["results"] + second["results"]]
    assert queries == ["three", "two", "one"] == [e["query"] for e in whole["results"]]


def test_deleting_a_session_resets_its_script_and_journal_only(
    control: httpx.Client, live_url: str
) -> None:
    control.post("/rules", json=SCRIPT)
    for session in ("a", "b"):
        ask(live_url, "weather?", session=session)
    assert control.delete("/sessions/a").json() == {"session": "a", "counters": 1, "journal": 1}
    assert ask(live_url, "weather?", session="a").json()["response"]["content"] == ""  # tool call
    assert ask(live_url, "weather?", session="b").json()["response"]["content"] == "Sunny."
    sessions = [e["session"] for e in control.get("/journal").json()["results"]]
    assert sorted(sessions) == ["a", "b", "b"]


def test_a_session_script_answers_that_session_alone_before_any_rule(
    control: httpx.Client, live_url: str
) -> None:
    control.post("/rules", json=GREETING)
    version = RulesetState.objects.get().version
    ask(live_url, "hello", session="a")
    script = {"responses": [{"content": "one"}, {"content": "two"}], "on_exhausted": "error"}

    put = control.put("/sessions/a", json=script)
    assert put.json() == {"session": "a", "counters": 0, "journal": 1}  # started afresh
    assert control.get("/sessions/a").json()["script"] == {"name": "replies", **script}
    answers = [ask(live_url, "hello", session="a").json() for _ in range(3)]
    assert [a["response"]["content"] for a in answers[:2]] == ["one", "two"]
    assert answers[2]["error_type"] == "script_exhausted"
    assert ask(live_url, "hello", session="b").json()["response"]["content"] == "Hi!"
    assert ask(live_url, "hello").json()["response"]["content"] == "Hi!"  # the global session
    assert {e["rule"] for e in control.get("/journal?session=a").json()["results"]} == {"replies"}
    # The rules were never touched: their version is where it was.
    assert RulesetState.objects.get().version == version
    assert rule_names(control) == ["greeting"]

    control.delete("/sessions/a")
    assert control.get("/sessions/a").json()["script"] is None
    assert ask(live_url, "hello", session="a").json()["response"]["content"] == "Hi!"


def test_a_bad_script_is_refused_with_its_paths_and_changes_nothing(
    control: httpx.Client, live_url: str
) -> None:
    control.put("/sessions/a", json={"responses": [{"content": "kept"}]})
    refused = [
        control.put("/sessions/a", json={"responses": [{"contnet": "x"}]}),
        control.put("/sessions/a", json={"responses": [], "match": {"query": "x"}}),
        control.put("/sessions/a", json={"on_exhausted": "error"}),
        control.put("/sessions/a", json=["x"]),
    ]
    paths = [[e["path"] for e in errors_of(response)] for response in refused]
    assert paths == [["responses[0].contnet"], ["match"], ["responses"], [""]]
    assert control.get("/sessions/a").json()["script"]["responses"] == [{"content": "kept"}]


def test_counters_sum_what_the_service_saw_overall_and_per_session(
    control: httpx.Client, live_url: str
) -> None:
    control.put(
        "/fixture",
        content=yaml.safe_dump(
            {
                "rules": [
                    SCRIPT,
                    {
                        "name": "flaky",
                        "match": {"contains": "flaky"},
                        "response": {"fail_first": 1},
                    },
                ]
            }
        ),
    )
    for query in ("weather", "weather", "weather", "flaky", "flaky", "nothing matches"):
        ask(live_url, query, session="s1")
    ask(live_url, "weather", session="s2")
    overall = control.get("/counters").json()
    assert overall["requests"] == 7
    assert overall["rules"] == {"flaky": 2, "script": 4}
    assert overall["fallbacks"] == 1
    assert overall["errors"] == 1  # the exhausted script
    assert overall["failed_first"] == 1
    assert overall["cancelled"] == 0
    s2 = control.get("/counters", params={"session": "s2"}).json()
    assert (s2["session"], s2["requests"], s2["rules"]) == ("s2", 1, {"script": 1})

    reset = control.delete("/counters", params={"session": "s1"}).json()
    assert reset["requests"] == 0
    assert control.get("/counters").json()["requests"] == 1
    assert control.get("/journal").json()["count"] == 7  # the journal itself is kept
    control.delete("/counters")
    assert control.get("/counters").json()["requests"] == 0


def test_explain_names_the_rule_and_every_failing_predicate(control: httpx.Client) -> None:
    rules = [
        {"name": "typed", "match": {"agent_type": "custom_tool"}, "response": {}},
        {"name": "regex", "match": {"query": "^tool"}, "response": {}},
        {"name": "paged", "match": {"context": {"page_id": "."}}, "response": {}},
        {"name": "later", "match": {"turn": 2}, "response": {}},
        {"name": "catch-all", "response": {}},
    ]
    control.put("/fixture", content=yaml.safe_dump({"rules": rules}))
    explained = control.post("/explain", json={"query": "which tool?", "turn": 1}).json()
    assert explained["rule"] == "catch-all"
    assert explained["fallback"] is False
    failing = [(v["rule"], v["predicate"]) for v in explained["verdicts"] if not v["matched"]]
    assert failing == [
        ("typed", "agent_type"),
        ("regex", "query"),
        ("paged", "context"),
        ("later", "turn"),
    ]
    reasons = {v["rule"]: v["reason"] for v in explained["verdicts"]}
    assert reasons["regex"] == "query 'which tool?' does not match /^tool/"
    assert reasons["paged"] == "the inquiry has no context"


def test_explain_reports_the_fallback_when_nothing_matches(control: httpx.Client) -> None:
    control.post("/rules", json=GREETING)
    explained = control.post("/explain", json={"query": "bye"}).json()
    assert explained["rule"] is None
    assert explained["fallback"] is True
    assert explained["verdicts"][0]["predicate"] == "query"


def test_explain_rejects_bad_inquiries_naming_the_field(control: httpx.Client) -> None:
    errors = errors_of(control.post("/explain", json={"turn": 0, "querry": "y", "context": 1}))
    by_path = {e["path"]: e for e in errors}
    assert set(by_path) == {"query", "turn", "querry", "context"}
    assert by_path["querry"] == {"path": "querry", "message": "unknown key", "code": "unknown_key"}
    assert by_path["query"]["code"] == "required"
    assert errors_of(control.post("/explain", json=["which tool?"]))[0]["path"] == ""


# -- one error shape ---------------------------------------------------------------------


def test_malformed_json_is_a_400_in_the_error_shape(control: httpx.Client) -> None:
    response = control.post(
        "/rules", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    [error] = errors_of(response)
    assert error["code"] == "parse_error"
    assert "JSON parse error" in error["message"]


@pytest.mark.parametrize(
    ("method", "path", "body", "where"),
    [
        ("post", "/rules", '{"name": "a", "match": {"query": "x", "query": "y"}}', "match.query"),
        ("put", "/rules/a", '{"response": {"content": "x"}, "response": {}}', "response"),
        ("patch", "/rules/a", '{"enabled": false,\n "enabled": true}', "enabled"),
        ("put", "/defaults", '{"confidence": "low", "confidence": "high"}', "confidence"),
    ],
)
def test_a_key_given_twice_in_a_json_body_is_a_400_naming_it(
    control: httpx.Client, method: str, path: str, body: str, where: str
) -> None:
    control.post("/rules", json={"name": "a", "response": {"content": "kept"}})
    response = control.request(
        method, path, content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400, response.text
    [error] = errors_of(response)
    assert error["path"] == where and error["code"] == "duplicate"
    assert repr(where.rsplit(".", 1)[-1]) in error["message"]
    assert control.get("/rules/a").json()["response"] == {"content": "kept"}  # nothing changed


def test_unknown_routes_methods_and_parameters_are_clear_4xx(control: httpx.Client) -> None:
    assert errors_of(control.get("/nowhere"))[0]["code"] == "not_found"
    assert errors_of(control.put("/journal"))[0]["code"] == "method_not_allowed"
    [error] = errors_of(control.get("/journal", params={"sesion": "x"}))
    assert error == {"path": "sesion", "message": "unknown query parameter", "code": "unknown_key"}
    unsupported = control.post("/rules", content=b"a: b", headers={"Content-Type": "text/yaml"})
    assert unsupported.status_code == 415
    assert errors_of(unsupported)[0]["code"] == "unsupported_media_type"


# -- defaults ---------------------------------------------------------------------


def test_the_defaults_are_read_replaced_and_patched_with_errors_by_path(
    control: httpx.Client,
) -> None:
    assert control.get("/defaults").json() == {"confidence": "medium"}
    chaos = {"probability": 0.5, "kinds": ["stall"], "seed": 3}
    replaced = control.put("/defaults", json={"confidence": "high", "chaos": chaos})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["chaos"] == chaos
    patched = control.patch("/defaults", json={"confidence": None, "chaos": {"seed": 4}})
    assert patched.json() == {
        "confidence": "medium",
        "chaos": {"probability": 0.5, "kinds": ["stall"], "seed": 4},
    }
    [error] = errors_of(control.patch("/defaults", json={"chaos": {"kinds": ["boom"]}}))
    assert error["path"] == "defaults.chaos.kinds[0]"
    assert errors_of(control.put("/defaults", json={"colour": "red"}))[0]["path"] == (
        "defaults.colour"
    )
    assert control.get("/defaults").json()["chaos"]["seed"] == 4  # refused: nothing changed
    exported = yaml.safe_load(control.get("/fixture").text)
    assert exported["defaults"]["chaos"]["seed"] == 4
    assert "chaos" not in control.patch("/defaults", json={"chaos": None}).json()
