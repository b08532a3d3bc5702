"""Requests to an upstream, over httpx: the key read from the environment at request time.

The client's own credentials are never sent on: the headers are made here from the
upstream's configuration alone (plus the client's ``anthropic-version`` and
``anthropic-beta``, which say what the request means). The key appears in no error:
a failure names the upstream, and an upstream's error body is relayed with the key
masked should it echo it.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import orjson

from staticagents.core.inquiry import MASK
from staticagents.core.routing import Upstream
from staticagents.proxying.wire import ANTHROPIC_VERSION, error_of, upstream_path

if TYPE_CHECKING:
    # Imported by the functions that send (httpx brings its command line's rich and
    # pygments): a service that proxies nothing never loads it, and starts sooner.
    import httpx

PASSED_ON = ("anthropic-version", "anthropic-beta")  # what the request means, not who sends it


class UpstreamFailure(Exception):
    """The upstream answered with an error, or could not be asked; ``body`` is its own
    error body (key masked), for a client of its dialect."""

    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        *,
        retry_after: float | None = None,
        body: bytes | None = None,
        latency: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.retry_after = retry_after
        self.body = body
        self.latency = latency


def url_of(upstream: Upstream) -> str:
    return upstream.base_url.rstrip("/") + upstream_path(upstream.dialect)


def key_of(upstream: Upstream) -> str:
    key = os.environ.get(upstream.api_key_env, "")
    if not key:
        message = (
            f"upstream {upstream.name!r} has no key: the environment variable "
            f"{upstream.api_key_env} is not set"
        )
        raise UpstreamFailure(502, "upstream_unconfigured", message)
    return key


def headers_for(upstream: Upstream, key: str, client_headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of a request to ``upstream``: its key, its extra headers, nothing else of
    the client's but ``PASSED_ON``."""
    # identity: a stream is relayed as it arrives, never held back by a decompressor.
    headers = {"content-type": "application/json", "accept-encoding": "identity"}
    if upstream.dialect == "anthropic":
        headers["anthropic-version"] = client_headers.get("anthropic-version", ANTHROPIC_VERSION)
        if "anthropic-beta" in client_headers:
            headers["anthropic-beta"] = client_headers["anthropic-beta"]
        headers["x-api-key"] = key
    else:
        headers["authorization"] = f"Bearer {key}"
    headers.update({name.lower(): value for name, value in upstream.headers.items()})
    return headers


def retry_after_of(headers: Mapping[str, str]) -> float | None:
    """The upstream's Retry-After (or retry-after-ms), in seconds."""
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            value = float(headers.get(name, ""))
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            return value / scale
    return None


def failure_of(
    upstream: Upstream, response: httpx.Response, key: str, latency: float
) -> UpstreamFailure:
    """An upstream's error reply (its body already read); its body is kept to be relayed only
    when it is an error in JSON, as the dialect's clients read one."""
    body: bytes | None = response.content
    if key:  # should the upstream echo the key, it is masked
        body = response.content.replace(key.encode(), MASK.encode())
    try:
        kind, message = error_of(orjson.loads(body or b""))
    except orjson.JSONDecodeError:
        kind, message, body = "api_error", "", None
    message = message or f"upstream {upstream.name!r} answered {response.status_code}"
    return UpstreamFailure(
        response.status_code,
        kind,
        message,
        retry_after=retry_after_of(response.headers),
        body=body,
        latency=latency,
    )


def unreachable(upstream: Upstream, exc: httpx.HTTPError, latency: float) -> UpstreamFailure:
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        message = f"upstream {upstream.name!r} did not answer within {upstream.timeout:g} s"
        return UpstreamFailure(504, "upstream_timeout", message, latency=latency)
    reason = str(exc) or type(exc).__name__
    message = f"upstream {upstream.name!r} could not be reached: {reason}"
    return UpstreamFailure(502, "upstream_unreachable", message, latency=latency)


def _timeout(upstream: Upstream) -> httpx.Timeout:
    import httpx

    return httpx.Timeout(upstream.timeout)


# One pooled client per event loop (and per thread): a new client per request would build
# an SSL context and a connection each time, which costs more than the upstream's answer.
_loop_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)
_thread_clients = threading.local()


def _async_client() -> httpx.AsyncClient:
    import httpx

    loop = asyncio.get_running_loop()
    client = _loop_clients.get(loop)
    if client is None:
        client = _loop_clients[loop] = httpx.AsyncClient(follow_redirects=False)
    return client


def _sync_client() -> httpx.Client:
    import httpx

    client: httpx.Client | None = getattr(_thread_clients, "client", None)
    if client is None:
        client = _thread_clients.client = httpx.Client(follow_redirects=False)
    return client


def post(
    upstream: Upstream, payload: Mapping[str, Any], client_headers: Mapping[str, str]
) -> tuple[Any, float]:
    """POST ``payload`` and return the upstream's JSON reply and its latency in seconds;
    raises ``UpstreamFailure``."""
    import httpx

    key = key_of(upstream)
    started = time.perf_counter()
    try:
        response = _sync_client().post(
            url_of(upstream),
            content=orjson.dumps(payload),
            headers=headers_for(upstream, key, client_headers),
            timeout=_timeout(upstream),
        )
    except httpx.HTTPError as exc:
        raise unreachable(upstream, exc, time.perf_counter() - started) from None
    return _json_of(upstream, response, key, time.perf_counter() - started)


async def apost(
    upstream: Upstream, payload: Mapping[str, Any], client_headers: Mapping[str, str]
) -> tuple[Any, float]:
    """``post`` for the event loop."""
    import httpx

    key = key_of(upstream)
    started = time.perf_counter()
    try:
        response = await _async_client().post(
            url_of(upstream),
            content=orjson.dumps(payload),
            headers=headers_for(upstream, key, client_headers),
            timeout=_timeout(upstream),
        )
    except httpx.HTTPError as exc:
        raise unreachable(upstream, exc, time.perf_counter() - started) from None
    return _json_of(upstream, response, key, time.perf_counter() - started)


def _json_of(
    upstream: Upstream, response: httpx.Response, key: str, latency: float
) -> tuple[Any, float]:
    if response.status_code >= 400:
        raise failure_of(upstream, response, key, latency)
    try:
        return orjson.loads(response.content), latency
    except orjson.JSONDecodeError:
        message = f"upstream {upstream.name!r} answered {response.status_code} without JSON"
        raise UpstreamFailure(502, "upstream_invalid", message, latency=latency) from None


@asynccontextmanager
async def astream(
    upstream: Upstream, body: bytes, client_headers: Mapping[str, str]
) -> AsyncIterator[tuple[httpx.Response, float]]:
    """The upstream's response to ``body``, its body still to be read (a stream, or JSON),
    with the latency until its headers came; raises ``UpstreamFailure`` for an error reply.

    Leaving the block (a client that left cancels the handler) closes the connection:
    the upstream stops generating.
    """
    import httpx

    key = key_of(upstream)
    started = time.perf_counter()
    client = _async_client()
    try:
        request = client.build_request(
            "POST",
            url_of(upstream),
            content=body,
            headers=headers_for(upstream, key, client_headers),
            timeout=_timeout(upstream),
        )
        response = await client.send(request, stream=True)
        latency = time.perf_counter() - started
        try:
            if response.status_code >= 400:
                await response.aread()
                raise failure_of(upstream, response, key, latency)
            yield response, latency
        finally:
            await response.aclose()
    except httpx.HTTPError as exc:
        raise unreachable(upstream, exc, time.perf_counter() - started) from None
