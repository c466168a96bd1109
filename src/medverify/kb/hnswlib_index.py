"""The hnswlib index backend (kind ``hnswlib``; optional: ``pip install 'medverify[hnswlib]'``).

:class:`HnswlibBackend` is registered in ``medverify.kb.index.INDEX_BACKENDS`` beside faiss's;
``auto`` picks it from ``index_threshold`` chunks when the ``hnswlib`` package imports (it
answers a query faster than faiss's HNSW on a graph of the same parameters and than IVF at
equal recall: docs/scale.md "HNSW where it wins"), faiss otherwise. :class:`HnswlibIndex`
wraps an ``hnswlib.Index`` (inner product, M :data:`medverify.kb.index.HNSW_M`,
ef_construction :data:`medverify.kb.index.HNSW_EF_CONSTRUCTION`) in the faiss surface the
KB's index code uses (``d``, ``ntotal``, ``add_with_ids``), chunk ids as hnswlib labels.

- Removal: ``mark_deleted`` (the vector stays in the graph as a waypoint, is never returned,
  costs nothing per query); the ids are also recorded as removed (``vectors.json``), and the
  index is rebuilt without them past the same limit as faiss's HNSW.
- Threads: adding uses faiss's OpenMP thread count (``OMP_NUM_THREADS``), a search of fewer
  than :data:`medverify.kb.faiss_ops.SMALL_BATCH` queries one thread, as faiss's.
- ef: :data:`EF_PER_100K` times (started 100ks) ** :data:`EF_POWER` (:meth:`HnswlibBackend.ef`),
  or ``ef_search`` if larger, measured to keep recall@10 >= 0.95 at 100k and 1M.
- Memory: hnswlib reads its file whole (no memory map): each process holding the index
  holds all of it (about 1.7 GB at 1M vectors of 384 dimensions), where a faiss file is
  mapped and shared through the page cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import Any

import numpy as np

from medverify.errors import KBError
from medverify.kb.faiss_ops import SMALL_BATCH, Exclusions, IndexShape, scaled_ef

EF_PER_100K = 128  # efSearch at 100k vectors (recall@10 0.963 there: bench_ann_peers.py)
EF_POWER = 0.8  # ... times (started 100ks) ** this: 1M -> 808 (hnswlib ef 768: 0.9545)
GROWTH = 1.25  # capacity grows by this factor when an add outgrows it (hnswlib preallocates)
INSTALL_HINT = "pip install 'medverify[hnswlib]' (or index = \"auto\": faiss without it)"


@functools.cache
def _importable() -> bool:
    """Whether the hnswlib package imports here (asked once per process)."""
    try:
        import hnswlib  # noqa: F401
    except ImportError:
        return False
    return True


def _threads() -> int:
    """faiss's OpenMP thread count (``OMP_NUM_THREADS``, or faiss.omp_set_num_threads)."""
    import faiss

    return max(1, int(faiss.omp_get_max_threads()))


