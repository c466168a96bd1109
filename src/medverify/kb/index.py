"""The vector index of a KB directory: a faiss file kept in step with SQLite.

``vectors.faiss`` is the index over the chunk vectors, keyed by chunk id, of one of
:data:`INDEX_KINDS`: ``flat`` (exact, ``IndexIDMap2(IndexFlatIP)``), ``ivf`` (IVF-flat:
exact inner products inside the ``nprobe`` nearest of ``nlist`` k-means lists), ``ivfpq``
(IVF with product-quantised codes, 8x smaller, lossy), ``hnsw`` (``IndexIDMap2`` over
``IndexHNSWFlat``, M :data:`HNSW_M`, efConstruction :data:`HNSW_EF_CONSTRUCTION`) or
``hnswlib`` (an hnswlib graph of the same parameters, written by hnswlib under the same name;
optional package). Each kind's library is its backend in :data:`INDEX_BACKENDS` (faiss:
:class:`~medverify.kb.faiss_ops.FaissBackend`, hnswlib:
:class:`~medverify.kb.hnswlib_index.HnswlibBackend`). The KB's policy (SQLite meta
``vector_index``: ``auto`` or a kind) chooses it; ``auto`` is exact below :data:`EXACT_BELOW`
chunks and a graph from there: the first kind of :data:`AUTO_GRAPHS` whose package imports
(hnswlib: 1.2-2x faster per query than faiss's HNSW, and than IVF at 1M; docs/scale.md).

Why HNSW (``benchmarks/bench_ann_peers.py``, one vector set, queries on one thread; see
docs/scale.md "HNSW where it wins"): at recall@10 >= 0.95 it answers a query 5x faster
than IVF-flat at 100k (0.169 ms against 0.857 ms) and hundreds of times faster than an
exact scan, which stays below the threshold (exact, free to build, removes in place).
The graph sets the recall at a given ``ef_search``: faiss's default efConstruction (40)
never reached 0.95 at M 16, efConstruction 100 does at ef 96. hnswlib on a graph of the
same parameters is still 1.3-1.4x faster per query at that ef (issue 45's 1.1x: missed).
HNSW's costs: building (67 s per 100k on two loaded cores, 4x IVF's) and removal (neither
graph removes in place: removed ids are recorded in ``vectors.json`` and left out of every
search, faiss by a selector, hnswlib marked deleted, and the index is rebuilt from SQLite
once they pass :data:`REMOVED_LIMIT` or a tenth of the KB). A KB of auto's policy holding
another kind than auto now picks (IVF from before, faiss's HNSW once hnswlib is installed)
is rebuilt as that kind by its next ingest or removal.

``vectors.json`` records what the file is: the SQLite generation and size it was written
at, its kind and parameters, and the embedder and dimension of its vectors. The file is
trusted only when that record matches SQLite and it reads back as an index of that kind,
dimension and size; otherwise it is rebuilt from the vectors stored in SQLite, so an
interrupted ingest or a damaged file never leaves the two out of step.

A trusted faiss file is read memory-mapped (faiss ``IO_FLAG_MMAP`` for IVF inverted lists,
``IO_FLAG_MMAP_IFC`` for flat and HNSW storage, the HNSW graph included: opening one takes
no anonymous memory, measured): opening a KB of millions of chunks costs milliseconds and
pages come from the OS page cache, shared between processes. A mapped
index is read-only, so it is loaded into memory before anything is added or removed.
An hnswlib file is read whole (hnswlib maps nothing): each process holds all of it.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from medverify.errors import KBError
from medverify.kb.database import BUILD_HINT, DB_NAME, count_rows, read_generation
from medverify.kb.faiss_ops import (  # noqa: F401  (re-exported: one import for callers)
    SMALL_BATCH,
    Exclusions,
    IndexBackend,
    faiss_search,
    first_line,
    make_index,
    set_query_knob,
)
from medverify.kb.index_policy import (  # noqa: F401  (re-exported)
    AUTO_GRAPHS,
    EF_PER_100K,
    EXACT_BELOW,
    GRAPH_KINDS,
    HNSW_BELOW,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    INDEX_BACKENDS,
    INDEX_KINDS,
    INDEX_POLICIES,
    MIN_TRAIN,
    IndexKind,
    IndexSpec,
    SearchKnobs,
    auto_graph,
    auto_kind,
    auto_next,
    choose_spec,
    hnsw_ef,
    index_backend,
)

log = logging.getLogger(__name__)

INDEX_NAME = "vectors.faiss"
INDEX_META = "vectors.json"

IndexState = Literal["fresh", "stale", "missing"]
RETRAIN_GROWTH = 4  # auto: an IVF index is retrained once the KB is this many times larger
TRAIN_PER_LIST = 40  # k-means training vectors per IVF list
REMOVED_LIMIT = 1000  # hnsw: removed vectors left in the graph before a rebuild (or a tenth)


class VectorIndex:
    """The faiss index of the KB directory ``path``, loaded (or rebuilt from the vectors
    stored in SQLite, read through ``conn``) on first use.

    ``policy`` is the KB's recorded choice (``auto`` or a kind), ``embedder_id`` the KB's
    embedder (recorded with the file), ``threshold`` where ``auto`` turns approximate,
    ``knobs`` the query-time parameters, ``mmap`` whether a saved file is memory-mapped."""

    def __init__(self, path: Path, dim: int, conn: sqlite3.Connection, policy: str = "auto",
                 embedder_id: str = "", threshold: int = EXACT_BELOW,
                 knobs: SearchKnobs | None = None, mmap: bool = True) -> None:
        self.path = path
        self.dim = dim
        self._conn = conn
        self.policy = policy
        self.embedder_id = embedder_id
        self.threshold = threshold
        self.knobs = knobs or SearchKnobs()
        self.mmap = mmap
        self.loaded: Any = None  # the faiss index once read or built
        self.spec: IndexSpec | None = None  # what the loaded index is
        self.mapped = False  # whether the loaded index is memory-mapped (read-only)
        self.trained_at = 0  # vectors an IVF index was trained for (its nlist's basis)
        self.removed: set[int] = set()  # chunk ids an HNSW index holds but the KB removed
        self._exclusions = Exclusions()  # the search selector leaving them out

    def _generation(self) -> int:
        return read_generation(self._conn)

    def _count(self) -> int:
        return count_rows(self._conn)[1]

    def state(self) -> IndexState:
        if not (self.path / INDEX_NAME).is_file():
            return "missing"
        return "fresh" if self._meta_matches() else "stale"

    def recorded(self) -> dict[str, Any] | None:
        """What ``vectors.json`` records, or None when it cannot be read."""
        try:
            record = json.loads((self.path / INDEX_META).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def _meta_matches(self) -> bool:
        recorded = self.recorded()
        if recorded is None:
            return False
        if (recorded.get("generation"), recorded.get("ntotal")) != (self._generation(),
                                                                     self._count()):
            return False
        # written by this version: the embedder and dimension must be the KB's too
        return all(recorded.get(key, mine) == mine
                   for key, mine in (("embedder_id", self.embedder_id), ("dim", self.dim))
                   if mine)

    def recorded_spec(self) -> IndexSpec | None:
        """The kind of the saved file (None when there is no readable record)."""
        recorded = self.recorded()
        try:
            return IndexSpec.from_record(recorded) if recorded is not None else None
        except ValueError:
            return None

    def wanted_spec(self, count: int | None = None) -> IndexSpec:
        """The index the policy asks for at ``count`` chunks (default: the KB's size)."""
        return choose_spec(self.policy, self._count() if count is None else count, self.dim,
                           self.threshold)

    def current_spec(self) -> IndexSpec:
        """The loaded index's spec, else the saved file's, else what would be built."""
        if self.spec is not None:
            return self.spec
        recorded = self.recorded_spec() if self.state() == "fresh" else None
        return recorded or self.wanted_spec()

    def ensure(self) -> Any:
        """The faiss index: the saved file when it can be trusted (memory-mapped), else
        rebuilt (and saved when the directory is writable)."""
        if self.loaded is None:
            index = self._read(self.mmap) if self.state() == "fresh" else None
            if index is None:
                self.loaded, self.mapped = self._build(), False
                self._try_save()
        return self.loaded

    def writable(self) -> Any:
        """The index loaded in memory (a memory-mapped one is read again without mmap:
        faiss aborts the process on a write to a mapped index)."""
        index = self.ensure()
        if self.mapped:
            self.loaded, self.mapped = None, False
            index = self._read(mmap=False)
            if index is None:
                self.loaded = self._build()
                self._try_save()
            index = self.loaded
        return index

    def _read(self, mmap: bool) -> Any | None:
        """Load the saved faiss index (sets ``loaded``), or None (with a warning) when it
        cannot be used: a truncated, empty or foreign file, or one whose kind, dimension or
        size is not the recorded one."""
        path = self.path / INDEX_NAME
        spec = self.recorded_spec() or IndexSpec()
        backend = index_backend(spec.kind)
        mmap = mmap and backend.mappable
        try:
            index = backend.read(str(path), spec, self.dim, mmap)
        except RuntimeError as exc:
            problem = f"cannot be read ({first_line(exc)})"
        else:
            chunks = self._count()
            removed = {int(i) for i in (self.recorded() or {}).get("removed", ())}
            if (backend.holds(index, spec) and index.d == self.dim
                    and index.ntotal == chunks + len(removed)):
                self.loaded, self.spec, self.mapped = index, spec, mmap
                self.trained_at = int((self.recorded() or {}).get("trained_at", chunks))
                self.removed = removed
                self._apply_knobs()
                return index
            problem = (f"holds {index.ntotal} vectors of dimension {index.d} "
                       f"({type(index).__name__}), not {chunks} of dimension {self.dim} "
                       f"in a {spec.describe()} index")
        log.warning("the vector index %s %s: rebuilding it from %s", path, problem, DB_NAME)
        return None

    def rebuild(self, spec: IndexSpec | None = None) -> None:
        """Rebuild the index from the vectors stored in SQLite (as ``spec``, default the
        one the policy asks for at the KB's size), and save it.

        KBError when the stored vectors cannot be read (the KB must then be rebuilt)."""
        self.loaded, self.mapped = None, False
        self.loaded = self._build(spec)
        self.save()

    def _build(self, spec: IndexSpec | None = None) -> Any:
        spec = spec or self.wanted_spec()
        try:
            index = self._make(spec)
            if not index.is_trained:
                self._train(index)
            for ids, vectors in self.stored_vectors():
                index.add_with_ids(vectors, ids)
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise KBError(f"the vector index of {self.path} cannot be rebuilt from {DB_NAME} "
                          f"({first_line(exc)}): delete {self.path} and "
                          + BUILD_HINT.format(path=self.path)) from exc
        self.spec, self.trained_at, self.removed = spec, self._count(), set()
        self._apply_knobs(index)
        return index

    def _make(self, spec: IndexSpec) -> Any:
        return index_backend(spec.kind).make(spec, self.dim, self._count())

    @property
    def backend(self) -> IndexBackend:
        """The library of the loaded (else the saved, else the wanted) index."""
        return index_backend(self.current_spec().kind)

    def _train(self, index: Any) -> None:
        """k-means on an evenly spaced sample of the stored vectors (one pass over them).
        An empty KB trains on nothing: the index is then trained on first add."""
        import faiss

        count = self._count()
        nlist = faiss.extract_index_ivf(index).nlist
        want = max(TRAIN_PER_LIST * nlist, 256 * 39 if isinstance(index, faiss.IndexIVFPQ)
                   else 0)
        step = max(1, count // max(want, 1))
        blocks = [vectors for _, vectors in self._strided(step)]
        sample = (np.concatenate(blocks) if blocks
                  else np.zeros((0, self.dim), dtype=np.float32))
        if len(sample) < nlist:
            raise ValueError(f"{len(sample)} vectors cannot train {nlist} IVF lists")
        ivf = faiss.extract_index_ivf(index)
        ivf.cp.niter = 10
        ivf.cp.max_points_per_centroid = max(ivf.cp.max_points_per_centroid, TRAIN_PER_LIST)
        index.train(np.ascontiguousarray(sample, dtype=np.float32))

    def _strided(self, step: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if step <= 1:
            yield from self.stored_vectors()
            return
        for n, (ids, vectors) in enumerate(self.stored_vectors()):
            keep = (np.arange(len(ids)) + n * 8192) % step == 0
            yield ids[keep], vectors[keep]

    def _apply_knobs(self, index: Any = None) -> None:
        index = self.loaded if index is None else index
        if index is not None and self.spec is not None:
            index_backend(self.spec.kind).set_knobs(index, self.knobs.nprobe,
                                                    self.knobs.ef_search)

    def set_knobs(self, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Change the query-time parameters of the loaded index (and later loads)."""
        if nprobe is not None:
            self.knobs.nprobe = nprobe
        if ef_search is not None:
            self.knobs.ef_search = ef_search
        self._apply_knobs()

    def stored_vectors(self, block: int = 8192) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, vectors) of every chunk stored in SQLite, in blocks of ``block`` rows, by
        id; ValueError for a vector of the wrong size."""
        cursor = self._conn.execute("SELECT id, vector FROM chunks ORDER BY id")
        size = self.dim * 4
        while rows := cursor.fetchmany(block):
            bad = next((r for r in rows if len(r[1]) != size), None)
            if bad is not None:
                raise ValueError(f"chunk {bad[0]} has a vector of {len(bad[1])} bytes, "
                                 f"not {size}")
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32)
            yield ids, vectors.reshape(len(rows), self.dim)

    def _try_save(self) -> None:
        """Save a rebuilt index; if the directory is not writable, keep it in memory."""
        try:
            self.save()
        except (OSError, RuntimeError) as exc:
            log.warning("could not save the rebuilt vector index in %s (%s); using it from "
                        "memory", self.path, first_line(exc))

    def add(self, ids: list[int], vectors: np.ndarray, rebuild: bool) -> None:
        """Add committed chunks (``rebuild``: chunks were also deleted, so rebuild; so is an
        index still holding a removed chunk's id that SQLite gave to a new chunk)."""
        if rebuild or not self.removed.isdisjoint(int(i) for i in ids):
            self.rebuild(self.spec)
            return
        self.writable().add_with_ids(np.asarray(vectors, dtype=np.float32),
                                     np.asarray(ids, dtype=np.int64))
        self._apply_knobs()  # (an HNSW index's ef follows its size)

    def remove(self, ids: list[int]) -> None:
        """Drop removed chunks' vectors, and save. A graph removes nothing in place (faiss's
        HNSW; hnswlib marks them deleted): its ids are recorded as removed (``vectors.json``)
        and left out of every search, until :meth:`outgrown` asks for a rebuild (more than
        :data:`REMOVED_LIMIT` or a tenth of the index). A kind that fails to remove them is
        rebuilt."""
        if not ids:
            return
        self.ensure()
        wanted = np.asarray(ids, dtype=np.int64)
        try:
            dropped = index_backend(self.current_spec().kind).drop(
                self.writable, self.current_spec(), wanted)
        except RuntimeError as exc:
            log.warning("could not remove %d vectors from the vector index (%s): rebuilding "
                        "it from SQLite", len(ids), first_line(exc))
            self.rebuild()
            return
        if not dropped:
            self.removed.update(int(i) for i in ids)
        self.save()

    def outgrown(self) -> IndexSpec | None:
        """The index the policy now asks for, when the loaded one no longer fits the KB's
        size (``auto`` crossed a boundary, with :func:`auto_next`'s hysteresis, or an IVF
        index's lists were trained for a KB four times smaller), or holds too many removed
        vectors (HNSW: more than :data:`REMOVED_LIMIT` or a tenth); None when it fits."""
        count = self._count()
        current = self.spec or self.recorded_spec() or IndexSpec()
        if len(self.removed) > max(REMOVED_LIMIT, count // 10):
            return current
        kind: str = self.policy
        if self.policy == "auto":
            kind = auto_next(current.kind, count, self.threshold)
        wanted = choose_spec(kind, count, self.dim, self.threshold)
        if wanted.kind != current.kind:
            return wanted
        if wanted.kind in ("ivf", "ivfpq") and count > RETRAIN_GROWTH * max(self.trained_at, 1):
            return wanted
        return None

    def save(self) -> None:
        if self.loaded is None:
            return
        spec = self.spec or IndexSpec()
        if not self.mapped:  # a mapped index is the saved file itself: its record only
            tmp = self.path / (INDEX_NAME + ".tmp")
            index_backend(spec.kind).write(self.loaded, str(tmp))
            os.replace(tmp, self.path / INDEX_NAME)
        meta = {"generation": self._generation(),
                "ntotal": int(self.loaded.ntotal) - len(self.removed),
                **spec.record(), "embedder_id": self.embedder_id, "dim": self.dim,
                "trained_at": self.trained_at, "removed": sorted(self.removed)}
        (self.path / (INDEX_META + ".tmp")).write_text(json.dumps(meta), "utf-8")
        os.replace(self.path / (INDEX_META + ".tmp"), self.path / INDEX_META)

    def search(self, vectors: np.ndarray, depth: int) -> list[list[tuple[int, float]]]:
        """Per query vector, up to ``depth`` (chunk id, inner product), best first."""
        index = self.ensure()
        backend = index_backend(self.current_spec().kind)
        pairs = getattr(backend, "search_pairs", None)  # hnswlib's: straight to the pairs
        if pairs is not None:  # (an empty index or no vectors: empty lists)
            return pairs(index, vectors, depth, self.removed)
        if index.ntotal == 0 or not len(vectors):
            return [[] for _ in range(len(vectors))]
        scores, ids = backend.search(index, vectors, depth, self.removed, self._exclusions)
        return [found_pairs(row_ids, row_scores)
                for row_ids, row_scores in zip(ids.tolist(), scores.tolist(), strict=True)]


def found_pairs(ids: list[int], scores: list[float]) -> list[tuple[int, float]]:
    """One query's (id, score) pairs, the -1 ids of places nothing filled left out (a row
    without any, the usual one, is zipped whole: this runs once per query)."""
    if not ids or min(ids) >= 0:
        return list(zip(ids, scores, strict=True))
    return [(i, s) for i, s in zip(ids, scores, strict=True) if i >= 0]

