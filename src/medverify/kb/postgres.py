"""The knowledge base on PostgreSQL: one KB that several service replicas share.

Selected by ``[kb_settings] location = "postgresql://USER:PASSWORD@HOST:PORT/DB"``
(:func:`medverify.kb.open_store`), or by the ``postgresql`` name of
:data:`medverify.kb.KB_STORES` (``KB_STORES.build("postgresql", url, config)``). The tables and
what writes them are in :mod:`medverify.kb.postgres_schema`.

What is searched how: PostgreSQL holds documents, chunks and vectors (float32 ``bytea``;
pgvector is not used), the source of truth; each replica searches indexes derived from
them in memory (:mod:`medverify.kb.postgres_replica`):

* lexical: by default (``rank_function`` ``fts5``) the embedded store's own FTS5 index
  and BM25 ranking, fed from the chunk rows, so the candidates and scores are the
  embedded store's (same chunk ids: same order). ``ts_rank_cd`` / ``ts_rank`` rank in
  PostgreSQL instead (each chunk's ``tsv`` is ``to_tsvector('english', title || text)``,
  GIN-indexed; the query's words OR-ed into a tsquery): no replica memory, but their
  top 5 agrees with the embedded BM25's far less (measured in
  ``benchmarks/results/kb_postgres.md``). BM25 computed in SQL from stored postings
  (schema 1 and 2) agreed on 0.75-0.79 of the top 5 (PostgreSQL's Snowball stemmer is not
  FTS5's porter) and cost a third of an ingest's time: dropped in schema 3.
* dense: a faiss index of the kind the embedded KB would choose at this size (exact
  below ``[kb_settings] index_threshold`` chunks, ``auto``'s approximate kind from it).

A replica checks the KB's generation on a read at most every ``[kb_settings]
generation_poll_s`` seconds; when it moved, the chunks added and removed since the
replica's generation are applied to its indexes incrementally (:meth:`PostgresKB.follow`),
so a document taught or reverted on another replica is searched here within that bound
(plus the time to apply it). Chunks are always read from the tables: a chunk removed
since is never handed out, even by a replica whose indexes still have it.

Ingest (here or on an executor's workers) is :mod:`medverify.kb.postgres_ingest`.

:attr:`PostgresKB.generation` is the KB's generation in the database;
:attr:`PostgresKB.replica_generation` the one this replica's indexes have.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from medverify.config import KBSettings, RetrievalSettings
from medverify.connections import PostgresDatabase, display
from medverify.errors import KBError
from medverify.kb.database import (
    DOC_ID_PREFIX,
    META_KEY,
    KBStats,
    recorded_embedder,
    recorded_settings,
)
from medverify.kb.embed import Embedder, get_embedder
from medverify.kb.fts import LEXICAL_BUDGET, query_terms
from medverify.kb.ingest_batches import IngestStats
from medverify.kb.loaders import KBInput
from medverify.kb.postgres_ingest import PgIngester, unit_task
from medverify.kb.postgres_replica import ChunkRow, ReplicaIndexes
from medverify.kb.postgres_schema import (
    SCHEMA_VERSION,
    TS_CONFIG,
    initialise_meta,
    migrate,
    read_generation,
    read_meta,
    remove_documents,
)
from medverify.kb.protocol import Candidate, StoredChunk, Subset

if TYPE_CHECKING:
    from medverify.config import Config
    from medverify.executor import Executor

MAX_FILTERED = 20_000  # chunks a metadata filter may match (as the embedded store)
_CHUNK_COLUMNS = ('c.id, c.ord, c.text, c.start, c."end", d.doc_id, d.title, d.url, '
                  "d.source")


def tsquery_text(query: str) -> str:
    """The words of untrusted query text that a PostgreSQL query ORs together: the
    embedded store's query terms (word characters only), space-separated; passed as a
    parameter to ``plainto_tsquery``, so nothing in it is tsquery syntax."""
    return " ".join(query_terms(query))


_OR_QUERY = (f"(SELECT replace(plainto_tsquery('{TS_CONFIG}', ?)::text, '&', '|')::tsquery "
             "AS q) q")  # any of the words, as a tsquery (the words are a parameter)
SQL_RANKINGS = ("ts_rank_cd", "ts_rank")  # the rankings done in PostgreSQL


def lexical_sql(rank: str = "ts_rank_cd", normalization: int = 1) -> str:
    """The lexical candidates query ranked in PostgreSQL (parameters: the query's words
    and the depth): the chunks whose tsvector matches one of the words (GIN), ranked by
    ``ts_rank_cd`` or ``ts_rank`` with that normalization."""
    if rank not in SQL_RANKINGS:
        raise KBError(f"unknown lexical ranking {rank!r}: fts5 or one of {SQL_RANKINGS}")
    return (f"SELECT c.id, {rank}(c.tsv, q.q, {int(normalization)}) AS score FROM "
            f"kb_chunks c, {_OR_QUERY} WHERE c.tsv @@ q.q ORDER BY score DESC, c.id LIMIT ?")


def metadata_condition(where: Mapping[str, str]) -> tuple[str, list[Any]]:
    """The SQL condition over ``kb_documents d`` selecting the documents whose metadata
    matches every ``key=value`` (a list matches when one element does; case-insensitive;
    ``doc_id_prefix``: document ids starting with the value), as the embedded store's."""
    clauses: list[str] = []
    params: list[Any] = []
    for key, value in where.items():
        if key == DOC_ID_PREFIX:
            clauses.append("d.doc_id >= ? AND d.doc_id < ?")
            params += [value, value + "\U0010ffff"]
            continue
        if not META_KEY.fullmatch(key):
            raise KBError(f"bad metadata key {key!r}: letters, digits and _ only")
        clauses.append(
            "(CASE jsonb_typeof(d.meta -> ?) WHEN 'array' THEN EXISTS (SELECT 1 FROM "
            "jsonb_array_elements_text(d.meta -> ?) e WHERE lower(e) = lower(?)) "
            "ELSE lower(d.meta ->> ?) = lower(?) END)")
        params += [key, key, value, key, value]
    return " AND ".join(clauses) or "TRUE", params


