"""The front door (/), the health (/health), the API documentation (/api/docs/) and serve's
start-up message."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client

from staticagents.front import service_version
from staticagents.models import RulesetState
from tests.conftest import free_port
from tests.test_scripting import ROOT, Served

RULES = """
rules:
  - {name: one, match: {query: one}, response: {content: "1"}}
  - {name: two, match: {query: two}, response: {content: "2"}}
  - {name: disabled, enabled: false, response: {content: "never"}}
"""


@pytest.fixture
def loaded(load_rules: Callable[[Any], Any]) -> None:
    load_rules(RULES)


def test_the_front_door_names_the_service_its_version_and_links_what_matters(
    client: Client, loaded: None
) -> None:
    response = client.get("/")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "<h1>Static Agents</h1>" in page
    assert f"version {service_version()}" in page and service_version() != "unknown"
    links = set(re.findall(r'href="([^"]+)"', page))
    assert {"/admin/", "/api/docs/", "/health", "/api/schema"} <= links
    version = RulesetState.objects.get(pk=1).version
    assert '<dd id="rules-loaded">2</dd>' in page  # the enabled ones
    assert f'<dd id="ruleset-version">{version}</dd>' in page


def test_health_reports_the_rules_loaded_and_the_ruleset_version(
    client: Client, loaded: None
) -> None:
    health = client.get("/health").json()
    version = RulesetState.objects.get(pk=1).version
    assert health == {
        "status": "ok",
        "version": service_version(),
        "rules": 2,
        "ruleset_version": version,
    }


@pytest.mark.django_db
def test_the_front_door_answers_only_reads() -> None:
    client = Client(enforce_csrf_checks=True)
    for path in ("/", "/health"):
        refused = client.post(path, "{}", content_type="application/json")
        assert refused.status_code == 404 and refused.json()["error"]
    assert client.get("/nowhere").json()["error"]  # other paths: still the JSON 404


@pytest.mark.django_db
def test_the_admin_view_site_link_goes_to_the_front_door(admin_client: Client) -> None:
    page = admin_client.get("/admin/").content.decode()
    assert '<a href="/">View site</a>' in page


@pytest.mark.django_db
def test_the_api_documentation_uses_local_assets_only(client: Client) -> None:
    response = client.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert any("swagger-ui" in source for source in sources)
    assert all(not source.startswith(("http:", "https:", "//")) for source in sources)
    assert "/api/schema" in page


def test_serve_names_the_admin_and_how_to_create_its_first_user(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "project.settings",
    }
    port = free_port()
    args = ["serve", "--port", str(port), "--log-level", "info"]
    served = Served([sys.executable, str(ROOT / "manage.py"), *args], env)
    try:
        served.wait_for("createsuperuser")
        assert f"Admin: http://127.0.0.1:{port}/admin/" in served.output
        # started from the checkout's manage.py: the same entry point, hence the same database
        assert "`python manage.py createsuperuser`" in served.output
        base = f"http://127.0.0.1:{port}"
        served.wait_for("Started server process")  # serve listens before it says so
        docs = httpx.get(f"{base}/api/docs/", timeout=30).text
        [asset] = re.findall(r'src="([^"]*swagger-ui-bundle\.js)"', docs)
        script = httpx.get(f"{base}{asset}", timeout=30)  # served by the service itself
        assert script.status_code == 200 and "SwaggerUIBundle" in script.text
    finally:
        served.stop()
