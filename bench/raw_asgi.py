"""The baseline: a raw ASGI app that answers every request with the same bytes.

``BENCH_RAW_BODY_FILE`` names a file holding the body to send (the bench puts
one of our own replies there, so both servers send the same bytes).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

BODY = Path(os.environ["BENCH_RAW_BODY_FILE"]).read_bytes()
START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"application/json")],
}
END = {"type": "http.response.body", "body": BODY}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send(START)
    await send(END)
