"""The embedded knowledge base: one directory, no server.

Layout of a KB directory::

    kb.sqlite      SQLite (WAL): meta, documents, chunks (text, offsets, float32 vector),
                   chunks_fts (FTS5, porter stemming, bm25). The source of truth.
    vectors.faiss  faiss IndexIDMap2(IndexFlatIP) over the chunk vectors, keyed by chunk id.
    vectors.json   the SQLite generation the faiss file was written at.

Every committed ingest batch bumps ``generation`` in SQLite. The faiss file is trusted only
when its recorded generation and size match SQLite and it reads back as an index of the
right dimension and size; otherwise it is rebuilt from the stored vectors, so an
interrupted ingest or a damaged file never leaves the two out of step.

Ingest streams: documents are chunked while they are read (a large text file is never one
string), and chunks are embedded and committed in batches of ``flush_chunks``. A document
whose chunks span several batches is stored with ``content_hash = "partial:<hash>"`` until
its last chunk is committed; re-ingesting it resumes after the chunks already stored.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel

from medverify.config import KBSettings, RetrievalSettings
from medverify.errors import ConfigError, KBError
from medverify.kb.chunking import WINDOW_CHARS, Chunk, iter_chunks
from medverify.kb.embed import Embedder, get_embedder
from medverify.kb.loaders import KBInput, TextFile
from medverify.records import Passage, Span
from medverify.retrieve import rrf

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
DB_NAME = "kb.sqlite"
INDEX_NAME = "vectors.faiss"
INDEX_META = "vectors.json"
Mode = Literal["hybrid", "lexical", "dense"]
MODES: tuple[Mode, ...] = ("hybrid", "lexical", "dense")
MAX_QUERY_TERMS = 32
SMALL_BATCH = 8  # query batches below this size search the vector index on one thread
LEXICAL_BUDGET = 5000  # postings a lexical query may touch before common terms are dropped
_BUILD_HINT = "build one with `medverify kb ingest PATH... --kb {path}`"
PARTIAL = "partial:"  # content_hash prefix of a document whose chunks are not all stored

_SCHEMA = """
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

# Very common English words: dropped from lexical queries (they match nearly every chunk
# and only cost time); kept when a query has nothing else.
_STOPWORD_TEXT = """
a an and are as at be been but by can could did do does for from had has have how i if in
into is it its may might of on or should so than that the their them then there these they
this those to was were what when where which while who whom why will with would you your
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"\w+", re.UNICODE)
_FAISS_WHERE = re.compile(r"^Error in .*? at \S+:\d+: (?:Error: )?")  # faiss's C++ location


class IngestStats(BaseModel):
    """What one ingest did."""

    documents_seen: int = 0
    documents_added: int = 0
    documents_updated: int = 0
    documents_unchanged: int = 0
    documents_empty: int = 0
    documents_resumed: int = 0
    chunks_added: int = 0
    seconds: float = 0.0


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


@dataclass
class _Pending:
    """A document being stored: its row once inserted, chunks stored so far."""

    doc: KBInput
    digest: str
    replace: bool  # an older version (or an unmatched partial one) is deleted first
    row: int | None = None
    stored: int = 0
    done: bool = False
    resumed: bool = False


@dataclass
class _Batch:
    """Chunks waiting to be embedded and committed together, and their documents."""

    docs: list[_Pending] = field(default_factory=list)
    chunks: list[tuple[_Pending, int, Chunk]] = field(default_factory=list)

    def touch(self, pending: _Pending) -> None:
        if not self.docs or self.docs[-1] is not pending:
            self.docs.append(pending)

    def add(self, pending: _Pending, order: int, chunk: Chunk) -> None:
        self.touch(pending)
        self.chunks.append((pending, order, chunk))


def document_hash(doc: KBInput) -> str:
    """Content hash of what the KB stores for a document: ``content_hash`` of title, url,
    source and text joined by NULs, computed piece by piece (a :class:`TextFile` hashes to
    the hash of the Document it stands for)."""
    digest = hashlib.sha256("\x00".join([doc.title or "", doc.url or "", doc.source or "",
                                         ""]).encode("utf-8", "surrogatepass"))
    for piece in _pieces(doc):
        digest.update(piece.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


def _pieces(doc: KBInput, size: int = 1 << 20) -> Iterator[str]:
    """The document's text in consecutive pieces (slices of a Document's text)."""
    if isinstance(doc, TextFile):
        return doc.pieces()
    return (doc.text[i:i + size] for i in range(0, len(doc.text), size))


def query_terms(text: str) -> list[str]:
    """Lower-cased word terms of a query, deduplicated, stopwords dropped (unless that
    leaves nothing)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    return ([w for w in words if w not in STOPWORDS] or words)[:MAX_QUERY_TERMS]


