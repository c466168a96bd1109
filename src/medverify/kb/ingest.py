"""Ingest into a KB directory: chunk, embed and commit documents in batches.

Ingest streams: documents are chunked while they are read (a large text file is never one
string), and chunks are embedded and committed in batches of ``flush_chunks``. Every
committed batch bumps ``generation`` in SQLite. A document whose chunks span several
batches is stored with ``content_hash = "partial:<hash>"`` until its last chunk is
committed; re-ingesting it resumes after the chunks already stored.

Embedding overlaps the rest (issue 19): a full batch is handed to one embedding thread
(torch releases the GIL) while this thread stores the previous batch and reads and chunks
the next; batches are stored in order, one SQLite transaction each, with bulk inserts
(``executemany``, chunk ids assigned in the transaction). ``Ingester.overlap = False``
and ``Ingester.bulk = False`` give the serial, row-by-row path of before (benchmarks).

On an executor (``kb ingest --executor ray``, :mod:`medverify.executor`) the batches are
embedded by :class:`~medverify.kb.embed.EmbedTask` tasks instead of the thread, about the
executor's ``slots`` tasks at once; this process still reads, chunks and stores them, in
order, so the KB is the one the local path writes. A batch whose worker dies is embedded
again by Ray; a batch is stored once.

Both paths embed a batch in the same units (:data:`EMBED_UNIT` chunks, cut from the start
of each batch; one executor task each). A model's vector of a text depends in its last
bits on the other texts of the call (the padded width and shape of its forward batches;
int8's activation scales), while one torch or ONNX Runtime thread or several give the
same bits (measured), so the same units make the vectors of a Ray ingest byte-equal to
a local one.

The records an ingest carries (its stats, pending documents, batches) and the content hash
are in :mod:`medverify.kb.ingest_batches`.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

import numpy as np

from medverify.kb.chunking import Chunk, iter_chunks
from medverify.kb.embed import EmbedTask
from medverify.kb.fts import chunk_terms
from medverify.kb.ingest_batches import (
    PARTIAL,
    Batch,
    InFlight,
    IngestStats,
    Pending,
    document_hash,
    document_pieces,
)
from medverify.kb.loaders import KBInput

if TYPE_CHECKING:
    from medverify.executor import Executor
    from medverify.kb.embed import Embedder
    from medverify.kb.index import VectorIndex

log = logging.getLogger(__name__)

EMBED_UNIT = 64  # chunks per embedder call on every path, and per task on an executor
# (~8 s of MiniLM on one core, so a few workers get several tasks even from a small ingest)


class IngestTarget(Protocol):
    """What an ingest needs of its KB (:class:`medverify.kb.store.KnowledgeBase`)."""

    flush_chunks: int  # chunks per committed batch
    window_chars: int  # characters of a document tokenized at once

    @property
    def dim(self) -> int: ...

    @property
    def embedder(self) -> Embedder: ...

    @property
    def vector_index(self) -> VectorIndex: ...

    def embed_task(self) -> EmbedTask: ...


class Ingester:
    """One ingest run into ``kb`` through its connection ``conn`` (started by
    :meth:`KnowledgeBase.ingest`, which holds the KB's lock); ``kb.flush_chunks`` and
    ``kb.window_chars`` are read while it runs."""

    overlap = True  # embed a batch in a thread while the next one is read and chunked
    bulk = True  # executemany inserts (False: one INSERT per chunk, as before issue 19)

    def __init__(self, kb: IngestTarget, conn: sqlite3.Connection, chunk_tokens: int,
                 chunk_overlap: int, executor: Executor | None = None) -> None:
        self.kb = kb
        self.conn = conn
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.executor = executor
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight: deque[InFlight] = deque()
        self._depth = 1  # batches embedding at once
        self._task: EmbedTask | None = None

    def run(self, documents: Iterable[KBInput],
            progress: Callable[[IngestStats], None] | None) -> IngestStats:
        stats, started = IngestStats(), time.perf_counter()
        self.kb.vector_index.ensure()
        batch = Batch()
        if self.executor is not None:
            self._task = self.kb.embed_task()
            units = -(-max(1, self.kb.flush_chunks) // EMBED_UNIT)  # tasks per batch
            self._depth = max(1, -(-self.executor.slots // units))
        elif self.overlap:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="medverify-embed")
        try:
            for doc in documents:
                self._ingest_one(doc, batch, stats, progress)
                if progress is not None:
                    progress(stats)
            self._flush(batch, stats)
            self._settle(stats)
        except BaseException:
            with contextlib.suppress(Exception):  # a batch handed over is committed, as
                self._settle(stats)  # it was without overlap; the error is the one raised
            raise
        finally:
            for waiting in self._in_flight:  # (only after an error)
                _cancel(waiting.vectors)
            self._in_flight.clear()
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
            stats.seconds = time.perf_counter() - started
            self.kb.vector_index.save()
        return stats

    def _batch_chunks(self) -> int:
        """Chunks per batch: ``kb.flush_chunks`` on every path (read each time: tests change
        it while an ingest runs)."""
        return self.kb.flush_chunks

    def _ingest_one(self, doc: KBInput, batch: Batch, stats: IngestStats,
                    progress: Callable[[IngestStats], None] | None) -> None:
        stats.documents_seen += 1
        held = batch.docs + [p for f in self._in_flight for p in f.batch.docs]
        if any(p.doc.doc_id == doc.doc_id for p in held):
            self._flush(batch, stats)  # an earlier copy in this run is settled first
            self._settle(stats)
        pending = self._admit(doc, stats)
        if pending is None:
            return
        found = False
        for order, chunk in self._new_chunks(pending):
            found = True
            if len(batch.chunks) >= self._batch_chunks():  # flushed only once more is coming,
                self._flush(batch, stats)  # so a document's last batch also completes it
                if progress is not None:
                    progress(stats)
            batch.add(pending, order, chunk)
        if not found and not pending.stored:
            stats.documents_empty += 1
            return
        pending.done = True
        batch.touch(pending)
        if len(batch.chunks) >= self._batch_chunks():
            self._flush(batch, stats)

    def _admit(self, doc: KBInput, stats: IngestStats) -> Pending | None:
        """The document to store, or None when the KB already holds this version."""
        digest = document_hash(doc)
        row = self.conn.execute("SELECT id, content_hash, n_chunks FROM documents "
                                "WHERE doc_id=?", (doc.doc_id,)).fetchone()
        if row is not None and row[1] == digest:
            stats.documents_unchanged += 1
            return None
        pending = Pending(doc, digest, replace=row is not None)
        if row is not None and row[1] == PARTIAL + digest:
            pending.row, pending.stored, pending.resumed = int(row[0]), int(row[2]), True
        return pending

    def _new_chunks(self, pending: Pending) -> Iterator[tuple[int, Chunk]]:
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
        return iter_chunks(document_pieces(doc), self.kb.embedder.tokenizer,
                           self.chunk_tokens, self.chunk_overlap, self.kb.window_chars)

    def _stored_span(self, pending: Pending) -> tuple[int, int] | None:
        row = self.conn.execute('SELECT start, "end" FROM chunks WHERE doc=? AND ord=?',
                                (pending.row, pending.stored - 1)).fetchone()
        return (int(row[0]), int(row[1])) if row else None

    def _flush(self, batch: Batch, stats: IngestStats) -> None:
        """Embed the batch and store it: at once without overlap; else hand it to the
        embedding thread (or the executor) and store the oldest batch handed over once
        more than ``_depth`` are out (batches are stored in order, so a document's chunks
        and rows are written as without overlap)."""
        if not batch.docs:
            return
        texts = [_embed_text(p.doc.title, c) for p, _, c in batch.chunks]
        taken = Batch(batch.docs, batch.chunks, {id(p) for p in batch.docs if p.done})
        batch.docs, batch.chunks = [], []
        if self.executor is not None and self._task is not None:
            executor, task = self.executor, self._task
            vectors: list[Future[np.ndarray]] | list[Future[Sequence[np.ndarray]]] = [
                executor.submit(task, unit) for unit in _units(texts)]
        elif self._pool is not None:
            vectors = [self._pool.submit(self._embed, texts)]
        else:
            self._store(taken, self._embed(texts), stats)
            return
        self._in_flight.append(InFlight(taken, vectors))
        while len(self._in_flight) > self._depth:
            self._store_oldest(stats)

    def _settle(self, stats: IngestStats) -> None:
        """Store every batch being embedded, in order, once its vectors are there."""
        while self._in_flight:
            self._store_oldest(stats)

    def _store_oldest(self, stats: IngestStats) -> None:
        """Store the oldest batch out. If its embedding failed, the later batches are
        dropped too (never stored past a gap): the KB keeps a prefix, which a rerun
        resumes."""
        pending = self._in_flight.popleft()
        try:
            vectors = np.concatenate([np.zeros((0, self.kb.dim), dtype=np.float32)] + [
                np.asarray(part.result(), dtype=np.float32).reshape(-1, self.kb.dim)
                for part in pending.vectors])
        except BaseException:
            _cancel(pending.vectors)
            for later in self._in_flight:
                _cancel(later.vectors)
            self._in_flight.clear()
            raise
        self._store(pending.batch, vectors.reshape(len(pending.batch.chunks), self.kb.dim),
                    stats)

    def _embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.kb.dim), dtype=np.float32)
        embedder = self.kb.embedder
        if not self.bulk and hasattr(embedder, "embed_legacy"):
            return embedder.embed_legacy(texts)  # type: ignore[no-any-return]
        return np.concatenate([np.asarray(embedder.embed(unit), dtype=np.float32)
                               .reshape(-1, self.kb.dim) for unit in _units(texts)])

    def _store(self, batch: Batch, vectors: np.ndarray, stats: IngestStats) -> None:
        replaced = any(p.replace and p.row is None for p in batch.docs)
        with self.conn:
            ids = self._store_batch(batch, vectors)
            self.conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 "
                              "WHERE key='generation'")
        stats.chunks_added += len(ids)
        for pending in (p for p in batch.docs if batch.completes(p)):
            stats.documents_resumed += pending.resumed
            stats.documents_updated += pending.replace and not pending.resumed
            stats.documents_added += not pending.replace or pending.resumed
        self.kb.vector_index.add(ids, vectors, rebuild=replaced)
        _release_free_memory()

    def _store_batch(self, batch: Batch, vectors: np.ndarray) -> list[int]:
        for pending in batch.docs:
            if pending.row is None:
                if pending.replace:
                    self._delete_document(pending.doc.doc_id)
                pending.row = self._insert_document(pending)
        if self.bulk:
            ids = self._insert_chunks(batch, vectors)
        else:
            ids = [self._insert_chunk(p, order, chunk, vector)
                   for (p, order, chunk), vector in zip(batch.chunks, vectors, strict=True)]
        texts_of: dict[int, list[str]] = {}
        for p, _, c in batch.chunks:
            texts_of.setdefault(id(p), []).append(c.text)
        for pending in batch.docs:
            texts = texts_of.get(id(pending), [])
            self._count_terms(pending.doc.title, texts, +1)
            pending.stored += len(texts)
            state = pending.digest if batch.completes(pending) else PARTIAL + pending.digest
            self.conn.execute("UPDATE documents SET content_hash=?, n_chunks=? WHERE id=?",
                              (state, pending.stored, pending.row))
        return ids

    def _insert_document(self, pending: Pending) -> int:
        doc = pending.doc
        cursor = self.conn.execute(
            "INSERT INTO documents (doc_id, content_hash, title, url, source, meta, n_chunks,"
            " added_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (doc.doc_id, PARTIAL + pending.digest, doc.title, doc.url, doc.source,
             json.dumps(doc.meta, default=str), 0, time.time()))
        return int(cursor.lastrowid or 0)

    def _insert_chunks(self, batch: Batch, vectors: np.ndarray) -> list[int]:
        """Insert the batch's chunks and their full-text rows with two ``executemany``
        calls. The ids are assigned here, in the transaction, as SQLite would (one past
        the largest), so they equal those of inserting row by row."""
        if not batch.chunks:
            return []
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if len(vectors) != len(batch.chunks):
            raise ValueError(f"{len(batch.chunks)} chunks but {len(vectors)} vectors")
        first = int(self.conn.execute("SELECT COALESCE(MAX(id), 0) FROM chunks")
                    .fetchone()[0]) + 1
        ids = list(range(first, first + len(batch.chunks)))
        self.conn.executemany(
            'INSERT INTO chunks (id, doc, ord, text, start, "end", n_tokens, vector) '
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(i, p.row, order, c.text, c.span.start, c.span.end, c.n_tokens, v.tobytes())
             for i, (p, order, c), v in zip(ids, batch.chunks, vectors, strict=True)])
        self.conn.executemany(
            "INSERT INTO chunks_fts (rowid, title, body) VALUES (?, ?, ?)",
            [(i, p.doc.title or "", c.text) for i, (p, _, c) in zip(ids, batch.chunks,
                                                                     strict=True)])
        return ids

    def _insert_chunk(self, pending: Pending, order: int, chunk: Chunk,
                      vector: np.ndarray) -> int:
        cursor = self.conn.execute(
            'INSERT INTO chunks (doc, ord, text, start, "end", n_tokens, vector) '
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (pending.row, order, chunk.text, chunk.span.start, chunk.span.end, chunk.n_tokens,
             np.ascontiguousarray(vector, dtype=np.float32).tobytes()))
        chunk_id = int(cursor.lastrowid or 0)
        self.conn.execute("INSERT INTO chunks_fts (rowid, title, body) VALUES (?, ?, ?)",
                          (chunk_id, pending.doc.title or "", chunk.text))
        return chunk_id

    def _count_terms(self, title: str | None, texts: list[str], sign: int) -> None:
        counts: dict[str, int] = {}
        for text in texts:
            for term in chunk_terms(title, text):
                counts[term] = counts.get(term, 0) + sign
        self.conn.executemany(
            "INSERT INTO terms (term, df) VALUES (?, ?) "
            "ON CONFLICT(term) DO UPDATE SET df = df + excluded.df", counts.items())

    def remove(self, doc_ids: Iterable[str]) -> int:
        """Delete documents: their rows, chunks, full-text entries and term counts in one
        SQLite transaction (which bumps ``generation``, so the snapshot id changes), then
        their vectors from the faiss index, which is saved in step; ids the KB does not
        hold are skipped. Returns how many documents were removed.

        faiss's flat and IVF indexes remove ids in place; an HNSW index records them as
        removed and leaves them out of its results (:meth:`VectorIndex.remove`); should
        a removal fail, the index is rebuilt from the vectors in SQLite, the source of
        truth."""
        wanted = list(dict.fromkeys(doc_ids))
        index = self.kb.vector_index
        index.ensure()
        chunk_ids: list[int] = []
        removed = 0
        with self.conn:
            for doc_id in wanted:
                row = self.conn.execute("SELECT id FROM documents WHERE doc_id=?",
                                        (doc_id,)).fetchone()
                if row is None:
                    continue
                chunk_ids += [int(r[0]) for r in self.conn.execute(
                    "SELECT id FROM chunks WHERE doc=?", (row[0],))]
                self._delete_document(doc_id)
                removed += 1
            if removed:
                self.conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 "
                                  "WHERE key='generation'")
        if removed:
            index.remove(chunk_ids)
        return removed

    def _delete_document(self, doc_id: str) -> None:
        row = self.conn.execute("SELECT id, title FROM documents WHERE doc_id=?",
                                (doc_id,)).fetchone()
        cursor = self.conn.execute("SELECT text FROM chunks WHERE doc=?", (row[0],))
        while rows := cursor.fetchmany(1024):
            self._count_terms(row[1], [r[0] for r in rows], -1)
        self.conn.execute("DELETE FROM chunks_fts WHERE rowid IN "
                          "(SELECT id FROM chunks WHERE doc=?)", (row[0],))
        self.conn.execute("DELETE FROM chunks WHERE doc=?", (row[0],))
        self.conn.execute("DELETE FROM documents WHERE id=?", (row[0],))


def _units(texts: list[str]) -> list[list[str]]:
    """A batch's texts cut into the embedder calls (tasks) of every path: :data:`EMBED_UNIT`
    each from the start, read at each call (tests change it)."""
    return [texts[i:i + EMBED_UNIT] for i in range(0, len(texts), EMBED_UNIT)]


def _cancel(parts: Sequence[Future[np.ndarray]] | Sequence[Future[Sequence[np.ndarray]]]) -> None:
    for part in parts:
        part.cancel()


def _embed_text(title: str | None, chunk: Chunk) -> str:
    """What is embedded for a chunk: the document title (context), then the chunk."""
    return f"{title}\n{chunk.text}" if title else chunk.text


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
