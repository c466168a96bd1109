"""The tables of a knowledge base on PostgreSQL: versioned migrations, the settings rows,
the write transaction (the KB's lock, a new generation) and removal. Ingest is
:mod:`medverify.kb.postgres_ingest`.

Tables (all ``kb_``-prefixed, so a KB can share a database or schema with the run store)::

    kb_meta       key/value settings: schema_version, embedder, dim, chunking, generation
    kb_documents  one row per document (doc_id unique, content hash, metadata as jsonb)
    kb_chunks     text, offsets, float32 vector (bytea), the generation that added it,
                  once per (document, order),
                  tsv: to_tsvector('english', title || text), GIN-indexed (the SQL
                  rankings ts_rank_cd / ts_rank), and fts_len: its words (title and text)
    kb_removed    tombstones: chunk ids removed, with the generation that removed them

A replica keeps its in-memory indexes in step by reading the chunks added and the
tombstones written after the generation it has (:mod:`medverify.kb.postgres`).

Writers are serialised by a transaction-scoped advisory lock of their own (not the run
store's), so two replicas teaching at once, or two ingests and their workers, apply one
after the other; what each writes is in :mod:`medverify.kb.postgres_ingest`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

from medverify.config import KBSettings
from medverify.connections import PostgresDatabase
from medverify.kb.database import spec_of
from medverify.kb.embed import Embedder, precision_of

SCHEMA_VERSION = 3
KB_LOCK = 0x6D65_646B_6277  # "medkbw": the KB's write lock (the run store has its own)
TS_CONFIG = "english"  # the text search configuration of tsv and of every query
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
    (2, [  # a chunk once per (document, order): a task run twice writes nothing twice
        "CREATE UNIQUE INDEX IF NOT EXISTS kb_chunks_doc_ord ON kb_chunks(doc, ord)",
        "DROP INDEX IF EXISTS kb_chunks_doc",
    ]),
    (3, [  # BM25 in SQL dropped: each replica ranks with the embedded store's FTS5 index
        # (its statistics cost a third of an ingest's time: benchmarks/results/kb_postgres.md)
        "DROP TABLE IF EXISTS kb_postings",
        "DROP TABLE IF EXISTS kb_terms",
        "DELETE FROM kb_meta WHERE key IN ('fts_chunks', 'fts_tokens')",
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


def words_of(title: str | None, text: str) -> int:
    """A chunk's length for BM25: its words, title included (FTS5's token count)."""
    return len(WORD.findall(title or "")) + len(WORD.findall(text))


def begin_write(db: PostgresDatabase) -> int:
    """Open a write transaction under the KB's write lock (a transaction-scoped advisory
    lock: writers of every process apply one after the other, and a chunk's generation
    is its commit order); returns the new generation."""
    db.begin()
    db.execute("SELECT pg_advisory_xact_lock(?)", (KB_LOCK,))
    row = db.execute("UPDATE kb_meta SET value = (value::bigint + 1)::text "
                     "WHERE key = 'generation' RETURNING value").fetchone()
    return int(row[0])


def delete_document(db: PostgresDatabase, row: int, generation: int) -> None:
    """In a write transaction: delete a document (by row id) and its chunks, leaving
    tombstones."""
    db.execute("INSERT INTO kb_removed (chunk_id, generation) SELECT id, ? FROM kb_chunks "
               "WHERE doc = ? ON CONFLICT (chunk_id) DO UPDATE SET generation = "
               "excluded.generation", (generation, row))
    db.execute("DELETE FROM kb_documents WHERE id = ?", (row,))


def remove_documents(db: PostgresDatabase, doc_ids: Iterable[str]) -> int:
    """Remove documents by id in one transaction (one new generation); ids not stored
    are skipped. Returns how many were removed."""
    wanted = list(dict.fromkeys(doc_ids))
    if not wanted:
        return 0
    generation = begin_write(db)
    try:
        rows = [r[0] for r in db.execute("SELECT id FROM kb_documents WHERE doc_id = ANY(?) "
                                         "ORDER BY id", (wanted,))]
        for row in rows:
            delete_document(db, row, generation)
        if rows:
            db.commit()
        else:
            db.rollback()  # nothing changed: the generation stays
    except BaseException:
        db.rollback()
        raise
    return len(rows)
