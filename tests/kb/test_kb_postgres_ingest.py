"""The KB on PostgreSQL against the embedded KB: the same ingest gives the same chunks and
vector bytes (in this process, on an executor, on Ray from 2 workers), the replica's
indexes give the embedded store's lexical and dense candidates; an ingest that fails or
is killed keeps what it committed and a rerun resumes; two ingests at once store each
chunk once. Behind the ``database`` marker (Ray: also ``slow``)."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from medverify.config import KBSettings
from medverify.executor import RayExecutor
from medverify.kb import KnowledgeBase, sample_kb_path
from medverify.kb.embed import EMBEDDERS
from medverify.kb.embed_base import HashEmbedder
from medverify.kb.loaders import LoadReport, iter_documents
from medverify.kb.postgres import PostgresKB
from medverify.kb.postgres_replica import FTS_TOKENIZE
from medverify.records import Document
from medverify.retrieve import Retriever
from ray_cluster import needs_ray
from test_kb_executor import (
    QUERIES,
    SMALL_CHUNKS,
    CountingExecutor,
    batch_mixing_embedder,
    documents,
)

database = pytest.mark.database


@pytest.fixture(autouse=True)
def _task_connections() -> Any:
    """The connections tasks run in this process opened, closed after each test."""
    from medverify.kb.postgres_ingest import close_worker_connections

    yield
    close_worker_connections()


def test_the_replica_tokenizes_as_the_embedded_store() -> None:
    from medverify.kb.database import SCHEMA

    assert f"tokenize = '{FTS_TOKENIZE}'" in SCHEMA


def embedded(path: Path, docs: list[Any], embedder: str = "batch-mixing",
             settings: KBSettings = SMALL_CHUNKS, flush_chunks: int = 100) -> KnowledgeBase:
    kb = KnowledgeBase.create(path, settings, embedder=embedder)
    kb.flush_chunks = flush_chunks
    kb.ingest(docs)
    return kb


def on_postgres(url: str, docs: list[Any], embedder: str = "batch-mixing",
                settings: KBSettings = SMALL_CHUNKS, flush_chunks: int = 100,
                executor: Any = None) -> PostgresKB:
    kb = PostgresKB.open(url, settings.model_copy(update={"embedder": embedder}))
    kb.flush_chunks = flush_chunks
    kb.ingest(docs, executor=executor)
    return kb


def stored(kb: KnowledgeBase | PostgresKB) -> list[tuple[Any, ...]]:
    """(doc_id, order, text, start, end, n_tokens, vector bytes, content hash) of every
    chunk, by document and order."""
    if isinstance(kb, PostgresKB):
        rows = kb._db.execute(
            'SELECT d.doc_id, c.ord, c.text, c.start, c."end", c.n_tokens, c.vector, '
            "d.content_hash FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc").fetchall()
    else:
        rows = kb._conn.execute(
            'SELECT d.doc_id, c.ord, c.text, c.start, c."end", c.n_tokens, c.vector, '
            "d.content_hash FROM chunks c JOIN documents d ON d.id = c.doc").fetchall()
    return sorted((*r[:6], bytes(r[6]), r[7]) for r in rows)


def results(kb: KnowledgeBase | PostgresKB) -> list[Any]:
    """Lexical and dense candidates and hybrid passages of the queries, by chunk id."""
    lexical = [kb.lexical_candidates(q, 20) for q in QUERIES]
    hybrid = [[(p.id, p.score) for p in found]
              for found in Retriever(kb).search_many(QUERIES, k=10, mode="hybrid")]
    return [lexical, kb.dense_candidates(QUERIES, 20), hybrid]


@pytest.fixture
def mixing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch-mixing embedder: vectors that depend on the other texts of the call."""
    monkeypatch.setitem(EMBEDDERS._factories, "batch-mixing", batch_mixing_embedder())


@database
def test_the_same_ingest_stores_and_finds_what_the_embedded_one_does(
        pg_url: str, tmp_path: Path, mixing: None) -> None:
    docs = documents(40)  # 256 chunks: batches of 100, units of 64 + 36
    local = embedded(tmp_path / "kb", docs)
    pg = on_postgres(pg_url, docs)
    assert len(stored(pg)) == 256 and stored(pg) == stored(local)  # vector bytes too
    assert results(pg) == results(local)  # the same ids: the same candidates and scores
    assert pg.snapshot_id == local.snapshot_id
    local.close()
    pg.close()