def fts_match(terms: Sequence[str]) -> str | None:
    """An FTS5 MATCH expression: each term double-quoted, joined by OR.

    Terms are runs of word characters, so once quoted nothing in them can act as FTS5
    syntax: operators (AND, OR, NOT, NEAR), column filters, ``*``, ``^`` and quotes in
    untrusted text are inert. None when there are no terms.
    """
    return " OR ".join(f'"{t}"' for t in terms) or None


def fts_query(text: str) -> str | None:
    """The MATCH expression for untrusted query text (see :func:`fts_match`)."""
    return fts_match(query_terms(text))


def select_terms(terms: Sequence[str], df: dict[str, int], budget: int) -> list[str]:
    """The rarest terms whose summed document frequency fits ``budget`` (at least one).

    bm25 work grows with the rows a query matches, and very common words match most rows
    while adding almost nothing to the score (their idf is near zero), so on large KBs
    they are dropped first. On small KBs everything fits and the query is exact.
    """
    ranked = sorted(terms, key=lambda t: df.get(t, 0))
    chosen, spent = [], 0
    for term in ranked:
        cost = df.get(term, 0)
        if chosen and spent + cost > budget:
            break
        chosen.append(term)
        spent += cost
    return [t for t in terms if t in set(chosen)]


def chunk_terms(title: str | None, text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(f"{title or ''} {text}")}


