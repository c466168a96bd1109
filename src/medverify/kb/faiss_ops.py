"""The faiss side of a vector index: making an empty index of a spec, setting its
query-time parameter, searching it (a few queries on one thread; ids left out), and faiss's
errors on one line; :class:`FaissBackend`, those operations as the index backend of the
faiss kinds (flat, ivf, ivfpq, hnsw), and :class:`IndexBackend`, what every backend of
``medverify.kb.index.INDEX_BACKENDS`` offers (hnswlib's: :mod:`medverify.kb.hnswlib_index`).
:mod:`medverify.kb.index` keeps the index of a KB directory in step with SQLite; the
PostgreSQL replica's indexes (:mod:`medverify.kb.postgres_replica`) and the benchmarks use
the same backends."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any, Protocol

import numpy as np


class IndexShape(Protocol):
    """What :func:`make_index` reads of a :class:`medverify.kb.index.IndexSpec`."""

    kind: str
    nlist: int
    pq_m: int
    hnsw_m: int
    hnsw_efc: int

class IndexBackend(Protocol):
    """The library under an index kind: what :class:`medverify.kb.index.VectorIndex` and the
    PostgreSQL replica do with an index, whatever builds it. An index object has ``d``,
    ``ntotal`` (vectors held, removed ones it still holds included), ``is_trained``,
    ``add_with_ids(vectors, ids)`` (and ``train`` when not trained), as faiss's do."""

    mappable: bool  # whether read(mmap=True) maps the file (else it is read whole)
    install_hint: str  # what to install when available() is False

    def available(self) -> bool:
        """Whether its package imports here."""

    def make(self, spec: IndexShape, dim: int, capacity: int = 0) -> Any:
        """An empty index of ``spec`` (``capacity``: the vectors about to be added)."""

    def read(self, path: str, spec: IndexShape, dim: int, mmap: bool) -> Any:
        """The index saved at ``path``; RuntimeError when it cannot be read."""

    def write(self, index: Any, path: str) -> None:
        """Save ``index`` to ``path`` (the caller writes a temporary name and renames it)."""

    def holds(self, index: Any, spec: IndexShape) -> bool:
        """Whether ``index`` (read back) is of ``spec``'s kind and parameters."""

    def set_knobs(self, index: Any, nprobe: int, ef_search: int) -> None:
        """Set the query-time parameter (an HNSW index's ef follows its size: its rule)."""

    def drop(self, writable: Callable[[], Any], spec: IndexShape, ids: np.ndarray) -> bool:
        """Remove ``ids`` (``writable()``: the index, loaded for writing); True when they
        left the index, False when it still holds them (recorded as removed by the caller,
        left out of searches, rebuilt without them past a limit). RuntimeError: rebuild."""

    def search(self, index: Any, vectors: np.ndarray, depth: int, removed: Collection[int],
               exclusions: Exclusions) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids) of the ``depth`` nearest (inner product), -1 ids past the end;
        ``removed`` ids never returned (``exclusions`` caches their selector)."""


SMALL_BATCH = 8  # query batches below this size search the vector index on one thread
_FAISS_WHERE = re.compile(r"^Error in .*? at \S+:\d+: (?:Error: )?")  # faiss's C++ location


def make_index(spec: IndexShape, dim: int) -> Any:
    """An empty faiss index of ``spec`` over ``dim``-dimensional vectors (inner product)."""
    import faiss

    ip = faiss.METRIC_INNER_PRODUCT
    if spec.kind == "ivf":
        return faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, spec.nlist, ip)
    if spec.kind == "ivfpq":
        return faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, spec.nlist, spec.pq_m, 8, ip)
    if spec.kind == "hnsw":
        hnsw = faiss.IndexHNSWFlat(dim, spec.hnsw_m, ip)
        if spec.hnsw_efc:
            hnsw.hnsw.efConstruction = spec.hnsw_efc
        return faiss.IndexIDMap2(hnsw)
    return faiss.IndexIDMap2(faiss.IndexFlatIP(dim))


def set_query_knob(index: Any, nprobe: int | None = None, ef_search: int | None = None) -> None:
    """Set an approximate index's query-time parameter (IVF lists probed, HNSW candidate
    list size); other indexes have none."""
    import faiss

    if isinstance(index, faiss.IndexIVF) and nprobe is not None:
        index.nprobe = min(nprobe, index.nlist)
    elif isinstance(index, faiss.IndexIDMap2) and ef_search is not None:
        inner = faiss.downcast_index(index.index)
        if isinstance(inner, faiss.IndexHNSW):
            inner.hnsw.efSearch = ef_search



class Exclusions:
    """The faiss selector that leaves a set of ids out of a search, built again only when
    the set changes (it only grows in place, or is replaced): building one costs time in
    the number of ids (thousands of ids may be held), paid per query otherwise."""

    def __init__(self) -> None:
        self._of: Collection[int] | None = None  # the set the selector was built from
        self._size = -1
        self._selector: Any = None

    def selector(self, ids: Collection[int]) -> Any:
        """The selector leaving ``ids`` out, or None when there are none."""
        if not ids:
            return None
        if ids is not self._of or len(ids) != self._size:
            self._of, self._size, self._selector = ids, len(ids), _not_in(ids)
        return self._selector


def faiss_search(index: Any, vectors: np.ndarray, depth: int,
                 excluded: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Search; a few queries run on one thread (a flat scan of one query is bound by memory
    bandwidth, and OpenMP start-up and spinning cost more than a second core gains).

    ``excluded``: a selector (:meth:`Exclusions.selector`) of ids the index still holds but
    must never return (chunks removed from a KB whose HNSW index cannot drop them); they
    are skipped inside the search, so the results are ``depth`` deep all the same."""
    import faiss

    params = _without(index, excluded) if excluded is not None else None
    if len(vectors) >= SMALL_BATCH:
        return index.search(vectors, depth, params=params)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return index.search(vectors, depth, params=params)
    finally:
        faiss.omp_set_num_threads(threads)