class HnswlibIndex:
    """An ``hnswlib.Index`` (space ``ip``) with the faiss-like surface of a KB's index."""

    is_trained = True

    def __init__(self, index: Any, dim: int) -> None:
        self.index = index
        self.d = dim

    @property
    def ntotal(self) -> int:
        """Vectors held, those marked deleted included (as faiss's HNSW counts them)."""
        return int(self.index.get_current_count())

    @property
    def ef(self) -> int:
        return int(self.index.ef)

    def add_with_ids(self, vectors: np.ndarray, ids: np.ndarray) -> None:
        """Add (or replace: a label held, even marked deleted, is updated and live again)."""
        if not len(ids):
            return
        need = self.ntotal + len(ids)
        if need > self.index.get_max_elements():
            self.index.resize_index(max(need, int(self.index.get_max_elements() * GROWTH)))
        self.index.add_items(np.ascontiguousarray(vectors, dtype=np.float32),
                             np.asarray(ids, dtype=np.int64), num_threads=_threads())

    def mark_deleted(self, ids: np.ndarray) -> None:
        """Mark ``ids`` deleted (ids not held, or already deleted, are skipped)."""
        for label in np.asarray(ids, dtype=np.int64).tolist():
            try:
                self.index.mark_deleted(label)
            except RuntimeError:  # not held, or already marked
                continue

    def search(self, vectors: np.ndarray, depth: int,
               live: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids) ``depth`` wide, padded with -1 ids past the ``live`` vectors."""
        rows, k = len(vectors), min(depth, live)
        if k <= 0 or not rows:
            return (np.full((rows, depth), -np.inf, dtype=np.float32),
                    np.full((rows, depth), -1, dtype=np.int64))
        queries = np.ascontiguousarray(vectors, dtype=np.float32)
        threads = 1 if rows < SMALL_BATCH else _threads()
        try:  # (positional: pybind11 parses keywords slower, and this is per query)
            labels, distances = self.index.knn_query(queries, k, threads)
        except RuntimeError:  # fewer than k found (a graph with many deleted): one by one
            return self._one_by_one(queries, depth, k)
        # hnswlib's labels are uint64: viewed as int64 (the values astype gives, no copy);
        # ip distance is 1 - product, so the score is 1 - distance (float32, in place)
        ids = labels.view(np.int64)
        scores = np.subtract(1.0, distances, out=distances)
        if k < depth:
            ids = np.pad(ids, ((0, 0), (0, depth - k)), constant_values=-1)
            scores = np.pad(scores, ((0, 0), (0, depth - k)), constant_values=-np.inf)
        return scores, ids

    def pairs(self, vectors: np.ndarray, depth: int,
              live: int) -> list[list[tuple[int, float]]]:
        """Per query, the (id, score) pairs :meth:`search` finds, best first, without its -1
        padding: what ``VectorIndex.search`` returns. Built with as few numpy calls as can
        be: a query's graph walk evicts numpy's code from the CPU caches, so each call after
        it costs several times what it costs timed in a loop (bench_ann_overhead.py)."""
        k = min(depth, live)
        if k <= 0 or not len(vectors):
            return [[] for _ in range(len(vectors))]
        threads = 1 if len(vectors) < SMALL_BATCH else _threads()
        try:  # (hnswlib casts the queries to C-ordered float32 itself: pybind11 forcecast)
            labels, distances = self.index.knn_query(vectors, k, threads)
        except RuntimeError:  # fewer than k found: search's way, then its pairs
            from medverify.kb.index import found_pairs

            scores, ids = self.search(vectors, depth, live)
            return [found_pairs(r, t) for r, t in zip(ids.tolist(), scores.tolist(), strict=True)]
        # hnswlib's labels (uint64) are the chunk ids added, never -1: Python ints as they
        # are; the score 1 - distance in float32, as search's
        scores = np.subtract(1.0, distances, out=distances).tolist()
        return list(map(list, map(zip, labels.tolist(), scores)))  # rows of k (id, score)

    def _one_by_one(self, queries: np.ndarray, depth: int,
                    k: int) -> tuple[np.ndarray, np.ndarray]:
        scores = np.full((len(queries), depth), -np.inf, dtype=np.float32)
        ids = np.full((len(queries), depth), -1, dtype=np.int64)
        for row, query in enumerate(queries):
            for want in range(k, 0, -1):
                try:
                    labels, distances = self.index.knn_query(query[None, :], k=want,
                                                             num_threads=1)
                except RuntimeError:
                    continue
                ids[row, :want] = labels[0].astype(np.int64)
                scores[row, :want] = 1.0 - distances[0]
                break
        return scores, ids


class HnswlibBackend:
    """The ``hnswlib`` kind's backend (:class:`medverify.kb.faiss_ops.IndexBackend`)."""

    mappable = False  # hnswlib reads its file whole
    install_hint = INSTALL_HINT

    def available(self) -> bool:
        return _importable()

    def _module(self) -> Any:
        try:
            import hnswlib
        except ImportError as exc:
            raise KBError(f"the vector index kind 'hnswlib' needs the hnswlib package: "
                          f"{INSTALL_HINT}") from exc
        return hnswlib

    def make(self, spec: IndexShape, dim: int, capacity: int = 0) -> HnswlibIndex:
        index = self._module().Index(space="ip", dim=dim)
        index.init_index(max_elements=max(capacity, 16), ef_construction=spec.hnsw_efc,
                         M=spec.hnsw_m, random_seed=100)
        return HnswlibIndex(index, dim)

    def read(self, path: str, spec: IndexShape, dim: int, mmap: bool) -> HnswlibIndex:
        try:
            hnswlib = self._module()
        except KBError as exc:
            raise RuntimeError(str(exc)) from exc
        index = hnswlib.Index(space="ip", dim=dim)
        try:  # hnswlib checks the sizes its header implies against the file's
            index.load_index(path)
        except (MemoryError, ValueError, OSError) as exc:  # (a header asking for too much)
            raise RuntimeError(f"not an hnswlib index ({type(exc).__name__}: {exc})") from exc
        if index.get_max_elements() > index.get_current_count() + 16:
            index.resize_index(index.get_current_count() + 16)  # no spare capacity held
        return HnswlibIndex(index, dim)

    def write(self, index: HnswlibIndex, path: str) -> None:
        index.index.save_index(path)

    def holds(self, index: Any, spec: IndexShape) -> bool:
        return (isinstance(index, HnswlibIndex) and int(index.index.M) == spec.hnsw_m
                and int(index.index.ef_construction) == spec.hnsw_efc)

    @staticmethod
    def ef(ef_search: int, ntotal: int) -> int:
        """The ef an index of ``ntotal`` vectors searches with (docs/scale.md)."""
        return scaled_ef(ef_search, ntotal, EF_PER_100K, EF_POWER)

    def set_knobs(self, index: HnswlibIndex, nprobe: int, ef_search: int) -> None:
        index.index.set_ef(self.ef(ef_search, index.ntotal))

    def drop(self, writable: Callable[[], Any], spec: IndexShape, ids: np.ndarray) -> bool:
        writable().mark_deleted(ids)
        return False  # still held (as waypoints): recorded as removed, rebuilt past a limit

    def search(self, index: HnswlibIndex, vectors: np.ndarray, depth: int,
               removed: Collection[int], exclusions: Exclusions) -> tuple[np.ndarray, np.ndarray]:
        return index.search(vectors, depth, index.ntotal - len(removed))

    def search_pairs(self, index: HnswlibIndex, vectors: np.ndarray, depth: int,
                     removed: Collection[int]) -> list[list[tuple[int, float]]]:
        """:meth:`search`'s results as ``VectorIndex.search`` returns them (optional in a
        backend: built in fewer steps than from the arrays, :meth:`HnswlibIndex.pairs`)."""
        return index.pairs(vectors, depth, index.ntotal - len(removed))
