"""The hnswlib index backend (kind ``hnswlib``, optional package) and ``auto``'s choice with
and without it: build, search, removal (marked deleted), save and load, the damaged or
half-written files an interrupted save leaves, and the PostgreSQL replica's index."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

import medverify.kb.index as index_module
from medverify.config import KBSettings
from medverify.errors import KBError
from medverify.kb import KnowledgeBase
from medverify.kb.hnswlib_index import HnswlibBackend, HnswlibIndex
from medverify.kb.index import (
    HNSW_BELOW,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    INDEX_NAME,
    IndexSpec,
    VectorIndex,
    auto_kind,
    auto_next,
    choose_spec,
)
from medverify.kb.postgres_replica import ChunkRow, ReplicaIndexes
from medverify.retrieve import Retriever
from test_kb_index import TINY, _clustered, _recall, _stored, corpus, text_of

HNSWLIB = IndexSpec("hnswlib", hnsw_m=HNSW_M, hnsw_efc=HNSW_EF_CONSTRUCTION)
needs_hnswlib = pytest.mark.skipif(not HnswlibBackend().available(),
                                   reason="hnswlib is not installed (pip install hnswlib)")
SETTINGS = TINY.model_copy(update={"index": "hnswlib"})


@pytest.fixture
def no_hnswlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a machine without the hnswlib package."""
    monkeypatch.setattr(HnswlibBackend, "available", lambda self: False)


@needs_hnswlib
def test_auto_picks_hnswlib_from_the_threshold_at_every_size() -> None:
    assert auto_kind(99_999) == "flat"
    assert choose_spec("auto", 100_000, 384) == HNSWLIB
    assert auto_kind(HNSW_BELOW) == "hnswlib" and auto_kind(5 * HNSW_BELOW) == "hnswlib"
    assert auto_next("ivf", HNSW_BELOW) == "hnswlib"  # an IVF KB moves to hnswlib
    assert auto_next("hnsw", 200_000) == "hnswlib"  # so does faiss's HNSW
    assert auto_next("hnswlib", 60_000) == "hnswlib" and auto_next("hnswlib", 10) == "flat"
    assert HNSWLIB.describe() == "hnswlib (M 16, efConstruction 100)"


def test_auto_without_hnswlib_is_faiss(no_hnswlib: None) -> None:
    assert choose_spec("auto", 100_000, 384).kind == "hnsw"
    assert auto_kind(HNSW_BELOW) == "ivf"
    assert auto_next("ivf", HNSW_BELOW // 2 - 1) == "hnsw"
    assert auto_next("hnswlib", 200_000) == "hnsw"  # a KB built where it was installed


def test_hnswlib_asked_for_without_the_package_fails_clearly(tmp_path: Path,
                                                            no_hnswlib: None) -> None:
    with pytest.raises(KBError, match=r"pip install 'medverify\[hnswlib\]'"):
        choose_spec("hnswlib", 10, 64)
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS) as kb, \
            pytest.raises(KBError, match="needs a package that is not installed"):
        kb.ingest(corpus(3))


@needs_hnswlib
def test_hnswlib_kb_builds_searches_removes_saves_and_loads(tmp_path: Path) -> None:
    kb_dir = tmp_path / "kb"
    with KnowledgeBase.create(kb_dir, SETTINGS) as kb:
        kb.ingest(corpus(120))
        stats = kb.stats()
        assert stats.index_kind == HNSWLIB.describe() and stats.index_policy == "hnswlib"
        before = Retriever(kb).search(text_of(7), k=3, mode="dense")
        assert before[0].doc_id == "d7"
    record = json.loads((kb_dir / "vectors.json").read_text())
    assert record["kind"] == "hnswlib" and record["ntotal"] == stats.chunks
    with KnowledgeBase.open(kb_dir, settings=SETTINGS) as kb:
        index = kb.vector_index.ensure()
        assert isinstance(index, HnswlibIndex) and not kb.vector_index.mapped  # read whole
        assert index.ef == 128 and index.index.M == HNSW_M
        after = Retriever(kb).search(text_of(7), k=3, mode="dense")
        assert [p.id for p in after] == [p.id for p in before]
        kb.ingest(corpus(5, start=200))
        assert kb.remove_documents(["d0", "d201"]) == 2  # marked deleted and recorded
        removed = set(kb.vector_index.removed)
        assert removed and kb.vector_index.loaded.ntotal == kb.stats().chunks + len(removed)
    with KnowledgeBase.open(kb_dir, settings=SETTINGS) as kb:
        assert kb.stats().vector_index == "fresh"
        assert kb.vector_index.ensure().ntotal == kb.stats().chunks + len(removed)
        assert kb.vector_index.removed == removed  # read back from vectors.json
        assert Retriever(kb).search("marker203", k=1, mode="hybrid")[0].doc_id == "d203"
        for i in (0, 201):  # a removed document's own text no longer finds it
            found = Retriever(kb).search(text_of(i), k=5, mode="dense")
            assert f"d{i}" not in {p.doc_id for p in found} and len(found) == 5
        deep = kb.vector_index.search(kb.embedder.embed([text_of(0)]), 10_000)[0]
        assert len(deep) == kb.stats().chunks and not {i for i, _ in deep} & removed


