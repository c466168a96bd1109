"""The SQLite file of a KB directory: schema, creation, connection, settings rows.

``kb.sqlite`` (WAL) holds meta (settings, schema version, generation), documents, chunks
(text, offsets, float32 vector), ``terms`` (document frequencies of chunk words) and
``chunks_fts`` (FTS5, porter stemming, bm25). It is the KB's source of truth.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path

from medverify.config import KBSettings
from medverify.errors import KBError
from medverify.kb.embed import Embedder, precision_of

SCHEMA_VERSION = 1
DB_NAME = "kb.sqlite"
PRECISION_KEY = "embed_precision"  # meta: fp32 or int8, the precision of the stored vectors
DOC_ID_PREFIX = "doc_id_prefix"  # a where key over document ids, not metadata
CHUNK_COLUMNS = ('c.id, c.ord, c.text, c.start, c."end", d.doc_id, d.title, d.url, '
                 "d.source")  # a StoredChunk's, from chunks c JOIN documents d
_META_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
BUILD_HINT = "build one with `medverify kb ingest PATH... --kb {path}`"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY, doc_id TEXT NOT NULL UNIQUE, content_hash TEXT NOT NULL,
    title TEXT, url TEXT, source TEXT, meta TEXT NOT NULL DEFAULT '{}',
    n_chunks INTEGER NOT NULL, added_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY, doc INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    ord INTEGER NOT NULL, text TEXT NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
    n_tokens INTEGER NOT NULL, vector BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(doc);
CREATE TABLE IF NOT EXISTS terms (term TEXT PRIMARY KEY, df INTEGER NOT NULL) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(
    title, body, tokenize = 'porter unicode61 remove_diacritics 2');
"""


def create_database(db: Path, meta: dict[str, str]) -> None:
    """Tables and settings written under a temporary name, then renamed into place: a KB
    database exists only complete (a kill while creating leaves the temporary file, which
    the next creation removes)."""
    tmp = db.with_name(db.name + ".creating")
    remove_database(tmp)
    conn = connect(tmp)
    try:
        conn.executescript(SCHEMA)
        write_meta(conn, meta)
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    remove_database(db, keep_main=True)  # stale -wal/-shm of an older file, if any
    os.replace(tmp, db)


def remove_database(db: Path, *, keep_main: bool = False) -> None:
    for suffix in ("-wal", "-shm") if keep_main else ("", "-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)


def unfinished_creation(db: Path) -> bool:
    """Whether ``db`` is what an older medverify's creation left when killed: no settings
    and no document (so nothing can be lost by creating it again)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "meta" in tables and conn.execute("SELECT COUNT(*) FROM meta").fetchone()[0]:
                return False
            return "documents" not in tables or not conn.execute(
                "SELECT COUNT(*) FROM documents").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return False  # unreadable: the open path reports it


def connect(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(str(path), check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
    except sqlite3.DatabaseError as exc:
        raise KBError(f"{path} is not a readable knowledge base ({exc}): delete it and "
                      + BUILD_HINT.format(path=path.parent)) from exc
    return conn


def initial_meta(settings: KBSettings, embedder: Embedder,
                 spec: Embedder | str | None) -> dict[str, str]:
    return {"schema_version": str(SCHEMA_VERSION), "embedder_id": embedder.id,
            "embedder_spec": spec_of(embedder, spec), "dim": str(embedder.dim),
            PRECISION_KEY: precision_of(embedder),
            "chunk_tokens": str(settings.chunk_tokens),
            "chunk_overlap": str(settings.chunk_overlap),
            "generation": "0", "created_at": str(time.time())}


def spec_of(embedder: Embedder, spec: Embedder | str | None) -> str:
    """How to re-create the embedder later: a name or an absolute model path."""
    if isinstance(spec, str) and Path(spec).expanduser().is_dir():
        return str(Path(spec).expanduser().resolve())
    path = getattr(embedder, "path", None)
    if embedder.id.startswith("st:") and path is not None:
        return str(path)
    return embedder.id


def read_precision(conn: sqlite3.Connection) -> str:
    """The precision class of the KB's vectors (``fp32`` for a KB from before it was
    recorded)."""
    row = conn.execute("SELECT value FROM meta WHERE key=?", (PRECISION_KEY,)).fetchone()
    return str(row[0]) if row else "fp32"


def recorded_precision(conn: sqlite3.Connection) -> str:
    """:func:`read_precision`, or ``fp32`` when the database cannot be read (opening the
    KB then reports that)."""
    try:
        return read_precision(conn)
    except sqlite3.DatabaseError:
        return "fp32"


def read_generation(conn: sqlite3.Connection) -> int:
    """The KB's generation: bumped by every committed ingest batch."""
    row = conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()
    return int(row[0])


def count_rows(conn: sqlite3.Connection) -> tuple[int, int]:
    """(documents, chunks) stored."""
    docs = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
    chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    return int(docs), int(chunks)


def write_meta(conn: sqlite3.Connection, meta: dict[str, str]) -> None:
    conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", meta.items())


def metadata_condition(where: Mapping[str, str]) -> tuple[str, list[str]]:
    """The SQL condition (over ``documents d``) and its parameters selecting the documents
    whose metadata matches every ``key=value`` of ``where`` (a list-valued field matches
    when one element does; strings compare case-insensitively; ``true``/``false`` match
    booleans); the key ``doc_id_prefix`` selects document ids starting with the value.
    KBError on a key that is not a plain name."""
    clauses, params = [], []
    for key, value in where.items():
        if key == DOC_ID_PREFIX:  # not metadata: a range of the indexed document ids
            clauses.append("d.doc_id >= ? AND d.doc_id < ?")
            params += [value, value + "\U0010ffff"]
            continue
        if not _META_KEY.fullmatch(key):
            raise KBError(f"bad metadata key {key!r}: letters, digits and _ only")
        wanted = {"true": "1", "false": "0"}.get(value.lower(), value)
        path = f"$.{key}"
        clauses.append(
            "(CASE json_type(d.meta, ?) WHEN 'array' THEN EXISTS (SELECT 1 FROM "
            "json_each(d.meta, ?) WHERE lower(CAST(value AS TEXT)) = lower(?)) "
            "ELSE lower(CAST(json_extract(d.meta, ?) AS TEXT)) = lower(?) END)")
        params += [path, path, wanted, path, wanted]
    return " AND ".join(clauses) or "1", params
