"""The embedder seam and what needs no model: the :class:`Tokenizer` and :class:`Embedder`
protocols, row-wise L2 normalisation, cutting a long text into token windows, the word
tokenizer and the hash embedder (deterministic feature hashing: for tests and tiny demos).

The registry of embedders and :func:`~medverify.kb.embed.get_embedder` are in
:mod:`medverify.kb.embed`; the model embedder in :mod:`medverify.kb.sentence_embed`.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from typing import Protocol, runtime_checkable

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)


@runtime_checkable
class Tokenizer(Protocol):
    """Splits a text into tokens, reporting each token's character offsets."""

    def offsets(self, text: str) -> list[tuple[int, int]]: ...


@runtime_checkable
class Embedder(Protocol):
    """One method: ``embed(texts) -> (len(texts), dim)`` float32, rows L2-normalised."""

    id: str
    dim: int
    tokenizer: Tokenizer

    def embed(self, texts: list[str]) -> np.ndarray: ...



def normalize(vectors: np.ndarray) -> np.ndarray:
    """Row-wise L2 normalisation (zero rows stay zero), as float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class WordTokenizer:
    """Word tokens (``\\w+``): the tokenizer of the hash embedder."""

    def offsets(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in _WORD.finditer(text)]


class HashEmbedder:
    """Deterministic signed feature hashing of lower-cased words and word bigrams.

    No model, no randomness across processes: two texts sharing words get similar
    vectors. Good enough for tests and demos, not for real retrieval quality.
    """

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.id = f"hash-{dim}"
        self.tokenizer: Tokenizer = WordTokenizer()

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature in _features(text):
                index, sign = self._slot(feature)
                out[row, index] += sign
        return normalize(out)

    def _slot(self, feature: str) -> tuple[int, float]:
        digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
        value = int.from_bytes(digest, "little")
        return value % self.dim, 1.0 if (value >> 63) & 1 else -1.0


def _features(text: str) -> list[str]:
    words = [w.lower() for w in _WORD.findall(text)]
    return words + [f"{a} {b}" for a, b in itertools.pairwise(words)]


def split_windows(text: str, tokenizer: Tokenizer, window: int) -> list[str]:
    """Cut ``text`` into the fewest consecutive, equal-sized pieces of at most ``window``
    tokens."""
    offsets = tokenizer.offsets(text)
    if len(offsets) <= window:
        return [text]
    count = -(-len(offsets) // window)
    size = -(-len(offsets) // count)
    return [text[offsets[i][0]:offsets[min(i + size, len(offsets)) - 1][1]]
            for i in range(0, len(offsets), size)]