@needs_hnswlib
def test_hnswlib_removal_rebuilds_past_the_limit_and_on_a_reused_id(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = _stored(tmp_path, _clustered(300, 16))
    index = VectorIndex(tmp_path, 16, conn, policy="hnswlib")
    index.rebuild()
    built = index.loaded
    index.remove([5, 6, 7])
    assert index.loaded is built and index.removed == {5, 6, 7}  # in place, not rebuilt
    assert index.outgrown() is None
    vectors = _clustered(300, 16)
    index.add([6], vectors[5:6], rebuild=False)  # an id the graph still holds as deleted
    assert index.loaded is not built and index.removed == set()  # rebuilt instead
    monkeypatch.setattr(index_module, "REMOVED_LIMIT", 0)
    index.remove(list(range(1, 40)))  # past a tenth: outgrown asks for a rebuild
    assert index.outgrown() == HNSWLIB
    conn.close()


@needs_hnswlib
def test_a_search_deeper_than_the_live_vectors_of_a_mostly_deleted_graph() -> None:
    backend = HnswlibBackend()
    index = backend.make(HNSWLIB, 16, capacity=4)  # grows as vectors are added
    vectors = _clustered(60, 16)
    index.add_with_ids(vectors[:30], np.arange(30))
    index.add_with_ids(vectors[30:], np.arange(30, 60))
    assert index.ntotal == 60
    assert not backend.drop(lambda: index, HNSWLIB, np.arange(5, 60))  # still held
    scores, ids = backend.search(index, vectors[:3], 10, set(range(5, 60)), None)  # type: ignore[arg-type]
    assert ids.shape == (3, 10) and (ids[:, 5:] == -1).all()
    assert {int(i) for i in ids[:, :5].ravel()} == set(range(5))
    assert ids[0, 0] == 0 and abs(scores[0, 0] - 1.0) < 1e-5  # itself, inner product 1


@needs_hnswlib
def test_a_search_returns_exactly_what_hnswlib_finds(tmp_path: Path) -> None:
    """The wrapper adds nothing and changes nothing: per query, the ids hnswlib's own
    knn_query returns, in its order, with the score 1 - distance in float32."""
    dim = 32
    conn = _stored(tmp_path, _clustered(800, dim))
    index = VectorIndex(tmp_path, dim, conn, policy="hnswlib")
    index.rebuild()
    graph = index.loaded.index
    queries = _clustered(40, dim, seed=3)
    for depth, rows in ((10, 1), (10, 5), (10, 9), (900, 1)):  # 9: more than one thread
        found = index.search(queries[:rows], depth)
        k = min(depth, 800)
        labels, distances = graph.knn_query(queries[:rows], k=k, num_threads=1)
        assert [[i for i, _ in row] for row in found] == labels.astype(np.int64).tolist()
        assert [[s for _, s in row] for row in found] == (1.0 - distances).tolist()
        assert all(type(i) is int and type(s) is float for row in found for i, s in row)
    as_float64 = index.search(queries[:5].astype(np.float64), 10)  # cast by hnswlib
    assert as_float64 == index.search(np.asfortranarray(queries[:5]), 10)
    assert as_float64 == index.search(queries[:5], 10)
    assert index.search(queries[:0], 10) == []
    empty = HnswlibBackend().make(HNSWLIB, dim)
    assert HnswlibBackend().search_pairs(empty, queries[:2], 10, set()) == [[], []]
    conn.close()


class _FewerThanK:
    """An hnswlib index that, like one whose graph holds many deleted vectors, fails a
    batch of queries (RuntimeError: fewer than k found) but answers them one by one."""

    def __init__(self, index: object) -> None:
        self.index = index

    def knn_query(self, queries: np.ndarray, *args: object, **kwargs: object) -> object:
        if len(queries) > 1:
            raise RuntimeError("Cannot return the results in a contiguous 2D array")
        return self.index.knn_query(queries, *args, **kwargs)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.index, name)


