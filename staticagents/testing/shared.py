"""One service for every pytest-xdist worker (``pytest -n N --static-agents-shared``).

The workers meet in the directory they share (xdist's base temporary directory):
under a lock file, the first worker to need the service starts it and writes its
address, token and process id to a state file; the others read it from there
and add their names; the last one to leave (or the last live one, when a worker
crashed) stops it.

Sessions keep every test's scripts and journal apart, but the rules are the
service's own. So a test whose fixture installs rules holds the service alone
while it runs (an exclusive lock) and puts the demo rules back before it lets
go; every other test holds it shared, and may script its session (``replies``)
but not replace the rules. A writer waiting for the service stops new readers
at a turnstile, so a stream of scripted tests never starves it.

File locks are POSIX ``flock``: the option is refused where there is none.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from staticagents.testing.client import (
    FixtureSource,
    InstallResult,
    ServiceUnreachable,
    StaticAgentsClient,
    StaticAgentsError,
    new_session_key,
)
from staticagents.testing.server import DEFAULT_FIXTURE, StaticAgentsServer

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

STOP_SECONDS = 10.0


@contextlib.contextmanager
def locked(path: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold ``path``'s lock (shared or exclusive) for the block; other processes wait."""
    with path.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def installs_rules(fixture: FixtureSource | None) -> bool:
    """Whether a test's fixture replaces the rules (a list of replies only scripts a session)."""
    if fixture is None:
        return False
    return isinstance(fixture, str | os.PathLike) or not isinstance(fixture, Sequence)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


class SessionOnlyClient(StaticAgentsClient):
    """The client of a test that holds the shared service shared: its session is its own,
    the rules are every worker's."""

    def install(self, fixture: FixtureSource) -> InstallResult:
        if installs_rules(fixture):
            raise StaticAgentsError(
                "with --static-agents-shared the rules are every worker's: give the test its "
                "rules with @pytest.mark.static_agents_fixture (it then runs alone), or "
                "script its session with replies()"
            )
        return super().install(fixture)


class SharedService:
    """This worker's part in the service the workers share, kept in ``directory``."""

    def __init__(self, directory: Path, worker: str) -> None:
        if fcntl is None:
            raise RuntimeError("--static-agents-shared needs POSIX file locks (flock)")
        self.directory = directory
        self.worker = worker
        self.state_path = directory / "static-agents-shared.json"
        self.lock_path = directory / "static-agents-shared.lock"
        self.rules_lock = directory / "static-agents-rules.lock"
        self.turnstile = directory / "static-agents-turnstile.lock"
        self.server: StaticAgentsServer | None = None
        self.started: StaticAgentsServer | None = None  # when this worker started it

    def join(self) -> StaticAgentsServer:
        """The shared service, started now when no worker has it running."""
        with locked(self.lock_path):
            state = self._read()
            if state is None or not self._answers(state):
                state = self._start()
            state["workers"][self.worker] = os.getpid()
            self._write(state)
        self.server = self._attached(state)
        return self.server

    def leave(self) -> None:
        """Stop counting this worker; the last one out stops the service."""
        with locked(self.lock_path):
            state = self._read()
            if state is None:
                return
            state["workers"].pop(self.worker, None)
            # A worker that crashed never leaves: only the live ones keep the service.
            state["workers"] = {
                name: pid for name, pid in state["workers"].items() if process_alive(pid)
            }
            if state["workers"]:
                self._write(state)
                return
            self.state_path.unlink()
            self._stop(state)

    @contextlib.contextmanager
    def test(self, *, alone: bool) -> Iterator[None]:
        """Hold the service for one test: alone (its rules) or beside others."""
        with contextlib.ExitStack() as held:
            with locked(self.turnstile):  # a waiting writer holds it: no reader overtakes
                held.enter_context(locked(self.rules_lock, shared=not alone))
            yield

    def restore_demo_rules(self) -> None:
        """Put the demo rules back (a test that held the service alone leaves them so)."""
        assert self.server is not None
        with self.server.client(session=new_session_key("restore")) as client:
            client.install(DEFAULT_FIXTURE)

    def _start(self) -> dict[str, Any]:
        server = StaticAgentsServer(self.directory / f"static-agents-{self.worker}")
        server.start()
        atexit.unregister(server.stop)  # it outlives this worker while others use it
        self.started = server
        return {
            "port": server.port,
            "token": server.token,
            "pid": server.pid,
            "workdir": str(server.workdir),
            "workers": {},  # name: process id
        }

    def _attached(self, state: dict[str, Any]) -> StaticAgentsServer:
        if self.started is not None:
            return self.started
        server = StaticAgentsServer(Path(state["workdir"]))
        server.port, server.token = state["port"], state["token"]
        return server

    @staticmethod
    def _answers(state: dict[str, Any]) -> bool:
        url = f"http://127.0.0.1:{state['port']}"
        try:
            with StaticAgentsClient(url, token=state["token"], timeout=5) as probe:
                probe.counters(every_session=True)
        except StaticAgentsError:
            return False
        return True

    def _stop(self, state: dict[str, Any]) -> None:
        if self.started is not None:
            self.started.stop()
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(state["pid"], signal.SIGTERM)
        # Not this worker's child: wait until it no longer answers, then make sure.
        deadline = time.monotonic() + STOP_SECONDS
        url = f"http://127.0.0.1:{state['port']}"
        with StaticAgentsClient(url, token=state["token"], timeout=1) as probe:
            while time.monotonic() < deadline:
                try:
                    probe.counters(every_session=True)
                except ServiceUnreachable:
                    return
                time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.kill(state["pid"], signal.SIGKILL)

    def _read(self) -> dict[str, Any] | None:
        try:
            state: dict[str, Any] = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return None
        return state

    def _write(self, state: dict[str, Any]) -> None:
        partial = self.state_path.with_suffix(".partial")
        partial.write_text(json.dumps(state))
        partial.replace(self.state_path)
