"""The indexes of a :class:`~medverify.kb.store.KnowledgeBase` and the primitive searches
over them: the vector index (faiss's or hnswlib's) kept in step with SQLite (and rebuilt),
the stored lexical postings (built, dropped, their state), and the candidates the retrieval
stage combines (lexical, dense, a metadata subset, chunks by id). Ranking (modes, fusion,
passages with scores) is :class:`medverify.retrieve.Retriever`'s.

:class:`KBIndexes` is a mixin of :class:`~medverify.kb.store.KnowledgeBase`: it uses the
store's connection, metadata, embedder and its ``reading``/``writing`` locks.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from medverify.kb.database import CHUNK_COLUMNS, subset_rows
from medverify.kb.fts import (
    LexicalKnobs,
    StoredPostings,
    document_frequencies,
    rank_lexical,
)
from medverify.kb.index import IndexSpec, VectorIndex, choose_spec
from medverify.kb.lock import GuardedVectorIndex
from medverify.kb.postings_build import build_postings, drop_postings
from medverify.kb.protocol import Candidate, StoredChunk, Subset

if TYPE_CHECKING:
    from medverify.kb.embed import Embedder

INDEX_POLICY_KEY = "vector_index"  # meta: the KB's vector index policy (auto or a kind)
LEXICAL_EXACT = 1000  # postings past which a lexical query is ranked without bm25() ...
MAX_FILTERED = 20_000  # chunks a metadata filter may match (ranked exactly in memory)


class KBIndexes:
    """The vector index, the stored lexical postings and the primitive searches of a KB
    (a mixin: the attributes below are the store's)."""

    _conn: sqlite3.Connection
    _meta: dict[str, str]
    _vectors: GuardedVectorIndex
    _vectors_at: int | None
    _postings: StoredPostings
    dim: int
    embedder: Embedder
    generation: int
    index_policy: str
    lexical_budget: int
    lexical_exact: int
    lexical_large: int | None
    lexical_postings_from: int | None
    writing: Any  # (activity: str) -> context manager holding the writer lock
    reading: Any  # () -> context manager holding the KB for reads
    _counts: Any  # () -> (documents, chunks)

    # ---- vector index -------------------------------------------------------------

    @property
    def vector_index(self) -> VectorIndex:
        """The vector index kept in step with the stored vectors."""
        return self._vectors

    @property
    def _index(self) -> Any:
        """The loaded vector index (None until first used)."""
        return self._vectors.loaded

    def rebuild_index(self, policy: str | None = None, nlist: int | None = None) -> IndexSpec:
        """Rebuild the faiss index from the vectors stored in SQLite, and save it; with
        ``policy`` (``auto`` or a kind), record that choice in the KB first. ``nlist``
        overrides the IVF list count. Returns what was built.

        KBError when the stored vectors cannot be read (the KB must then be rebuilt)."""
        with self.writing("reindex"):
            if policy is not None:
                spec = choose_spec(policy, self._counts()[1], self.dim,
                                   self._vectors.threshold, nlist)  # KBError if unknown
                with self._conn:
                    self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES "
                                       "(?, ?)", (INDEX_POLICY_KEY, policy))
                self._meta[INDEX_POLICY_KEY] = policy
                self._vectors.policy = policy
            spec = choose_spec(self.index_policy, self._counts()[1], self.dim,
                               self._vectors.threshold, nlist)
            self._vectors.rebuild(spec)
            self._vectors_at = self.generation
            return spec


    # ---- primitive searches (ranking is the Retriever's) ---------------------------

    def lexical_candidates(self, query: str, depth: int) -> list[Candidate]:
        """Up to ``depth`` (chunk id, BM25 score) of the chunks matching the query's terms,
        best first (ties by chunk id), as :func:`medverify.kb.fts.rank_lexical` ranks them
        with this KB's ``lexical_*`` settings and its stored postings (when fresh)."""
        knobs = LexicalKnobs(self.lexical_budget, self.lexical_exact, self.lexical_large,
                             self.lexical_postings_from)
        with self.reading():
            return rank_lexical(self._conn, query, depth, knobs, self._postings_ranked)

    def build_lexical_postings(self) -> dict[str, int]:
        """Write the stored postings (every FTS5 token's chunk ids and hits, every chunk's
        length) that rank lexical queries on a large KB, recorded at the KB's generation:
        any later change to the KB makes them stale, and stale postings are never read
        (bm25() ranks until they are built again). Holds the KB's write lock meanwhile
        (43-111 s at 1M chunks, measured). Returns counts (terms, postings, rows, tokens)."""
        with self.writing("lexical postings build"):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                stats = build_postings(self._conn, self.generation)
                self._conn.commit()
            except BaseException:
                self._conn.rollback()
                raise
            self._postings.forget()
            return stats

    def drop_lexical_postings(self) -> None:
        """Remove the stored postings (bm25() ranks every lexical query again)."""
        with self.writing("lexical postings drop"), self._conn:
            drop_postings(self._conn)
            self._postings.forget()

    def lexical_postings_state(self) -> Literal["fresh", "stale", "missing"]:
        """Whether the KB holds stored postings at its current generation."""
        with self.reading():
            return self._postings.state()

    def _postings_ranked(self, terms: Sequence[str], depth: int) -> list[Candidate] | None:
        """:meth:`medverify.kb.fts.StoredPostings.ranked` of this KB's stored postings."""
        return self._postings.ranked(terms, depth)

    def _document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        return document_frequencies(self._conn, terms)

    def _current_vectors(self) -> Any:
        """The faiss index, in step with SQLite: when another process (a worker of the
        service teaching or reverting) changed the KB since this one loaded its index and
        has saved its own, the saved index is loaded; this process's own changes keep the
        loaded index in step."""
        generation = self.generation
        if (self._vectors.loaded is not None and generation != self._vectors_at
                and self._vectors.state() == "fresh"):  # (mid-ingest elsewhere: not yet)
            self._vectors.loaded = None
        if self._vectors.loaded is None:
            self._vectors.ensure()
            self._vectors_at = generation
        return self._vectors.loaded

    def dense_candidates(self, queries: Sequence[str], depth: int) -> list[list[Candidate]]:
        """Per query, up to ``depth`` (chunk id, inner product with the query's embedding),
        most similar first; the queries are embedded in one batch (nothing is embedded when
        the KB is empty)."""
        with self.reading():
            index = self._current_vectors()
            if index.ntotal == 0 or not queries:
                return [[] for _ in queries]
            vectors = np.asarray(self.embedder.embed(list(queries)), dtype=np.float32)
            return self._vectors.search(vectors, depth)

    def subset(self, where: Mapping[str, str], limit: int = MAX_FILTERED) -> Subset:
        """The chunks of the documents whose metadata matches every ``key=value`` of
        ``where`` (a list-valued field matches when one element does; strings compare
        case-insensitively; ``true``/``false`` match booleans), with their stored vectors,
        for exact ranking in memory. KBError when more than ``limit`` chunks match.

        Metadata filters read every document's metadata (linear in the KB's documents);
        the reserved key ``doc_id_prefix`` selects documents whose id starts with the value
        through the document-id index (a trial KB's ``NCT02210780#``: one trial's sections,
        at any KB size)."""
        with self.reading():
            return subset_rows(self._conn, where, limit, self.dim)

    def chunks(self, ids: Sequence[int]) -> dict[int, StoredChunk]:
        """The stored chunks of ``ids``, with their documents' identity, by chunk id."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        with self.reading():
            rows = self._conn.execute(
                f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.doc "
                f"WHERE c.id IN ({marks})", list(ids))
            return {r[0]: StoredChunk(*r) for r in rows}
