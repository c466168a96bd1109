"""The tables of a knowledge base on PostgreSQL and what writes them: versioned migrations,
the settings rows, ingest (chunk, embed, insert) and removal, each write one transaction
that bumps the KB's generation.

Tables (all ``kb_``-prefixed, so a KB can share a database or schema with the run store)::

    kb_meta       key/value settings: schema_version, embedder, dim, chunking, generation
    kb_documents  one row per document (doc_id unique, content hash, metadata as jsonb)
    kb_chunks     text, offsets, float32 vector (bytea), the generation that added it,
                  tsv: to_tsvector('english', title || text), GIN-indexed, and fts_len:
                  its words (title and text), the length BM25 normalises by
    kb_terms      per lexeme, the chunks whose tsv holds it (BM25's document frequency);
                  with kb_meta's fts_chunks and fts_tokens, the statistics BM25 reads
    kb_postings   per lexeme and chunk, its frequency there (the tsvector's positions)
                  and the chunk's length: what a BM25 query reads, by lexeme
    kb_removed    tombstones: chunk ids removed, with the generation that removed them

A replica keeps its in-memory vector index in step by reading the chunks added and the
tombstones written after the generation it has (:mod:`medverify.kb.postgres`).

Writers are serialised by a transaction-scoped advisory lock of their own (not the run
store's), so two replicas teaching at once apply one after the other.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from medverify.config import KBSettings
from medverify.connections import PostgresDatabase
from medverify.kb.chunking import WINDOW_CHARS, Chunk, iter_chunks
from medverify.kb.database import spec_of
from medverify.kb.embed import Embedder, precision_of
from medverify.kb.ingest import EMBED_UNIT
from medverify.kb.ingest_batches import IngestStats, document_hash, document_pieces
from medverify.kb.loaders import KBInput

SCHEMA_VERSION = 1
KB_LOCK = 0x6D65_646B_6277  # "medkbw": the KB's write lock (the run store has its own)
TS_CONFIG = "english"  # the text search configuration of tsv and of every query
BATCH_CHUNKS = 256  # chunks embedded and committed together (the embedded store's batch)
WORD = re.compile(r"\w+")  # the words a chunk's BM25 length counts

MIGRATIONS: list[tuple[int, list[str]]] = [
    (1, [
        "CREATE TABLE IF NOT EXISTS kb_documents (id BIGSERIAL PRIMARY KEY, "
        "doc_id TEXT NOT NULL UNIQUE, content_hash TEXT NOT NULL, title TEXT, url TEXT, "
        "source TEXT, meta JSONB NOT NULL DEFAULT '{}', n_chunks INTEGER NOT NULL, "
        "added_at DOUBLE PRECISION NOT NULL)",
        "CREATE TABLE IF NOT EXISTS kb_chunks (id BIGSERIAL PRIMARY KEY, "
        "doc BIGINT NOT NULL REFERENCES kb_documents(id) ON DELETE CASCADE, "
        'ord INTEGER NOT NULL, text TEXT NOT NULL, start INTEGER NOT NULL, "end" INTEGER '
        "NOT NULL, n_tokens INTEGER NOT NULL, vector BYTEA NOT NULL, "
        "generation BIGINT NOT NULL, tsv TSVECTOR NOT NULL, fts_len INTEGER NOT NULL)",
        "CREATE TABLE IF NOT EXISTS kb_terms (lexeme TEXT PRIMARY KEY, df BIGINT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS kb_postings (lexeme TEXT NOT NULL, chunk_id BIGINT NOT "
        "NULL REFERENCES kb_chunks(id) ON DELETE CASCADE, tf INTEGER NOT NULL, "
        "len INTEGER NOT NULL, PRIMARY KEY (lexeme, chunk_id))",
        "CREATE INDEX IF NOT EXISTS kb_postings_chunk ON kb_postings(chunk_id)",
        "CREATE INDEX IF NOT EXISTS kb_chunks_doc ON kb_chunks(doc)",
        "CREATE INDEX IF NOT EXISTS kb_chunks_generation ON kb_chunks(generation)",
        "CREATE INDEX IF NOT EXISTS kb_chunks_tsv ON kb_chunks USING GIN (tsv)",
        "CREATE TABLE IF NOT EXISTS kb_removed (chunk_id BIGINT PRIMARY KEY, "
        "generation BIGINT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS kb_removed_generation ON kb_removed(generation)",
    ]),
]


def migrate(db: PostgresDatabase) -> None:
    """Create or upgrade the KB's tables: each missing migration in one transaction under
    the KB's write lock (replicas opening a new database at once apply it once)."""
    db.begin()
    try:
        db.execute("SELECT pg_advisory_xact_lock(?)", (KB_LOCK,))
        db.execute("CREATE TABLE IF NOT EXISTS kb_meta (key TEXT PRIMARY KEY, "
                   "value TEXT NOT NULL)")
        row = db.execute("SELECT value FROM kb_meta WHERE key = 'schema_version'").fetchone()
        have = int(row[0]) if row else 0
        for version, statements in MIGRATIONS:
            if version > have:
                for statement in statements:
                    db.execute(statement)
                have = version
        db.execute(db.upsert_sql("kb_meta", ["key", "value"], ["key"]),
                   ("schema_version", str(have)))
        db.commit()
    except BaseException:
        db.rollback()
        raise


