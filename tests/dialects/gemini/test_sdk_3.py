"""google-genai 3.x, the major after the one google-adk pins, against the service.

3.x speaks ``/v1`` where 2.x speaks ``/v1beta``; the wire is otherwise the
same. The installed 2.x cannot sit beside 3.x in one environment, so 3.x is
installed (alone: its dependencies are 2.x's, already here) into a directory
put first on a subprocess's path, which runs ``sdk_probe.py``. Without PyPI the
test is skipped, except in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from staticagents.testing.client import StaticAgentsClient

PROBE = Path(__file__).with_name("sdk_probe.py")
RULES: dict[str, Any] = {
    "rules": [
        {
            "name": "call",
            "match": {"contains": "#tool", "tool_result": False},
            "response": {"tool_calls": [{"name": "lookup", "arguments": {"topic": "weather"}}]},
        },
        {
            "name": "report",
            "match": {"contains": "#tool", "tool_result": True},
            "response": {"template": True, "content": "lookup said: $tool_result"},
        },
        {
            "name": "fail",
            "match": {"contains": "#error"},
            "response": {"error": {"status": 429, "message": "slow down"}},
        },
        {"name": "echo", "response": {"template": True, "content": "$query"}},
    ]
}


@pytest.fixture(scope="module")
def genai_3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("google-genai-3")
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    install += ["--target", str(target), "google-genai>=3,<4"]
    done = subprocess.run(install, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        reason = f"google-genai 3.x could not be installed: {done.stderr.strip()[-500:]}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return target


@pytest.mark.static_agents_fixture(RULES)
def test_google_genai_3_speaks_v1_and_is_answered_alike(
    static_agents: StaticAgentsClient, genai_3: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(genai_3)}
    command = [sys.executable, str(PROBE), static_agents.gemini_base_url, static_agents.session]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)

    assert seen["version"].startswith("3.")
    assert seen["text"] == "hello"
    assert seen["call"] == ["lookup", {"topic": "weather"}]
    assert seen["reported"] == "lookup said: sunny"
    assert seen["stream"] == ["one ", "two"]
    assert seen["tokens"] == 3
    assert seen["models"] == ["models/static-agents"]
    assert seen["error"] == [429, "RESOURCE_EXHAUSTED"]
    prefix = f"/sessions/{static_agents.session}"
    routes = {entry.route.removeprefix(prefix).split("/")[1] for entry in static_agents.requests()}
    assert routes == {"v1"}
