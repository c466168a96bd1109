"""The vector index of a KB directory: a faiss file kept in step with SQLite.

``vectors.faiss`` is a faiss ``IndexIDMap2(IndexFlatIP)`` over the chunk vectors, keyed by
chunk id; ``vectors.json`` records the SQLite generation and size it was written at. The
file is trusted only when that record matches SQLite and it reads back as an index of the
right dimension and size; otherwise it is rebuilt from the vectors stored in SQLite, so an
interrupted ingest or a damaged file never leaves the two out of step.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from medverify.errors import KBError
from medverify.kb.database import BUILD_HINT, DB_NAME, count_rows, read_generation

log = logging.getLogger(__name__)

INDEX_NAME = "vectors.faiss"
INDEX_META = "vectors.json"
SMALL_BATCH = 8  # query batches below this size search the vector index on one thread
_FAISS_WHERE = re.compile(r"^Error in .*? at \S+:\d+: (?:Error: )?")  # faiss's C++ location

IndexState = Literal["fresh", "stale", "missing"]


class VectorIndex:
    """The faiss index of the KB directory ``path``, loaded (or rebuilt from the vectors
    stored in SQLite, read through ``conn``) on first use."""

    def __init__(self, path: Path, dim: int, conn: sqlite3.Connection) -> None:
        self.path = path
        self.dim = dim
        self._conn = conn
        self.loaded: Any = None  # the faiss index once read or built

    def _generation(self) -> int:
        return read_generation(self._conn)

    def _count(self) -> int:
        return count_rows(self._conn)[1]

    def state(self) -> IndexState:
        if not (self.path / INDEX_NAME).is_file():
            return "missing"
        return "fresh" if self._meta_matches() else "stale"

    def _meta_matches(self) -> bool:
        try:
            recorded = json.loads((self.path / INDEX_META).read_text("utf-8"))
        except (OSError, ValueError):
            return False
        return recorded == {"generation": self._generation(), "ntotal": self._count()}

    def ensure(self) -> Any:
        """The faiss index: the saved file when it can be trusted, else rebuilt (and saved
        when the directory is writable)."""
        if self.loaded is None:
            index = self._read() if self.state() == "fresh" else None
            if index is not None:
                self.loaded = index
            else:
                self.loaded = self._build()
                self._try_save()
        return self.loaded

    def _read(self) -> Any | None:
        """The saved faiss index, or None (with a warning) when it cannot be used: a
        truncated, empty or foreign file, or one whose dimension or size is not the KB's."""
        import faiss

        path = self.path / INDEX_NAME
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as exc:
            problem = f"cannot be read ({first_line(exc)})"
        else:
            chunks = self._count()
            if (isinstance(index, faiss.IndexIDMap2) and index.d == self.dim
                    and index.ntotal == chunks):
                return index
            problem = (f"holds {index.ntotal} vectors of dimension {index.d} "
                       f"({type(index).__name__}), not {chunks} of dimension {self.dim}")
        log.warning("the vector index %s %s: rebuilding it from %s", path, problem, DB_NAME)
        return None

    def rebuild(self) -> None:
        """Rebuild the index from the vectors stored in SQLite, and save it.

        KBError when the stored vectors cannot be read (the KB must then be rebuilt)."""
        self.loaded = self._build()
        self.save()

    def _build(self) -> Any:
        import faiss

        index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        try:
            for ids, vectors in self.stored_vectors():
                index.add_with_ids(vectors, ids)
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise KBError(f"the vector index of {self.path} cannot be rebuilt from {DB_NAME} "
                          f"({first_line(exc)}): delete {self.path} and "
                          + BUILD_HINT.format(path=self.path)) from exc
        return index

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
        """Add committed chunks (``rebuild``: chunks were also deleted, so rebuild)."""
        if rebuild:
            self.loaded = None
            self.rebuild()
        else:
            self.ensure().add_with_ids(np.asarray(vectors, dtype=np.float32),
                                       np.asarray(ids, dtype=np.int64))

    def save(self) -> None:
        import faiss

        if self.loaded is None:
            return
        tmp = self.path / (INDEX_NAME + ".tmp")
        faiss.write_index(self.loaded, str(tmp))
        os.replace(tmp, self.path / INDEX_NAME)
        meta = {"generation": self._generation(), "ntotal": int(self.loaded.ntotal)}
        (self.path / (INDEX_META + ".tmp")).write_text(json.dumps(meta), "utf-8")
        os.replace(self.path / (INDEX_META + ".tmp"), self.path / INDEX_META)

    def search(self, vectors: np.ndarray, depth: int) -> list[list[tuple[int, float]]]:
        """Per query vector, up to ``depth`` (chunk id, inner product), best first."""
        index = self.ensure()
        if index.ntotal == 0 or not len(vectors):
            return [[] for _ in range(len(vectors))]
        scores, ids = faiss_search(index, vectors, depth)
        return [[(int(i), float(s)) for i, s in zip(row_ids, row_scores, strict=True) if i >= 0]
                for row_ids, row_scores in zip(ids, scores, strict=True)]


def faiss_search(index: Any, vectors: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Search; a few queries run on one thread (a flat scan of one query is bound by memory
    bandwidth, and OpenMP start-up and spinning cost more than a second core gains)."""
    import faiss

    if len(vectors) >= SMALL_BATCH:
        return index.search(vectors, depth)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        return index.search(vectors, depth)
    finally:
        faiss.omp_set_num_threads(threads)


def first_line(exc: BaseException) -> str:
    """An exception's message on one line (faiss errors carry a multi-line C++ trace)."""
    line = next((x.strip() for x in str(exc).splitlines() if x.strip()), type(exc).__name__)
    return _FAISS_WHERE.sub("", line)
