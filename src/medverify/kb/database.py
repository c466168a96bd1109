"""The SQLite file of a KB directory: schema, creation, connection, settings rows, and
what is read from it whole (the snapshot id, metadata subsets, :class:`KBStats`), the
refusals of another embedder or chunking, and what a SQLite error means
(:func:`database_error`: damage only when the file is unreadable).

``kb.sqlite`` (WAL) holds meta (settings, schema version, generation), documents, chunks
(text, offsets, float32 vector), ``terms`` (document frequencies of chunk words) and
``chunks_fts`` (FTS5, porter stemming, bm25). It is the KB's source of truth.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel

from medverify.config import KBSettings
from medverify.errors import KBError
from medverify.kb.embed import Embedder, get_embedder, precision_of
from medverify.kb.protocol import StoredChunk, Subset

SCHEMA_VERSION = 1
DB_NAME = "kb.sqlite"
PRECISION_KEY = "embed_precision"  # meta: fp32 or int8, the precision of the stored vectors
DOC_ID_PREFIX = "doc_id_prefix"  # a where key over document ids, not metadata
CHUNK_COLUMNS = ('c.id, c.ord, c.text, c.start, c."end", d.doc_id, d.title, d.url, '
                 "d.source")  # a StoredChunk's, from chunks c JOIN documents d
META_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # a metadata filter key
BUILD_HINT = "build one with `medverify kb ingest PATH... --kb {path}`"

class KBStats(BaseModel):
    """A knowledge base's size, settings and identity."""

    path: str
    schema_version: int
    documents: int
    chunks: int
    embedder_id: str
    dim: int
    chunk_tokens: int
    chunk_overlap: int
    snapshot_id: str
    vector_index: Literal["fresh", "stale", "missing"]
    size_bytes: int
    index_policy: str = "auto"  # the KB's recorded choice: auto or a kind
    index_kind: str = "flat"  # what the saved (or next built) index is, with its parameters
    embed_precision: str = "fp32"  # the precision of the stored vectors (and of queries)
    lexical_postings: Literal["fresh", "stale", "missing"] = "missing"  # stored postings
    # ranking lexical queries on a large KB (docs/scale.md); bm25() ranks unless fresh


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


def embedder_refusal(kb: Path | str, meta: Mapping[str, str],
                     embedder: Embedder) -> KBError | None:
    """Why the KB at ``kb`` (settings ``meta``) refuses ``embedder``: another embedder or
    dimension, or the KB's embedder computing vectors of another precision; None if not."""
    have = meta.get(PRECISION_KEY, "fp32")
    if embedder.id == meta["embedder_id"] and precision_of(embedder) != have:
        return KBError(
            f"the knowledge base at {kb} holds {have} vectors of {meta['embedder_id']!r}, "
            f"and this embedder computes {precision_of(embedder)} ones: queries must be "
            "embedded in the KB's precision (open the KB by embedder name, or with "
            f"embed_precision = \"{have}\"), or ingest into a new --kb directory")
    if embedder.id != meta["embedder_id"] or embedder.dim != int(meta["dim"]):
        return KBError(
            f"the knowledge base at {kb} was built with embedder {meta['embedder_id']!r} "
            f"(dim {meta['dim']}), not {embedder.id!r} (dim {embedder.dim}): use --embedder "
            f"{meta.get('embedder_spec')} or ingest into a new --kb directory")
    return None


def recorded_settings(meta: Mapping[str, str]) -> KBSettings:
    """The chunking and embedder settings a KB recorded when it was created."""
    return KBSettings(chunk_tokens=int(meta["chunk_tokens"]),
                      chunk_overlap=int(meta["chunk_overlap"]),
                      embedder=meta.get("embedder_spec", meta["embedder_id"]))


def recorded_embedder(kb: Path | str, meta: Mapping[str, str], device: str | None = None,
                      runtime: str | None = None) -> Embedder:
    """The KB's embedder from its recorded spec and precision (queries are embedded as the
    stored vectors were); a KBError when what loads does not match what the KB holds."""
    embedder = get_embedder(meta.get("embedder_spec") or meta["embedder_id"],
                            meta.get(PRECISION_KEY, "fp32"),  # type: ignore[arg-type]
                            device, runtime)  # type: ignore[arg-type]
    refusal = embedder_refusal(kb, meta, embedder)
    if refusal is not None:
        raise refusal
    return embedder


def chunking_refusal(kb: Path, meta: Mapping[str, str], settings: KBSettings) -> KBError | None:
    """Why the KB at ``kb`` refuses chunk settings other than its own; None if they match."""
    have = (int(meta["chunk_tokens"]), int(meta["chunk_overlap"]))
    if have == (settings.chunk_tokens, settings.chunk_overlap):
        return None
    return KBError(f"the knowledge base at {kb} uses chunks of {have[0]} tokens with "
                   f"{have[1]} overlap, not {settings.chunk_tokens}/{settings.chunk_overlap}: "
                   "use a new --kb directory to change them")


