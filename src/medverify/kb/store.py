"""The embedded knowledge base: one directory, no server.

Layout of a KB directory::

    kb.sqlite      SQLite (WAL): meta, documents, chunks (text, offsets, float32 vector),
                   chunks_fts (FTS5, porter stemming, bm25). The source of truth.
    vectors.faiss  faiss IndexIDMap2(IndexFlatIP) over the chunk vectors, keyed by chunk id.
    vectors.json   the SQLite generation the faiss file was written at.
    kb.lock        the writer lock: one writer at a time (:mod:`medverify.kb.lock`).

:class:`KnowledgeBase` holds storage and indexes only: the SQLite file
(:mod:`medverify.kb.database`), the vector index kept in step with it
(:mod:`medverify.kb.index`), ingest (:mod:`medverify.kb.ingest`), the snapshot id, its
writer and reader locks, and the primitive searches the retrieval stage combines
(:meth:`~KnowledgeBase.lexical_candidates`, :meth:`~KnowledgeBase.dense_candidates`,
:meth:`~KnowledgeBase.chunks`; with the index upkeep they live in
:mod:`medverify.kb.store_indexes`). A lexical query is ranked by :mod:`medverify.kb.fts`
(bm25(), stored postings or the bounded rank query); the store serves the candidates.
Ranking (modes, fusion, passages with scores) is :class:`medverify.retrieve.Retriever`'s.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from medverify.config import KBSettings, RetrievalSettings
from medverify.errors import ConfigError, KBError
from medverify.kb.chunking import WINDOW_CHARS
from medverify.kb.database import (
    BUILD_HINT,
    DB_NAME,
    SCHEMA_VERSION,
    KBStats,
    chunking_refusal,
    connect,
    count_rows,
    create_database,
    database_error,
    embedder_refusal,
    initial_meta,
    read_generation,
    recorded_embedder,
    recorded_precision,
    recorded_settings,
    remove_database,
    snapshot_of,
    unfinished_creation,
)
from medverify.kb.embed import Embedder, EmbedTask, get_embedder
from medverify.kb.fts import (
    LEXICAL_BUDGET,
    StoredPostings,
    last_chunk_id,
)
from medverify.kb.index import SearchKnobs
from medverify.kb.ingest import Ingester
from medverify.kb.ingest_batches import IngestStats
from medverify.kb.loaders import KBInput
from medverify.kb.lock import WRITER_WAIT_S, GuardedVectorIndex, WriterLock
from medverify.kb.store_indexes import INDEX_POLICY_KEY, LEXICAL_EXACT, KBIndexes

if TYPE_CHECKING:
    from medverify.config import Config
    from medverify.executor import Executor

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class KnowledgeBase(KBIndexes):
    """Documents, chunks, a full-text index and a vector index in one directory."""

    def __init__(self, path: Path, conn: sqlite3.Connection, embedder: Embedder | None,
                 retrieval: RetrievalSettings | None = None,
                 settings: KBSettings | None = None) -> None:
        self.path = path
        self._conn = conn
        self._meta = self._read_meta()
        self._embedder = embedder
        self.retrieval = retrieval or RetrievalSettings()
        knobs = settings or KBSettings()
        self._writer: int | None = None  # the thread holding the writer lock, if one does
        self.writer_wait: float | None = WRITER_WAIT_S  # seconds a write waits for another
        self._vectors = GuardedVectorIndex(path, self.dim, conn, policy=self.index_policy,
                                           embedder_id=self.embedder_id,
                                           threshold=knobs.index_threshold,
                                           knobs=SearchKnobs(knobs.nprobe, knobs.ef_search),
                                           writer_held=self._holds_writer)
        self._snapshot: tuple[int, str] | None = None
        self._vectors_at: int | None = None  # the generation the loaded index is in step with
        self._lock = threading.RLock()
        self.flush_chunks = KBSettings().batch_size * 4  # chunks per committed batch
        self.window_chars = WINDOW_CHARS  # characters of a document tokenized at once
        self._embed_device = knobs.embed_device
        self._embed_runtime = knobs.embed_runtime
        self.lexical_budget = LEXICAL_BUDGET
        self.lexical_exact = LEXICAL_EXACT  # postings up to which FTS5 bm25() ranks
        # chunks from which past that, it does not: off (None) unless configured, because
        # its top 10 agrees poorly with bm25's (benchmarks/results/lexical_ranking.md)
        self.lexical_large: int | None = knobs.lexical_bounded_from
        # chunks from which a lexical query is ranked from the stored postings (bm25() in
        # numpy, equal to FTS5's) when the KB has them at its generation; None: never
        self.lexical_postings_from: int | None = knobs.lexical_postings_from
        self._postings = StoredPostings(conn)  # ranks lexical queries on a large KB
        if embedder is not None:
            self._check_embedder(embedder)
        if settings is not None:
            self._check_index(settings.index)

    # ---- construction -------------------------------------------------------------

    @classmethod
    def create(cls, path: str | Path, settings: KBSettings | None = None,
               embedder: Embedder | str | None = None,
               retrieval: RetrievalSettings | None = None, *,
               wait: float | None = WRITER_WAIT_S) -> KnowledgeBase:
        """Create a new, empty KB at ``path`` (KBError if one is already there), holding
        its writer lock meanwhile (waiting up to ``wait`` seconds for another writer)."""
        return cls._create(Path(path), settings, embedder, retrieval, wait, exist_ok=False)

    @classmethod
    def _create(cls, path: Path, given: KBSettings | None, embedder: Embedder | str | None,
                retrieval: RetrievalSettings | None, wait: float | None,
                exist_ok: bool) -> KnowledgeBase:
        """Create the KB under its writer lock; with ``exist_ok``, open the one another
        process created meanwhile (so of two processes creating one KB, one creates it
        and the other opens it)."""
        settings, db = given or KBSettings(), path / DB_NAME
        exists = KBError(f"a knowledge base already exists at {path}: open it, or choose "
                         "another --kb directory")
        if db.exists() and not exist_ok:
            raise exists
        if settings.chunk_overlap >= settings.chunk_tokens:
            raise ConfigError("chunk overlap must be smaller than the chunk size")
        emb = get_embedder(embedder if embedder is not None else settings.embedder,
                           settings.embed_precision, settings.embed_device,
                           settings.embed_runtime)
        path.mkdir(parents=True, exist_ok=True)
        with WriterLock(path, "KB creation", wait):
            if exist_ok and db.is_file() and unfinished_creation(db):
                log.warning("%s was left half-created (no settings, no documents): creating "
                            "it again", db)
                remove_database(db)
            if db.exists():
                if not exist_ok:
                    raise exists
                return cls._opened(path, given, embedder, retrieval)
            meta = initial_meta(settings, emb, embedder)
            meta[INDEX_POLICY_KEY] = settings.index
            create_database(db, meta)
        return cls(path, connect(db), emb, retrieval, settings)

    @classmethod
    def open(cls, path: str | Path, embedder: Embedder | str | None = None,
             retrieval: RetrievalSettings | None = None,
             settings: KBSettings | None = None) -> KnowledgeBase:
        """Open an existing KB. With ``embedder``, refuse it unless the KB was built with it;
        with ``settings``, refuse a KB whose vector index is not ``settings.index`` (unless
        that is ``auto``), and take its query-time index parameters."""
        path = Path(path)
        if not (path / DB_NAME).is_file():
            raise KBError(f"no knowledge base at {path}: " + BUILD_HINT.format(path=path))
        conn = connect(path / DB_NAME)
        knobs = settings or KBSettings()
        emb = (get_embedder(embedder, recorded_precision(conn),  # type: ignore[arg-type]
                            knobs.embed_device, knobs.embed_runtime)
               if embedder is not None else None)  # a name: in the KB's precision
        return cls(path, conn, emb, retrieval, settings)

    @classmethod
    def open_or_create(cls, path: str | Path, settings: KBSettings | None = None,
                       embedder: Embedder | str | None = None,
                       retrieval: RetrievalSettings | None = None, *,
                       wait: float | None = WRITER_WAIT_S) -> KnowledgeBase:
        """Open the KB at ``path``, or create it there (under its writer lock, waiting up
        to ``wait`` seconds; a database an older medverify left half-created is created
        again)."""
        db = Path(path) / DB_NAME
        if db.is_file() and not unfinished_creation(db):
            return cls._opened(Path(path), settings, embedder, retrieval)
        return cls._create(Path(path), settings, embedder, retrieval, wait, exist_ok=True)

    @classmethod
    def _opened(cls, path: Path, settings: KBSettings | None, embedder: Embedder | str | None,
                retrieval: RetrievalSettings | None) -> KnowledgeBase:
        kb = cls.open(path, embedder, retrieval, settings)
        if settings is not None:
            kb._check_chunking(settings)
        return kb

    @classmethod
    def from_config(cls, path: str | Path, config: Config) -> KnowledgeBase:
        """The ``embedded`` entry of :data:`medverify.kb.KB_STORES`: open the KB directory
        at ``path`` with the configured retrieval and index settings (and the KB's own
        embedder); a KB built with another vector index than a configured kind is refused."""
        return cls.open(path, retrieval=config.retrieval, settings=config.kb_settings)

    def _read_meta(self) -> dict[str, str]:
        try:
            meta = dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise KBError(f"{self.path} is not a readable knowledge base ({exc}); delete it "
                          "and " + BUILD_HINT.format(path=self.path)) from exc
        version = int(meta.get("schema_version", "0"))
        if version != SCHEMA_VERSION:
            self._conn.close()
            raise KBError(f"{self.path} has KB schema version {version}, this medverify "
                          f"reads version {SCHEMA_VERSION}: rebuild it with "
                          "`medverify kb ingest`")
        return meta

    def _check_embedder(self, embedder: Embedder) -> None:
        refusal = embedder_refusal(self.path, self._meta, embedder)
        if refusal is not None:
            raise refusal

    def _check_index(self, wanted: str) -> None:
        """Refuse a KB whose vector index is not the configured kind (``auto`` takes any):
        searching it would silently trade recall (or latency) against what was asked."""
        if wanted == "auto" or wanted == self.index_policy:
            return
        built = self._vectors.recorded_spec() if self._vectors.state() == "fresh" else None
        if built is not None and built.kind == wanted:
            return
        have = built.describe() if built is not None else self._vectors.wanted_spec().kind
        raise KBError(
            f"the knowledge base at {self.path} has a {have} vector index (policy "
            f"{self.index_policy!r}), not {wanted!r} as configured: rebuild it with "
            f"`medverify kb reindex --kb {self.path} --index {wanted}`, or set the "
            "index to auto to use it as it is")

    def _check_chunking(self, settings: KBSettings) -> None:
        refusal = chunking_refusal(self.path, self._meta, settings)
        if refusal is not None:
            raise refusal

    # ---- identity -----------------------------------------------------------------

    @property
    def embedder_id(self) -> str:
        return self._meta["embedder_id"]

    @property
    def dim(self) -> int:
        return int(self._meta["dim"])

    @property
    def embed_precision(self) -> str:
        """The precision of the stored vectors (fp32 or int8); queries use the same."""
        return self._meta.get("embed_precision", "fp32")

    @property
    def index_policy(self) -> str:
        """The vector index this KB records: ``auto`` (by size) or a kind."""
        return self._meta.get(INDEX_POLICY_KEY, "auto")

    @property
    def settings(self) -> KBSettings:
        return recorded_settings(self._meta)

    @property
    def embedder(self) -> Embedder:
        """The KB's embedder, loaded on first use."""
        if self._embedder is None:
            self._embedder = recorded_embedder(self.path, self._meta, self._embed_device,
                                               self._embed_runtime)
        return self._embedder

    def embed_task(self) -> EmbedTask:
        """The picklable embedding function of an ingest on an executor: this KB's embedder
        by its recorded spec, precision and device (a worker makes it, and refuses one
        that is not the KB's)."""
        spec = self._meta.get("embedder_spec") or self.embedder_id
        return EmbedTask.for_kb(str(spec), self.embedder_id, self.dim, self.embed_precision,
                                self._embed_device, self._embed_runtime)

    @property
    def generation(self) -> int:
        return read_generation(self._conn)

    @property
    def lineage(self) -> str:
        """The KB's identity across ingests and removals (``kbl-`` + a hash of when it was
        created and its embedder): a copy of the directory keeps it, a rebuilt KB gets a
        new one. Review decisions settle claims only within one lineage."""
        created = self._meta.get("created_at") or str(Path(self.path).resolve())
        body = f"{created}|{self._meta['embedder_id']}"
        return "kbl-" + hashlib.sha256(body.encode()).hexdigest()[:16]

    @property
    def snapshot_id(self) -> str:
        """Changes whenever the content changes: documents, embedder or chunk settings."""
        generation = self.generation
        if self._snapshot is None or self._snapshot[0] != generation:
            self._snapshot = (generation, self._compute_snapshot())
        return self._snapshot[1]

    def _compute_snapshot(self) -> str:
        return snapshot_of(self._conn, self._meta, self.embed_precision)

    def stats(self) -> KBStats:
        with self._damage_is_an_error():
            docs, chunks = self._counts()
            size = sum(f.stat().st_size for f in self.path.iterdir() if f.is_file())
            return KBStats(path=str(self.path), schema_version=SCHEMA_VERSION, documents=docs,
                           chunks=chunks, embedder_id=self.embedder_id, dim=self.dim,
                           chunk_tokens=int(self._meta["chunk_tokens"]),
                           chunk_overlap=int(self._meta["chunk_overlap"]),
                           snapshot_id=self.snapshot_id, vector_index=self._vectors.state(),
                           size_bytes=size, index_policy=self.index_policy,
                           index_kind=self._vectors.current_spec().describe(),
                           embed_precision=self.embed_precision,
                           lexical_postings=self.lexical_postings_state())

    def _counts(self) -> tuple[int, int]:
        return count_rows(self._conn)

    # ---- ingest -------------------------------------------------------------------

    def ingest(self, documents: Iterable[KBInput],
               progress: Callable[[IngestStats], None] | None = None,
               executor: Executor | None = None) -> IngestStats:
        """Add documents; unchanged ones (same doc_id and content hash) are skipped.

        Chunks are embedded and committed in batches of ``flush_chunks`` while documents
        are read, so memory does not grow with document size. A document counts as stored
        once its last chunk is committed; an interrupted ingest resumes where it stopped,
        inside a large document too (see :mod:`medverify.kb.ingest`). With ``executor``
        (e.g. a :class:`~medverify.executor.RayExecutor`) the batches are embedded by its
        workers, with the KB's embedder made there (:meth:`embed_task`). Holds the KB's
        writer lock throughout (:meth:`writing`).
        """
        return self._write("ingest", lambda ingester: ingester.run(documents, progress),
                           executor)

    def remove_documents(self, doc_ids: Iterable[str]) -> int:
        """Remove documents by id (their chunks from SQLite, the full-text index and the
        vector index); ids the KB does not hold are skipped. The generation is bumped, so
        :attr:`snapshot_id` follows the content (removing what was added gives the id of
        before). Returns how many documents were removed. Holds the writer lock."""
        return self._write("removal", lambda ingester: ingester.remove(doc_ids))

    def _write(self, activity: str, run: Callable[[Ingester], _T],
               executor: Executor | None = None) -> _T:
        """``run`` an :class:`Ingester` under the writer lock, with the vector index in
        memory and in step; then follow the KB's new size."""
        with self.writing(activity):
            ingester = Ingester(self, self._conn, int(self._meta["chunk_tokens"]),
                                int(self._meta["chunk_overlap"]), executor)
            self._current_vectors()
            self._vectors.writable()
            try:
                result = run(ingester)
            finally:
                self._vectors_at = self.generation
            self._follow_size()
            return result

    def _follow_size(self) -> None:
        """After an ingest or a removal: rebuild the vector index when the KB's size calls
        for another one (``auto`` crossing the threshold, IVF lists trained for a KB four
        times smaller, or a kind asked for a KB that was too small to train it)."""
        spec = self._vectors.outgrown()
        if spec is not None:
            log.warning("%s now holds %d chunks: rebuilding its vector index as %s",
                        self.path, self._counts()[1], spec.describe())
            self._vectors.rebuild(spec)
        self.follow_lexical()

    def follow_lexical(self) -> dict[str, int] | None:
        """On a KB of ``lexical_postings_from`` chunks or more whose stored postings are not
        fresh (an ingest or a removal made them stale, or they were never built), build
        them (:meth:`build_lexical_postings`: 43-111 s at 1M chunks); below the threshold
        or with the switch off, nothing. Returns the build's counts, or None."""
        with self.writing("lexical postings build"):
            if (self.lexical_postings_from is None
                    or last_chunk_id(self._conn) < self.lexical_postings_from
                    or self.lexical_postings_state() == "fresh"):
                return None
            started = time.perf_counter()
            built = self.build_lexical_postings()
            log.info("%s: lexical postings built in %.1fs (%d postings)", self.path,
                     time.perf_counter() - started, built.get("postings", 0))
            return built

    # ---- locks ---------------------------------------------------------------------

    def _holds_writer(self) -> bool:
        return self._writer == threading.get_ident()

    @contextmanager
    def writing(self, activity: str = "ingest") -> Iterator[None]:
        """Hold the KB's writer lock (:mod:`medverify.kb.lock`; waiting up to
        :attr:`writer_wait` seconds for another writer, then KBBusyError) and its thread
        lock for one write, SQLite errors said as :meth:`_damage_is_an_error` says them.
        A write nested in another of the same thread holds them once. Once taken, what
        another writer may have changed is read again."""
        if self._holds_writer():
            yield
            return
        with (WriterLock(self.path, activity, self.writer_wait), self._lock,
              self._damage_is_an_error()):
            self._writer = threading.get_ident()
            try:
                self._follow_other_writers()
                yield
            finally:
                self._writer = None

    def _follow_other_writers(self) -> None:
        """Under the writer lock: the KB's settings as recorded now (a reindex elsewhere
        may have changed its index policy), and the vector index loaded again when
        another process moved the KB's generation since this one loaded it."""
        self._meta = self._read_meta()
        self._vectors.policy = self.index_policy
        if self._vectors.loaded is not None and self.generation != self._vectors_at:
            self._vectors.loaded = None

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the KB (one thread at a time on its connection and index) for a series of
        reads; a damaged database met meanwhile is one clear KBError."""
        with self._lock, self._damage_is_an_error():
            yield

    @contextmanager
    def _damage_is_an_error(self) -> Iterator[None]:
        """A SQLite error is one clear KBError, not a raw sqlite3 error: damage (the
        database must be rebuilt) only when the file is unreadable; a constraint failure,
        a locked database, a full disk are said as such (:func:`database_error`)."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise database_error(exc, self.path) from None

    # ---- lifecycle ----------------------------------------------------------------

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
