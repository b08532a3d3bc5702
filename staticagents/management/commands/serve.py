"""``serve``: migrate, load a fixture, then serve HTTP and WebSocket with uvicorn.

In that order, each step only once the one before it worked: the options are
parsed (a bad one exits with status 2, nothing touched), Django's system checks
run (``--skip-checks``: only the service's own, ``staticagents.checks``, which
is how the testing kit starts it), the port is bound (a port in use stops it here,
before the database is touched or a control token created), then the database
is migrated, the fixture loaded, the token announced and "serving on" printed.

SIGTERM or SIGINT stops it within a few seconds: open streams send the rest of
their script at once and end with their dialect's end marker
(``serving.shutdown``), requests under way finish and their journal entries are
committed, and whatever still runs after ``SHUTDOWN_GRACE_SECONDS`` is cancelled.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from staticagents.checks import check_served_host
from staticagents.conf import settings
from staticagents.management.commands._database_template import (
    new_database,
    save_template,
    start_from_template,
)
from staticagents.models import Rule
from staticagents.optional import hidden_modules
from staticagents.services import COMMAND, ensure_control_token, import_fixture
from staticagents.serving.logs import FORMATS, LEVELS, log_config

# Once told to stop, requests still running after this long are cancelled.
SHUTDOWN_GRACE_SECONDS = 5
BACKLOG = 2048  # uvicorn's own


def port_number(text: str) -> int:
    if not (text.isascii() and text.isdigit() and int(text) <= 65535):
        message = f"{text!r} is not a port number, 0 to 65535 (--port, else $PORT)"
        raise argparse.ArgumentTypeError(message)
    return int(text)


def worker_count(text: str) -> int:
    if not (text.isascii() and text.isdigit() and int(text) >= 1):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of workers (1 or more)")
    return int(text)


class Command(BaseCommand):
    help = "Migrate, load a fixture and serve HTTP and WebSocket with uvicorn."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--host",
            default=os.environ.get("HOST", "127.0.0.1"),
            help="default: $HOST, else 127.0.0.1",
        )
        # A string default goes through `type` too, so a bad $PORT is refused like a bad --port.
        parser.add_argument(
            "--port",
            type=port_number,
            default=os.environ.get("PORT", "8000"),
            help="default: $PORT, else 8000",
        )
        parser.add_argument("--workers", type=worker_count, default=1, help="worker processes")
        parser.add_argument(
            "--fixture",
            default=None,
            help="fixture to load (replacing the rules); default: "
            "$STATIC_AGENTS_FIXTURE, else the bundled demo when no rules",
        )
        parser.add_argument(
            "--log-level",
            default="warning",
            choices=tuple(LEVELS),
            help="info and below: one access-log line per request on stdout",
        )
        parser.add_argument(
            "--log-format", default="text", choices=FORMATS, help="json: one object a line"
        )
        parser.add_argument(
            "--template-dir",
            type=Path,
            default=None,
            help="start a new SQLite database from a migrated copy kept here (made on first use)",
        )
        parser.add_argument(
            "--proxy-headers",
            action="store_true",
            help="trust X-Forwarded-For/-Proto from the proxy in front",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        import_rest_framework_lean()
        if options["skip_checks"]:  # Django's were skipped (they import every URL); not ours
            self.check(tags=["staticagents"])
        for warning in check_served_host(options["host"]):
            self.stderr.write(self.style.WARNING(str(warning)))
        listener = listening_socket(options["host"], options["port"])
        try:
            fixture = options["fixture"] or settings.STATIC_AGENTS_FIXTURE or None
            self.prepare_database(options["template_dir"], fixture)
            self.announce_control_token()
            host, port = listener.getsockname()[:2]
            base = f"http://{host}:{port}/"
            self.stdout.write(f"Static Agents serving on {base} ({options['workers']} worker(s))")
            self.announce_admin(base)
            self.stdout.flush()
            run_server(listener, options)
        finally:
            listener.close()

    def prepare_database(self, template_dir: Path | None, fixture: str | None) -> None:
        """Migrate, then load the fixture (``load_fixture``).

        With a template directory, a new database starts from a copy
        (``_database_template``): of one that holds the demo's rules already when
        the demo is what it would load (no fixture given), so the start neither
        validates nor imports them; else of one just migrated (nothing to
        migrate). A template missing is made from this start, at that point.
        """
        if template_dir is None or not new_database():
            call_command("migrate", interactive=False, verbosity=0)
            self.load_fixture(fixture)
            return
        demo = None if fixture is not None else Path(settings.STATIC_AGENTS_DEFAULT_FIXTURE)
        if demo is not None and start_from_template(template_dir, demo):
            self.stdout.write(f"{demo}: its rules were in the template ({template_dir})")
            return
        if not start_from_template(template_dir):
            call_command("migrate", interactive=False, verbosity=0)
            save_template(template_dir)
        self.load_fixture(fixture)
        if demo is not None:
            save_template(template_dir, demo)

    def announce_control_token(self) -> None:
        """Print the control API's token the first time serve creates it (shown only then)."""
        token = ensure_control_token(settings.STATIC_AGENTS_CONTROL_TOKEN)
        if token is not None:
            self.stdout.write(f"Control API token (created now, shown once): {token}")

    def announce_admin(self, base: str) -> None:
        """Where the admin is, and, until someone can log in to it, how to make its first user."""
        self.stdout.write(f"Admin: {base}admin/")
        if not User.objects.filter(is_staff=True, is_active=True).exists():
            # The same entry point as this process: a checkout's manage.py and the installed
            # command default to different databases.
            run = "python manage.py" if Path(sys.argv[0]).name == "manage.py" else "static-agents"
            self.stdout.write(
                f"No one can log in to the admin yet: create its first user with "
                f"`{run} createsuperuser`."
            )

    def load_fixture(self, path: str | None) -> None:
        if path is None:
            if Rule.objects.exists():
                return
            path = str(settings.STATIC_AGENTS_DEFAULT_FIXTURE)
        # Imported here: reading a fixture takes YAML and the schema (pydantic), which a start
        # from the database template does not (bench/README.md, the testing kit, step 23).
        from staticagents.management.commands._fixture_io import read_fixture

        result = import_fixture(document=read_fixture(path), by=COMMAND)
        self.stdout.write(f"{path}: {result.summary()}")