@needs_hnswlib
def test_pairs_of_a_mostly_deleted_graph_are_those_of_its_arrays() -> None:
    """When hnswlib fails a batch, the pairs are search's (found one query at a time)."""
    backend = HnswlibBackend()
    index = backend.make(HNSWLIB, 16, capacity=60)
    vectors = _clustered(60, 16)
    index.add_with_ids(vectors, np.arange(60))
    backend.drop(lambda: index, HNSWLIB, np.arange(5, 60))
    removed = set(range(5, 60))
    expected = backend.search_pairs(index, vectors[:4], 10, removed)  # the batch answered
    index.index = _FewerThanK(index.index)
    scores, ids = backend.search(index, vectors[:4], 10, removed, None)  # type: ignore[arg-type]
    assert (ids[:, 5:] == -1).all()
    assert backend.search_pairs(index, vectors[:4], 10, removed) == expected == [
        index_module.found_pairs(r, t) for r, t in zip(ids.tolist(), scores.tolist(), strict=True)]
    assert all(len(row) == 5 for row in expected)


def test_found_pairs_leaves_out_the_places_nothing_filled() -> None:
    assert index_module.found_pairs([4, 2], [0.5, 0.25]) == [(4, 0.5), (2, 0.25)]
    assert index_module.found_pairs([4, -1, -1], [0.5, -1.0, -1.0]) == [(4, 0.5)]
    assert index_module.found_pairs([], []) == []


@needs_hnswlib
def test_auto_builds_hnswlib_and_reaches_the_recall_at_the_default_ef(tmp_path: Path) -> None:
    n, dim = 1500, 32
    conn = _stored(tmp_path, _clustered(n, dim))
    queries = _clustered(100, dim, seed=1)
    exact = VectorIndex(tmp_path / "x", dim, conn, policy="flat")
    (tmp_path / "x").mkdir()
    exact.rebuild()
    chosen = VectorIndex(tmp_path, dim, conn, policy="auto", threshold=n)
    chosen.rebuild()
    assert chosen.spec == HNSWLIB
    recall = _recall(chosen.search(queries, 10), exact.search(queries, 10))
    assert recall >= 0.95, recall
    conn.close()


@needs_hnswlib
@pytest.mark.parametrize("damage", ["truncated", "new file, old record", "old file, new record",
                                    "a faiss file"])
def test_a_damaged_or_half_saved_hnswlib_file_is_rebuilt(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    """What a kill leaves: a file cut short, or the new file renamed into place before its
    record (vectors.json is replaced after it); or a file of another kind than recorded."""
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS) as kb:
        kb.ingest(corpus(30))
        record = (tmp_path / "kb" / "vectors.json").read_text()
        saved = (tmp_path / "kb" / INDEX_NAME).read_bytes()
        kb.ingest(corpus(5, start=30))
    path = tmp_path / "kb" / INDEX_NAME
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: len(saved) // 2])
    elif damage == "new file, old record":  # killed between the two renames
        (tmp_path / "kb" / "vectors.json").write_text(record)
    elif damage == "old file, new record":  # the record matches SQLite, the file does not
        path.write_bytes(saved)
    else:
        with KnowledgeBase.create(tmp_path / "other", TINY) as other:
            other.ingest(corpus(35))
        path.write_bytes((tmp_path / "other" / INDEX_NAME).read_bytes())
    with KnowledgeBase.open(tmp_path / "kb", settings=SETTINGS) as kb, \
            caplog.at_level(logging.WARNING):
        assert Retriever(kb).search(text_of(33), k=1, mode="dense")[0].doc_id == "d33"
        assert isinstance(kb.vector_index.loaded, HnswlibIndex)
    if damage != "new file, old record":  # (that one is stale: rebuilt without reading)
        assert "rebuilding it" in caplog.text


@needs_hnswlib
def test_the_replica_builds_hnswlib_and_follows_removals() -> None:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((80, 16)).astype(np.float32)
    rows = [ChunkRow(1 + i, "T", f"text {i}", v.tobytes()) for i, v in enumerate(vectors)]
    replica = ReplicaIndexes(16, KBSettings(index_threshold=50))
    replica.build(rows)
    assert replica.spec == HNSWLIB and isinstance(replica.vectors, HnswlibIndex)
    assert replica.dense(vectors[5:6], 1)[0][0][0] == 6
    replica.dead_limit = 3
    replica.remove([6])
    assert 6 not in {i for i, _ in replica.dense(vectors[5:6], 10)[0]}
    assert replica.size == 79 and not replica.outgrown()
    replica.remove(range(7, 16))
    assert replica.outgrown()  # more removed than a tenth: rebuilt from the rows
    replica.close()
