"""Static Agents in a subprocess: a free port, its own SQLite database, a random token.

The pytest plugin starts one per test session; anything else can too::

    with StaticAgentsServer(Path(tmp)) as server:
        client = server.client()

The service runs as ``python -m staticagents serve`` with the working
directory set to a temporary directory and a cleaned environment, so neither a
user's own top-level ``project`` package nor their Django settings, database
or Redis can leak into it.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import staticagents
from staticagents.testing.keys import new_session_key

# The client (and urllib3 with it) is imported once the service is spawned, so that
# its import runs beside the service's start rather than before it (bench/README.md, the
# testing kit, step 22).
if TYPE_CHECKING:
    from staticagents.testing.client import StaticAgentsClient

# Variables of the user's own environment that would point the service at their
# settings, database, channel layer or code; STATIC_AGENTS_* are dropped as well.
FOREIGN_VARIABLES = frozenset(
    {
        "DJANGO_SETTINGS_MODULE",
        "DATABASE_URL",
        "REDIS_URL",
        "ALLOWED_HOSTS",
        "CSRF_TRUSTED_ORIGINS",
        "DEBUG",
        "HOST",
        "PORT",
        "PYTHONPATH",
        "PYTHONSTARTUP",
    }
)
DEFAULT_FIXTURE = Path(staticagents.__file__).resolve().parent / "data" / "demo.yml"
START_ATTEMPTS = 3  # a free port can be taken between choosing it and binding it
# Migrated empty databases (``serve --template-dir``): a new service migrates nothing.
TEMPLATE_DIR = Path(tempfile.gettempdir()) / "static-agents-templates"
# Where the service keeps its bytecode when the environment says not to write it beside
# the source: else each start compiles every module of the service again.
BYTECODE_DIR = Path(tempfile.gettempdir()) / "static-agents-bytecode"


class ServerFailed(RuntimeError):
    """The service did not start (or stopped); the message ends with its log."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StaticAgentsServer:
    """One Static Agents service in a subprocess, owned by the caller.

    ``workdir`` holds its database and log; ``environment`` adds variables
    (``STATIC_AGENTS_WORD_DELAY_MS``, ...) to the cleaned environment.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        environment: Mapping[str, str] | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        self.workdir = workdir
        self.token = new_session_key("control")
        self.environment = dict(environment or {})
        self.startup_timeout = startup_timeout
        self.port = 0
        self.log_path = workdir / "server.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The service's process id while it runs (one worker serves in this very process)."""
        return self._process.pid if self._process is not None else None

    def client(self, session: str | None = None) -> StaticAgentsClient:
        """A client for this service's control API, on ``session`` (default: a new one)."""
        from staticagents.testing.client import StaticAgentsClient

        return StaticAgentsClient(self.url, token=self.token, session=session)

    def launch(self) -> None:
        """Start the service's process, without waiting for it (``start`` waits)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self._spawn()
        atexit.register(self.stop)

    def start(self) -> None:
        """Start the service (unless ``launch`` did) and wait until its control API answers."""
        if self._process is None:
            self.launch()
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._wait_until_ready()
                return
            except ServerFailed:
                self.stop()
                if attempt == START_ATTEMPTS or "address already in use" not in self.log():
                    raise
                self.launch()

    def stop(self) -> None:
        """Stop the service (idempotent); kill it when it does not stop within 10 s."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def log(self) -> str:
        """Everything the service printed so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def command(self) -> list[str]:
        # -P: the working directory is not put on sys.path, whatever it holds.
        python = [sys.executable, "-P", "-m", "staticagents"]
        port = str(self.port)
        serve = ["serve", "--host", "127.0.0.1", "--port", port, "--log-level", "warning"]
        # --skip-checks: Django's own checks import every URL and view (half a second);
        # the service's checks of its settings still run.
        return [*python, *serve, "--template-dir", str(TEMPLATE_DIR), "--skip-checks"]

    def child_environment(self) -> dict[str, str]:
        environment = {
            name: value
            for name, value in os.environ.items()
            if name not in FOREIGN_VARIABLES and not name.startswith("STATIC_AGENTS_")
        }
        if environment.pop("PYTHONDONTWRITEBYTECODE", ""):
            environment.setdefault("PYTHONPYCACHEPREFIX", str(BYTECODE_DIR))
        environment.update(
            DJANGO_SETTINGS_MODULE="staticagents.settings",
            DATABASE_URL=f"sqlite:///{self.workdir / 'db.sqlite3'}",
            STATIC_AGENTS_CONTROL_TOKEN=self.token,
            PYTHONUNBUFFERED="1",
        )
        source_root = Path(staticagents.__file__).resolve().parents[1]
        if source_root.name not in ("site-packages", "dist-packages"):
            # Run from a checkout (not installed): the service runs the same code.
            environment["PYTHONPATH"] = str(source_root)
        environment.update(self.environment)
        return environment

    def _spawn(self) -> None:
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self.command(),
                cwd=self.workdir,
                env=self.child_environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _wait_until_ready(self) -> None:
        from staticagents.testing.client import ServiceUnreachable

        deadline = time.monotonic() + self.startup_timeout
        with self.client(session="readiness") as probe:
            while True:
                if self._process is None or self._process.poll() is not None:
                    raise ServerFailed(f"Static Agents exited while starting:\n{self.log()}")
                try:
                    probe.counters(every_session=True)
                    return
                except ServiceUnreachable:
                    pass
                if time.monotonic() > deadline:
                    raise ServerFailed(
                        f"Static Agents did not answer at {self.url} within "
                        f"{self.startup_timeout:.0f} s:\n{self.log()}"
                    )
                time.sleep(0.01)

    def __enter__(self) -> StaticAgentsServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
