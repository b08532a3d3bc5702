"""Listings and exports read the rules and their responses in one snapshot.

An import replaces every rule; a listing read in two queries with an import
committing between them showed every rule with ``"response": {}`` (and an
export of that, re-imported, installed empty replies). Here a server of two
worker processes imports two fixtures in turn while the rules are listed and
exported, and every read must be one fixture, whole. The PostgreSQL run is in
tests/test_scale_out.py.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

from bench.servers import serve

TOKEN = "consistent-reads-token"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def fixture(prefix: str, size: int = 300) -> dict[str, Any]:
    rules = [
        {
            "name": f"{prefix}-{i}",
            "match": {"contains": f"{prefix} {i}"},
            "response": {"content": f"{prefix}{i}"},
        }
        for i in range(size)
    ]
    return {"rules": rules}


def problems_in(rules: list[dict[str, Any]]) -> list[str]:
    """What makes a listing something other than one of the two fixtures, whole."""
    prefixes = {rule["name"].split("-")[0] for rule in rules}
    found = [f"rules of two fixtures at once: {sorted(prefixes)}"] if len(prefixes) > 1 else []
    found += [
        f"{rule['name']}: {rule.get('response')}" for rule in rules if not rule.get("response")
    ]
    return found[:5]


def reads_during_imports(
    url: str, headers: dict[str, str] = HEADERS, imports: int = 30
) -> tuple[int, list[str]]:
    """List and export the rules while another client imports two fixtures in turn."""
    documents = [fixture("alpha"), fixture("beta")]
    done = threading.Event()
    failures: list[str] = []

    def import_in_turn() -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            for n in range(imports):
                response = client.put("/control/fixture", json=documents[n % 2])
                if response.status_code != 200:
                    failures.append(f"import: {response.status_code} {response.text[:200]}")
        done.set()

    httpx.put(f"{url}/control/fixture", json=documents[1], headers=headers, timeout=60)
    importer = threading.Thread(target=import_in_turn)
    importer.start()
    reads = 0
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        while True:  # at least one read, however quickly the imports go
            listing = client.get("/control/rules").json()["rules"]
            export = client.get("/control/fixture", params={"format": "json"}).json()["rules"]
            reads += 1
            failures += [f"listing {p}" for p in problems_in(listing)]
            failures += [f"export {p}" for p in problems_in(export)]
            if done.is_set():
                break
    importer.join()
    return reads, failures


def test_listings_and_exports_never_see_half_an_import_on_sqlite(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'rules.sqlite3'}"
    with serve(
        "reads", database_url=database, workers=2, env={"STATIC_AGENTS_CONTROL_TOKEN": TOKEN}
    ) as live:
        reads, failures = reads_during_imports(live.url)
    assert reads > 0
    assert not failures, failures[:10]
