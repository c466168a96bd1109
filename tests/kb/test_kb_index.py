"""The vector index a KB chooses, records, memory-maps, rebuilds and refuses (docs/scale.md),
with faiss's kinds only: ``auto`` here is what it is without hnswlib installed (the hnswlib
backend and auto's choice with it: test_kb_hnswlib.py)."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np
import pytest
from click.testing import CliRunner

from medverify.cli import main
from medverify.config import Config, KBSettings
from medverify.errors import KBError
from medverify.kb import KnowledgeBase
from medverify.kb.database import DB_NAME, connect, create_database
from medverify.kb.index import (
    EXACT_BELOW,
    HNSW_BELOW,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    IndexSpec,
    VectorIndex,
    auto_next,
    choose_spec,
    hnsw_ef,
)
from medverify.kb.index_policy import AUTO_GRAPHS
from medverify.records import Document
from medverify.retrieve import Retriever


@pytest.fixture(autouse=True)
def faiss_graphs_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto as without hnswlib: faiss's HNSW its graph kind (IVF from HNSW_BELOW)."""
    import medverify.kb.index_policy as policy

    monkeypatch.setattr(policy, "AUTO_GRAPHS", tuple(g for g in AUTO_GRAPHS if g[0] == "hnsw"))


HNSW = IndexSpec("hnsw", hnsw_m=HNSW_M, hnsw_efc=HNSW_EF_CONSTRUCTION)  # what auto builds
TINY = KBSettings(chunk_tokens=32, chunk_overlap=4, embedder="hash-64", index_threshold=60)
WORDS = (
    "warfarin", "metformin", "statin", "asthma", "measles", "insulin", "aspirin", "fever",
    "cough", "rash", "kidney", "liver", "heart", "lung", "bone", "blood", "sugar", "pressure",
    "dose", "vaccine",
)


def corpus(n: int, start: int = 0) -> list[Document]:
    return [Document(doc_id=f"d{i}", title=f"Topic {i % 7}",
                     text=" ".join(np.random.default_rng(i).choice(WORDS, 12)) + f" marker{i}.")
            for i in range(start, start + n)]


def text_of(i: int) -> str:
    """Document ``i``'s title and text: its own nearest neighbour under any embedder."""
    doc = corpus(1, start=i)[0]
    return f"{doc.title}\n{doc.text}"


