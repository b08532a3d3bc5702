"""The kit's service answers its first replies without importing what they do not need.

The service runs as the kit runs it, with one addition made before it starts: on
SIGUSR1 it writes the names in ``sys.modules`` to a file. No timing is judged, only
which modules were loaded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from websockets.sync.client import connect

from staticagents.testing.server import StaticAgentsServer

# python -c RECORDER <file> serve ...: `python -m staticagents serve ...`, answering SIGUSR1.
RECORDER = """
import os, runpy, signal, sys
target = sys.argv.pop(1)
def record(signum, frame):
    with open(target + ".part", "w") as out:
        out.write("\\n".join(sorted(sys.modules)))
    os.replace(target + ".part", target)
signal.signal(signal.SIGUSR1, record)
runpy.run_module("staticagents", run_name="__main__", alter_sys=True)
"""


class RecordingServer(StaticAgentsServer):
    """The kit's service, which lists its loaded modules when asked (``loaded_modules``)."""

    def command(self) -> list[str]:
        python, isolated, module, package, *arguments = super().command()
        assert (isolated, module, package) == ("-P", "-m", "staticagents")
        return [python, "-P", "-c", RECORDER, str(self.workdir / "modules"), *arguments]

    def loaded_modules(self) -> set[str]:
        listing = self.workdir / "modules"
        listing.unlink(missing_ok=True)
        assert self.pid is not None
        os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + 30
        probe = self.client(session="recorder")
        while not listing.exists():  # the handler runs once the event loop wakes
            assert time.monotonic() < deadline, "the service did not list its modules"
            probe.counters()
            time.sleep(0.02)
        return set(listing.read_text().split("\n"))


# Loaded at the first request that needs them, never for a reply or a control call.
HEAVY = (
    "drf_spectacular.views",  # the OpenAPI schema and its documentation page
    "drf_spectacular.generators",
    "drf_spectacular.plumbing",
    "staticagents.openapi",
    "staticagents.control.schema",
    "staticagents.admin",  # the admin's own modules and forms
    "staticagents.forms",
    "django.contrib.admin.forms",
    "django.contrib.auth.admin",
    "markdown_it",  # the admin's Try-it preview
    "staticagents.dialects.galaxy.urls",  # the Galaxy API's DRF views (its replies are lean)
    "psycopg",  # PostgreSQL's driver, on SQLite (DRF's compat asks for it)
    "django.contrib.postgres",
    "requests",  # DRF's compat: its own test client
    "pygments",  # DRF's compat: the browsable API's highlighting
    "uritemplate",  # DRF's compat: its own OpenAPI generator
    "httpx",  # the upstreams' client: a service that proxies nothing
    "staticagents.dialects.adk.routes",  # the reply routes after OpenAI's (asgi.LATER_SEGMENTS)
    "staticagents.dialects.anthropic.routes",
    "staticagents.dialects.embeddings.routes",
    "staticagents.dialects.responses.routes",
    "staticagents.dialects.galaxy.routes",
    "staticagents.dialects.galaxy.stream",
    "staticagents.dialects.adk.sessions",
    "staticagents.dialects.galaxy.wire",  # its pydantic bodies: with its routes or its errors
    "staticagents.dialects.websocket",  # the WebSocket routes (asgi.WebSocketApplication)
    "staticagents.control.live",
    "staticagents.serving.websocket_protocol",  # uvicorn's, at the first upgrade
    "websockets",
    "importlib.metadata",  # websockets' and the version's (`--version`, the front door)
    "watchfiles",  # uvicorn's --reload
    "pydantic",  # the fixture schema's models: at the first validation (document.terms)
    "staticagents.document.schema",
    "staticagents.document.files",  # the fixture files: at the first fixture read or write
    "yaml",  # theirs, and DRF's compat's (its own OpenAPI renderer)
    "regex",  # the timed engine, for a rule's pattern RE2 cannot run (core.regexes)
    "staticagents.proxying",  # the upstreams' client: for a proxied agent type
    "staticagents.replying.proxied",
    "staticagents.dialects.llm.forward",
    "staticagents.document.diff",  # the versions' differences: their pages only
)
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(f"{n}.") for n in names))


def test_the_first_replies_import_no_schema_admin_other_dialect_or_optional_driver(
    tmp_path: Path,
) -> None:
    with RecordingServer(tmp_path) as server:  # started: its control API answered
        server.client().counters()
        httpx.post(f"{server.url}/v1/chat/completions", json=CHAT).raise_for_status()
        first = server.loaded_modules()
        # What the first replies did need is listed, so an absence means something.
        assert {"staticagents.asgi", "staticagents.control.views", "rest_framework.views"} <= first
        assert loaded(first, HEAVY) == []

        # The schema and the fixture files, once a script is validated and a fixture read.
        kit = server.client(session="later")
        kit.replies("scripted")
        scripted = server.loaded_modules()  # validated (the schema), with no YAML read
        assert "staticagents.document.schema" in scripted and "yaml" not in scripted
        kit.install({"rules": [{"match": {"query": "(?<=x)y"}, "response": {"content": "z"}}]})
        installed = server.loaded_modules()  # its snapshot: a lookbehind takes the timed engine
        assert {"staticagents.document.files", "regex"} <= installed

        # Each is there once asked for: the schema (its descriptions included) and the admin.
        schema = httpx.get(f"{server.url}/api/schema/").raise_for_status().text
        assert "ControlErrors" in schema and "/api/ai/agents/query" in schema
        assert "Static Agents" in httpx.get(f"{server.url}/admin/login/").raise_for_status().text
        # The other dialects' replies, once one is asked for (Anthropic's here).
        message = {"model": "m", "max_tokens": 5, "messages": CHAT["messages"]}
        httpx.post(f"{server.url}/v1/messages", json=message).raise_for_status()
        # The WebSocket's routes, once one connects.
        with connect(server.url.replace("http://", "ws://") + "/ws/chat/") as socket:
            socket.send('{"query": "hello"}')
            while json.loads(socket.recv(timeout=30))["type"] != "done":
                pass
        later = server.loaded_modules()
    assert {"drf_spectacular.views", "staticagents.control.schema", "staticagents.admin"} <= later
    assert {"staticagents.dialects.anthropic.routes", "staticagents.dialects.adk.routes"} <= later
    assert {"staticagents.dialects.websocket.consumer", "staticagents.control.live"} <= later
    assert {"staticagents.serving.websocket_protocol", "websockets"} <= later
    assert {"pydantic", "staticagents.document.schema", "staticagents.document.files"} <= later


def test_the_admins_checks_discover_its_modules_that_start_up_leaves_out() -> None:
    code = (
        "import sys, django\n"
        "from django.core import checks\n"
        "django.setup()\n"
        "assert 'staticagents.admin' not in sys.modules, 'discovered at start-up'\n"
        "assert checks.run_checks(tags=['admin']) == []\n"
        "from django.contrib import admin\n"
        "from staticagents.models import Rule\n"
        "assert admin.site.is_registered(Rule)\n"
    )
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "staticagents.settings"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_kits_client_imports_neither_httpx_nor_django() -> None:
    code = (
        "import sys\n"
        "import staticagents.testing.client\n"
        "loaded = {'httpx', 'django', 'click', 'rich', 'pygments'} & set(sys.modules)\n"
        "assert not loaded, sorted(loaded)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    environment = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run(
        [sys.executable, "-P", "-c", code], env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