def read_meta(db: PostgresDatabase) -> dict[str, str]:
    return {str(k): str(v) for k, v in db.execute("SELECT key, value FROM kb_meta")}


def initialise_meta(db: PostgresDatabase, settings: KBSettings, embedder: Embedder) -> None:
    """Record the KB's settings when none are recorded yet (the first replica to open an
    empty database decides them; the others read them)."""
    meta = {"embedder_id": embedder.id, "embedder_spec": spec_of(embedder, settings.embedder),
            "dim": str(embedder.dim),
            "embed_precision": precision_of(embedder),
            "chunk_tokens": str(settings.chunk_tokens),
            "chunk_overlap": str(settings.chunk_overlap), "generation": "0",
            "created_at": str(time.time())}
    db.begin()
    try:
        db.execute("SELECT pg_advisory_xact_lock(?)", (KB_LOCK,))
        sql = db.insert_ignore_sql("kb_meta", ["key", "value"])
        for key, value in meta.items():
            db.execute(sql, (key, value))
        db.commit()
    except BaseException:
        db.rollback()
        raise


def read_generation(db: PostgresDatabase) -> int:
    row = db.execute("SELECT value FROM kb_meta WHERE key = 'generation'").fetchone()
    return int(row[0])


def _words(title: str | None, text: str) -> int:
    """A chunk's length for BM25: its words, title included (FTS5's token count)."""
    return len(WORD.findall(title or "")) + len(WORD.findall(text))


@dataclass
class _Batch:
    """Chunks of one or more documents embedded and committed together."""

    rows: list[tuple[str, int, Chunk, str | None]] = field(default_factory=list)
    # (doc_id, order, chunk, title)


