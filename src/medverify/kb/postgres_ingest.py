"""Ingest into a KB on PostgreSQL, in this process or from an executor's workers
(``kb ingest --executor ray``).

This process reads and chunks the documents and cuts the chunks to store into the
embedded ingest's embedding units (:data:`medverify.kb.ingest.EMBED_UNIT` chunks from the
start of each batch of ``flush_chunks``), so that a model embeds the same calls and gives
the same vector bytes as :mod:`medverify.kb.ingest`. Each unit is one
:class:`UnitTask`: embed its texts, then write its chunks in one transaction
(:func:`store_unit`). Without an executor the tasks run here, one after another; on an
executor each runs on a worker, which embeds (:class:`medverify.kb.embed.EmbedTask`) and
writes through its own connection (the task carries the KB's URL, password included),
while this process keeps about the executor's ``slots`` tasks out.

Every write takes the KB's write lock (``pg_advisory_xact_lock``, transaction-scoped:
:func:`medverify.kb.postgres_schema.begin_write`), so workers, ingests and replicas
teaching write one transaction after another, and a chunk's generation is its commit
order. A document's first unit inserts its row as ``partial:<hash>`` with the number of
chunks it will have; each unit inserts its chunks unless (document, order) is already
stored (a unique index); the transaction that stores a document's last chunk sets its
hash. A document held under another hash (an older version, whole or partial) is
deleted, with tombstones, by the first unit of the new one.

So a killed worker or ingest loses nothing committed, and a rerun resumes: a document
stored whole with the same hash is skipped, of a partial one only the missing chunks are
embedded and written. A task run twice (Ray runs a task again when its worker dies, even
after its commit) writes nothing the second time, and two ingests of the same documents
at once store each chunk once.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from medverify.connections import PostgresDatabase
from medverify.kb.chunking import WINDOW_CHARS, iter_chunks
from medverify.kb.embed import EmbedTask
from medverify.kb.ingest import EMBED_UNIT
from medverify.kb.ingest_batches import PARTIAL, IngestStats, document_hash, document_pieces
from medverify.kb.loaders import KBInput
from medverify.kb.postgres_schema import (
    TS_CONFIG,
    begin_write,
    delete_document,
    words_of,
)

if TYPE_CHECKING:
    from medverify.executor import Executor
    from medverify.kb.embed import Embedder

READ_AHEAD = 256  # documents whose stored hash is read in one query


@dataclass(frozen=True)
class UnitRow:
    """One chunk to store, with what its transaction needs of its document."""

    doc_id: str
    digest: str  # the document's content hash
    n_chunks: int  # the chunks the whole document has
    title: str | None
    url: str | None
    source: str | None
    meta: str  # JSON
    order: int
    text: str
    start: int
    end: int
    n_tokens: int

    @property
    def embedded(self) -> str:
        """What is embedded for the chunk (as :mod:`medverify.kb.ingest`): title, text."""
        return f"{self.title}\n{self.text}" if self.title else self.text


def store_unit(db: PostgresDatabase, rows: Sequence[UnitRow], vectors: np.ndarray) -> list[int]:
    """Write a unit's chunks in one transaction under the KB's lock; per row, 1 when it
    was written, 0 when it was not (stored already, or its document is stored whole, or
    under another hash by a later ingest)."""
    generation = begin_write(db)
    try:
        firsts: dict[str, UnitRow] = {}  # each document's first row, in order
        for row in rows:
            firsts.setdefault(row.doc_id, row)
        held = {str(r[0]): (int(r[1]), str(r[2])) for r in db.execute(
            "SELECT doc_id, id, content_hash FROM kb_documents WHERE doc_id = ANY(?)",
            (list(firsts),))}
        docs: dict[str, int | None] = {}
        new: list[UnitRow] = []
        for doc_id, first in firsts.items():
            docs[doc_id] = _document_row(db, first, held.get(doc_id), generation)
            if docs[doc_id] == -1:
                new.append(first)
        docs.update(_insert_documents(db, new))
        changed = bool(new)
        live = [d for d in docs.values() if d is not None]
        present = {(int(d), int(o)) for d, o in db.execute(
            "SELECT doc, ord FROM kb_chunks WHERE doc = ANY(?)", (live,))} if live else set()
        keep = [n for n, row in enumerate(rows) if docs[row.doc_id] is not None
                and (docs[row.doc_id], row.order) not in present]
        if not keep and not changed:
            db.rollback()  # nothing to write: the generation stays
            return [0] * len(rows)
        _insert_chunks(db, [(rows[n], docs[rows[n].doc_id], vectors[n]) for n in keep],
                       generation)
        written = {rows[n].doc_id: rows[n] for n in keep}.values()
        db.execute(  # the documents whose last chunk this unit stored: whole
            "UPDATE kb_documents d SET content_hash = v.digest FROM (SELECT "
            "unnest(?::bigint[]) AS id, unnest(?::text[]) AS digest) v WHERE d.id = v.id AND "
            "d.n_chunks = (SELECT count(*) FROM kb_chunks c WHERE c.doc = d.id)",
            ([docs[r.doc_id] for r in written], [r.digest for r in written]))
        db.commit()
    except BaseException:
        db.rollback()
        raise
    kept = set(keep)
    return [int(n in kept) for n in range(len(rows))]


def _document_row(db: PostgresDatabase, row: UnitRow, found: tuple[int, str] | None,
                  generation: int) -> int | None:
    """The row id the unit's chunks of this document go to; None to skip them; -1 for a
    row to insert (an older version, ``found``: its row id and hash, deleted first)."""
    if found is not None and found[1] == row.digest:
        return None  # stored whole (by a rerun or another ingest)
    if found is not None and found[1] == PARTIAL + row.digest:
        return found[0]
    if found is not None:
        delete_document(db, found[0], generation)  # another version
    return -1


def _insert_documents(db: PostgresDatabase, rows: list[UnitRow]) -> dict[str, int]:
    """Insert the documents of ``rows`` as partial (one statement); their row ids."""
    if not rows:
        return {}
    now = time.time()
    inserted = db.execute(
        "INSERT INTO kb_documents (doc_id, content_hash, title, url, source, meta, n_chunks, "
        "added_at) SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], "
        "?::text[], ?::jsonb[], ?::int[], ?::float8[]) RETURNING doc_id, id",
        ([r.doc_id for r in rows], [PARTIAL + r.digest for r in rows],
         [r.title for r in rows], [r.url for r in rows], [r.source for r in rows],
         [r.meta for r in rows], [r.n_chunks for r in rows], [now] * len(rows))).fetchall()
    return {str(d): int(i) for d, i in inserted}


def _insert_chunks(db: PostgresDatabase, rows: list[tuple[UnitRow, int | None, np.ndarray]],
                   generation: int) -> None:
    db.executemany(
        'INSERT INTO kb_chunks (doc, ord, text, start, "end", n_tokens, vector, generation, '
        f"tsv, fts_len) VALUES (?, ?, ?, ?, ?, ?, ?, ?, to_tsvector('{TS_CONFIG}', ?), ?)",
        [(doc, r.order, r.text, r.start, r.end, r.n_tokens,
          np.ascontiguousarray(v, dtype=np.float32).tobytes(), generation,
          f"{r.title or ''} {r.text}", words_of(r.title, r.text)) for r, doc, v in rows])


_WORKER_DBS: dict[str, PostgresDatabase] = {}  # a worker's connection per KB URL


def close_worker_connections() -> None:
    """Close this process's task connections (an executor running tasks in this process:
    the local one, tests)."""
    while _WORKER_DBS:
        _WORKER_DBS.popitem()[1].close()


@dataclass(frozen=True)
class UnitTask:
    """The picklable task of an ingest on an executor: embed a unit with the KB's
    embedder, write it through this process's connection to ``url``."""

    url: str
    embed: EmbedTask

    def __call__(self, rows: list[UnitRow]) -> list[int]:
        vectors = self.embed([r.embedded for r in rows])
        db = _WORKER_DBS.get(self.url)
        if db is None:
            db = _WORKER_DBS[self.url] = PostgresDatabase(self.url)
        return store_unit(db, rows, vectors)


