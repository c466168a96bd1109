"""A replica's derived search indexes of a KB on PostgreSQL, kept in step with the KB's
generation (:meth:`medverify.kb.postgres.PostgresKB.follow`).

PostgreSQL holds the documents, chunks and vectors (the source of truth); each replica
(service process) searches two indexes derived from them, in memory:

* lexical: the embedded store's own full-text index, fed from the chunk rows: an in-memory
  SQLite with the embedded KB's ``chunks_fts`` (FTS5, the same tokenizer: porter,
  unicode61, diacritics removed) and ``terms`` (the chunks holding each word) tables, keyed
  by the PostgreSQL chunk id. A lexical query is ranked by the embedded store's ranking
  (:func:`medverify.kb.fts.rank_lexical`: bm25(), the same lexical budget), so with the
  same chunk ids it gives the embedded store's candidates and scores exactly.
* dense: a vector index of the kind the embedded KB would choose at this size
  (:func:`medverify.kb.index.choose_spec` with ``[kb_settings] index``, ``index_threshold``,
  ``nprobe``, ``ef_search``), made by that kind's backend (``INDEX_BACKENDS``: faiss, or
  hnswlib when installed, as the embedded KB): exact below the threshold, approximate from
  it (``auto``'s kind), an IVF one trained as the embedded index is (the same strided
  sample, k-means iterations and seed).

Changes are applied incrementally: chunks added, chunk ids removed (a graph, which cannot
remove in place, leaves them out of its results instead: faiss's HNSW by a selector,
hnswlib marked deleted). An index whose kind no longer fits
the KB's size (``auto`` crossing the threshold, an IVF grown 4x past what it was trained
on, an HNSW index holding more removed vectors than a tenth of its size) is rebuilt from
the rows, as the embedded one is.

From ``[kb_settings] lexical_postings_from`` chunks (100,000) the replica also builds the
embedded KB's stored postings (:mod:`medverify.kb.postings_build`) after each change, as
the embedded KB does after each write, and ranks from them in numpy (the same scores).

Memory per replica: the FTS5 table holds each chunk's title and text and their postings,
plus the stored postings on a large KB (:meth:`ReplicaIndexes.memory` reads SQLite's page
count); the vector index ``dim * 4 + 8`` bytes a chunk (flat or IVF-flat) plus the IVF
centroids, or plus about ``2 * M * 4`` bytes of links (HNSW, faiss's or hnswlib's).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from medverify.config import KBSettings
from medverify.kb.fts import (
    LexicalKnobs,
    StoredPostings,
    chunk_terms,
    last_chunk_id,
    rank_lexical,
)
from medverify.kb.index import (
    GRAPH_KINDS,
    RETRAIN_GROWTH,
    TRAIN_PER_LIST,
    Exclusions,
    IndexSpec,
    SearchKnobs,
    auto_next,
    choose_spec,
    index_backend,
)
from medverify.kb.postings_build import build_postings
from medverify.kb.protocol import Candidate
from medverify.kb.store_indexes import LEXICAL_EXACT

# the embedded KB's lexical tables (medverify.kb.database.SCHEMA), in memory
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"
LEXICAL_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
INSERT INTO meta (key, value) VALUES ('generation', '0');
CREATE TABLE chunks (id INTEGER PRIMARY KEY);
CREATE TABLE terms (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;
CREATE VIRTUAL TABLE chunks_fts USING fts5(title, body, tokenize = '{FTS_TOKENIZE}');
"""


@dataclass(frozen=True)
class ChunkRow:
    """What a replica indexes of a chunk: its id, its document's title, text and vector."""

    id: int
    title: str | None
    text: str
    vector: bytes