def read_generation(conn: sqlite3.Connection) -> int:
    """The KB's generation: bumped by every committed ingest batch."""
    row = conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()
    return int(row[0])


def count_rows(conn: sqlite3.Connection) -> tuple[int, int]:
    """(documents, chunks) stored."""
    docs = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
    chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    return int(docs), int(chunks)


def snapshot_of(conn: sqlite3.Connection, meta: Mapping[str, str], precision: str) -> str:
    """The KB's snapshot id: a hash of its embedder and chunk settings and its sorted
    ``(doc_id, content_hash)`` pairs (the precision only when not fp32, so fp32 KBs keep
    the ids they had)."""
    digest = hashlib.sha256()
    for key in ("embedder_id", "dim", "chunk_tokens", "chunk_overlap"):
        digest.update(f"{key}={meta[key]}\n".encode())
    if precision != "fp32":
        digest.update(f"embed_precision={precision}\n".encode())
    rows = conn.execute("SELECT doc_id, content_hash FROM documents ORDER BY doc_id")
    for doc_id, digest_hex in rows:
        digest.update(f"{doc_id}\x00{digest_hex}\n".encode("utf-8", "surrogatepass"))
    return "kb-" + digest.hexdigest()[:16]


def subset_rows(conn: sqlite3.Connection, where: Mapping[str, str], limit: int,
                dim: int) -> Subset:
    """The chunks (with their vectors of ``dim`` floats) of the documents ``where``
    selects (:func:`metadata_condition`); KBError past ``limit`` chunks."""
    condition, params = metadata_condition(where)
    try:
        count = conn.execute(f"SELECT COUNT(*) FROM chunks c JOIN documents d ON d.id = c.doc "
                             f"WHERE {condition}", params).fetchone()[0]
    except sqlite3.OperationalError as exc:
        raise KBError(f"cannot filter this knowledge base ({exc})") from None
    if count > limit:
        raise KBError(f"the filter matches {count:,} chunks, more than the "
                      f"{limit:,} ranked exactly in memory: narrow it")
    rows = conn.execute(f"SELECT {CHUNK_COLUMNS}, c.vector FROM chunks c JOIN documents d "
                        f"ON d.id = c.doc WHERE {condition} ORDER BY c.id", params).fetchall()
    chunks = [StoredChunk(*r[:9]) for r in rows]
    vectors = (np.frombuffer(b"".join(r[9] for r in rows), dtype=np.float32)
               .reshape(len(rows), dim) if rows else np.zeros((0, dim), dtype=np.float32))
    return Subset(chunks, vectors)


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
        if not META_KEY.fullmatch(key):
            raise KBError(f"bad metadata key {key!r}: letters, digits and _ only")
        wanted = {"true": "1", "false": "0"}.get(value.lower(), value)
        path = f"$.{key}"
        clauses.append(
            "(CASE json_type(d.meta, ?) WHEN 'array' THEN EXISTS (SELECT 1 FROM "
            "json_each(d.meta, ?) WHERE lower(CAST(value AS TEXT)) = lower(?)) "
            "ELSE lower(CAST(json_extract(d.meta, ?) AS TEXT)) = lower(?) END)")
        params += [path, path, wanted, path, wanted]
    return " AND ".join(clauses) or "1", params


def database_error(exc: sqlite3.DatabaseError, kb: Path) -> KBError:
    """The KBError for a SQLite error met while using the KB at ``kb``. Only an error that
    says the file is unreadable calls the KB damaged (it must then be rebuilt): a UNIQUE or
    other constraint failure means another writer changed the KB meanwhile (a writer that
    did not take the lock, e.g. an older medverify), a locked database that another
    process is writing, a full disk or a read-only file that nothing was written; in each
    case the KB holds what its last committed batch left, and the command can be run
    again. The message names the case."""
    text = str(exc)
    lowered = text.lower()
    again = "the knowledge base is not damaged: run the command again"
    if isinstance(exc, sqlite3.IntegrityError):
        return KBError(f"another writer changed {kb} while this one was writing ({text}); "
                       f"{again} (it skips what is already stored)")
    if "locked" in lowered or "busy" in lowered:
        return KBError(f"another process is writing {kb} ({text}); {again} when it has "
                       "finished")
    if "disk is full" in lowered or "readonly" in lowered or "read-only" in lowered:
        return KBError(f"cannot write {kb / DB_NAME} ({text}); nothing past the last "
                       f"committed batch was stored, and {again} once it can be written")
    return KBError(f"{kb / DB_NAME} is damaged ({text}): delete {kb} and "
                   + BUILD_HINT.format(path=kb))