class PgIngester:
    """One ingest run into a KB on PostgreSQL (started by ``PostgresKB.ingest``):
    documents read and chunked here, units embedded and written here or by ``executor``."""

    def __init__(self, db: PostgresDatabase, embedder: Embedder, chunk_tokens: int,
                 chunk_overlap: int, flush_chunks: int,
                 task: UnitTask | None = None, executor: Executor | None = None) -> None:
        self.db = db
        self.embedder = embedder
        self.chunk_tokens = chunk_tokens
        self.chunk_overlap = chunk_overlap
        self.flush_chunks = max(1, flush_chunks)
        self.task = task
        self.executor = executor
        self._unit: list[UnitRow] = []
        self._in_batch = 0  # chunks of the current batch of flush_chunks given out
        self._out: deque[Future[Sequence[int]]] = deque()
        self._since_settled: set[str] = set()  # doc ids given out since the last settle

    def run(self, documents: Iterable[KBInput],
            progress: Callable[[IngestStats], None] | None = None) -> IngestStats:
        stats, started = IngestStats(), time.perf_counter()
        try:
            docs = iter(documents)
            while block := list(islice(docs, READ_AHEAD)):
                held = self._held([doc.doc_id for doc in block])
                for doc in block:
                    self._one(doc, stats, held)
                    if progress is not None:
                        progress(stats)
            self._settle(stats)
        except BaseException:
            for future in self._out:
                future.cancel()
            self._out.clear()
            raise
        finally:
            stats.seconds = time.perf_counter() - started
        return stats

    def _held(self, doc_ids: list[str]) -> dict[str, tuple[int, str]]:
        """(row id, content hash) of the documents of ``doc_ids`` the KB holds."""
        return {str(r[0]): (int(r[1]), str(r[2])) for r in self.db.execute(
            "SELECT doc_id, id, content_hash FROM kb_documents WHERE doc_id = ANY(?)",
            (doc_ids,))}

    def _one(self, doc: KBInput, stats: IngestStats, held: dict[str, tuple[int, str]]) -> None:
        stats.documents_seen += 1
        if doc.doc_id in self._since_settled:
            self._settle(stats)  # an earlier copy in this run is stored first
            held.pop(doc.doc_id, None)
            held.update(self._held([doc.doc_id]))  # as the earlier copy left it
        digest = document_hash(doc)
        found = held.get(doc.doc_id)
        if found is not None and found[1] == digest:
            stats.documents_unchanged += 1
            return
        stored: set[int] = set()
        if found is not None and found[1] == PARTIAL + digest:
            stored = {int(r[0]) for r in self.db.execute(
                "SELECT ord FROM kb_chunks WHERE doc = ?", (found[0],))}
        chunks = list(iter_chunks(document_pieces(doc), self.embedder.tokenizer,
                                  self.chunk_tokens, self.chunk_overlap, WINDOW_CHARS))
        if not chunks:
            stats.documents_empty += 1
            return
        resumed = bool(stored)
        stats.documents_resumed += resumed
        stats.documents_updated += found is not None and not resumed
        stats.documents_added += found is None or resumed
        meta = json.dumps(doc.meta, default=str)
        self._since_settled.add(doc.doc_id)
        for order, chunk in enumerate(chunks):
            if order not in stored:
                self._give(UnitRow(doc.doc_id, digest, len(chunks), doc.title, doc.url,
                                   doc.source, meta, order, chunk.text, chunk.span.start,
                                   chunk.span.end, chunk.n_tokens), stats)

    def _give(self, row: UnitRow, stats: IngestStats) -> None:
        """Add a chunk to the current unit; a unit is cut where the embedded ingest cuts
        its embedder calls (every EMBED_UNIT chunks from each batch's start)."""
        if self._in_batch >= self.flush_chunks:
            self._in_batch = 0
        if self._unit and self._in_batch % EMBED_UNIT == 0:
            self._submit(stats)
        self._unit.append(row)
        self._in_batch += 1

    def _submit(self, stats: IngestStats) -> None:
        rows, self._unit = self._unit, []
        if not rows:
            return
        if self.executor is None or self.task is None:
            vectors = np.asarray(self.embedder.embed([r.embedded for r in rows]),
                                 dtype=np.float32)
            stats.chunks_added += sum(store_unit(self.db, rows, vectors))
            return
        self._out.append(self.executor.submit(self.task, rows))  # type: ignore[arg-type]
        while len(self._out) > max(1, self.executor.slots) * 2:
            stats.chunks_added += sum(self._out.popleft().result())

    def _settle(self, stats: IngestStats) -> None:
        """Submit the current unit and wait for every unit out (a new batch starts)."""
        self._submit(stats)
        while self._out:
            stats.chunks_added += sum(self._out.popleft().result())
        self._in_batch = 0
        self._since_settled.clear()


def unit_task(url: str, meta: dict[str, Any], embedder: Embedder, device: str,
              runtime: str) -> UnitTask:
    """The task of an ingest into the KB at ``url`` (its recorded embedder)."""
    spec = meta.get("embedder_spec") or embedder.id
    embed = EmbedTask.for_kb(str(spec), embedder.id, int(meta["dim"]),
                             meta.get("embed_precision", "fp32"), device, runtime)
    return UnitTask(url, embed)