class KnowledgeBase:
    """Documents, chunks, a full-text index and a vector index in one directory."""

    def __init__(self, path: Path, conn: sqlite3.Connection, embedder: Embedder | None,
                 retrieval: RetrievalSettings | None = None) -> None:
        self.path = path
        self._conn = conn
        self._meta = self._read_meta()
        self._embedder = embedder
        self.retrieval = retrieval or RetrievalSettings()
        self._index: Any = None
        self._snapshot: tuple[int, str] | None = None
        self._lock = threading.RLock()
        self.flush_chunks = KBSettings().batch_size * 4  # chunks per committed batch
        self.window_chars = WINDOW_CHARS  # characters of a document tokenized at once
        self.lexical_budget = LEXICAL_BUDGET
        if embedder is not None:
            self._check_embedder(embedder)

    # ---- construction -------------------------------------------------------------

    @classmethod
    def create(cls, path: str | Path, settings: KBSettings | None = None,
               embedder: Embedder | str | None = None,
               retrieval: RetrievalSettings | None = None) -> KnowledgeBase:
        """Create a new, empty KB at ``path`` (KBError if one is already there)."""
        path, settings = Path(path), settings or KBSettings()
        if (path / DB_NAME).exists():
            raise KBError(f"a knowledge base already exists at {path}: open it, or choose "
                          "another --kb directory")
        if settings.chunk_overlap >= settings.chunk_tokens:
            raise ConfigError("chunk overlap must be smaller than the chunk size")
        emb = get_embedder(embedder if embedder is not None else settings.embedder)
        path.mkdir(parents=True, exist_ok=True)
        _create_database(path / DB_NAME, _initial_meta(settings, emb, embedder))
        return cls(path, _connect(path / DB_NAME), emb, retrieval)

    @classmethod
    def open(cls, path: str | Path, embedder: Embedder | str | None = None,
             retrieval: RetrievalSettings | None = None) -> KnowledgeBase:
        """Open an existing KB. With ``embedder``, refuse it unless the KB was built with it."""
        path = Path(path)
        if not (path / DB_NAME).is_file():
            raise KBError(f"no knowledge base at {path}: " + _BUILD_HINT.format(path=path))
        conn = _connect(path / DB_NAME)
        emb = get_embedder(embedder) if embedder is not None else None
        return cls(path, conn, emb, retrieval)

    @classmethod
    def open_or_create(cls, path: str | Path, settings: KBSettings | None = None,
                       embedder: Embedder | str | None = None,
                       retrieval: RetrievalSettings | None = None) -> KnowledgeBase:
        if (Path(path) / DB_NAME).is_file() and _unfinished_creation(Path(path) / DB_NAME):
            log.warning("%s was left half-created (no settings, no documents): creating "
                        "it again", Path(path) / DB_NAME)
            _remove_database(Path(path) / DB_NAME)
        if (Path(path) / DB_NAME).is_file():
            kb = cls.open(path, embedder, retrieval)
            if settings is not None:
                kb._check_chunking(settings)
            return kb
        return cls.create(path, settings, embedder, retrieval)

    def _read_meta(self) -> dict[str, str]:
        try:
            meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise KBError(f"{self.path} is not a readable knowledge base ({exc}); delete it "
                          "and " + _BUILD_HINT.format(path=self.path)) from exc
        version = int(meta.get("schema_version", "0"))
        if version != SCHEMA_VERSION:
            self._conn.close()
            raise KBError(f"{self.path} has KB schema version {version}, this medverify "
                          f"reads version {SCHEMA_VERSION}: rebuild it with "
                          "`medverify kb ingest`")
        return meta

    def _check_embedder(self, embedder: Embedder) -> None:
        if embedder.id != self.embedder_id or embedder.dim != self.dim:
            raise KBError(
                f"the knowledge base at {self.path} was built with embedder "
                f"{self.embedder_id!r} (dim {self.dim}), not {embedder.id!r} (dim "
                f"{embedder.dim}): use --embedder {self._meta.get('embedder_spec')} "
                "or ingest into a new --kb directory")

    def _check_chunking(self, settings: KBSettings) -> None:
        have = (int(self._meta["chunk_tokens"]), int(self._meta["chunk_overlap"]))
        if have != (settings.chunk_tokens, settings.chunk_overlap):
            raise KBError(f"the knowledge base at {self.path} uses chunks of {have[0]} tokens "
                          f"with {have[1]} overlap, not {settings.chunk_tokens}/"
                          f"{settings.chunk_overlap}: use a new --kb directory to change them")

    # ---- identity -----------------------------------------------------------------

    @property
    def embedder_id(self) -> str:
        return self._meta["embedder_id"]

    @property
    def dim(self) -> int:
        return int(self._meta["dim"])

    @property
    def settings(self) -> KBSettings:
        return KBSettings(chunk_tokens=int(self._meta["chunk_tokens"]),
                          chunk_overlap=int(self._meta["chunk_overlap"]),
                          embedder=self._meta.get("embedder_spec", self.embedder_id))

    @property
    def embedder(self) -> Embedder:
        """The KB's embedder, loaded on first use."""
        if self._embedder is None:
            embedder = get_embedder(self._meta.get("embedder_spec") or self.embedder_id)
            self._check_embedder(embedder)
            self._embedder = embedder
        return self._embedder

    @property
    def generation(self) -> int:
        row = self._conn.execute("SELECT value FROM meta WHERE key='generation'").fetchone()
        return int(row[0])

    @property
    def snapshot_id(self) -> str:
        """Changes whenever the content changes: documents, embedder or chunk settings."""
        generation = self.generation
        if self._snapshot is None or self._snapshot[0] != generation:
            self._snapshot = (generation, self._compute_snapshot())
        return self._snapshot[1]

    def _compute_snapshot(self) -> str:
        digest = hashlib.sha256()
        for key in ("embedder_id", "dim", "chunk_tokens", "chunk_overlap"):
            digest.update(f"{key}={self._meta[key]}\n".encode())
        rows = self._conn.execute("SELECT doc_id, content_hash FROM documents ORDER BY doc_id")
        for doc_id, digest_hex in rows:
            digest.update(f"{doc_id}\x00{digest_hex}\n".encode("utf-8", "surrogatepass"))
        return "kb-" + digest.hexdigest()[:16]

    def stats(self) -> KBStats:
        with self._damage_is_an_error():
            docs, chunks = self._counts()
            size = sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())
            return KBStats(path=str(self.path), schema_version=SCHEMA_VERSION, documents=docs,
                           chunks=chunks, embedder_id=self.embedder_id, dim=self.dim,
                           chunk_tokens=int(self._meta["chunk_tokens"]),
                           chunk_overlap=int(self._meta["chunk_overlap"]),
                           snapshot_id=self.snapshot_id, vector_index=self._index_state(),
                           size_bytes=size)

    def _counts(self) -> tuple[int, int]:
        docs = self._conn.execute("SELECT count(*) FROM documents").fetchone()[0]
        chunks = self._conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        return int(docs), int(chunks)

    # ---- ingest -------------------------------------------------------------------

    def ingest(self, documents: Iterable[KBInput],
               progress: Callable[[IngestStats], None] | None = None) -> IngestStats:
        """Add documents; unchanged ones (same doc_id and content hash) are skipped.

        Chunks are embedded and committed in batches of ``flush_chunks`` while documents
        are read, so memory does not grow with document size. A document counts as stored
        once its last chunk is committed; an interrupted ingest resumes where it stopped,
        inside a large document too.
        """
        with self._lock, self._damage_is_an_error():
            return self._ingest(documents, progress)

    def _ingest(self, documents: Iterable[KBInput],
                progress: Callable[[IngestStats], None] | None) -> IngestStats:
        stats, started = IngestStats(), time.perf_counter()
        self._ensure_index()
        batch = _Batch()
        try:
            for doc in documents:
                self._ingest_one(doc, batch, stats, progress)
                if progress is not None:
                    progress(stats)
            self._flush(batch, stats)
        finally:
            stats.seconds = time.perf_counter() - started
            self._save_index()
        return stats

    def _ingest_one(self, doc: KBInput, batch: _Batch, stats: IngestStats,
                    progress: Callable[[IngestStats], None] | None) -> None:
        stats.documents_seen += 1
        if any(p.doc.doc_id == doc.doc_id for p in batch.docs):
            self._flush(batch, stats)  # an earlier copy in this run is settled first
        pending = self._admit(doc, stats)
        if pending is None:
            return
        found = False
        for order, chunk in self._new_chunks(pending):
            found = True
            if len(batch.chunks) >= self.flush_chunks:  # flushed only once more is coming,
                self._flush(batch, stats)  # so a document's last batch also completes it
                if progress is not None:
                    progress(stats)
            batch.add(pending, order, chunk)
        if not found and not pending.stored:
            stats.documents_empty += 1
            return
        pending.done = True
        batch.touch(pending)
        if len(batch.chunks) >= self.flush_chunks:
            self._flush(batch, stats)

    def _admit(self, doc: KBInput, stats: IngestStats) -> _Pending | None:
        """The document to store, or None when the KB already holds this version."""
        digest = document_hash(doc)
        row = self._conn.execute("SELECT id, content_hash, n_chunks FROM documents "
                                 "WHERE doc_id=?", (doc.doc_id,)).fetchone()
        if row is not None and row[1] == digest:
            stats.documents_unchanged += 1
            return None
        pending = _Pending(doc, digest, replace=row is not None)
        if row is not None and row[1] == PARTIAL + digest:
            pending.row, pending.stored, pending.resumed = int(row[0]), int(row[2]), True
        return pending

    def _new_chunks(self, pending: _Pending) -> Iterator[tuple[int, Chunk]]:
        """(order, chunk) of the chunks not stored yet. A resumed document is re-chunked
        and its stored chunks skipped; if the last stored one does not match, the partial
        copy is replaced instead."""
        chunks = enumerate(self._chunk(pending.doc))
        if pending.stored:
            last = next((c for o, c in chunks if o == pending.stored - 1), None)
            if last is None or self._stored_span(pending) != (last.span.start, last.span.end):
                log.warning("%s: the stored part does not match its chunks; storing it again",
                            pending.doc.doc_id)
                pending.row, pending.stored, pending.resumed = None, 0, False
                chunks = enumerate(self._chunk(pending.doc))
        yield from chunks

    def _chunk(self, doc: KBInput) -> Iterator[Chunk]:
        return iter_chunks(_pieces(doc), self.embedder.tokenizer,
                           int(self._meta["chunk_tokens"]), int(self._meta["chunk_overlap"]),
                           self.window_chars)

    def _stored_span(self, pending: _Pending) -> tuple[int, int] | None:
        row = self._conn.execute('SELECT start, "end" FROM chunks WHERE doc=? AND ord=?',
                                 (pending.row, pending.stored - 1)).fetchone()
        return (int(row[0]), int(row[1])) if row else None

    def _flush(self, batch: _Batch, stats: IngestStats) -> None:
        if not batch.docs:
            return
        texts = [_embed_text(p.doc.title, c) for p, _, c in batch.chunks]
        vectors = (self.embedder.embed(texts) if texts
                   else np.zeros((0, self.dim), dtype=np.float32))
        replaced = any(p.replace and p.row is None for p in batch.docs)
        with self._conn:
            ids = self._store_batch(batch, vectors)
            self._conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 "
                               "WHERE key='generation'")
        stats.chunks_added += len(ids)
        for pending in (p for p in batch.docs if p.done):
            stats.documents_resumed += pending.resumed
            stats.documents_updated += pending.replace and not pending.resumed
            stats.documents_added += not pending.replace or pending.resumed
        self._index_add(ids, vectors, rebuild=replaced)
        batch.docs, batch.chunks = [], []
        _release_free_memory()

    def _store_batch(self, batch: _Batch, vectors: np.ndarray) -> list[int]:
        for pending in batch.docs:
            if pending.row is None:
                if pending.replace:
                    self._delete_document(pending.doc.doc_id)
                pending.row = self._insert_document(pending)
        ids = [self._insert_chunk(p, order, chunk, vector)
               for (p, order, chunk), vector in zip(batch.chunks, vectors, strict=True)]
        for pending in batch.docs:
            texts = [c.text for p, _, c in batch.chunks if p is pending]
            self._count_terms(pending.doc.title, texts, +1)
            pending.stored += len(texts)
            state = pending.digest if pending.done else PARTIAL + pending.digest
            self._conn.execute("UPDATE documents SET content_hash=?, n_chunks=? WHERE id=?",
                               (state, pending.stored, pending.row))
        return ids

    def _insert_document(self, pending: _Pending) -> int:
        doc = pending.doc
        cursor = self._conn.execute(
            "INSERT INTO documents (doc_id, content_hash, title, url, source, meta, n_chunks,"
            " added_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (doc.doc_id, PARTIAL + pending.digest, doc.title, doc.url, doc.source,
             json.dumps(doc.meta, default=str), 0, time.time()))
        return int(cursor.lastrowid or 0)

    def _insert_chunk(self, pending: _Pending, order: int, chunk: Chunk,
                      vector: np.ndarray) -> int:
        cursor = self._conn.execute(
            'INSERT INTO chunks (doc, ord, text, start, "end", n_tokens, vector) '
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (pending.row, order, chunk.text, chunk.span.start, chunk.span.end, chunk.n_tokens,
             np.ascontiguousarray(vector, dtype=np.float32).tobytes()))
        chunk_id = int(cursor.lastrowid or 0)
        self._conn.execute("INSERT INTO chunks_fts (rowid, title, body) VALUES (?, ?, ?)",
                           (chunk_id, pending.doc.title or "", chunk.text))
        return chunk_id

    def _count_terms(self, title: str | None, texts: list[str], sign: int) -> None:
        counts: dict[str, int] = {}
        for text in texts:
            for term in chunk_terms(title, text):
                counts[term] = counts.get(term, 0) + sign
        self._conn.executemany(
            "INSERT INTO terms (term, df) VALUES (?, ?) "
            "ON CONFLICT(term) DO UPDATE SET df = df + excluded.df", counts.items())

    def _document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        marks = ",".join("?" * len(terms))
        rows = self._conn.execute(f"SELECT term, df FROM terms WHERE term IN ({marks})", terms)
        return dict(rows.fetchall())

    def _delete_document(self, doc_id: str) -> None:
        row = self._conn.execute("SELECT id, title FROM documents WHERE doc_id=?",
                                 (doc_id,)).fetchone()
        cursor = self._conn.execute("SELECT text FROM chunks WHERE doc=?", (row[0],))
        while rows := cursor.fetchmany(1024):
            self._count_terms(row[1], [r[0] for r in rows], -1)
        self._conn.execute("DELETE FROM chunks_fts WHERE rowid IN "
                           "(SELECT id FROM chunks WHERE doc=?)", (row[0],))
        self._conn.execute("DELETE FROM chunks WHERE doc=?", (row[0],))
        self._conn.execute("DELETE FROM documents WHERE id=?", (row[0],))

    # ---- vector index -------------------------------------------------------------

    def _index_state(self) -> Literal["fresh", "stale", "missing"]:
        if not (self.path / INDEX_NAME).is_file():
            return "missing"
        return "fresh" if self._index_meta_matches() else "stale"

    def _index_meta_matches(self) -> bool:
        try:
            recorded = json.loads((self.path / INDEX_META).read_text("utf-8"))
        except (OSError, ValueError):
            return False
        return recorded == {"generation": self.generation, "ntotal": self._counts()[1]}

    def _ensure_index(self) -> Any:
        if self._index is None:
            index = self._read_index() if self._index_state() == "fresh" else None
            if index is not None:
                self._index = index
            else:
                self._index = self._build_index()
                self._try_save_index()
        return self._index

    def _read_index(self) -> Any | None:
        """The saved faiss index, or None (with a warning) when it cannot be used: a
        truncated, empty or foreign file, or one whose dimension or size is not the KB's."""
        import faiss

        path = self.path / INDEX_NAME
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as exc:
            problem = f"cannot be read ({_first_line(exc)})"
        else:
            chunks = self._counts()[1]
            if (isinstance(index, faiss.IndexIDMap2) and index.d == self.dim
                    and index.ntotal == chunks):
                return index
            problem = (f"holds {index.ntotal} vectors of dimension {index.d} "
                       f"({type(index).__name__}), not {chunks} of dimension {self.dim}")
        log.warning("the vector index %s %s: rebuilding it from %s", path, problem, DB_NAME)
        return None

    def rebuild_index(self) -> None:
        """Rebuild the faiss index from the vectors stored in SQLite, and save it.

        KBError when the stored vectors cannot be read (the KB must then be rebuilt)."""
        self._index = self._build_index()
        self._save_index()

    def _build_index(self) -> Any:
        import faiss

        index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        try:
            for ids, vectors in self._stored_vectors():
                index.add_with_ids(vectors, ids)
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise KBError(f"the vector index of {self.path} cannot be rebuilt from {DB_NAME} "
                          f"({_first_line(exc)}): delete {self.path} and "
                          + _BUILD_HINT.format(path=self.path)) from exc
        return index

    def _try_save_index(self) -> None:
        """Save a rebuilt index; if the directory is not writable, keep it in memory."""
        try:
            self._save_index()
        except (OSError, RuntimeError) as exc:
            log.warning("could not save the rebuilt vector index in %s (%s); using it from "
                        "memory", self.path, _first_line(exc))

    def _stored_vectors(self, block: int = 8192) -> Iterator[tuple[np.ndarray, np.ndarray]]:
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

    def _index_add(self, ids: list[int], vectors: np.ndarray, rebuild: bool) -> None:
        if rebuild:
            self._index = None
            self.rebuild_index()
        else:
            self._ensure_index().add_with_ids(np.asarray(vectors, dtype=np.float32),
                                              np.asarray(ids, dtype=np.int64))

    def _save_index(self) -> None:
        import faiss

        if self._index is None:
            return
        tmp = self.path / (INDEX_NAME + ".tmp")
        faiss.write_index(self._index, str(tmp))
        os.replace(tmp, self.path / INDEX_NAME)
        meta = {"generation": self.generation, "ntotal": int(self._index.ntotal)}
        (self.path / (INDEX_META + ".tmp")).write_text(json.dumps(meta), "utf-8")
        os.replace(self.path / (INDEX_META + ".tmp"), self.path / INDEX_META)

    # ---- search -------------------------------------------------------------------

    def search(self, query: str, k: int = 7, mode: Mode = "hybrid") -> list[Passage]:
        """Top ``k`` passages for one query."""
        return self.search_many([query], k, mode)[0]

    def search_many(self, queries: Sequence[str], k: int = 7,
                    mode: Mode = "hybrid") -> list[list[Passage]]:
        """Top ``k`` passages per query; queries are embedded in one batch."""
        if mode not in MODES:
            raise ConfigError(f"unknown search mode {mode!r}: use one of {', '.join(MODES)}")
        with self._lock, self._damage_is_an_error():
            return self._search_many(queries, k, mode)

    @contextmanager
    def _damage_is_an_error(self) -> Iterator[None]:
        """A damaged database page met while reading is one clear KBError, not a raw
        sqlite3 error (the database cannot repair itself: it must be rebuilt)."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise KBError(f"{self.path / DB_NAME} is damaged ({exc}): delete {self.path} "
                          "and " + _BUILD_HINT.format(path=self.path)) from None

    def _search_many(self, queries: Sequence[str], k: int, mode: Mode) -> list[list[Passage]]:
        depth = k if mode != "hybrid" else max(k, self.retrieval.candidates)
        lexical = [self._lexical(q, depth) for q in queries] if mode != "dense" else None
        dense = self._dense(list(queries), depth) if mode != "lexical" else None
        results = []
        for i in range(len(queries)):
            ranked = self._rank(lexical[i] if lexical else None, dense[i] if dense else None, k)
            results.append(self._passages(ranked))
        return results

    def _rank(self, lexical: list[tuple[int, float]] | None,
              dense: list[tuple[int, float]] | None, k: int) -> list[tuple[int, dict[str, float]]]:
        if dense is None or lexical is None:
            name, hits = ("lexical", lexical) if dense is None else ("dense", dense)
            return [(cid, {name: s, "fused": s}) for cid, s in (hits or [])[:k]]
        raw = {"lexical": dict(lexical), "dense": dict(dense)}
        fused = rrf({"lexical": [c for c, _ in lexical], "dense": [c for c, _ in dense]},
                    rrf_k=self.retrieval.rrf_k, limit=k)
        return [(int(f.id), {**{n: raw[n][int(f.id)] for n in f.ranks}, "fused": f.score})
                for f in fused]

    def _lexical(self, query: str, depth: int) -> list[tuple[int, float]]:
        terms = query_terms(query)
        if not terms:
            return []
        terms = select_terms(terms, self._document_frequencies(terms), self.lexical_budget)
        match = fts_match(terms)
        rows = self._conn.execute(
            "SELECT rowid, bm25(chunks_fts) AS s FROM chunks_fts WHERE chunks_fts MATCH ? "
            "ORDER BY s LIMIT ?", (match, depth)).fetchall()
        return [(int(r[0]), -float(r[1])) for r in rows]

    def _dense(self, queries: list[str], depth: int) -> list[list[tuple[int, float]]]:
        index = self._ensure_index()
        if index.ntotal == 0 or not queries:
            return [[] for _ in queries]
        vectors = np.asarray(self.embedder.embed(queries), dtype=np.float32)
        scores, ids = _faiss_search(index, vectors, depth)
        return [[(int(i), float(s)) for i, s in zip(row_ids, row_scores, strict=True) if i >= 0]
                for row_ids, row_scores in zip(ids, scores, strict=True)]

    def _passages(self, ranked: list[tuple[int, dict[str, float]]]) -> list[Passage]:
        if not ranked:
            return []
        ids = [cid for cid, _ in ranked]
        marks = ",".join("?" * len(ids))
        rows = self._conn.execute(
            f'SELECT c.id, c.ord, c.text, c.start, c."end", d.doc_id, d.title, d.url, d.source '
            f"FROM chunks c JOIN documents d ON d.id = c.doc WHERE c.id IN ({marks})", ids)
        by_id = {r[0]: r for r in rows}
        return [_passage(by_id[cid], scores) for cid, scores in ranked if cid in by_id]

    # ---- lifecycle ----------------------------------------------------------------

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _faiss_search(index: Any, vectors: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
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


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # not glibc
        return None


def _release_free_memory() -> None:
    """Hand freed heap pages back to the OS after a batch (glibc only). Embedding batches
    of varying shapes leaves the heap fragmented: without this, RSS crept up by ~0.5 GB
    over a few thousand MiniLM chunks while nothing was retained (docs/kb.md)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _first_line(exc: BaseException) -> str:
    """An exception's message on one line (faiss errors carry a multi-line C++ trace)."""
    line = next((x.strip() for x in str(exc).splitlines() if x.strip()), type(exc).__name__)
    return _FAISS_WHERE.sub("", line)