def _not_in(ids: Collection[int]) -> Any:
    """A faiss selector of every id but ``ids`` (it keeps the batch it wraps alive)."""
    import faiss

    batch = faiss.IDSelectorBatch(np.fromiter(ids, dtype=np.int64, count=len(ids)))
    drop = faiss.IDSelectorNot(batch)
    drop.keep = batch  # type: ignore[attr-defined]
    return drop


def _without(index: Any, drop: Any) -> Any:
    """Search parameters with the selector ``drop`` (an HNSW index keeps its efSearch, an
    IVF its nprobe; an ``IndexIDMap2`` translates the selector to its own ids)."""
    import faiss

    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else index
    if isinstance(inner, faiss.IndexHNSW):
        params = faiss.SearchParametersHNSW(sel=drop, efSearch=inner.hnsw.efSearch)
    elif isinstance(inner, faiss.IndexIVF):
        params = faiss.SearchParametersIVF(sel=drop, nprobe=inner.nprobe)
    else:
        params = faiss.SearchParameters(sel=drop)
    params.keep = drop  # type: ignore[attr-defined]  # the selector lives as long as params
    return params


def scaled_ef(ef_search: int, ntotal: int, per_100k: int, power: float = 1.0) -> int:
    """An HNSW index's efSearch at ``ntotal`` vectors: ``ef_search`` or ``per_100k`` times
    (started 100ks) ** ``power`` (power 1: per started 100k), whichever is larger."""
    started = -(-max(ntotal, 1) // 100_000)
    return max(ef_search, round(per_100k * started ** power))


class FaissBackend:
    """The faiss kinds' backend (:class:`IndexBackend`): files memory-mapped; an HNSW
    index removes nothing in place (its removed ids are left out of every search)."""

    mappable = True
    install_hint = "pip install faiss-cpu"
    ef_per_100k = 128  # hnsw: efSearch per started 100k vectors (recall@10 >= 0.95 kept)

    def available(self) -> bool:
        return True

    def make(self, spec: IndexShape, dim: int, capacity: int = 0) -> Any:
        return make_index(spec, dim)

    def read(self, path: str, spec: IndexShape, dim: int, mmap: bool) -> Any:
        import faiss

        flags = 0
        if mmap:
            flags = faiss.IO_FLAG_MMAP if spec.kind in ("ivf", "ivfpq") else faiss.IO_FLAG_MMAP_IFC
        return faiss.read_index(path, flags)

    def write(self, index: Any, path: str) -> None:
        import faiss

        faiss.write_index(index, path)

    def holds(self, index: Any, spec: IndexShape) -> bool:
        import faiss

        if spec.kind in ("ivf", "ivfpq"):
            cls = faiss.IndexIVFFlat if spec.kind == "ivf" else faiss.IndexIVFPQ
            return isinstance(index, cls) and index.nlist == spec.nlist
        if not isinstance(index, faiss.IndexIDMap2):
            return False
        inner = faiss.downcast_index(index.index)
        if spec.kind == "hnsw":
            return isinstance(inner, faiss.IndexHNSWFlat)
        return isinstance(inner, faiss.IndexFlat)

    def set_knobs(self, index: Any, nprobe: int, ef_search: int) -> None:
        set_query_knob(index, nprobe, scaled_ef(ef_search, int(index.ntotal), self.ef_per_100k))

    def drop(self, writable: Callable[[], Any], spec: IndexShape, ids: np.ndarray) -> bool:
        if spec.kind == "hnsw":
            return False  # faiss's HNSW cannot remove: skipped in searches instead
        writable().remove_ids(np.asarray(ids, dtype=np.int64))
        return True

    def search(self, index: Any, vectors: np.ndarray, depth: int, removed: Collection[int],
               exclusions: Exclusions) -> tuple[np.ndarray, np.ndarray]:
        return faiss_search(index, vectors, depth, exclusions.selector(removed))


def first_line(exc: BaseException) -> str:
    """An exception's message on one line (faiss errors carry a multi-line C++ trace)."""
    line = next((x.strip() for x in str(exc).splitlines() if x.strip()), type(exc).__name__)
    return _FAISS_WHERE.sub("", line)