def import_rest_framework_lean() -> None:
    """Import DRF without what its ``compat`` module imports for features the service does
    not use: ``requests`` (DRF's own test client), ``pygments`` (the browsable API's code
    highlighting), ``uritemplate`` and ``yaml`` (DRF's own OpenAPI generator and its YAML
    renderer: drf-spectacular's import them themselves; YAML cost 10 ms, step 23) and,
    unless the database is PostgreSQL, ``django.contrib.postgres`` (model fields no model
    here has), which imports psycopg. All are optional there; together a fifth of the
    start-up's imports (bench/README.md, the testing kit, step 20).
    """
    names = ["requests", "pygments", "uritemplate", "yaml"]
    if django_settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        names.append("django.contrib.postgres")
    with hidden_modules(*names):
        import rest_framework.compat  # noqa: F401


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, or a CommandError saying why not.

    Connections that arrive before the server accepts them wait in its backlog.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = (exc.strerror or str(exc)).lower()
        raise CommandError(f"cannot listen on {host}:{port} (--host, --port): {reason}") from None
    sock.listen(BACKLOG)
    sock.set_inheritable(True)  # the worker processes serve it too
    return sock


def run_server(listener: socket.socket, options: dict[str, Any]) -> None:
    """Serve on ``listener`` until told to stop, with one process or several workers."""
    # uvicorn's package imports its --reload supervisor, whose watchfiles serve never uses
    # (uvicorn takes its plain one without it): 4 ms of start-up (bench/README.md, step 22).
    with hidden_modules("watchfiles"):
        import uvicorn
    from uvicorn.supervisors import Multiprocess

    from staticagents.serving.protocol import ServiceHttpProtocol, websocket_protocol

    workers = options["workers"]
    metrics_directory = None
    if workers > 1:  # the workers' metrics, summed at each scrape (serving.metrics)
        metrics_directory = tempfile.mkdtemp(prefix="static-agents-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_directory
    config = uvicorn.Config(
        "staticagents.asgi:served_application",
        factory=True,
        workers=workers,
        log_level=options["log_level"],
        log_config=log_config(options["log_level"], options["log_format"]),
        access_log=False,  # ours is serving.telemetry's
        lifespan="off",
        # Bytes uvicorn cannot parse get our JSON 400; a reply's head leaves with its body.
        http=ServiceHttpProtocol,
        ws=websocket_protocol,  # type: ignore[arg-type]  # a factory: a failed handshake too
        # X-Forwarded-* rewriting costs every request a middleware layer; a
        # deployment behind a proxy turns it on with --proxy-headers.
        proxy_headers=options["proxy_headers"],
        # A WebSocket message over the body limit is refused from its frame's header,
        # before it is read (close code 1009, "message too big"); uncompressed, since a
        # compressed frame is only known too big once inflated that far.
        ws_max_size=settings.STATIC_AGENTS_MAX_BODY_BYTES,
        ws_per_message_deflate=False,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
    )
    try:
        if workers > 1:
            Multiprocess(config, sockets=[listener]).run()
        else:
            uvicorn.Server(config).run(sockets=[listener])
    except KeyboardInterrupt:
        pass  # uvicorn raises the SIGINT again once it has stopped
    finally:
        if metrics_directory is not None:
            shutil.rmtree(metrics_directory, ignore_errors=True)
