"""Valid means valid, generated: what an import accepts, every dialect can send.

Hypothesis writes fixtures (YAML or JSON) whose free-form values hold what the
formats can carry and JSON or the database cannot hold back (dates, sets,
binary data, NaN and infinities, integers beyond 64 bits, lone surrogates,
nesting hundreds deep) beside ordinary ones, and imports each through the
control API: a 200 or a 400 naming the path, never a 5xx. Every fixture that
is accepted is then asked for its reply in every dialect (OpenAI chat and
responses, Anthropic, Gemini, Galaxy, ADK, the WebSocket), streamed and not,
with generated query text and request metadata: each answers with its reply or
the error the fixture scripts, never a 5xx of its own, and nothing is logged
as an error.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets.sync.client as ws_client
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from staticagents.document.terms import ACTION_PARAMETERS, CONFIDENCES, FINISH_REASONS
from tests.conftest import CONTROL_TOKEN

pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")

EXAMPLES = 100
FUZZ = settings(
    deadline=None,
    database=None,
    max_examples=EXAMPLES,
    # Shrinking replays a live server's requests hundreds of times: the first failure is shown.
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)

# -- fixtures: free-form values, ordinary and not ------------------------------------------------

TEXT = st.text(max_size=16)
ODD_TEXT = TEXT | st.sampled_from(["\ud800", "a\udfffb", "tab\there", "$query $turn", "\u2028"])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()  # NaN and the infinities too
    | ODD_TEXT
    | st.dates()
    | st.binary(max_size=6)
    | st.frozensets(st.integers(0, 5), max_size=3)
)


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


FREE = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
) | st.integers(50, 300).map(nested)
FREE_MAPPING = st.dictionaries(TEXT, FREE, max_size=4)
WIDE_INT = st.integers(0, 3) | st.integers(0, 2**65) | st.sampled_from([2**31, 2**63 - 1, 2**63])

SUGGESTION = st.fixed_dictionaries(
    {
        "action_type": st.sampled_from(sorted(ACTION_PARAMETERS)),
        "description": ODD_TEXT,
        "confidence": st.sampled_from(CONFIDENCES),
        "parameters": st.fixed_dictionaries(
            {},
            optional={
                "tool_id": ODD_TEXT,
                "tool_yaml": ODD_TEXT,
                "url": ODD_TEXT,
                "trs_id": ODD_TEXT,
                "extra": FREE,
            },
        ),
    },
    optional={"priority": WIDE_INT | st.integers(max_value=-1)},
)
TOOL_CALL = st.fixed_dictionaries(
    {"name": st.text(min_size=1, max_size=12)},
    optional={"arguments": FREE_MAPPING, "id": st.text(min_size=1, max_size=8)},
)
ERROR = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from([400, 404, 429, 500, 503]),
        "type": ODD_TEXT,
        "message": ODD_TEXT,
    },
)
RESPONSE = st.fixed_dictionaries(
    {},
    optional={
        "content": ODD_TEXT,
        "confidence": st.sampled_from(CONFIDENCES),
        "agent_type": ODD_TEXT,
        "suggestions": st.lists(SUGGESTION, max_size=2),
        "metadata": FREE_MAPPING,
        "reasoning": ODD_TEXT,
        "thinking": ODD_TEXT,
        "tool_calls": st.lists(TOOL_CALL, max_size=2),
        "finish_reason": st.sampled_from(FINISH_REASONS),
        "error": ERROR,
        "retry_after": st.floats(min_value=0) | WIDE_INT,
        "fail_first": WIDE_INT,
        "template": st.booleans(),
        "usage": st.fixed_dictionaries(
            {}, optional={"input_tokens": WIDE_INT, "output_tokens": WIDE_INT}
        ),
        "stream": st.fixed_dictionaries(
            {}, optional={"chunk": st.sampled_from(["word", "char"]) | WIDE_INT}
        ),
    },
)
MATCH = st.fixed_dictionaries({}, optional={"turn": st.just(1) | WIDE_INT})


def fixture_text(response: dict[str, Any], match: dict[str, Any], as_yaml: bool) -> str:
    """The fixture as its author would write it; JSON turns what it has no word for into text."""
    document = {"rules": [{"name": "generated", "match": match, "response": response}]}
    if as_yaml:
        try:
            return yaml.safe_dump(document, allow_unicode=True, sort_keys=False)
        except (yaml.YAMLError, UnicodeEncodeError):
            pass  # a lone surrogate: YAML cannot write one, JSON can
    return json.dumps(document, default=str)


# -- requests: every dialect, with generated text and metadata ------------------------------------


def scripted_statuses(response: dict[str, Any]) -> set[int]:
    """The error statuses the fixture may answer its first request with."""
    error = response.get("error")
    statuses = {int(error.get("status", 500))} if error is not None else set()
    if response.get("fail_first"):
        statuses.add(int((error or {}).get("status", 503)))  # a transient failure by default
    return statuses


def requests_for(query: str, metadata: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    user = [{"role": "user", "content": query}]
    gemini = {"contents": [{"role": "user", "parts": [{"text": query}]}]}
    run = {
        "appName": "router",
        "userId": "fuzz",
        "sessionId": "fuzz",
        "newMessage": {"role": "user", "parts": [{"text": query}]},
        "stateDelta": metadata,
        "customMetadata": metadata,
    }
    return [
        ("openai", "/v1/chat/completions", {"model": "m", "messages": user, "metadata": metadata}),
        ("openai", "/v1/chat/completions", {"model": "m", "messages": user, "stream": True}),
        ("responses", "/v1/responses", {"model": "m", "input": query, "metadata": metadata}),
        ("responses", "/v1/responses", {"model": "m", "input": query, "stream": True}),
        ("anthropic", "/v1/messages", {"model": "m", "max_tokens": 64, "messages": user}),
        (
            "anthropic",
            "/v1/messages",
            {"model": "m", "max_tokens": 64, "messages": user, "stream": True},
        ),
        ("gemini", "/v1beta/models/m:generateContent", gemini),
        ("gemini", "/v1beta/models/m:streamGenerateContent?alt=sse", gemini),
        ("galaxy", "/api/ai/agents/query", {"query": query, "agent_type": "router"}),
        ("galaxy", "/api/chat?agent_type=router", {"query": query, "context": metadata}),
        ("galaxy", "/api/chat/stream?agent_type=router", {"query": query}),
        ("adk", "/run", run),
        ("adk", "/run_sse", {**run, "streaming": True}),
    ]


def websocket_events(url: str, message: dict[str, Any]) -> list[dict[str, Any]]:
    with ws_client.connect(url, open_timeout=5) as socket:
        socket.send(json.dumps(message))
        events = [json.loads(socket.recv(timeout=10))]
        while events[-1]["type"] not in ("done", "error"):
            events.append(json.loads(socket.recv(timeout=10)))
    return events


@pytest.fixture
def errors_logged(caplog: pytest.LogCaptureFixture) -> Iterator[list[logging.LogRecord]]:
    """Records at ERROR or above, from the server's threads as well as the test's."""
    with caplog.at_level(logging.ERROR):
        yield caplog.records


REQUEST_TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=16)
REQUEST_METADATA = st.dictionaries(
    st.text(max_size=6),
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(2**63), 2**64 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | REQUEST_TEXT,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(REQUEST_TEXT, inner, max_size=3)
        ),
        max_leaves=8,
    ),
    max_size=3,
)


def test_every_accepted_fixture_answers_in_every_dialect_without_a_5xx(
    live_url: str, settings: Any, errors_logged: list[logging.LogRecord]
) -> None:
    settings.STATIC_AGENTS_CONTROL_TOKEN = CONTROL_TOKEN
    tally: Counter[str] = Counter()
    headers = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
    socket_url = live_url.replace("http://", "ws://") + "/ws/chat/"

    with httpx.Client(base_url=live_url, headers=headers, timeout=30) as client:

        @FUZZ
        @given(
            response=RESPONSE,
            match=MATCH,
            as_yaml=st.booleans(),
            query=REQUEST_TEXT,
            metadata=REQUEST_METADATA,
        )
        def run(
            response: dict[str, Any],
            match: dict[str, Any],
            as_yaml: bool,
            query: str,
            metadata: dict[str, Any],
        ) -> None:
            text = fixture_text(response, match, as_yaml)
            imported = client.put("/control/fixture", content=text.encode("utf-8", "surrogatepass"))
            tally["fixtures tried"] += 1
            assert imported.status_code in (200, 400), (text[:400], imported.text[:400])
            if imported.status_code == 400:
                assert all(e["message"] for e in imported.json()["errors"]), imported.text
                return
            tally["fixtures accepted"] += 1
            allowed = scripted_statuses(response)
            client.post("/apps/router/users/fuzz/sessions", json={"sessionId": "fuzz"})
            for dialect, path, body in requests_for(query, metadata):
                # fail_first counts per question: each request starts its own session
                session = {"X-Static-Session": uuid.uuid4().hex}
                answer = client.post(path, json=body, headers=session)
                tally["replies"] += 1
                assert answer.status_code < 500 or answer.status_code in allowed, (
                    dialect,
                    path,
                    text[:400],
                    answer.status_code,
                    answer.text[:400],
                )
                assert "internal error" not in answer.text, (dialect, path, answer.text[:400])
            for stored in (
                "/apps/router/users/fuzz/sessions/fuzz",
                "/apps/router/users/fuzz/sessions",
            ):
                assert client.get(stored).status_code == 200, stored  # the state deltas it took
            events = websocket_events(socket_url, {"query": query, "context": metadata})
            status = events[-1].get("error", {}).get("status", 200)
            assert status < 500 or status in allowed, (text[:400], events[-1])
            assert not errors_logged, [r.getMessage() for r in errors_logged][:3]

        run()
    print(f"\ngenerated fixtures: {dict(tally)}")
    assert tally["fixtures accepted"] > 0
