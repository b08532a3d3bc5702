"""Deterministic text embeddings: one text, one unit vector; shared wording, close vectors.

No model is involved, and nothing random: a text's vector is arithmetic on hashes
of the text, so every process on every machine computes the same one.

1. **Features.** The text is normalised (Unicode NFKC, case-folded, each run of
   whitespace made one space, trimmed) and counted as a bag of its words
   (``\\w+``) and its character trigrams (of the normalised text with a space at
   each end). Only the first ``TEXT_WINDOW`` characters count.
2. **Projection** (the hashing trick). Each feature's BLAKE2b hash picks one of
   the vector's components and a sign; the component gains sign x count. Texts
   that share wording share components, so cosine similarity follows shared
   wording: near-duplicates are close, texts with nothing in common near 0. It
   is lexical similarity, not meaning: "refund" is close to "refunds", not to
   "money back".
3. **Fingerprint.** A dense pseudo-random vector seeded by the SHAKE-256 hash of
   the exact text, of length about ``FINGERPRINT_WEIGHT``, is added, so that
   texts with the same features ("Hello" and "hello ") still get different
   vectors (cosine about 0.998), and no component is exactly zero.

The projection is scaled so that the sum has unit length; its components are
float32 numbers, the precision the providers send, so the float and base64
encodings carry the same numbers.

A rule can pin a text's vector instead (``embedding``: zero-padded to the
requested dimensions, scaled to unit length) or give it the vector of another
text (``embedding_like``); see ``reply_vector``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import re
import struct
import unicodedata
from collections import Counter
from collections.abc import Sequence

MAX_DIMENSIONS = 4096  # the largest models' (OpenAI's and Gemini's are 3072)
FLOAT32_MAX = 3.4028234663852886e38
TEXT_WINDOW = 32_768  # characters of a text that its features are read from
FINGERPRINT_WEIGHT = 0.05
_WORD = re.compile(r"\w+")
_FINGERPRINT_SEED = b"static-agents/embedding/v1\x00"


def normalise_text(text: str) -> str:
    """NFKC, case-folded, whitespace runs made one space, trimmed."""
    return " ".join(unicodedata.normalize("NFKC", text[:TEXT_WINDOW]).casefold().split())


def text_features(text: str) -> Counter[str]:
    """The bag of words and character trigrams of the normalised text."""
    normal = normalise_text(text)
    if not normal:
        return Counter()
    padded = f" {normal} "
    features = Counter(map("".join, zip(padded, padded[1:], padded[2:], strict=False)))
    features.update("\x1fword:" + word for word in _WORD.findall(normal))
    return features


def embed_text(text: str, dimensions: int) -> list[float]:
    """The unit vector of ``text`` with ``dimensions`` components (float32 values)."""
    return list(struct.unpack(f"<{dimensions}f", embedding_bytes(text, dimensions)))


def embedding_bytes(text: str, dimensions: int) -> bytes:
    """The vector of ``text`` as little-endian float32 numbers (what ``embed_text`` reads)."""
    vector = _fingerprint(text, dimensions)
    fingerprint = struct.unpack(f"<{dimensions}f", vector)
    projected = _projection(text, dimensions)
    if not projected:  # no features (an empty or blank text): the fingerprint alone
        return float32_bytes(unit(fingerprint))
    # Scale the projection p so that |f + scale*p| = 1, a quadratic in scale (f is short,
    # so its root is real and positive); only the few components p touches change.
    f_squared = math.hypot(*fingerprint) ** 2
    p_squared = math.fsum(value * value for value in projected.values())
    dot = math.fsum(value * fingerprint[index] for index, value in projected.items())
    scale = (math.sqrt(dot * dot - p_squared * (f_squared - 1.0)) - dot) / p_squared
    for index, value in projected.items():
        struct.pack_into("<f", vector, 4 * index, fingerprint[index] + scale * value)
    return bytes(vector)


def _projection(text: str, dimensions: int) -> dict[int, float]:
    """The features hashed onto the components, signed (sparse: the non-zero ones)."""
    projected: dict[int, float] = {}
    for feature, count in text_features(text).items():
        digest = _feature_hash(feature)
        index = digest % dimensions
        projected[index] = projected.get(index, 0.0) + (count if digest >> 63 else -count)
    return {index: value for index, value in projected.items() if value}


@functools.lru_cache(maxsize=1 << 16)  # common words and trigrams recur in every text
def _feature_hash(feature: str) -> int:
    return int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")


def _fingerprint(text: str, dimensions: int) -> bytearray:
    """Pseudo-random float32 components seeded by the exact text, of length about the weight.

    The random bytes are made float32 numbers in place (no Python work per
    component): a random sign and mantissa, and one exponent for all, so each
    lies in ±[2^k, 2^(k+1)).
    """
    seed = _FINGERPRINT_SEED + text.encode("utf-8", "surrogatepass")
    raw = bytearray(hashlib.shake_256(seed).digest(4 * dimensions))
    top, next_ = _exponent_tables(dimensions)
    raw[3::4] = raw[3::4].translate(top)
    raw[2::4] = raw[2::4].translate(next_)
    return raw


@functools.lru_cache(maxsize=64)
def _exponent_tables(dimensions: int) -> tuple[bytes, bytes]:
    """Byte maps that set a little-endian float32's exponent and keep its sign and mantissa.

    Its top byte holds the sign and the exponent's high seven bits; the next
    one the exponent's low bit and the mantissa's top seven. Numbers in ±[1, 2)
    have a mean square of 7/3: the power of two that scales them brings the
    length of ``dimensions`` of them nearest to ``FINGERPRINT_WEIGHT``.
    """
    power = round(math.log2(FINGERPRINT_WEIGHT / math.sqrt(7 * dimensions / 3)))
    exponent = 127 + power
    top = bytes((byte & 0x80) | (exponent >> 1) for byte in range(256))
    next_ = bytes(((exponent & 1) << 7) | (byte & 0x7F) for byte in range(256))
    return top, next_


def pinned_vector(values: Sequence[float], dimensions: int) -> list[float]:
    """A rule's pinned vector at ``dimensions``: zero-padded, at unit length.

    A longer one is the caller's to refuse (which components to drop is the
    fixture's to say, not the service's): it raises ValueError.
    """
    if len(values) > dimensions:
        raise ValueError(f"a pinned vector of {len(values)} values at {dimensions} dimensions")
    return as_float32(unit([*values, *[0.0] * (dimensions - len(values))]))


def reply_vector(
    text: str, dimensions: int, *, pinned: Sequence[float] | None = None, like: str | None = None
) -> list[float]:
    """The vector a text gets: the rule's pinned one, else that of ``like``, else its own."""
    if pinned is not None:
        return pinned_vector(pinned, dimensions)
    return embed_text(like if like is not None else text, dimensions)


def unit(vector: Sequence[float]) -> list[float]:
    """``vector`` scaled to length 1 (a zero vector stays zero)."""
    length = math.hypot(*vector)
    return [value / length for value in vector] if length else list(vector)


def float32_bytes(vector: Sequence[float]) -> bytes:
    """Little-endian float32 components, as the base64 encoding carries them."""
    return struct.pack(f"<{len(vector)}f", *vector)


def as_float32(vector: Sequence[float]) -> list[float]:
    """The components rounded to float32 (and back to Python floats)."""
    return list(struct.unpack(f"<{len(vector)}f", float32_bytes(vector)))


def base64_vector(vector: Sequence[float]) -> str:
    """The base64 encoding of OpenAI's API: float32 components, little-endian."""
    return base64.b64encode(float32_bytes(vector)).decode("ascii")


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine similarity of two vectors of the same length."""
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    lengths = math.hypot(*a) * math.hypot(*b)
    return dot / lengths if lengths else 0.0
