"""The kinds of vector index a KB can hold and ``auto``'s choice among them: the kinds, their
backends (:data:`INDEX_BACKENDS`: the library behind each kind, faiss's or hnswlib's), what
an index is (:class:`IndexSpec`), the policy choosing one for a KB's size (:func:`choose_spec`,
:func:`auto_kind`, :func:`auto_next`'s hysteresis), the ef rule of faiss's HNSW
(:func:`hnsw_ef`) and the query knobs (:class:`SearchKnobs`). :mod:`medverify.kb.index`
keeps the chosen index of a KB directory in step with SQLite (and re-exports these); the
PostgreSQL replica chooses through the same functions. Why these kinds and thresholds:
docs/scale.md "HNSW where it wins"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from medverify.errors import KBError
from medverify.kb.faiss_ops import FaissBackend, IndexBackend, scaled_ef
from medverify.registry import Registry

IndexKind = Literal["flat", "ivf", "ivfpq", "hnsw", "hnswlib"]
INDEX_KINDS: tuple[IndexKind, ...] = ("flat", "ivf", "ivfpq", "hnsw", "hnswlib")
INDEX_POLICIES = ("auto", *INDEX_KINDS)
GRAPH_KINDS = ("hnsw", "hnswlib")  # built with HNSW_M and HNSW_EF_CONSTRUCTION
EXACT_BELOW = 100_000  # auto: a flat (exact) index below this many chunks, a graph from it
HNSW_BELOW = 1_000_000  # auto: faiss's HNSW below this many chunks, IVF from it (equal speed)
# auto's graph kinds, the first whose package imports, and the size from which auto builds
# IVF instead (None: never; hnswlib is 2.5x faster than IVF at 1M at equal recall)
AUTO_GRAPHS: tuple[tuple[IndexKind, int | None], ...] = (("hnswlib", None), ("hnsw", HNSW_BELOW))
EF_PER_100K = FaissBackend.ef_per_100k  # hnsw: efSearch raised to this per 100k vectors


class IndexBackends(Registry[IndexBackend]):
    """The library behind each index kind (:class:`~medverify.kb.faiss_ops.IndexBackend`),
    made once per kind (a backend holds no state: it is asked on every search)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self._made: dict[str, IndexBackend] = {}

    def create(self, kind: str) -> IndexBackend:
        made = self._made.get(kind)
        if made is None:
            made = self._made[kind] = self.build(kind)
        return made


INDEX_BACKENDS = IndexBackends("vector index backend")
for _kind in ("flat", "ivf", "ivfpq", "hnsw"):
    INDEX_BACKENDS.register(_kind, "medverify.kb.faiss_ops:FaissBackend")
INDEX_BACKENDS.register("hnswlib", "medverify.kb.hnswlib_index:HnswlibBackend")
HNSW_M = 16  # hnsw: neighbours per node (M 32: 13 MB more per 100k, no faster at 0.95)
HNSW_EF_CONSTRUCTION = 100  # hnsw: candidates while building (faiss's 40: ef 96 -> 0.89)
MIN_TRAIN = {"ivf": 39, "ivfpq": 256 * 39}  # vectors k-means needs (one list; PQ codebooks)


@dataclass(frozen=True)
class IndexSpec:
    """What a vector index is: its kind and the parameters it was built with."""

    kind: IndexKind = "flat"
    nlist: int = 0  # ivf, ivfpq: k-means lists
    pq_m: int = 0  # ivfpq: sub-quantisers (8 bits each)
    hnsw_m: int = 0  # hnsw: neighbours per node
    hnsw_efc: int = 0  # hnsw: efConstruction (0: faiss's default, 40)

    def describe(self) -> str:
        efc = f", efConstruction {self.hnsw_efc}" if self.hnsw_efc else ""
        extra = {"ivf": f"nlist {self.nlist}", "ivfpq": f"nlist {self.nlist}, PQ{self.pq_m}",
                 "hnsw": f"M {self.hnsw_m}{efc}", "hnswlib": f"M {self.hnsw_m}{efc}"
                 }.get(self.kind)
        return f"{self.kind} ({extra})" if extra else self.kind

    def record(self) -> dict[str, Any]:
        return {"kind": self.kind, "nlist": self.nlist, "pq_m": self.pq_m,
                "hnsw_m": self.hnsw_m, "hnsw_efc": self.hnsw_efc}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> IndexSpec:
        """The spec a ``vectors.json`` records (one written before index kinds: flat)."""
        kind = record.get("kind", "flat")
        if kind not in INDEX_KINDS:
            raise ValueError(f"unknown vector index kind {kind!r}")
        return cls(kind=kind, nlist=int(record.get("nlist", 0)),
                   pq_m=int(record.get("pq_m", 0)), hnsw_m=int(record.get("hnsw_m", 0)),
                   hnsw_efc=int(record.get("hnsw_efc", 0)))


