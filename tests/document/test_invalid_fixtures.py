"""The corpus of broken fixtures: each is refused with its path (and line), quickly,
in bounded memory, and the database is exactly as before."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from staticagents.document.files import dump_fixture
from staticagents.selectors import export_document
from tests.conftest import FIXTURES, GALAXY_STYLE_FIXTURE

INVALID = FIXTURES / "invalid"

# file → (text the error must contain, the line it must name or None)
EXPECTED: dict[str, tuple[str, int | None]] = {
    "syntax-error.yml": ("invalid YAML", 4),
    "unknown-key-top.yml": ("fallbak: unknown key", 2),
    "unknown-key-defaults.yml": ("defaults.confidance: unknown key", 3),
    "unknown-key-defaults-stream.yml": ("defaults.stream.word_delay: unknown key", 3),
    "unknown-key-rule.yml": ("rules[0].matches: unknown key", 3),
    "unknown-key-match.yml": ("rules[0].match.querry: unknown key", 4),
    "unknown-key-response.yml": ("rules[0].response.contents: unknown key", 4),
    "unknown-key-sequence-step.yml": ("rules[0].responses[1].tool_call: unknown key", 6),
    "unknown-key-suggestion.yml": ("rules[0].response.suggestions[0].prio: unknown key", 9),
    "unknown-key-tool-call.yml": ("rules[0].response.tool_calls[0].args: unknown key", 6),
    "unknown-key-error.yml": ("rules[0].response.error.kind: unknown key", 4),
    "unknown-key-fallback.yml": ("fallback.confidense: unknown key", 4),
    "wrong-type-rules.yml": ("rules: Input should be a valid list", 1),
    "wrong-type-enabled.yml": ("rules[0].enabled: Input should be a valid boolean", 3),
    "wrong-type-turn.yml": ("rules[0].match.turn: Input should be a valid integer", 3),
    "wrong-type-metadata.yml": ("rules[0].response.metadata: Input should be a valid dict", 4),
    "wrong-value-confidence.yml": ("rules[0].response.confidence: Input should be 'low'", 3),
    "wrong-value-error-status.yml": ("rules[0].response.error.status", 4),
    "bad-regex-query.yml": ("rules[0].match.query: invalid regex", 3),
    "bad-regex-context.yml": ("rules[0].match.context.page_id: invalid regex", 4),
    "catastrophic-regex.yml": ("rules[0].match.query: regex can backtrack exponentially", 4),
    "invalid-suggestion-save-tool.yml": ("save_tool needs parameters.tool_yaml", 5),
    "invalid-suggestion-action-type.yml": ("unknown action_type 'launch_rocket'", 5),
    "duplicate-names.yml": ("rules[1].name: duplicate name 'greeting'", 4),
    "both-response-and-responses.yml": ("exactly one of 'response' or 'responses'", 2),
    "empty-sequence.yml": ("rules[0].responses: List should have at least 1 item", 3),
    "version-2.yml": ("version: unsupported version 2", 1),
    "version-string.yml": ("version: unsupported version '1'", 1),
    "not-a-mapping.yml": ("a fixture must be a mapping, not list", None),
    "adk-overlapping-ids.json": ("problem ids 'P-1' and 'P-12' overlap", None),
    "adk-unknown-member.json": ("replies.P-7.delay_ms: unknown key", None),
    "adk-version-2.json": ("version: unsupported version 2", None),
    "invalid-json.json": ("invalid JSON", 1),
    "yaml-bomb.yml": ("expands to more than", None),
    "not-utf8.yml": ("not UTF-8: byte 0xe9", None),
    "embedding-not-finite.yml": ("rules[0].response.embedding[1]: nan is not a finite number", 5),
    "embedding-all-zeros.yml": ("rules[0].response.embedding: must not be all zeros", 3),
    "embedding-and-embedding-like.yml": ("at most one of 'embedding' and 'embedding_like'", 3),
    "embedding-wrong-type.yml": ("fallback.embedding[0]: Input should be a valid number", 2),
    "wrong-value-dialect.yml": ("rules[0].match.dialect: Input should be 'galaxy'", 2),
    # values that would not come back the same from JSON and the database
    "yaml-date.yml": ("rules[0].response.metadata.released: is a date", 5),
    "yaml-binary.yml": ("rules[0].response.metadata.blob: is binary data (!!binary)", 4),
    "yaml-set.yml": ("rules[0].response.metadata.tags: is a set (!!set)", 4),
    "nan-in-tool-arguments.yml": ("tool_calls[0].arguments.limit: nan is not a finite", 5),
    "retry-after-inf.yml": ("rules[0].response.retry_after: inf is not a finite number", 4),
    "fail-first-over-64-bits.yml": ("rules[0].response.fail_first: Input should be less", 4),
    "turn-over-64-bits.yml": ("rules[0].match.turn: Input should be less than or equal", 3),
    "usage-over-64-bits.yml": ("rules[0].response.usage.output_tokens: Input should be", 4),
    "metadata-integer-over-64-bits.yml": ("metadata.big: integer 18446744073709551616 is", 4),
    "metadata-nested-too-deep.yml": ("nested deeper than 64 levels", 4),
    "lone-surrogate.json": ("rules[0].response.content: contains a lone surrogate (U+D83D)", None),
    "huge-integer.yml": ("a fixture must be a mapping, not int", None),
    # the last of two keys would silently win
    "duplicate-key-match.yml": ("rules[0].match: duplicate key 'match' (first at line 3)", 4),
    "duplicate-key-rules.yml": ("rules: duplicate key 'rules' (first at line 1)", 4),
    "duplicate-key.json": ("rules[0].match: duplicate key 'match' (first at line 3)", 4),
    "tab-indent.yml": ("a tab character at column 1", 3),
    # a recorded rule's tag: a time with its zone, known keys only
    "recorded-time-without-zone.yml": ("rules[0].recorded.at: must give its time zone", 6),
    "unknown-key-recorded.yml": ("rules[0].recorded.reviewd: unknown key", 7),
    # upstreams: a key only by its variable's name, http(s) only, modes naming real upstreams
    "upstream-literal-key.yml": ("upstreams[0].api_key_env: must name the environment", 6),
    "upstream-not-http.yml": ("upstreams[0].base_url: must be an http:// or https://", 4),
    "mode-unknown-upstream.yml": ("modes.agent_types.coder.upstream: unknown upstream 'reel'", 10),
}


def test_every_file_of_the_corpus_has_an_expectation() -> None:
    assert sorted(p.name for p in INVALID.iterdir()) == sorted(EXPECTED)


@pytest.fixture
def seeded(db: None) -> str:
    """A database holding a Galaxy-style fixture; returns its export to compare with later."""
    call_command("import_fixture", str(GALAXY_STYLE_FIXTURE), verbosity=0)
    return dump_fixture(export_document())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_broken_fixture_is_refused_with_its_path_and_changes_nothing(
    name: str, seeded: str
) -> None:
    path = INVALID / name
    expected, line = EXPECTED[name]
    started = time.perf_counter()
    with pytest.raises(CommandError) as caught:
        call_command("import_fixture", str(path))
    elapsed = time.perf_counter() - started
    message = str(caught.value)
    assert expected in message
    assert message.startswith(str(path))
    if line is not None:
        assert f"{path}:{line}: " in message
    assert elapsed < 5, "a broken fixture must be refused quickly"
    assert dump_fixture(export_document()) == seeded


def test_a_50_megabyte_fixture_is_refused_before_parsing(seeded: str, tmp_path: Path) -> None:
    huge = tmp_path / "huge.yml"
    rule = "  - name: r{n}\n    response: {{content: '" + "x" * 200 + "'}}\n"
    with huge.open("w") as out:
        out.write("rules:\n")
        n = 0
        while out.tell() < 50 * 1024 * 1024:
            out.write(rule.format(n=n))
            n += 1
    tracemalloc.start()
    with pytest.raises(CommandError) as caught:
        call_command("import_fixture", str(huge))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert "the limit is" in str(caught.value)
    assert peak < 5 * 1024 * 1024, "a huge file must be refused without reading it"
    assert dump_fixture(export_document()) == seeded
