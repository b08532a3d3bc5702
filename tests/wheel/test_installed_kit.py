"""The testing kit as a user gets it: the built wheel installed into a fresh environment.

Run by ``.ci/wheel-check`` from a directory outside the checkout, so only the
installed package is importable; the main suite does not collect this
directory. Only public API is used: the plugin's fixtures (loaded through the
``pytest11`` entry point), the client and the assertion helpers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from importlib import metadata, resources
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import staticagents
from staticagents.testing.assertions import (
    assert_no_credentials,
    assert_system_prompt,
    assert_tool_result_sent,
)
from staticagents.testing.client import StaticAgentsClient, tool_call

API_KEY = "sk-proj-wheelcheck0123456789abcdefghij"
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def weather_agent(base_url: str, headers: dict[str, str], question: str) -> str:
    """An OpenAI-SDK agent: ask the model, run the tools it calls, return its answer."""
    client = openai.OpenAI(
        base_url=base_url, api_key=API_KEY, default_headers=headers, max_retries=0
    )
    messages: list[Any] = [
        {"role": "system", "content": "You are a weather assistant."},
        {"role": "user", "content": question},
    ]
    for _ in range(4):
        reply = client.chat.completions.create(
            model="gpt-4o", messages=messages, tools=[WEATHER_TOOL]
        )
        message = reply.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            city = json.loads(call.function.arguments)["city"]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"{city}: 21C"})
    raise AssertionError("the agent never answered")


def test_the_kit_is_the_installed_wheel(request: pytest.FixtureRequest) -> None:
    site_packages = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert Path(staticagents.__file__).resolve().is_relative_to(site_packages)
    plugin = request.config.pluginmanager.get_plugin("static_agents")  # the pytest11 name
    assert plugin is not None and plugin.__name__ == "staticagents.testing.plugin"
    package = resources.files("staticagents")
    for bundled in (
        "data/demo.yml",
        "templates/admin/staticagents/rule/change_list.html",
        "templates/staticagents/widgets/items.html",
        "static/staticagents/edit.css",
    ):
        assert package.joinpath(bundled).is_file(), bundled


@pytest.mark.static_agents_fixture("agent.yml")
def test_an_openai_sdk_agent_runs_its_tool_loop(
    static_agents: StaticAgentsClient, openai_base_url: str, static_agents_headers: dict[str, str]
) -> None:
    answer = weather_agent(openai_base_url, static_agents_headers, "What is the weather?")

    assert answer == "Forecast: Paris: 21C"
    sent = static_agents.requests()
    assert [request.rule for request in sent] == ["ask-for-the-tool", "report"]
    assert_tool_result_sent(sent, call_id="call_weather", contains="21C")
    assert_system_prompt(sent, contains="weather assistant", every=True)
    assert_no_credentials(sent, secrets=[API_KEY])
    assert static_agents.counters().rules == {"ask-for-the-tool": 1, "report": 1}


def test_a_pydantic_ai_agent_follows_a_scripted_conversation(
    static_agents: StaticAgentsClient, openai_base_url: str, static_agents_headers: dict[str, str]
) -> None:
    static_agents.replies(
        tool_call("tide_table", {"harbour": "Brest"}, id="call_tides"),
        "High tide in Brest at 12:40.",
    )
    # The SDK client carries the session header; pydantic-ai sends every request through it.
    sdk = openai.AsyncOpenAI(
        base_url=openai_base_url, api_key=API_KEY, default_headers=static_agents_headers
    )
    provider = OpenAIProvider(openai_client=sdk)
    agent = Agent(OpenAIChatModel("gpt-4o", provider=provider), system_prompt="You know tides.")
    looked_up: list[str] = []

    @agent.tool_plain
    def tide_table(harbour: str) -> str:
        """The tide table of a harbour."""
        looked_up.append(harbour)
        return f"{harbour}: high 12:40"

    result = agent.run_sync("When is high tide in Brest?")

    assert result.output == "High tide in Brest at 12:40."
    assert looked_up == ["Brest"]
    assert_tool_result_sent(static_agents, call_id="call_tides", contains="high 12:40")
    assert_system_prompt(static_agents, equals="You know tides.", every=True)
    assert_no_credentials(static_agents, secrets=[API_KEY])


def test_a_test_without_a_fixture_gets_the_bundled_demo_in_a_session_of_its_own(
    static_agents: StaticAgentsClient, openai_base_url: str, static_agents_headers: dict[str, str]
) -> None:
    assert static_agents.requests() == []  # the earlier tests' requests are in their sessions
    client = openai.OpenAI(
        base_url=openai_base_url, api_key="x", default_headers=static_agents_headers
    )
    messages: Any = [{"role": "user", "content": "say this back"}]
    answer = client.chat.completions.create(model="gpt-4o", messages=messages)
    assert answer.choices[0].message.content == "say this back"  # the demo's echo rule
    assert [request.rule for request in static_agents.requests()] == ["echo"]


def test_the_command_keeps_its_database_out_of_site_packages(tmp_path: Path) -> None:
    command = Path(sys.executable).parent / "static-agents"
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
    }
    checked = subprocess.run(
        [command, "check_fixture", Path(__file__).parent / "agent.yml"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stderr
    subprocess.run([command, "migrate", "-v0"], cwd=tmp_path, env=environment, check=True)
    assert (tmp_path / "static-agents.sqlite3").is_file()
    package = Path(staticagents.__file__).parent
    assert not list(package.parent.glob("*.sqlite3")) and not list(package.glob("*.sqlite3"))


def run_command(
    arguments: list[str], cwd: Path, **variables: str
) -> subprocess.CompletedProcess[str]:
    """The installed ``static-agents`` command, on its own settings, with ``variables`` set."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")
        and not name.startswith("STATIC_AGENTS_")
    }
    command = Path(sys.executable).parent / "static-agents"
    return subprocess.run(
        [command, *arguments],
        cwd=cwd,
        env={**environment, **variables},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_distribution_installs_no_package_but_staticagents() -> None:
    files = metadata.files("static-agents") or []
    installed = {file.parts[0] for file in files if file.parts[0] != ".."}  # ..: bin/static-agents
    assert {name for name in installed if not name.endswith(".dist-info")} == {"staticagents"}
    assert importlib.util.find_spec("project") is None


def test_the_command_lists_the_service_commands_and_passes_its_checks(tmp_path: Path) -> None:
    helped = run_command(["--help"], tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: static-agents <command>")
    for command in ("serve", "token", "import_fixture", "export_fixture", "check_fixture"):
        assert f"\n  {command} " in helped.stdout, command

    checked = run_command(["check"], tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout


def test_a_malformed_variable_stops_the_command_in_one_line(tmp_path: Path) -> None:
    checked = run_command(["check"], tmp_path, DEBUG="tru")
    assert checked.returncode == 1
    assert checked.stderr == (
        "static-agents: DEBUG='tru' is not a boolean: true or false, yes or no, on or off, 1 or 0 "
        "(default: false)\n"
    )
