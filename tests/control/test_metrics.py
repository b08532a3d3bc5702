"""``GET /metrics``: Prometheus' text format, behind the control token unless open."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import CONTROL_TOKEN

BEARER = {"Authorization": f"Bearer {CONTROL_TOKEN}"}


def test_metrics_need_the_control_token_by_default(live_url: str, settings: Any) -> None:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    anonymous = httpx.get(f"{live_url}/metrics")
    wrong = httpx.get(f"{live_url}/metrics", headers={"Authorization": "Bearer nope"})
    scraped = httpx.get(f"{live_url}/metrics", headers=BEARER)

    assert [anonymous.status_code, wrong.status_code, scraped.status_code] == [401, 401, 200]
    assert anonymous.json()["errors"][0]["code"] == "not_authenticated"
    assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
    assert scraped.headers["content-type"].startswith("text/plain")
    for name in (
        "static_agents_requests_total",
        "static_agents_reply_seconds_bucket",
        "static_agents_streams_open",
        "static_agents_journal_entries",
    ):
        assert name in scraped.text


def test_open_metrics_need_no_token(live_url: str, settings: Any) -> None:
    settings.STATIC_AGENTS_METRICS = "open"

    assert httpx.get(f"{live_url}/metrics").status_code == 200


def test_metrics_answer_another_method_with_a_json_405(live_url: str) -> None:
    response = httpx.post(f"{live_url}/metrics", headers=BEARER, content=b"x")

    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, HEAD"
    assert response.json()["errors"][0]["code"] == "method_not_allowed"
