"""How ``serve`` logs: uvicorn's lines and the access log, as text or JSON, never with a key.

``log_config`` is the ``logging.config`` dictionary uvicorn applies in each
worker. Every handler masks credentials that a line could carry in a query
string (uvicorn logs a WebSocket's path with its query: ``?api_key=…``), by the
same names the journal masks (``core.inquiry.is_credential_name``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson

from staticagents.core.inquiry import MASK, is_credential_name

LEVELS = {"critical": 50, "error": 40, "warning": 30, "info": 20, "debug": 10, "trace": 5}
FORMATS = ("text", "json")

_QUERY_PARAMETER = re.compile(r"([?&])([^=&#\s\"']+)=([^&#\s\"']*)")


def mask_query_credentials(text: str) -> str:
    """``text`` with the value of every query parameter named like a credential masked."""
    if "=" not in text:
        return text
    return _QUERY_PARAMETER.sub(_masked_parameter, text)


def _masked_parameter(found: re.Match[str]) -> str:
    separator, name = found.group(1), found.group(2)
    return f"{separator}{name}={MASK}" if is_credential_name(name) else found.group(0)


class MaskCredentials(logging.Filter):
    """Masks credentials in a record's message (see the module doc)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_query_credentials(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, and the message or the request's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        request = getattr(record, "request", None)
        if isinstance(request, dict):
            line.update(request)
        else:
            line["message"] = record.getMessage()
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line).decode()


def log_config(level: str, log_format: str) -> dict[str, Any]:
    """The logging configuration of ``serve --log-level level --log-format log_format``."""
    if log_format == "json":
        formatter: dict[str, Any] = {"()": "staticagents.serving.logs.JsonFormatter"}
    else:
        formatter = {"()": "uvicorn.logging.DefaultFormatter", "fmt": "%(levelprefix)s %(message)s"}
    handler = {"formatter": "line", "filters": ["credentials"], "class": "logging.StreamHandler"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"credentials": {"()": "staticagents.serving.logs.MaskCredentials"}},
        "formatters": {"line": formatter},
        "handlers": {
            "stderr": {**handler, "stream": "ext://sys.stderr"},
            "stdout": {**handler, "stream": "ext://sys.stdout"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": LEVELS[level], "propagate": False},
            "staticagents.access": {
                "handlers": ["stdout"],
                "level": LEVELS[level],
                "propagate": False,
            },
        },
    }