@database
def test_an_ingest_on_an_executor_stores_what_the_local_one_does(
        pg_cluster: Any, tmp_path: Path, mixing: None) -> None:
    docs = documents(40)
    local = on_postgres(pg_cluster.create_schema(), docs)
    executor = CountingExecutor()
    try:
        remote = on_postgres(pg_cluster.create_schema(), docs, executor=executor)
    finally:
        executor.close()
    assert executor.batches == [64, 36, 64, 36, 56]  # the embedded ingest's calls
    assert stored(remote) == stored(local)
    local.close()
    remote.close()


class FailingExecutor(CountingExecutor):
    """Its fourth task fails (as a worker lost for good)."""

    def submit(self, fn: Callable[[list[Any]], Sequence[Any]],
               chunk: list[Any]) -> Future[Sequence[Any]]:
        if len(self.batches) == 3:
            self.batches.append(len(chunk))
            failed: Future[Sequence[Any]] = Future()
            failed.set_exception(RuntimeError("worker lost"))
            return failed
        return super().submit(fn, chunk)


@database
def test_a_failed_ingest_keeps_what_it_committed_and_a_rerun_resumes(
        pg_url: str, tmp_path: Path) -> None:
    docs = documents(40)
    kb = PostgresKB.open(pg_url, SMALL_CHUNKS.model_copy(update={"embedder": "hash-64"}))
    kb.flush_chunks = 100
    executor = FailingExecutor()
    with pytest.raises(RuntimeError, match="worker lost"):
        kb.ingest(docs, executor=executor)
    executor.close()
    kept = kb.counts()[1]
    assert 0 < kept < 256
    partial = kb._db.execute("SELECT count(*) FROM kb_documents WHERE content_hash LIKE "
                             "'partial:%'").fetchone()[0]
    stats = kb.ingest(docs)  # a rerun: only what is missing
    assert stats.chunks_added == 256 - kept and stats.documents_resumed == partial
    assert stats.documents_unchanged + stats.documents_added == 40  # added: resumed too
    whole = embedded(tmp_path / "kb", docs, "hash-64")
    assert [r[:7] for r in stored(kb)] == [r[:7] for r in stored(whole)]
    assert stored(kb) == stored(whole)  # every document stored whole (its hash set)
    kb.close()
    whole.close()


@database
def test_a_task_run_twice_writes_nothing_twice(pg_url: str) -> None:
    from medverify.kb.postgres_ingest import store_unit

    kb = on_postgres(pg_url, documents(3), "hash-64")
    before, generation = stored(kb), kb.generation
    rows = _unit_rows(kb, documents(3)[1])
    assert store_unit(kb._db, rows, np.zeros((len(rows), 64), np.float32)) == [0] * len(rows)
    assert (stored(kb), kb.generation) == (before, generation)  # not even a generation
    kb.close()


def _unit_rows(kb: PostgresKB, doc: Document) -> list[Any]:
    from medverify.kb.chunking import WINDOW_CHARS, iter_chunks
    from medverify.kb.ingest_batches import document_hash, document_pieces
    from medverify.kb.postgres_ingest import UnitRow

    chunks = list(iter_chunks(document_pieces(doc), kb.embedder.tokenizer, 24, 4,
                              WINDOW_CHARS))
    return [UnitRow(doc.doc_id, document_hash(doc), len(chunks), doc.title, doc.url,
                    doc.source, "{}", n, c.text, c.span.start, c.span.end, c.n_tokens)
            for n, c in enumerate(chunks)]