class ReplicaIndexes:
    """The in-memory lexical (FTS5) and vector (faiss) indexes of one replica. Callers
    serialise writes and searches (the store's lock)."""

    def __init__(self, dim: int, settings: KBSettings) -> None:
        self.dim = dim
        self.policy = settings.index
        self.threshold = settings.index_threshold
        self.knobs = SearchKnobs(settings.nprobe, settings.ef_search)
        self.postings_from = settings.lexical_postings_from  # as the embedded KB: stored
        # postings (FTS5's bm25 in numpy) rank lexical queries from this many chunks
        self._conn = sqlite3.connect(":memory:", isolation_level=None,
                                     check_same_thread=False)
        self._conn.executescript(LEXICAL_SCHEMA)
        self._postings = StoredPostings(self._conn)
        self.vectors: Any = None  # the vector index (faiss's, or the hnswlib wrapper)
        self.spec = IndexSpec()
        self.trained_at = 0  # vectors an IVF index was trained on
        self._dead: set[int] = set()  # ids removed that the vector index cannot drop (hnsw)
        self._exclusions = Exclusions()  # the search selector leaving them out
        self.dead_limit = 1000  # ... rebuilt past this many, or a tenth of the index

    # ---- building and applying changes ---------------------------------------------

    def build(self, rows: Sequence[ChunkRow]) -> None:
        """Both indexes from scratch over ``rows`` (ascending ids)."""
        self._conn.execute("DELETE FROM chunks_fts")
        self._conn.execute("DELETE FROM chunks")
        self._conn.execute("DELETE FROM terms")
        self._add_lexical(rows)
        self.rebuild_vectors(rows)
        self.follow_postings()

    def rebuild_vectors(self, rows: Sequence[ChunkRow]) -> None:
        """The vector index over ``rows`` (ascending ids), of the kind the policy asks for
        at their count."""
        self.spec = choose_spec(self.policy, len(rows), self.dim, self.threshold)
        index = index_backend(self.spec.kind).make(self.spec, self.dim, len(rows))
        ids, vectors = _arrays(rows, self.dim)
        if not index.is_trained:
            _train(index, vectors)
        if len(ids):
            index.add_with_ids(vectors, ids)
        self._apply_knobs(index)
        self.vectors, self.trained_at, self._dead = index, len(rows), set()

    def add(self, rows: Sequence[ChunkRow]) -> None:
        """Index chunks added to the KB (ids not indexed yet)."""
        if not rows:
            return
        self._add_lexical(rows)
        ids, vectors = _arrays(rows, self.dim)
        self.vectors.add_with_ids(vectors, ids)
        self._apply_knobs(self.vectors)  # (an HNSW index's ef follows its size)

    def remove(self, ids: Iterable[int]) -> None:
        """Drop chunks removed from the KB (ids not indexed are skipped)."""
        wanted = sorted({int(i) for i in ids})
        held: list[int] = []  # the ids indexed (both indexes hold the same ids)
        for start in range(0, len(wanted), 500):
            part = wanted[start:start + 500]
            marks = ",".join("?" * len(part))
            rows = self._conn.execute(f"SELECT rowid, title, body FROM chunks_fts WHERE "
                                      f"rowid IN ({marks})", part).fetchall()
            self._count_terms([(r[1], r[2]) for r in rows], -1)
            self._conn.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", part)
            self._conn.execute(f"DELETE FROM chunks WHERE id IN ({marks})", part)
            held += [int(r[0]) for r in rows]
        self._conn.execute("DELETE FROM terms WHERE df <= 0")
        self._changed()
        if not held:
            return
        try:
            dropped = index_backend(self.spec.kind).drop(
                lambda: self.vectors, self.spec, np.asarray(held, dtype=np.int64))
        except RuntimeError:
            dropped = False
        if not dropped:  # a graph removes nothing in place: left out of its results instead,
            self._dead.update(held)  # until outgrown() asks for a rebuild

    def outgrown(self) -> bool:
        """Whether the vector index no longer fits the KB's size (``auto`` crossed its
        threshold, with the embedded index's hysteresis; IVF grown 4x since training), or
        holds more removed vectors it could not drop than a tenth of its size."""
        count = self.size
        if len(self._dead) > max(self.dead_limit, count // 10):
            return True
        kind: str = self.policy
        if self.policy == "auto":  # the embedded index's hysteresis
            kind = auto_next(self.spec.kind, count, self.threshold)
        wanted = choose_spec(kind, count, self.dim, self.threshold)
        return wanted.kind != self.spec.kind or (
            wanted.kind in ("ivf", "ivfpq") and count > RETRAIN_GROWTH * max(self.trained_at, 1))

    def _add_lexical(self, rows: Sequence[ChunkRow]) -> None:
        self._conn.execute("BEGIN")
        try:
            self._conn.executemany("INSERT INTO chunks_fts (rowid, title, body) VALUES "
                                   "(?, ?, ?)", [(r.id, r.title or "", r.text) for r in rows])
            self._conn.executemany("INSERT INTO chunks (id) VALUES (?)", [(r.id,) for r in rows])
            self._count_terms([(r.title, r.text) for r in rows], +1)
            self._changed()
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise

    def _changed(self) -> None:
        """A new lexical generation: stored postings built before are stale (not read)."""
        self._conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 "
                           "WHERE key = 'generation'")

    def follow_postings(self) -> bool:
        """As the embedded KB after a write: on an index of ``postings_from`` chunks or more
        whose stored postings are stale, build them (seconds at 100k chunks: measured in
        benchmarks/results/kb_postgres.md). Returns whether they were built."""
        if (self.postings_from is None or last_chunk_id(self._conn) < self.postings_from
                or self._postings.ranker() is not None):
            return False
        generation = int(self._conn.execute(
            "SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
        self._conn.execute("BEGIN")
        try:
            build_postings(self._conn, generation)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._postings.forget()
        return True

    def _count_terms(self, texts: Sequence[tuple[str | None, str]], sign: int) -> None:
        counts: dict[str, int] = {}
        for title, text in texts:
            for term in chunk_terms(title, text):
                counts[term] = counts.get(term, 0) + sign
        self._conn.executemany("INSERT INTO terms (term, df) VALUES (?, ?) ON CONFLICT(term) "
                               "DO UPDATE SET df = df + excluded.df", counts.items())

    def _apply_knobs(self, index: Any) -> None:
        index_backend(self.spec.kind).set_knobs(index, self.knobs.nprobe, self.knobs.ef_search)

    # ---- searching ----------------------------------------------------------------

    def lexical(self, query: str, depth: int, budget: int) -> list[Candidate]:
        """The embedded store's lexical candidates (bm25() over the FTS5 table, or the same
        scores from fresh stored postings from ``postings_from`` chunks; the most common
        words dropped past ``budget`` postings)."""
        knobs = LexicalKnobs(budget, LEXICAL_EXACT, None, self.postings_from)
        return rank_lexical(self._conn, query, depth, knobs, self._postings.ranked)

    def dense(self, vectors: np.ndarray, depth: int) -> list[list[Candidate]]:
        """Per query vector, up to ``depth`` (chunk id, inner product), best first."""
        if self.size == 0 or not len(vectors):
            return [[] for _ in range(len(vectors))]
        scores, ids = index_backend(self.spec.kind).search(self.vectors, vectors, depth,
                                                           self._dead, self._exclusions)
        return [[(i, s) for i, s in zip(row_ids, row, strict=True) if i >= 0]
                for row_ids, row in zip(ids.tolist(), scores.tolist(), strict=True)]

    @property
    def size(self) -> int:
        """Chunks indexed (removed ones left out)."""
        return 0 if self.vectors is None else int(self.vectors.ntotal) - len(self._dead)

    def memory(self) -> dict[str, int]:
        """Bytes held: the in-memory SQLite's pages (the FTS5 table with its text and
        postings, the terms, the stored postings) and the vector index (stored vectors,
        ids, IVF centroids, HNSW links: estimated from its kind)."""
        pages = self._conn.execute("PRAGMA page_count").fetchone()[0]
        page = self._conn.execute("PRAGMA page_size").fetchone()[0]
        total = 0 if self.vectors is None else int(self.vectors.ntotal)
        links = 2 * self.spec.hnsw_m * 4 * 1.07  # level 0 and (~1/M of nodes) upper levels
        vectors = (total * (self.dim * 4 + 8 + (links if self.spec.kind in GRAPH_KINDS else 0))
                   + self.spec.nlist * self.dim * 4)
        return {"lexical_bytes": int(pages * page), "vector_bytes": int(vectors)}

    def close(self) -> None:
        self._conn.close()


def _arrays(rows: Sequence[ChunkRow], dim: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.fromiter((r.id for r in rows), dtype=np.int64, count=len(rows))
    vectors = np.frombuffer(b"".join(r.vector for r in rows), dtype=np.float32)
    return ids, vectors.reshape(len(rows), dim)


def _train(index: Any, vectors: np.ndarray) -> None:
    """k-means on the embedded index's sample: every ``step``-th vector by position (its
    8192-row blocks keep the positions whose global offset is a multiple of ``step``), 10
    iterations, faiss's default seed."""
    import faiss

    ivf = faiss.extract_index_ivf(index)
    want = max(TRAIN_PER_LIST * ivf.nlist,
               256 * 39 if isinstance(index, faiss.IndexIVFPQ) else 0)
    step = max(1, len(vectors) // max(want, 1))
    sample = vectors[::step] if step > 1 else vectors
    if len(sample) < ivf.nlist:
        raise ValueError(f"{len(sample)} vectors cannot train {ivf.nlist} IVF lists")
    ivf.cp.niter = 10
    ivf.cp.max_points_per_centroid = max(ivf.cp.max_points_per_centroid, TRAIN_PER_LIST)
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