class PostgresKB:
    """Documents, chunks, full-text search and stored vectors in PostgreSQL; a per-replica
    faiss index kept in step with the KB's generation."""

    def __init__(self, url: str, db: PostgresDatabase, retrieval: RetrievalSettings | None,
                 settings: KBSettings) -> None:
        self.url = url
        self.path = display(url)  # what a KB change records: the password masked
        self._db = db
        self.retrieval = retrieval or RetrievalSettings()
        self._knobs = settings
        self.poll_s = settings.generation_poll_s  # seconds between generation checks
        self._meta = read_meta(db)
        if int(self._meta.get("schema_version", "0")) != SCHEMA_VERSION:
            raise KBError(f"{self.path} has KB schema version "
                          f"{self._meta.get('schema_version')}, this medverify reads "
                          f"{SCHEMA_VERSION}")
        self._embedder: Embedder | None = None
        self._lock = threading.RLock()
        self._index: ReplicaIndexes | None = None  # this replica's indexes, built on first use
        self._at: int | None = None  # the generation the index has
        self._polled = 0.0  # time.monotonic() of the last generation check
        self._snapshot: tuple[int, str] | None = None
        self.rank_function, self.rank_normalization = "fts5", 1  # see lexical_candidates
        self.lexical_budget = LEXICAL_BUDGET  # postings a lexical query may read (BM25)
        self.flush_chunks = KBSettings().batch_size * 4  # the embedded ingest's batch

    # ---- construction -------------------------------------------------------------

    @classmethod
    def open(cls, url: str, settings: KBSettings | None = None,
             retrieval: RetrievalSettings | None = None) -> PostgresKB:
        """Open the KB in the database at ``url``, creating its tables (and recording
        ``settings``' embedder and chunking) when it has none."""
        settings = settings or KBSettings()
        db = PostgresDatabase(url)
        try:
            migrate(db)
            if "embedder_id" not in read_meta(db):
                embedder = get_embedder(settings.embedder, settings.embed_precision,
                                        settings.embed_device, settings.embed_runtime)
                initialise_meta(db, settings, embedder)
            return cls(url, db, retrieval, settings)
        except BaseException:
            db.close()
            raise

    @classmethod
    def from_config(cls, location: object, config: Config) -> PostgresKB:
        """The ``postgresql`` entry of :data:`medverify.kb.KB_STORES`."""
        return cls.open(str(location), config.kb_settings, config.retrieval)

    # ---- identity -----------------------------------------------------------------

    @property
    def embedder_id(self) -> str:
        return self._meta["embedder_id"]

    @property
    def dim(self) -> int:
        return int(self._meta["dim"])

    @property
    def settings(self) -> KBSettings:
        return recorded_settings(self._meta)

    @property
    def embedder(self) -> Embedder:
        """The KB's embedder (its recorded spec and precision), loaded on first use."""
        if self._embedder is None:
            self._embedder = recorded_embedder(self.path, self._meta, self._knobs.embed_device,
                                               self._knobs.embed_runtime)
        return self._embedder

    @property
    def generation(self) -> int:
        """The KB's generation in the database (bumped by every committed write)."""
        with self._lock:
            return read_generation(self._db)

    @property
    def replica_generation(self) -> int | None:
        """The generation this replica's vector index has (None before its first use)."""
        return self._at

    @property
    def lineage(self) -> str:
        """The KB's identity across ingests and removals (as the embedded store's)."""
        body = f"{self._meta['created_at']}|{self._meta['embedder_id']}"
        return "kbl-" + hashlib.sha256(body.encode()).hexdigest()[:16]

    @property
    def snapshot_id(self) -> str:
        """Changes whenever the content changes: the embedded store's hash of embedder,
        chunking and the sorted (doc_id, content hash) pairs."""
        with self._lock:
            generation = read_generation(self._db)
            if self._snapshot is None or self._snapshot[0] != generation:
                digest = hashlib.sha256()
                for key in ("embedder_id", "dim", "chunk_tokens", "chunk_overlap"):
                    digest.update(f"{key}={self._meta[key]}\n".encode())
                if self._meta.get("embed_precision", "fp32") != "fp32":
                    digest.update(f"embed_precision={self._meta['embed_precision']}\n"
                                  .encode())
                for doc_id, content in self._db.execute(
                        "SELECT doc_id, content_hash FROM kb_documents ORDER BY doc_id "
                        "COLLATE \"C\""):
                    digest.update(f"{doc_id}\x00{content}\n".encode("utf-8", "surrogatepass"))
                self._snapshot = (generation, "kb-" + digest.hexdigest()[:16])
            return self._snapshot[1]

    def counts(self) -> tuple[int, int]:
        """(documents, chunks) stored."""
        with self._lock:
            docs = self._db.execute("SELECT count(*) FROM kb_documents").fetchone()[0]
            chunks = self._db.execute("SELECT count(*) FROM kb_chunks").fetchone()[0]
            return int(docs), int(chunks)

    def stats(self) -> KBStats:
        """The KB's size, settings and identity (``vector_index``: whether this replica's
        indexes are at the KB's generation; ``size_bytes``: its tables on the server)."""
        documents, chunks = self.counts()
        with self._lock:
            size = self._db.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c WHERE "
                "c.relname LIKE 'kb\\_%' AND c.relkind = 'r' AND pg_table_is_visible(c.oid)"
            ).fetchone()[0]
            fresh = self._at is not None and self._at == read_generation(self._db)
            kind = self._index.spec.describe() if self._index is not None else "flat"
        settings = self.settings
        return KBStats(path=self.path, schema_version=SCHEMA_VERSION, documents=documents,
                       chunks=chunks, embedder_id=self.embedder_id, dim=self.dim,
                       chunk_tokens=settings.chunk_tokens, chunk_overlap=settings.chunk_overlap,
                       snapshot_id=self.snapshot_id, vector_index="fresh" if fresh else "stale",
                       size_bytes=int(size), index_policy=self._knobs.index, index_kind=kind,
                       embed_precision=self._meta.get("embed_precision", "fp32"))

    # ---- writes (the side review teaching uses) -----------------------------------

    def ingest(self, documents: Iterable[KBInput],
               progress: Callable[[IngestStats], None] | None = None,
               executor: Executor | None = None) -> IngestStats:
        """Add documents (unchanged ones skipped, changed ones replaced, partial ones
        resumed): chunked here, embedded and written in units here or, with ``executor``,
        by its workers (:mod:`medverify.kb.postgres_ingest`); this replica's indexes follow
        at once, the others' within ``generation_poll_s``."""
        task = None
        if executor is not None:
            task = unit_task(self.url, self._meta, self.embedder, self._knobs.embed_device,
                             self._knobs.embed_runtime)
        ingester = PgIngester(self._db, self.embedder, int(self._meta["chunk_tokens"]),
                              int(self._meta["chunk_overlap"]), self.flush_chunks, task,
                              executor)
        with self._lock, self._refusal_is_an_error():
            stats = ingester.run(documents, progress)
            self.follow(force=True)
            return stats

    def remove_documents(self, doc_ids: Iterable[str]) -> int:
        """Remove documents by id (one new generation); this replica's indexes follow at
        once, the others within ``generation_poll_s``. Returns how many were removed."""
        with self._lock, self._refusal_is_an_error():
            removed = remove_documents(self._db, doc_ids)
            self.follow(force=True)
            return removed

    @contextmanager
    def _refusal_is_an_error(self) -> Iterator[None]:
        """A statement the server refused (a constraint, a full disk, a lock timeout) is
        one KBError: the write's transaction was rolled back, the KB holds what its last
        committed batch left. A lost server stays StoreUnavailable (it says so)."""
        try:
            yield
        except self._db.Error as exc:
            detail = " ".join(str(exc).split())[:240]
            raise KBError(f"the knowledge base at {self.path} refused a write ({detail}); "
                          "nothing of the failed batch was kept: run it again") from None

    # ---- keeping the replica's vector index in step -------------------------------

    def follow(self, force: bool = False) -> bool:
        """Bring this replica's indexes (lexical and vector) to the KB's generation: built
        from the tables on first use, then the chunks added and removed since applied
        incrementally. Reads the generation at most every ``poll_s`` seconds unless
        ``force``. Returns whether the indexes changed."""
        with self._lock:
            now = time.monotonic()
            if not force and self._index is not None and now - self._polled < self.poll_s:
                return False
            self._polled = now
            generation = read_generation(self._db)
            if self._index is not None and generation == self._at:
                return False
            if self._index is None:
                self._build(generation)
            else:
                self._apply(self._at or 0, generation)
            self._at = generation
            return True

    _ROWS = ('SELECT c.id, d.title, c.text, c.vector FROM kb_chunks c JOIN kb_documents d '
             "ON d.id = c.doc WHERE c.generation > ? AND c.generation <= ? AND c.id > ? "
             "ORDER BY c.id LIMIT ?")

    def _rows(self, since: int, generation: int, block: int = 8192) -> list[ChunkRow]:
        """The chunks stored after generation ``since`` up to ``generation``, by id (read
        in blocks of ``block`` rows)."""
        rows: list[ChunkRow] = []
        last = 0
        while True:
            part = self._db.execute(self._ROWS, (since, generation, last, block)).fetchall()
            rows += [ChunkRow(int(r[0]), r[1], r[2], bytes(r[3])) for r in part]
            if len(part) < block:
                return rows
            last = rows[-1].id

    def _build(self, generation: int) -> None:
        replica = ReplicaIndexes(self.dim, self._knobs)
        replica.build(self._rows(-1, generation))
        if self._index is not None:
            self._index.close()
        self._index = replica

    def _apply(self, since: int, generation: int) -> None:
        """Remove the chunks tombstoned and add the chunks stored after ``since`` (up to
        ``generation``); the vector index rebuilt when it no longer fits the KB's size."""
        gone = [r[0] for r in self._db.execute(
            "SELECT chunk_id FROM kb_removed WHERE generation > ? AND generation <= ?",
            (since, generation))]
        self._index.remove(gone)
        self._index.add(self._rows(since, generation))
        if self._index.outgrown():
            self._index.rebuild_vectors(self._rows(-1, generation))
        self._index.follow_postings()

    def replica_memory(self) -> dict[str, int]:
        """Bytes this replica's indexes hold (:meth:`ReplicaIndexes.memory`; zeros before
        the first search)."""
        with self._lock:
            if self._index is None:
                return {"lexical_bytes": 0, "vector_bytes": 0}
            return self._index.memory()

    # ---- primitive searches (ranking is the Retriever's) ---------------------------

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the store (its connection and index) for a series of reads."""
        with self._lock:
            yield

    def lexical_candidates(self, query: str, depth: int) -> list[Candidate]:
        """Up to ``depth`` (chunk id, score) of the chunks holding one of the query's words,
        best first (ties by chunk id): by default (``rank_function`` ``fts5``) this
        replica's FTS5 index ranks them by BM25 exactly as the embedded store does
        (following the KB's generation first; the most common words dropped past
        ``lexical_budget`` postings); ``ts_rank_cd`` / ``ts_rank``: ranked in PostgreSQL
        (:func:`lexical_sql`)."""
        words = tsquery_text(query)
        if not words or depth <= 0:
            return []
        with self._lock:
            if self.rank_function == "fts5":
                self.follow()
                return self._index.lexical(query, depth, self.lexical_budget)
            rows = self._db.execute(lexical_sql(self.rank_function, self.rank_normalization),
                                    (words, depth)).fetchall()
        return [(int(i), float(s)) for i, s in rows]

    def dense_candidates(self, queries: Sequence[str], depth: int) -> list[list[Candidate]]:
        """Per query, up to ``depth`` (chunk id, inner product), most similar first, from
        this replica's index (following the KB's generation first)."""
        with self._lock:
            self.follow()
            if self._index.size == 0 or not queries:
                return [[] for _ in queries]
            vectors = np.asarray(self.embedder.embed(list(queries)), dtype=np.float32)
            return self._index.dense(vectors, depth)

    def chunks(self, ids: Sequence[int]) -> dict[int, StoredChunk]:
        """The stored chunks of ``ids`` by chunk id (ids not stored are left out)."""
        if not ids:
            return {}
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_CHUNK_COLUMNS} FROM kb_chunks c JOIN kb_documents d ON "
                "d.id = c.doc WHERE c.id = ANY(?)", ([int(i) for i in ids],)).fetchall()
        return {int(r[0]): StoredChunk(*r) for r in rows}

    def subset(self, where: Mapping[str, str], limit: int = MAX_FILTERED) -> Subset:
        """The chunks of the documents ``where`` selects, with their stored vectors (what
        the retriever ranks exactly in memory: taught documents, a trial's sections).
        KBError past ``limit`` chunks."""
        condition, params = metadata_condition(where)
        join = "FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc"
        with self._lock:
            count = self._db.execute(f"SELECT count(*) {join} WHERE {condition}",
                                     params).fetchone()[0]
            if count > limit:
                raise KBError(f"the filter matches {count:,} chunks, more than the "
                              f"{limit:,} ranked exactly in memory: narrow it")
            rows = self._db.execute(f"SELECT {_CHUNK_COLUMNS}, c.vector {join} WHERE "
                                    f"{condition} ORDER BY c.id", params).fetchall()
        chunks = [StoredChunk(*r[:9]) for r in rows]
        vectors = (np.frombuffer(b"".join(bytes(r[9]) for r in rows), dtype=np.float32)
                   .reshape(len(rows), self.dim) if rows
                   else np.zeros((0, self.dim), dtype=np.float32))
        return Subset(chunks, vectors)

    def document_meta(self, doc_id: str) -> dict[str, Any] | None:
        """A stored document's metadata (None when not stored)."""
        with self._lock:
            row = self._db.execute("SELECT meta FROM kb_documents WHERE doc_id = ?",
                                   (doc_id,)).fetchone()
        if row is None:
            return None
        return row[0] if isinstance(row[0], dict) else json.loads(row[0])

    # ---- lifecycle ----------------------------------------------------------------

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> PostgresKB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