@database
def test_two_ingests_at_once_store_each_chunk_once(pg_url: str, tmp_path: Path) -> None:
    docs = documents(30)
    settings = SMALL_CHUNKS.model_copy(update={"embedder": "hash-64"})
    PostgresKB.open(pg_url, settings).close()
    errors: list[BaseException] = []

    def ingest(order: list[Document]) -> None:
        try:
            with PostgresKB.open(pg_url, settings) as kb:
                kb.flush_chunks = 16
                kb.ingest(order)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=ingest, args=(order,))
               for order in (docs, list(reversed(docs)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with PostgresKB.open(pg_url) as kb:
        whole = embedded(tmp_path / "kb", docs, "hash-64", flush_chunks=16)
        assert stored(kb) == stored(whole)
        whole.close()


# ---- the MedQuAD sample through 2 Ray workers (slow) ---------------------------------------


@pytest.mark.slow
@database
@needs_ray
def test_medquad_sample_on_two_ray_workers_equals_the_embedded_ingest(
        ray_executor: RayExecutor, pg_url: str, tmp_path: Path, mixing: None) -> None:
    """The shipped MedQuAD sample (300 documents) with an embedder whose vectors depend on
    each call's other texts: the workers embed the embedded ingest's calls, so every chunk
    and vector byte is the embedded KB's (the chunk ids follow the workers' commit order,
    so they may differ: search parity on the same ids is the local ingest's test)."""
    assert ray_executor.slots == 2
    docs = list(iter_documents([sample_kb_path()], LoadReport()))
    settings = KBSettings(embedder="batch-mixing")
    local = embedded(tmp_path / "kb", docs, settings=settings,
                     flush_chunks=KBSettings().batch_size * 4)
    pg = on_postgres(pg_url, docs, settings=settings, flush_chunks=KBSettings().batch_size * 4,
                     executor=ray_executor)
    assert len(stored(pg)) > 1000 and stored(pg) == stored(local)
    local.close()
    pg.close()


@pytest.mark.slow
@database
@needs_ray
def test_a_ray_worker_killed_mid_unit_loses_nothing(
        ray_executor: RayExecutor, pg_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "died"

    class DiesOnceEmbedder(HashEmbedder):  # defined here: Ray pickles it by value
        def __init__(self) -> None:
            super().__init__(64)
            self.id = "dies-once"

        def embed(self, texts: list[str]) -> np.ndarray:
            with (marker.parent / "calls").open("a") as log:
                log.write(hashlib.sha256("|".join(texts).encode()).hexdigest()[:8] + "\n")
            if any(t.startswith("Topic 5\n") for t in texts) and not marker.exists():
                marker.touch()
                os._exit(1)  # the worker dies mid-unit
            return super().embed(texts)

    monkeypatch.setitem(EMBEDDERS._factories, "dies-once", DiesOnceEmbedder)
    docs = documents(40)
    pg = on_postgres(pg_url, docs, "dies-once", executor=ray_executor)
    assert marker.exists()
    calls = (tmp_path / "calls").read_text().split()
    assert len(calls) == len(set(calls)) + 1  # one unit embedded twice
    local = embedded(tmp_path / "kb", docs, "hash-64")
    assert stored(pg) == stored(local)
    pg.close()
    local.close()


@database
def test_cli_ingest_into_postgresql(pg_url: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from medverify.cli import main

    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("Metformin is a first-line drug for type 2 diabetes.\n", "utf-8")
    args = ["kb", "ingest", str(src), "--kb", pg_url, "--embedder", "hash",
            "--chunk-tokens", "64", "--chunk-overlap", "8"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "KB now has 1 documents, 1 chunks" in result.output
    again = CliRunner().invoke(main, [*args, "--executor", "local"])
    assert again.exit_code == 0 and "unchanged 1" in again.output, again.output
    with PostgresKB.open(pg_url) as kb:
        stats = kb.stats()
        assert (stats.documents, stats.chunks, stats.chunk_tokens) == (1, 1, 64)
        assert stats.size_bytes > 0 and stats.embedder_id == kb.embedder_id


@database
def test_a_document_given_twice_in_one_ingest_keeps_the_later_copy(
        pg_url: str, tmp_path: Path) -> None:
    docs = documents(6)
    later = docs[2].model_copy(update={"text": "Warfarin and bleeding. " * 30})
    pg = on_postgres(pg_url, [*docs, later], "hash-64", flush_chunks=8)
    local = embedded(tmp_path / "kb", [*docs, later], "hash-64", flush_chunks=8)
    assert stored(pg) == stored(local)
    assert pg.counts() == (6, len(stored(local)))
    pg.close()
    local.close()