def index_backend(kind: str) -> IndexBackend:
    """The backend of an index kind (:data:`INDEX_BACKENDS`)."""
    return INDEX_BACKENDS.create(kind)


def auto_graph() -> tuple[IndexKind, int | None]:
    """``auto``'s graph kind here (the first of :data:`AUTO_GRAPHS` whose package imports)
    and the size from which auto builds IVF instead (None: never)."""
    return next(((kind, below) for kind, below in AUTO_GRAPHS
                 if index_backend(kind).available()), ("hnsw", HNSW_BELOW))


def auto_kind(count: int, threshold: int = EXACT_BELOW) -> IndexKind:
    """``auto``'s kind at ``count`` chunks: exact below ``threshold``, a graph from it (the
    fastest at recall@10 >= 0.95 against IVF and chromadb; hnswlib when installed, 1.2-2x
    faster per query than faiss's HNSW), IVF from the graph's limit (faiss's HNSW: at 1M it
    needs ef 1,024 and is no faster than IVF at nprobe 32, builds 3x slower: docs/scale.md)."""
    if count < threshold:
        return "flat"
    kind, below = auto_graph()
    return "ivf" if below is not None and count >= below else kind


def hnsw_ef(ef_search: int, ntotal: int) -> int:
    """The efSearch a faiss HNSW index of ``ntotal`` vectors searches with: the configured
    ``ef_search`` or :data:`EF_PER_100K` per started 100k vectors, whichever is larger. A
    fixed ef loses recall as the graph grows (ef 128, M 16, efConstruction 100: recall@10
    0.964 at 100k, 0.928 at 200k, 0.908 at 300k, 0.808 at 1M; bench_ann_peers.py).
    hnswlib's rule: :meth:`medverify.kb.hnswlib_index.HnswlibBackend.ef`."""
    return scaled_ef(ef_search, ntotal, EF_PER_100K)


def auto_next(current: str, count: int, threshold: int = EXACT_BELOW) -> IndexKind:
    """``auto``'s kind for a KB of ``count`` chunks whose index is of kind ``current``,
    with hysteresis at both boundaries: exact again only below half the threshold, and an
    IVF index back to HNSW only below half of :data:`HNSW_BELOW` (a KB that grows and
    shrinks around a boundary is not rebuilt at every change)."""
    if current == "flat":
        return auto_kind(count, threshold)
    if count < threshold // 2:
        return "flat"
    if current in ("ivf", "ivfpq"):
        kind, below = auto_graph()
        return "ivf" if below is not None and count >= below // 2 else kind
    return auto_kind(max(count, threshold), threshold)


def choose_spec(policy: str, count: int, dim: int, threshold: int = EXACT_BELOW,
                nlist: int | None = None) -> IndexSpec:
    """The index for ``count`` vectors of dimension ``dim`` under ``policy`` (``auto`` or
    a kind). IVF lists: about 4 sqrt(count), a power of two, with at least 39 training
    vectors per list (faiss's minimum for k-means). An IVF kind asked for a KB too small
    to train one is built flat (exact) until the KB has grown enough."""
    if policy not in INDEX_POLICIES:
        raise KBError(f"unknown vector index {policy!r}: use one of {', '.join(INDEX_POLICIES)}")
    kind: IndexKind = auto_kind(count, threshold) if policy == "auto" else policy  # type: ignore[assignment]
    if not index_backend(kind).available():  # (an explicit hnswlib without its package)
        raise KBError(f"the vector index kind {kind!r} needs a package that is not installed "
                      f"here: {index_backend(kind).install_hint}")
    if kind in ("ivf", "ivfpq") and count < MIN_TRAIN[kind]:
        return IndexSpec("flat")  # too few vectors to train: exact until there are enough
    if kind in ("ivf", "ivfpq"):
        if nlist is None:
            target = max(1.0, 4 * count ** 0.5)
            nlist = 1 << max(0, round(np.log2(target)))
        nlist = max(1, min(nlist, max(1, count // 39), 1 << 16))
        pq_m = next((m for m in (dim // 8, dim // 4, dim // 2, dim) if m and dim % m == 0), dim)
        return IndexSpec(kind, nlist=nlist, pq_m=pq_m if kind == "ivfpq" else 0)
    if kind in GRAPH_KINDS:
        return IndexSpec(kind, hnsw_m=HNSW_M, hnsw_efc=HNSW_EF_CONSTRUCTION)
    return IndexSpec("flat")


@dataclass
class SearchKnobs:
    """Query-time parameters of the approximate indexes (recall against latency)."""

    nprobe: int = 32  # ivf, ivfpq: lists scanned per query
    ef_search: int = 128  # hnsw: candidate list size
