"""The service xdist's workers share (``--static-agents-shared``), met through its state file.

The plugin's own run under ``pytest -n 2`` is in ``test_plugin.py``; here, the
workers are ``SharedService`` objects of this process, and a crashed worker is
a process that has exited.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from staticagents.testing.client import ServiceUnreachable, StaticAgentsError
from staticagents.testing.shared import SessionOnlyClient, SharedService, installs_rules


def dead_process_id() -> int:
    exited = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(exited.stdout)


def test_the_last_live_worker_stops_the_service_though_another_crashed(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    first = SharedService(tmp_path, "gw0")
    server = first.join()
    assert first.started is not None
    request.addfinalizer(first.started.stop)  # whatever happens below
    state = json.loads(first.state_path.read_text())
    state["workers"]["gw1"] = dead_process_id()  # joined, then crashed without leaving
    first.state_path.write_text(json.dumps(state))

    second = SharedService(tmp_path, "gw2")
    assert second.join().url == server.url
    second.leave()
    assert server.client().counters(every_session=True).requests == 0  # gw0 still uses it

    first.leave()
    with pytest.raises(ServiceUnreachable):
        server.client().counters(every_session=True)
    assert not first.state_path.exists()


def test_a_test_on_the_shared_rules_scripts_its_session_but_installs_no_rules() -> None:
    assert installs_rules({"rules": []}) and installs_rules("rules.yml")
    assert not installs_rules(["a scripted reply"]) and not installs_rules(None)
    client = SessionOnlyClient("http://127.0.0.1:9", token="t")
    with pytest.raises(StaticAgentsError, match="static_agents_fixture"):
        client.install({"rules": [{"name": "mine", "response": {"content": "M"}}]})
