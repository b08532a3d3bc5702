"""uvicorn's HTTP protocol, answering a request it cannot parse in the service's error shape.

uvicorn answers bytes that are no HTTP request with a ``text/plain`` 400 before
any application code runs. Here that answer is JSON in the shape every unknown
path gets (OpenAI's: the path is unknown too). ``serve`` and the test server
give this class to uvicorn as its ``http`` protocol (httptools, which
``uvicorn[standard]`` installs and ``http="auto"`` picks).
"""

from __future__ import annotations

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def unparsable_response(message: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    body = orjson.dumps({"error": error})
    head = [b"HTTP/1.1 400 Bad Request"]
    head += [name + b": " + value for name, value in default_headers]
    head += [
        b"content-type: application/json",
        b"content-length: " + str(len(body)).encode(),
        b"connection: close",
    ]
    return b"\r\n".join(head) + b"\r\n\r\n" + body


class JSONErrorsHttpProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        headers = self.server_state.default_headers
        self.transport.write(unparsable_response(f"Invalid HTTP request: {msg}", headers))
        self.transport.close()
