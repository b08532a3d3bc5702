"""The vectors: deterministic, unit length, close for shared wording, pinned on request."""

from __future__ import annotations

import base64
import math
import struct
import subprocess
import sys

import pytest

from staticagents.core.embeddings import (
    MAX_DIMENSIONS,
    base64_vector,
    cosine,
    embed_text,
    normalise_text,
    pinned_vector,
    reply_vector,
    text_features,
)

TEXTS = [
    "Refunds are processed within five business days.",
    "Our office is open Monday to Friday.",
    "x",
    "!!!",
    "   ",
    "",
    "日本語のテキスト",
    "a" * 100_000,
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("dimensions", [1, 2, 8, 768, 1536, 3072])
def test_every_vector_has_unit_length_and_the_asked_size(text: str, dimensions: int) -> None:
    vector = embed_text(text, dimensions)
    assert len(vector) == dimensions
    assert math.isclose(math.hypot(*vector), 1.0, rel_tol=1e-6)
    assert all(math.isfinite(value) for value in vector)


def test_the_same_text_gives_the_same_vector_in_another_process() -> None:
    """No per-process hash seed: another interpreter computes exactly the same numbers."""
    text = "How long do refunds take?"
    script = (
        "from staticagents.core.embeddings import embed_text; "
        f"print(repr(embed_text({text!r}, 64)))"
    )
    other = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert eval(other.stdout) == embed_text(text, 64)


def test_different_texts_get_different_vectors_even_when_they_normalise_alike() -> None:
    vectors = {text: tuple(embed_text(text, 256)) for text in ["Hello", "hello", "hello ", "olleh"]}
    assert len(set(vectors.values())) == 4
    assert cosine(vectors["Hello"], vectors["hello"]) > 0.99


def test_shared_wording_makes_vectors_close_and_unrelated_texts_far() -> None:
    query = embed_text("How long does a refund take?", 1536)
    near = embed_text("how long does the refund take", 1536)
    related = embed_text("Refunds are processed within five business days.", 1536)
    unrelated = embed_text("Our office is open Monday to Friday.", 1536)
    assert cosine(query, near) > 0.7
    assert cosine(query, related) > cosine(query, unrelated)
    assert abs(cosine(query, unrelated)) < 0.05


def test_word_order_changes_the_vector_a_little() -> None:
    a, b = embed_text("dog bites man", 512), embed_text("man bites dog", 512)
    assert 0.5 < cosine(a, b) < 0.99


def test_the_features_are_words_and_trigrams_of_the_normalised_text() -> None:
    assert normalise_text("  \uff28ello\t\nWORLD ") == "hello world"  # a fullwidth H
    features = text_features("Hi hi")
    assert features["\x1fword:hi"] == 2
    assert features[" hi"] == 2 and features["hi "] == 2 and features["i h"] == 1
    assert text_features(" \n ") == {}


def test_only_the_text_window_is_read_for_features() -> None:
    long = "word " * 20_000
    assert text_features(long) == text_features(long + "tail " * 10)


def test_components_are_float32_values() -> None:
    vector = embed_text("float32, please", 32)
    packed = struct.pack("<32f", *vector)
    assert list(struct.unpack("<32f", packed)) == vector


def test_base64_is_little_endian_float32_as_the_openai_sdk_decodes_it() -> None:
    vector = embed_text("encode me", 16)
    decoded = struct.unpack("<16f", base64.b64decode(base64_vector(vector)))
    assert list(decoded) == vector


def test_a_pinned_vector_is_zero_padded_and_scaled_to_unit_length() -> None:
    assert pinned_vector([3, 4], 4) == [0.6000000238418579, 0.800000011920929, 0.0, 0.0]
    assert pinned_vector([1.0], 1) == [1.0]


def test_a_pinned_vector_longer_than_asked_is_the_callers_to_refuse() -> None:
    with pytest.raises(ValueError, match="3 values at 2 dimensions"):
        pinned_vector([1, 2, 3], 2)


def test_reply_vector_prefers_the_pin_then_the_likeness_then_the_text() -> None:
    assert reply_vector("a", 3, pinned=[0, 0, 2]) == [0.0, 0.0, 1.0]
    assert reply_vector("a", 64, like="another text") == embed_text("another text", 64)
    assert reply_vector("a", 64) == embed_text("a", 64)


def test_the_largest_size_is_served() -> None:
    assert len(embed_text("big", MAX_DIMENSIONS)) == MAX_DIMENSIONS
