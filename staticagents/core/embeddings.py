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
   the exact text is added with weight ``FINGERPRINT_WEIGHT``, so that texts
   with the same features ("Hello" and "hello ") still get different vectors
   (cosine about 0.998), and no component is exactly zero.

The sum is scaled to unit length and rounded to float32, the precision the
providers send, so the float and base64 encodings carry the same numbers.

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
    projected = _projection(text, dimensions)
    fingerprint = _fingerprint(text, dimensions)
    p_length, f_length = math.hypot(*projected.values()), math.hypot(*fingerprint)
    if p_length:
        p_scale, f_scale = 1.0 / p_length, FINGERPRINT_WEIGHT / f_length
    else:  # no features (an empty or blank text): the fingerprint alone
        p_scale, f_scale = 0.0, 1.0 / f_length
    # The length of the sum, from the few components where both are non-zero:
    # |a*f + b*p|^2 = (a|f|)^2 + (b|p|)^2 + 2ab(f.p). Then one pass builds the unit vector.
    dot = math.fsum(value * fingerprint[index] for index, value in projected.items())
    length = math.sqrt(
        (f_scale * f_length) ** 2 + (p_scale * p_length) ** 2 + 2 * f_scale * p_scale * dot
    )
    f_scale, p_scale = f_scale / length, p_scale / length
    vector = list(map(f_scale.__mul__, fingerprint))
    for index, value in projected.items():
        vector[index] += p_scale * value
    return as_float32(vector)


def _projection(text: str, dimensions: int) -> dict[int, float]:
    """The features hashed onto the components, signed (sparse: the non-zero ones)."""
    projected: dict[int, float] = {}
    for feature, count in text_features(text).items():
        digest = _feature_hash(feature)
        index = digest % dimensions
        projected[index] = projected.get(index, 0.0) + (count if digest >> 63 else -count)
    return projected


@functools.lru_cache(maxsize=1 << 16)  # common words and trigrams recur in every text
def _feature_hash(feature: str) -> int:
    return int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")


# A little-endian double's top byte holds its sign and the high bits of its exponent; the next
# one the low bits of the exponent and the top of the mantissa. These tables set the exponent
# to 1023 (so the value lies in [1, 2)) and keep a random sign and mantissa.
_SIGN_AND_EXPONENT = bytes(0x3F if byte < 0x80 else 0xBF for byte in range(256))
_EXPONENT_AND_MANTISSA = bytes(0xF0 | (byte & 0x0F) for byte in range(256))


def _fingerprint(text: str, dimensions: int) -> tuple[float, ...]:
    """Pseudo-random components in (-2, -1] and [1, 2), seeded by the exact text."""
    seed = _FINGERPRINT_SEED + text.encode("utf-8", "surrogatepass")
    raw = bytearray(hashlib.shake_256(seed).digest(8 * dimensions))
    raw[7::8] = raw[7::8].translate(_SIGN_AND_EXPONENT)
    raw[6::8] = raw[6::8].translate(_EXPONENT_AND_MANTISSA)
    components: tuple[float, ...] = struct.unpack(f"<{dimensions}d", raw)
    return components


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