class PgWriter:
    """Ingest and removal into the KB tables, one transaction per batch, each holding the
    KB's write lock and bumping its generation."""

    def __init__(self, db: PostgresDatabase, embedder: Embedder, chunk_tokens: int,
                 chunk_overlap: int) -> None:
        self.db = db
        self.embedder = embedder
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap

    def _begin(self) -> int:
        """Open a write transaction under the lock; returns the new generation."""
        self.db.begin()
        self.db.execute("SELECT pg_advisory_xact_lock(?)", (KB_LOCK,))
        row = self.db.execute("UPDATE kb_meta SET value = (value::bigint + 1)::text "
                              "WHERE key = 'generation' RETURNING value").fetchone()
        return int(row[0])

    def ingest(self, documents: Iterable[KBInput]) -> IngestStats:
        """Add documents: an unchanged one (same doc_id and content hash) is skipped, a
        changed one replaced. Chunks are embedded in batches of :data:`BATCH_CHUNKS` (in
        units of ``EMBED_UNIT`` as the embedded store does), each batch one transaction."""
        started, stats = time.perf_counter(), IngestStats()
        batch, docs = _Batch(), []
        for doc in documents:
            stats.documents_seen += 1
            state = self._state(doc)
            if state == "unchanged":
                stats.documents_unchanged += 1
                continue
            chunks = list(self._chunks(doc))
            if not chunks:
                stats.documents_empty += 1
                continue
            stats.documents_updated += state == "changed"
            stats.documents_added += state == "new"
            docs.append(doc)
            batch.rows += [(doc.doc_id, order, c, doc.title) for order, c in enumerate(chunks)]
            if len(batch.rows) >= BATCH_CHUNKS:
                stats.chunks_added += self._store(docs, batch)
                batch, docs = _Batch(), []
        if docs:
            stats.chunks_added += self._store(docs, batch)
        stats.seconds = time.perf_counter() - started
        return stats

    def _state(self, doc: KBInput) -> str:
        row = self.db.execute("SELECT content_hash FROM kb_documents WHERE doc_id = ?",
                              (doc.doc_id,)).fetchone()
        if row is None:
            return "new"
        return "unchanged" if row[0] == document_hash(doc) else "changed"

    def _chunks(self, doc: KBInput) -> Iterator[Chunk]:
        return iter_chunks(document_pieces(doc), self.embedder.tokenizer, self.chunk_tokens,
                           self.chunk_overlap, WINDOW_CHARS)

    def _embed(self, batch: _Batch) -> np.ndarray:
        # what is embedded for a chunk, as in medverify.kb.ingest: its title, then its text
        texts = [f"{title}\n{c.text}" if title else c.text for _, _, c, title in batch.rows]
        parts = [np.asarray(self.embedder.embed(texts[i:i + EMBED_UNIT]), dtype=np.float32)
                 for i in range(0, len(texts), EMBED_UNIT)]
        return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)

    def _store(self, docs: list[KBInput], batch: _Batch) -> int:
        """One transaction: replace the batch's documents and insert their chunks."""
        vectors = self._embed(batch)  # before the lock: other writers are not held up
        generation = self._begin()
        try:
            rows = {}
            for doc in docs:
                self._delete(doc.doc_id, generation)
                n = sum(1 for d, *_ in batch.rows if d == doc.doc_id)
                rows[doc.doc_id] = self.db.insert_id(
                    "INSERT INTO kb_documents (doc_id, content_hash, title, url, source, "
                    "meta, n_chunks, added_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (doc.doc_id, document_hash(doc), doc.title, doc.url, doc.source,
                     json.dumps(doc.meta, default=str), n, time.time()))
            self.db.executemany(
                'INSERT INTO kb_chunks (doc, ord, text, start, "end", n_tokens, vector, '
                "generation, tsv, fts_len) VALUES (?, ?, ?, ?, ?, ?, ?, ?, "
                f"to_tsvector('{TS_CONFIG}', ?), ?)",
                [(rows[d], o, c.text, c.span.start, c.span.end, c.n_tokens, v.tobytes(),
                  generation, f"{title or ''} {c.text}", _words(title, c.text))
                 for (d, o, c, title), v in zip(batch.rows, vectors, strict=True)])
            self.db.execute(
                "INSERT INTO kb_postings (lexeme, chunk_id, tf, len) SELECT u.lexeme, c.id, "
                "cardinality(u.positions), c.fts_len FROM kb_chunks c, unnest(c.tsv) u "
                "WHERE c.generation = ?", (generation,))
            self.db.execute(
                "INSERT INTO kb_terms (lexeme, df) SELECT u.lexeme, count(*) FROM kb_chunks "
                "c, unnest(c.tsv) u WHERE c.generation = ? GROUP BY u.lexeme ON CONFLICT "
                "(lexeme) DO UPDATE SET df = kb_terms.df + excluded.df", (generation,))
            self._count_statistics()
            self.db.commit()
        except BaseException:
            self.db.rollback()
            raise
        return len(batch.rows)

    def _count_statistics(self) -> None:
        """In the write transaction: the chunk count and word total BM25 reads (a scan of
        the chunks' lengths: linear in the KB per write), and lexemes no chunk holds
        dropped."""
        self.db.execute("DELETE FROM kb_terms WHERE df <= 0")
        chunks, tokens = self.db.execute("SELECT count(*), coalesce(sum(fts_len), 0) FROM "
                                         "kb_chunks").fetchone()
        upsert = self.db.upsert_sql("kb_meta", ["key", "value"], ["key"])
        self.db.execute(upsert, ("fts_chunks", str(chunks)))
        self.db.execute(upsert, ("fts_tokens", str(tokens)))

    def _delete(self, doc_id: str, generation: int) -> bool:
        """Delete a document and its chunks, leaving tombstones; False if not stored."""
        row = self.db.execute("SELECT id FROM kb_documents WHERE doc_id = ?",
                              (doc_id,)).fetchone()
        if row is None:
            return False
        self.db.execute(
            "UPDATE kb_terms t SET df = t.df - s.n FROM (SELECT u.lexeme, count(*) AS n FROM "
            "kb_chunks c, unnest(c.tsv) u WHERE c.doc = ? GROUP BY u.lexeme) s WHERE "
            "t.lexeme = s.lexeme", (row[0],))
        self.db.execute("INSERT INTO kb_removed (chunk_id, generation) SELECT id, ? FROM "
                        "kb_chunks WHERE doc = ? ON CONFLICT (chunk_id) DO UPDATE SET "
                        "generation = excluded.generation", (generation, row[0]))
        self.db.execute("DELETE FROM kb_documents WHERE id = ?", (row[0],))
        return True

    def remove(self, doc_ids: Iterable[str]) -> int:
        """Remove documents by id in one transaction (one new generation); ids not stored
        are skipped. Returns how many were removed."""
        wanted = list(dict.fromkeys(doc_ids))
        if not wanted:
            return 0
        generation = self._begin()
        try:
            removed = sum(self._delete(doc_id, generation) for doc_id in wanted)
            if removed:
                self._count_statistics()
                self.db.commit()
            else:
                self.db.rollback()  # nothing changed: the generation stays
        except BaseException:
            self.db.rollback()
            raise
        return removed
