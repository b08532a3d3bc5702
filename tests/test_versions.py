"""The ruleset's history: every write keeps one version (who, when, what, the whole ruleset),
shown and restored from the admin and the control API, pruned past a configured count."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client

from staticagents import services
from staticagents.document.files import load_fixture
from staticagents.document.schema import RuleSpec, validate_part
from staticagents.models import Rule, RuleResponse, RulesetVersion
from staticagents.selectors import export_document
from staticagents.services import (
    create_rule,
    delete_rule,
    delete_rules,
    import_fixture,
    move_rule,
    reorder_rules,
    restore_version,
    save_rule,
    set_defaults,
    set_fallback,
    set_rules_enabled,
    update_rule,
)
from tests.conftest import FIXTURES
from tests.test_admin import change_form_data, replace, upload
from tests.test_services import RULES

pytestmark = pytest.mark.django_db

TOKEN = "history-token"
VERSIONS = "/admin/staticagents/rulesetversion/"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.STATIC_AGENTS_CONTROL_TOKEN = TOKEN


@pytest.fixture
def rules(load_rules: Callable[[Any], dict[str, Any]]) -> None:
    load_rules(RULES)


def versions() -> list[RulesetVersion]:
    return list(RulesetVersion.objects.order_by("number"))


def newest() -> RulesetVersion:
    return RulesetVersion.objects.order_by("-number")[0]


def fixture(data: dict[str, Any]) -> dict[str, Any]:
    return load_fixture(yaml.safe_dump(data))


def control(method: str, path: str, **kwargs: Any) -> Any:
    return getattr(Client(), method)(
        f"/control{path}", HTTP_AUTHORIZATION=f"Bearer {TOKEN}", **kwargs
    )


# -- every service keeps exactly one version, with who and what -----------------------


def edit_script() -> None:
    rule = Rule.objects.get(name="script")
    first, second = rule.responses.all()
    first.content = "Checking"
    save_rule(rule=rule, responses=[first], removed_responses=[second], by="ada")


WRITES: dict[str, tuple[Callable[[], object], str]] = {
    "replace": (
        lambda: import_fixture(
            document=fixture({"rules": [{"name": "only", "response": {}}]}), by="ada"
        ),
        "imported 1 rule (replace)",
    ),
    "merge": (
        lambda: import_fixture(document=fixture(RULES), merge=True, by="ada"),
        "imported 3 rules (merge)",
    ),
    "create": (
        lambda: create_rule(
            document=validate_part(RuleSpec, {"name": "new", "response": {}}), by="ada"
        ),
        'added rule "new"',
    ),
    "update": (
        lambda: update_rule(
            name="greet",
            document=validate_part(RuleSpec, {"name": "hello", "response": {}}),
            by="ada",
        ),
        'changed rule "greet" (renamed "hello")',
    ),
    "save a new rule": (
        lambda: save_rule(
            rule=Rule(name="added"), responses=[RuleResponse(content="one")], by="ada"
        ),
        'added rule "added"',
    ),
    "save an edited rule": (edit_script, 'changed rule "script"'),
    "delete a rule": (lambda: delete_rule(name="greet", by="ada"), 'deleted rule "greet"'),
    "delete rules": (
        lambda: delete_rules(names=["greet", "script"], by="ada"),
        "deleted 2 rules: greet, script",
    ),
    "disable": (
        lambda: set_rules_enabled(names=["greet"], enabled=False, by="ada"),
        'disabled rule "greet"',
    ),
    "reorder": (
        lambda: reorder_rules(names=["catch-all"], by="ada"),
        "reordered the rules: catch-all first",
    ),
    "move": (
        lambda: move_rule(name="catch-all", direction="top", by="ada"),
        'moved rule "catch-all" top (to #1)',
    ),
    "defaults": (
        lambda: set_defaults(document={"confidence": "low"}, by="ada"),
        "set the defaults",
    ),
    "no defaults": (lambda: set_defaults(document=None, by="ada"), "removed the defaults"),
    "fallback": (
        lambda: set_fallback(document={"content": "Nothing"}, by="ada"),
        "set the fallback",
    ),
    "no fallback": (lambda: set_fallback(document=None, by="ada"), "removed the fallback"),
}


@pytest.mark.parametrize(("write", "what"), WRITES.values(), ids=WRITES.keys())
def test_each_write_keeps_one_version_of_the_whole_ruleset_after_it(
    rules: None, write: Callable[[], object], what: str
) -> None:
    before = versions()
    write()
    after = versions()
    assert after[:-1] == before
    kept = after[-1]
    assert kept.number == before[-1].number + 1
    assert (kept.by, kept.what) == ("ada", what)
    assert kept.document() == export_document()


def test_a_dry_run_and_a_replace_by_the_same_rules_keep_no_version(rules: None) -> None:
    before = versions()
    import_fixture(document=fixture({"rules": []}), dry_run=True)
    import_fixture(document=fixture(RULES))
    assert move_rule(name="greet", direction="up") == 0
    assert versions() == before


def test_code_calling_a_service_without_naming_itself_is_a_command(rules: None) -> None:
    assert newest().by == "command"


def test_a_version_holds_the_document_the_export_produces_byte_for_byte(db: None) -> None:
    """Rules written from a document are kept without being read back: what is kept must be
    what reading them would give (floats, defaults, dropped defaults and all)."""
    for path in sorted(FIXTURES.glob("*.yml")):
        document = load_fixture(path.read_bytes(), str(path))
        import_fixture(document=document)
        kept = newest().document()
        services._recorded.clear()  # nothing remembered: read every rule
        # Keys sorted: PostgreSQL's jsonb keeps a mapping's keys in an order of its own.
        sort = orjson.OPT_SORT_KEYS
        assert orjson.dumps(kept, option=sort) == orjson.dumps(export_document(), option=sort)
    import_fixture(document=fixture({"rules": [{"name": "r", "response": {"retry_after": 2}}]}))
    assert newest().document()["rules"][0]["response"] == {"retry_after": 2.0}


def test_versions_are_stored_compressed(db: None) -> None:
    document = load_fixture((FIXTURES / "demo.yml").read_bytes())
    import_fixture(document=document)
    assert len(newest().packed) < len(json.dumps(export_document())) / 2


def test_versions_past_the_configured_count_are_pruned(rules: None, settings: Any) -> None:
    settings.STATIC_AGENTS_VERSIONS_KEEP = 3
    for i in range(5):
        set_fallback(document={"content": f"fallback {i}"})
    numbers = [version.number for version in versions()]
    assert len(numbers) == 3 and numbers == list(range(numbers[0], numbers[0] + 3))
    assert newest().document()["fallback"] == {"content": "fallback 4"}


# -- restore ------------------------------------------------------------------------


def test_restoring_a_version_brings_its_document_back_as_a_new_version(rules: None) -> None:
    first = newest()
    update_rule(name="greet", document=validate_part(RuleSpec, {"response": {"content": "Yo"}}))
    set_defaults(document=None)
    made = restore_version(number=first.number, by="ada")
    assert made == first.number + 3
    assert export_document() == first.document()
    assert (newest().number, newest().by, newest().what) == (
        made,
        "ada",
        f"restored version {first.number}",
    )
    assert restore_version(number=first.number) is None  # the rules are that version already
    assert newest().number == made


def test_a_version_keeps_the_upstreams_and_restoring_one_without_them_removes_them(
    rules: None,
) -> None:
    before = newest()
    upstream = {
        "name": "real",
        "dialect": "openai",
        "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": "REAL_MODEL_KEY",
    }
    modes = {"default": "static", "agent_types": {"coder": {"mode": "proxy", "upstream": "real"}}}
    services.set_upstreams(upstreams=[upstream], modes=modes, by="ada")
    with_upstreams = newest()
    assert with_upstreams.by == "ada"
    assert with_upstreams.document()["upstreams"][0]["name"] == "real"
    assert with_upstreams.document()["modes"]["agent_types"] == modes["agent_types"]
    restore_version(number=before.number)
    assert "upstreams" not in export_document()
    restore_version(number=with_upstreams.number)
    assert export_document()["upstreams"] == with_upstreams.document()["upstreams"]


def test_restoring_a_version_no_longer_kept_is_an_error_naming_it(rules: None) -> None:
    with pytest.raises(RulesetVersion.DoesNotExist, match="no version 999 is kept"):
        restore_version(number=999)


# -- the admin -----------------------------------------------------------------------


def test_editing_a_rule_in_the_admin_keeps_one_version_by_the_curator(
    admin_client: Client, rules: None
) -> None:
    before = newest().number
    url = f"/admin/staticagents/rule/{Rule.objects.get(name='greet').pk}/change/"
    data = change_form_data(admin_client, url)
    data["responses-0-content"] = "Hello, curator"
    assert admin_client.post(url, data).status_code == 302
    assert [(v.by, v.what) for v in versions() if v.number > before] == [
        ("admin", 'changed rule "greet"')
    ]


def test_admin_moves_bulk_actions_deletes_and_defaults_are_kept_by_the_curator(
    admin_client: Client, rules: None
) -> None:
    before = newest().number
    greet = Rule.objects.get(name="greet").pk
    admin_client.post(f"/admin/staticagents/rule/{greet}/move/down/")
    admin_client.post(
        "/admin/staticagents/rule/",
        {"action": "disable_rules", "_selected_action": [greet]},
    )
    catch_all = Rule.objects.get(name="catch-all").pk
    admin_client.post(f"/admin/staticagents/rule/{catch_all}/delete/", {"post": "yes"})
    admin_client.post("/admin/staticagents/defaults/1/change/", {"confidence": "low"})
    admin_client.post(
        "/admin/staticagents/rule/",
        {"action": "delete_selected", "_selected_action": [greet], "post": "yes"},
    )
    assert [(v.by, v.what) for v in versions() if v.number > before] == [
        ("admin", 'moved rule "greet" down (to #2)'),
        ("admin", 'disabled rule "greet"'),
        ("admin", 'deleted rule "catch-all"'),
        ("admin", "set the defaults"),
        ("admin", 'deleted rule "greet"'),
    ]


def test_an_upload_is_one_version_by_the_curator_and_a_dry_run_none(
    admin_client: Client, rules: None
) -> None:
    before = newest().number
    text = yaml.safe_dump({"rules": [{"name": "uploaded", "response": {"content": "up"}}]})
    assert upload(admin_client, text, dry_run="on").status_code == 200
    assert upload(admin_client, text).status_code == 302
    assert replace(admin_client, text).status_code == 302
    assert [(v.by, v.what) for v in versions() if v.number > before] == [
        ("admin", "imported 1 rule (merge)"),
        ("admin", "imported 1 rule (replace)"),
    ]


def test_the_versions_are_listed_newest_first_and_linked_from_the_rule_list(
    admin_client: Client, rules: None
) -> None:
    set_fallback(document={"content": "Changed"}, by="grace")
    assert f'href="{VERSIONS}"' in admin_client.get("/admin/staticagents/rule/").content.decode()
    page = admin_client.get(VERSIONS)
    assert page.status_code == 200
    listed = [(v.number, v.by, v.what) for v in page.context["cl"].result_list]
    assert listed == [(v.number, v.by, v.what) for v in reversed(versions())]
    assert listed[0][1:] == ("grace", "set the fallback")
    html = page.content.decode()
    assert "grace" in html and "set the fallback" in html
    assert f'href="{VERSIONS}add/"' not in html  # read-only: nothing to add


def test_a_version_page_shows_what_it_changed_field_by_field(
    admin_client: Client, rules: None
) -> None:
    update_rule(
        name="greet", document=validate_part(RuleSpec, {"response": {"content": "<b>Yo</b>"}})
    )
    delete_rule(name="catch-all")
    changed = newest().number - 1
    html = admin_client.get(f"{VERSIONS}{changed}/change/").content.decode()
    assert f'<a href="{VERSIONS}{changed - 1}/change/">version {changed - 1}</a>' in html
    assert "changed rule “greet”" in html
    assert (
        '<td class="diff-field">response.content</td><td class="diff-old">Hi</td>'
        '<td class="diff-new">&lt;b&gt;Yo&lt;/b&gt;</td>'
    ) in html
    assert "catch-all" not in html.split("version-diff")[1]  # the next version removed it
    removed = admin_client.get(f"{VERSIONS}{changed + 1}/change/").content.decode()
    assert "removed rule “catch-all”" in removed
    assert '<td class="diff-old">Anything</td><td class="diff-new">—</td>' in removed


def test_the_first_version_is_compared_with_nothing_and_a_pruned_predecessor_is_said(
    admin_client: Client, rules: None, settings: Any
) -> None:
    first = admin_client.get(f"{VERSIONS}1/change/").content.decode()
    assert "Compared with an empty ruleset" in first and "added rule “greet”" in first
    settings.STATIC_AGENTS_VERSIONS_KEEP = 1
    set_fallback(document=None)
    page = admin_client.get(f"{VERSIONS}{newest().number}/change/").content.decode()
    assert "The version before it is no longer kept" in page


def test_restoring_from_the_admin_asks_first_then_restores_as_a_new_version(
    admin_client: Client, rules: None
) -> None:
    first = newest()
    update_rule(name="greet", document=validate_part(RuleSpec, {"response": {"content": "Yo"}}))
    page = admin_client.get(f"{VERSIONS}{first.number}/change/").content.decode()
    restore_url = f"{VERSIONS}{first.number}/restore/"
    assert f'href="{restore_url}"' in page and "Restore this version" in page

    confirmation = admin_client.get(restore_url)
    html = confirmation.content.decode()
    assert confirmation.status_code == 200
    assert 'method="post"' in html and "csrfmiddlewaretoken" in html
    assert '<td class="diff-old">Yo</td><td class="diff-new">Hi</td>' in html
    assert export_document()["rules"][0]["response"] == {"content": "Yo"}  # asked, not done

    done = admin_client.post(restore_url)
    assert done.status_code == 302 and done["Location"] == VERSIONS
    assert export_document() == first.document()
    assert (newest().by, newest().what) == ("admin", f"restored version {first.number}")
    messages = [str(m) for m in admin_client.get(VERSIONS).context["messages"]]
    assert messages == [
        f"Restored version {first.number}: the rules are version {newest().number}."
    ]


def test_restoring_in_the_admin_needs_a_csrf_token(rules: None, admin_user: Any) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(admin_user)
    first = newest().number
    set_fallback(document=None)
    assert browser.post(f"{VERSIONS}{first}/restore/").status_code == 403
    assert newest().what == "removed the fallback"


def staff(django_user_model: Any, name: str, *codenames: str) -> Client:
    user = django_user_model.objects.create_user(name, password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    browser = Client()
    browser.force_login(user)
    return browser


def test_a_curator_who_may_not_replace_the_rules_sees_versions_but_cannot_restore(
    rules: None, django_user_model: Any
) -> None:
    reader = staff(django_user_model, "reader", "view_rulesetversion", "view_rule")
    number = newest().number
    page = reader.get(f"{VERSIONS}{number}/change/")
    assert page.status_code == 200 and "Restore this version" not in page.content.decode()
    assert reader.get(f"{VERSIONS}{number}/restore/").status_code == 403
    assert reader.post(f"{VERSIONS}{number}/restore/").status_code == 403
    stranger = staff(django_user_model, "stranger", "add_rule", "change_rule", "delete_rule")
    assert stranger.get(VERSIONS).status_code == 403
    assert stranger.post(f"{VERSIONS}{number}/restore/").status_code == 403
    assert newest().number == number


# -- the control API ---------------------------------------------------------------------


def test_control_api_writes_are_kept_as_the_control_api_or_the_staff_user(
    rules: None, django_user_model: Any
) -> None:
    before = newest().number
    created = control(
        "post",
        "/rules?place=top",
        data={"name": "fresh", "response": {"content": "new"}},
        content_type="application/json",
    )
    assert created.status_code == 201
    text = yaml.safe_dump({"rules": [{"name": "fresh", "response": {}}]})
    assert control("put", "/fixture", data=text, content_type="application/yaml").status_code == 200
    assert [(v.by, v.what) for v in versions() if v.number > before] == [
        ("control API", 'added rule "fresh"'),
        ("control API", "imported 1 rule (replace)"),
    ]
    ops = staff(django_user_model, "ops", "view_rule", "change_rule")
    patched = ops.patch(
        "/control/rules/fresh", {"response": {"content": "p"}}, content_type="application/json"
    )
    assert patched.status_code == 200, patched.content
    assert (newest().by, newest().what) == ("ops", 'changed rule "fresh"')


def test_the_control_api_lists_versions_newest_first_in_pages(rules: None) -> None:
    for i in range(4):
        set_fallback(document={"content": f"f{i}"}, by="grace")
    page = control("get", "/versions?page_size=2").json()
    assert page["count"] == 5
    assert [v["number"] for v in page["results"]] == [5, 4]
    assert page["results"][0] == {
        "number": 5,
        "created_at": page["results"][0]["created_at"],
        "by": "grace",
        "what": "set the fallback",
    }
    rest = control("get", page["next"].split("/control", 1)[1]).json()
    assert [v["number"] for v in rest["results"]] == [3, 2]


def test_the_control_api_serves_a_versions_document_as_json_or_yaml(rules: None) -> None:
    number = newest().number
    set_fallback(document=None)
    as_json = control("get", f"/versions/{number}")
    assert as_json.status_code == 200 and as_json["Content-Type"] == "application/json"
    assert as_json.json() == RulesetVersion.objects.get(number=number).document()
    assert as_json.json()["fallback"] == {"content": "No rule matched"}
    as_yaml = control("get", f"/versions/{number}?format=yaml")
    assert as_yaml["Content-Type"].startswith("application/yaml")
    assert yaml.safe_load(as_yaml.content) == as_json.json()
    assert load_fixture(as_yaml.content)["rules"][0]["name"] == "greet"  # a valid fixture


def test_the_control_api_diffs_a_version_with_the_one_before(rules: None) -> None:
    update_rule(name="greet", document=validate_part(RuleSpec, {"response": {"content": "Yo"}}))
    number = newest().number
    diff = control("get", f"/versions/{number}/diff").json()
    assert diff == {
        "number": number,
        "against": number - 1,
        "changes": {
            "defaults": [],
            "fallback": [],
            "rules": [
                {
                    "name": "greet",
                    "change": "changed",
                    "fields": [
                        {"field": "match.query", "old": "(?i)hello", "new": None},
                        {"field": "response.content", "old": "Hi", "new": "Yo"},
                    ],
                }
            ],
        },
    }
    assert control("get", "/versions/1/diff").json()["against"] == 0


def test_the_control_api_restores_a_version_and_export_gives_it_back(rules: None) -> None:
    number = newest().number
    delete_rules(names=["greet", "script"])
    restored = control("post", f"/versions/{number}/restore")
    assert restored.status_code == 200
    assert restored.json() == {"restored": number, "version": number + 2}
    exported = control("get", "/fixture?format=json").json()
    assert exported == RulesetVersion.objects.get(number=number).document()
    assert (newest().by, newest().what) == ("control API", f"restored version {number}")
    again = control("post", f"/versions/{number}/restore").json()
    assert again == {"restored": number, "version": None}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/versions/999"),
        ("get", "/versions/999/diff"),
        ("post", "/versions/999/restore"),
        ("get", "/versions/99999999999999999999999"),
    ],
)
def test_an_unknown_version_is_a_404_naming_it(rules: None, method: str, path: str) -> None:
    response = control(method, path)
    number = path.split("/")[2]
    assert response.status_code == 404
    assert response.json()["errors"][0]["message"] == f"no version {number} is kept"


def test_a_bad_format_or_parameter_is_a_400(rules: None) -> None:
    assert control("get", "/versions/1?format=xml").json()["errors"][0]["path"] == "format"
    assert control("get", "/versions?unknown=1").status_code == 400
    assert control("get", "/versions?cursor=cj0xJnA9eHl6").status_code == 404  # p=xyz


def test_the_control_api_versions_need_the_token_or_the_permissions(
    rules: None, django_user_model: Any
) -> None:
    number = newest().number
    set_fallback(document=None)
    anonymous = Client()
    assert anonymous.get("/control/versions").status_code == 401
    assert anonymous.post(f"/control/versions/{number}/restore").status_code == 401
    reader = staff(django_user_model, "reader", "view_rulesetversion")
    assert reader.get("/control/versions").status_code == 200
    assert reader.get(f"/control/versions/{number}/diff").status_code == 200
    refused = reader.post(f"/control/versions/{number}/restore")
    assert refused.status_code == 403
    assert "add_rule, change_rule, delete_rule" in refused.json()["errors"][0]["message"]
    nobody = staff(django_user_model, "nobody")
    assert nobody.get(f"/control/versions/{number}").status_code == 403
    assert newest().what == "removed the fallback"
    writer = staff(django_user_model, "writer", "add_rule", "change_rule", "delete_rule")
    assert writer.post(f"/control/versions/{number}/restore").status_code == 200
    assert (newest().by, newest().what) == ("writer", f"restored version {number}")


def test_the_versions_routes_are_in_the_openapi_schema(client: Client) -> None:
    schema = yaml.safe_load(client.get("/api/schema/").content)
    paths = schema["paths"]
    assert {"get"} <= set(paths["/control/versions/"])
    assert "get" in paths["/control/versions/{number}/"]
    assert "get" in paths["/control/versions/{number}/diff/"]
    assert "post" in paths["/control/versions/{number}/restore/"]


# -- the command ------------------------------------------------------------------------


def test_the_import_command_keeps_one_version_by_the_command(rules: None, tmp_path: Path) -> None:
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"rules": [{"name": "cmd", "response": {"content": "c"}}]}))
    before = newest().number
    call_command("import_fixture", str(path), "--merge", stdout=io.StringIO())
    call_command("import_fixture", str(path), "--dry-run", stdout=io.StringIO())
    assert [(v.by, v.what) for v in versions() if v.number > before] == [
        ("command", "imported 1 rule (merge)")
    ]