def test_choose_spec_by_size_and_policy() -> None:
    # auto: exact below the threshold, HNSW from it (docs/scale.md, bench_ann_peers.py)
    assert choose_spec("auto", 99_999, 384).kind == "flat"
    assert choose_spec("auto", 100_000, 384) == HNSW
    assert choose_spec("auto", HNSW_BELOW - 1, 384) == HNSW
    at_1m = choose_spec("auto", 1_000_000, 384)  # HNSW no faster than IVF there (scale.md)
    assert (at_1m.kind, at_1m.nlist) == ("ivf", 4096)
    # HNSW's ef grows with the graph (a fixed 128 fell to recall 0.81 at 1M); a larger
    # configured ef_search is kept
    assert [hnsw_ef(128, n) for n in (0, 100_000, 100_001, 300_000, 999_999)] == [
        128, 128, 256, 384, 1280]
    assert hnsw_ef(2000, 300_000) == 2000
    # hysteresis: an HNSW KB turns IVF at HNSW_BELOW, an IVF one back only below half of it
    assert auto_next("hnsw", HNSW_BELOW - 1) == "hnsw" and auto_next("hnsw", HNSW_BELOW) == "ivf"
    assert auto_next("ivf", HNSW_BELOW // 2) == "ivf"
    assert auto_next("ivf", HNSW_BELOW // 2 - 1) == "hnsw"
    assert auto_next("hnsw", EXACT_BELOW // 2) == "hnsw" and auto_next("ivf", 10) == "flat"
    assert choose_spec("auto", 500, 384, threshold=100).kind == "hnsw"
    assert choose_spec("auto", 99, 384, threshold=100).kind == "flat"
    big = choose_spec("ivf", 1_000_000, 384)
    assert (big.kind, big.nlist) == ("ivf", 4096)
    assert choose_spec("ivf", 500, 384).nlist <= 500 // 39
    assert choose_spec("ivfpq", 100_000, 384).pq_m == 48
    assert choose_spec("ivfpq", 5_000, 384).kind == "flat"  # too few to train PQ codebooks
    assert choose_spec("ivf", 20, 64).kind == "flat"
    assert choose_spec("hnsw", 10, 64).describe() == HNSW.describe()
    assert choose_spec("ivf", 10_000, 64, nlist=77).nlist == 77
    with pytest.raises(KBError, match="unknown vector index 'annoy'"):
        choose_spec("annoy", 10, 64)


def test_index_follows_size_is_recorded_and_reloads_mapped(tmp_path: Path) -> None:
    kb_dir = tmp_path / "kb"
    with KnowledgeBase.create(kb_dir, TINY) as kb:
        kb.ingest(corpus(40))
        assert kb.stats().index_kind == "flat"  # below the (tiny) threshold: exact
        kb.ingest(corpus(80, start=40))  # crosses it: rebuilt as HNSW at the end
        stats = kb.stats()
        assert stats.index_kind == HNSW.describe() and stats.index_policy == "auto"
        before = Retriever(kb).search(text_of(7), k=3, mode="dense")
    record = json.loads((kb_dir / "vectors.json").read_text())
    assert record["kind"] == "hnsw" and record["embedder_id"] == "hash-64"
    assert record["dim"] == 64 and record["ntotal"] == stats.chunks
    with KnowledgeBase.open(kb_dir, settings=TINY) as kb:  # (its threshold: still HNSW)
        index = kb.vector_index.ensure()
        assert kb.vector_index.mapped and isinstance(index, faiss.IndexIDMap2)
        inner = faiss.downcast_index(index.index)
        assert isinstance(inner, faiss.IndexHNSWFlat) and inner.hnsw.efSearch == 128
        after = Retriever(kb).search(text_of(7), k=3, mode="dense")
        assert [p.id for p in after] == [p.id for p in before]
        # writes go to an in-memory copy (faiss aborts on a write to a mapped index)
        kb.ingest(corpus(5, start=200))
        assert not kb.vector_index.mapped
        assert kb.remove_documents(["d0", "d201"]) == 2  # (HNSW: recorded as removed)
        removed = set(kb.vector_index.removed)
        assert removed and kb.vector_index.loaded.ntotal == kb.stats().chunks + len(removed)
    with KnowledgeBase.open(kb_dir, settings=TINY) as kb:
        assert kb.stats().vector_index == "fresh"
        assert kb.vector_index.ensure().ntotal == kb.stats().chunks + len(removed)
        assert kb.vector_index.removed == removed  # read back from vectors.json
        hits = Retriever(kb).search("marker203", k=1, mode="hybrid")
        assert hits[0].doc_id == "d203"
        for i in (0, 201):  # a removed document's own text no longer finds it
            found = Retriever(kb).search(text_of(i), k=5, mode="dense")
            assert f"d{i}" not in {p.doc_id for p in found} and len(found) == 5


def test_hnsw_removal_leaves_ids_out_and_rebuilds_past_the_limit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """faiss's HNSW removes nothing in place: a removal records the ids (no rebuild, so a
    reverted teaching is cheap on a big KB), every search skips them, and past the limit
    (or a tenth of the KB) the index is rebuilt without them."""
    import medverify.kb.index as index_module

    kb_dir = tmp_path / "kb"
    with KnowledgeBase.create(kb_dir, TINY) as kb:
        kb.ingest(corpus(150))
        assert kb.stats().index_kind == HNSW.describe()
        built = kb.vector_index.loaded
        assert kb.remove_documents(["d3"]) == 1
        assert kb.vector_index.loaded is built  # not rebuilt
        held = {int(i) for i in faiss.vector_to_array(faiss.downcast_index(
            kb.vector_index.loaded).id_map)}
        assert kb.vector_index.removed <= held
        found = kb.vector_index.search(kb.embedder.embed([text_of(3)]), 150)[0]
        assert not {i for i, _ in found} & kb.vector_index.removed
        assert len(found) == kb.stats().chunks  # the search is as deep as the KB, all live
        monkeypatch.setattr(index_module, "REMOVED_LIMIT", 0)
        assert kb.remove_documents([f"d{i}" for i in range(10, 30)]) == 20  # > a tenth
        assert kb.vector_index.removed == set()  # rebuilt without them
        assert kb.vector_index.loaded.ntotal == kb.stats().chunks


def test_flat_index_is_memory_mapped_too(tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", TINY) as kb:
        kb.ingest(corpus(10))
    with KnowledgeBase.open(tmp_path / "kb") as kb:
        assert kb.stats().index_kind == "flat"
        assert Retriever(kb).search(text_of(3), k=1, mode="dense")[0].doc_id == "d3"
        assert kb.vector_index.mapped
        kb.ingest(corpus(2, start=10))
        assert Retriever(kb).search(text_of(11), k=1, mode="dense")[0].doc_id == "d11"


def test_reindex_records_the_kind_and_a_mismatch_is_refused(tmp_path: Path) -> None:
    kb_dir = tmp_path / "kb"
    with KnowledgeBase.create(kb_dir, TINY) as kb:
        kb.ingest(corpus(200))  # (auto: HNSW above the tiny threshold)
        spec = kb.rebuild_index("hnsw")
        assert spec == HNSW
        assert Retriever(kb).search(text_of(5), k=1, mode="dense")[0].doc_id == "d5"
    with KnowledgeBase.open(kb_dir, settings=KBSettings(index="hnsw")) as kb:
        assert kb.stats().index_policy == "hnsw"
    with KnowledgeBase.open(kb_dir, settings=KBSettings(index="auto")) as kb:
        assert kb.stats().index_kind == HNSW.describe()
    with pytest.raises(KBError) as caught:
        KnowledgeBase.from_config(kb_dir, Config(kb_settings=KBSettings(index="ivf")))
    message = str(caught.value)
    assert f"has a {HNSW.describe()} vector index" in message and "not 'ivf'" in message
    assert f"medverify kb reindex --kb {kb_dir} --index ivf" in message
    result = CliRunner().invoke(main, ["kb", "reindex", "--kb", str(kb_dir), "--index", "ivf",
                                       "--nlist", "4"])
    assert result.exit_code == 0, result.output
    assert "as ivf (nlist 4) over 200 chunks" in result.output
    with KnowledgeBase.open(kb_dir, settings=KBSettings(index="ivf")) as kb:
        assert isinstance(kb.vector_index.ensure(), faiss.IndexIVFFlat)
        assert Retriever(kb).search(text_of(5), k=1, mode="dense")[0].doc_id == "d5"
    result = CliRunner().invoke(main, ["kb", "stats", "--kb", str(kb_dir), "--json"])
    assert json.loads(result.output)["index_kind"] == "ivf (nlist 4)"


def test_a_kb_of_another_embedder_is_refused(tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", TINY) as kb:
        kb.ingest(corpus(5))
    with pytest.raises(KBError, match="built with embedder 'hash-64'"):
        KnowledgeBase.open(tmp_path / "kb", embedder="hash-32")


def test_an_index_file_of_another_embedder_is_not_trusted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with KnowledgeBase.create(tmp_path / "kb", TINY) as kb:
        kb.ingest(corpus(5))
    meta = tmp_path / "kb" / "vectors.json"
    record = json.loads(meta.read_text())
    meta.write_text(json.dumps({**record, "embedder_id": "st:other-model"}))
    with KnowledgeBase.open(tmp_path / "kb") as kb:
        assert kb.stats().vector_index == "stale"
        assert Retriever(kb).search(text_of(2), k=1, mode="dense")[0].doc_id == "d2"
        assert kb.stats().vector_index == "fresh"
    assert json.loads(meta.read_text())["embedder_id"] == "hash-64"


def test_a_file_of_another_kind_than_recorded_is_rebuilt(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with KnowledgeBase.create(tmp_path / "kb", TINY) as kb:
        kb.ingest(corpus(20))
    meta = tmp_path / "kb" / "vectors.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "kind": "ivf", "nlist": 4}))
    with KnowledgeBase.open(tmp_path / "kb") as kb, caplog.at_level(logging.WARNING):
        assert Retriever(kb).search(text_of(4), k=1, mode="dense")[0].doc_id == "d4"
    assert "in a ivf (nlist 4) index" in caplog.text and "rebuilding it" in caplog.text


def _clustered(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """Points near an 8-dimensional subspace (embeddings have a low intrinsic dimension)."""
    centres = np.random.default_rng(0).standard_normal((40, 8))
    basis = np.random.default_rng(1).standard_normal((8, dim))
    rng = np.random.default_rng(seed)
    latent = centres[rng.integers(0, 40, n)] + 0.3 * rng.standard_normal((n, 8))
    x = (latent @ basis + 0.05 * rng.standard_normal((n, dim))).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture
def one_faiss_thread() -> Iterator[None]:
    """HNSW builds on one OpenMP thread: on a loaded machine two threads spin on each
    other (2,500 vectors: 3.2 s on two threads, 0.8 s on one, at load 12)."""
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(threads)


def _stored(path: Path, base: np.ndarray) -> sqlite3.Connection:
    """A KB database holding ``base`` as the vectors of one document's chunks 1..n."""
    create_database(path / DB_NAME, {"schema_version": "1", "generation": "1"})
    conn = connect(path / DB_NAME)
    with conn:
        conn.execute("INSERT INTO documents (id, doc_id, content_hash, n_chunks, added_at) "
                     "VALUES (1, 'd', 'h', ?, 0)", (len(base),))
        conn.executemany('INSERT INTO chunks (id, doc, ord, text, start, "end", n_tokens, '
                         "vector) VALUES (?, 1, ?, '', 0, 0, 0, ?)",
                         [(i + 1, i, v.tobytes()) for i, v in enumerate(base)])
    return conn


def _recall(found: list[list[tuple[int, float]]], truth: list[list[tuple[int, float]]]) -> float:
    return float(np.mean([len({i for i, _ in f} & {i for i, _ in t}) / 10
                          for f, t in zip(found, truth, strict=True)]))


def test_auto_picks_by_size_and_its_index_reaches_the_recall(
        tmp_path: Path, one_faiss_thread: None) -> None:
    n, dim = 1500, 32
    conn = _stored(tmp_path, _clustered(n, dim))
    queries = _clustered(100, dim, seed=1)
    assert VectorIndex(tmp_path, dim, conn, threshold=n + 1).wanted_spec().kind == "flat"
    exact = VectorIndex(tmp_path, dim, conn, policy="flat")
    exact.rebuild()
    chosen = VectorIndex(tmp_path, dim, conn, policy="auto", threshold=n)
    chosen.rebuild()
    assert chosen.spec == HNSW  # from the threshold: HNSW
    recall = _recall(chosen.search(queries, 10), exact.search(queries, 10))
    assert recall >= 0.95, recall  # at the default ef_search (128)
    conn.close()


def test_auto_moves_an_ivf_index_to_hnsw_and_back_to_flat_when_small(
        tmp_path: Path, one_faiss_thread: None) -> None:
    n, dim = 800, 32
    conn = _stored(tmp_path, _clustered(n, dim))
    index = VectorIndex(tmp_path, dim, conn, policy="auto", threshold=400)
    index.rebuild(IndexSpec("ivf", nlist=8))  # as auto built it before it chose HNSW
    assert index.outgrown() == HNSW
    index.rebuild(index.outgrown())
    assert index.outgrown() is None
    index.threshold = 1200  # above half the threshold: HNSW is kept (hysteresis)
    assert index.outgrown() is None
    index.threshold = 2000  # below half of it: exact again
    assert index.outgrown() == IndexSpec("flat")
    conn.close()


@pytest.mark.parametrize("policy", ["ivf", "hnsw"])
def test_approximate_recall_against_exact(tmp_path: Path, policy: str,
                                        one_faiss_thread: None) -> None:
    n, dim = 2500, 32
    conn = _stored(tmp_path, _clustered(n, dim))
    queries = _clustered(100, dim, seed=1)
    exact = VectorIndex(tmp_path, dim, conn, policy="flat")
    exact.rebuild()
    approx = VectorIndex(tmp_path, dim, conn, policy=policy)
    approx.rebuild()
    assert approx.spec is not None and approx.spec.kind == policy
    truth = exact.search(queries, 10)
    found = approx.search(queries, 10)
    recall = np.mean([len({i for i, _ in f} & {i for i, _ in t}) / 10
                      for f, t in zip(found, truth, strict=True)])
    assert recall >= 0.9, recall
    approx.set_knobs(nprobe=1, ef_search=10)  # the knobs reach the index: recall drops
    if policy == "ivf":
        low = np.mean([len({i for i, _ in f} & {i for i, _ in t}) / 10 for f, t in
                       zip(approx.search(queries, 10), truth, strict=True)])
        assert low < recall
    conn.close()


def test_ivf_policy_on_an_empty_kb_starts_flat(tmp_path: Path) -> None:
    settings = KBSettings(chunk_tokens=32, chunk_overlap=4, embedder="hash-64", index="ivf")
    with KnowledgeBase.create(tmp_path / "kb", settings) as kb:
        assert kb.stats().index_kind == "flat"
        kb.ingest(corpus(100))  # enough to train: rebuilt as IVF at the end
        assert kb.stats().index_kind.startswith("ivf")
    conn = sqlite3.connect(tmp_path / "kb" / DB_NAME)
    assert conn.execute("SELECT value FROM meta WHERE key='vector_index'").fetchone() == ("ivf",)
    conn.close()


def test_lexical_ranking_past_the_exact_postings_is_bounded(tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", TINY) as kb:
        kb.ingest(corpus(40))
        exact = kb.lexical_candidates("warfarin marker7 marker9", 5)
        kb.lexical_exact = kb.lexical_large = 0  # every query takes the bounded rank query
        ranked = kb.lexical_candidates("warfarin marker7 marker9", 5)
        assert {ranked[0][0], ranked[1][0]} == {exact[0][0], exact[1][0]}  # the rare words
        assert ranked[0][1] >= ranked[1][1] >= ranked[-1][1] > 0
        kb.lexical_budget = 3  # a common word alone: at most the budget's postings
        common = kb.lexical_candidates("topic", 50)
        assert 0 < len(common) <= 3
        hits = Retriever(kb).search("marker12 warfarin", k=3, mode="hybrid")
        assert hits[0].doc_id == "d12"


def test_exclusions_build_the_selector_once_per_change() -> None:
    """The selector leaving removed ids out is built again only when the set changes."""
    from medverify.kb.faiss_ops import Exclusions

    exclusions, removed = Exclusions(), {3, 5}
    assert exclusions.selector(set()) is None
    first = exclusions.selector(removed)
    assert exclusions.selector(removed) is first  # unchanged: reused
    removed.add(7)
    grown = exclusions.selector(removed)
    assert grown is not first and not grown.is_member(7) and grown.is_member(8)
    assert exclusions.selector({3, 5, 7}) is not grown  # another set: built for it