def _passage(row: tuple[Any, ...], scores: dict[str, float]) -> Passage:
    _, order, text, start, end, doc_id, title, url, source = row
    return Passage(id=f"{doc_id}#{order}", doc_id=doc_id, text=text, title=title, url=url,
                   source=source, span=Span(start=start, end=end), score=scores["fused"],
                   scores=scores)


def _embed_text(title: str | None, chunk: Chunk) -> str:
    """What is embedded for a chunk: the document title (context), then the chunk."""
    return f"{title}\n{chunk.text}" if title else chunk.text


def _create_database(db: Path, meta: dict[str, str]) -> None:
    """Tables and settings written under a temporary name, then renamed into place: a KB
    database exists only complete (a kill while creating leaves the temporary file, which
    the next creation removes)."""
    tmp = db.with_name(db.name + ".creating")
    _remove_database(tmp)
    conn = _connect(tmp)
    try:
        conn.executescript(_SCHEMA)
        _write_meta(conn, meta)
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    _remove_database(db, keep_main=True)  # stale -wal/-shm of an older file, if any
    os.replace(tmp, db)


def _remove_database(db: Path, *, keep_main: bool = False) -> None:
    for suffix in ("-wal", "-shm") if keep_main else ("", "-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)


def _unfinished_creation(db: Path) -> bool:
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


def _connect(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(str(path), check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
    except sqlite3.DatabaseError as exc:
        raise KBError(f"{path} is not a readable knowledge base ({exc}): delete it and "
                      + _BUILD_HINT.format(path=path.parent)) from exc
    return conn


def _initial_meta(settings: KBSettings, embedder: Embedder,
                  spec: Embedder | str | None) -> dict[str, str]:
    return {"schema_version": str(SCHEMA_VERSION), "embedder_id": embedder.id,
            "embedder_spec": _spec_of(embedder, spec), "dim": str(embedder.dim),
            "chunk_tokens": str(settings.chunk_tokens),
            "chunk_overlap": str(settings.chunk_overlap),
            "generation": "0", "created_at": str(time.time())}


def _spec_of(embedder: Embedder, spec: Embedder | str | None) -> str:
    """How to re-create the embedder later: a name or an absolute model path."""
    if isinstance(spec, str) and Path(spec).expanduser().is_dir():
        return str(Path(spec).expanduser().resolve())
    path = getattr(embedder, "path", None)
    if embedder.id.startswith("st:") and path is not None:
        return str(path)
    return embedder.id


def _write_meta(conn: sqlite3.Connection, meta: dict[str, str]) -> None:
    conn.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", meta.items())
