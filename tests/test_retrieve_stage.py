"""The retrieval stage: Retriever over a KB store, the KB store registry, in-memory ranking."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from medverify.audit import select
from medverify.config import Config, RetrievalSettings
from medverify.errors import ConfigError
from medverify.kb import (
    KB_STORES,
    KBStore,
    KnowledgeBase,
    StoredChunk,
    iter_documents,
    open_store,
    sample_kb_path,
)
from medverify.kb.embed_base import HashEmbedder
from medverify.records import Document
from medverify.retrieve import (
    BM25,
    MODES,
    Retriever,
    TextIndex,
    fuse_candidates,
    fuse_scores,
    order,
    retrieve,
    rrf,
)

GOLDEN = Path(__file__).parent / "golden" / "retrieve_sample_kb.json"


@pytest.fixture(scope="module")
def sample_kb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KnowledgeBase]:
    """The shipped MedQuAD sample in a KB (hash embedder, default chunking)."""
    path = tmp_path_factory.mktemp("sample") / "kb"
    with KnowledgeBase.create(path, embedder="hash") as kb:
        kb.ingest(iter_documents([sample_kb_path()]))
        yield kb


@pytest.mark.parametrize("mode", MODES)
def test_retriever_reproduces_the_old_kb_search(sample_kb: KnowledgeBase, mode: str) -> None:
    """Same passages, same order, same scores as KnowledgeBase.search_many before the
    retrieval stage existed (tests/golden: written by that code on this sample)."""
    golden = json.loads(GOLDEN.read_text("utf-8"))
    found = Retriever(sample_kb).search_many(golden["queries"], k=golden["k"], mode=mode)
    for query, passages, expected in zip(golden["queries"], found, golden["results"][mode],
                                         strict=True):
        assert [p.id for p in passages] == [pid for pid, _ in expected], query
        for passage, (_, scores) in zip(passages, expected, strict=True):
            assert passage.scores.keys() == scores.keys()
            assert passage.scores == pytest.approx(scores, rel=1e-6)
            assert passage.score == passage.scores["fused"]


def test_the_kb_holds_storage_only_ranking_is_the_retrievers() -> None:
    assert not hasattr(KnowledgeBase, "search") and not hasattr(KnowledgeBase, "search_many")


def test_retriever_defaults_come_from_the_settings(sample_kb: KnowledgeBase) -> None:
    lexical = RetrievalSettings(top_k=2, mode="lexical")
    found = Retriever(sample_kb, lexical).search("insulin")
    assert len(found) == 2 and set(found[0].scores) == {"lexical", "fused"}
    assert Retriever(sample_kb).settings is sample_kb.retrieval  # the KB's own by default
    assert retrieve(sample_kb, ["insulin"], lexical) == [found]
    with pytest.raises(ConfigError, match="unknown search mode"):
        Retriever(sample_kb).search("insulin", mode="fuzzy")  # type: ignore[arg-type]


def test_hybrid_fuses_the_top_candidates_of_each_list(sample_kb: KnowledgeBase) -> None:
    query, k = "treatment options for leukemia in children", 5
    for candidates in (5, 50):
        retriever = Retriever(sample_kb, RetrievalSettings(candidates=candidates, rrf_k=10))
        depth = max(k, candidates)
        lexical = sample_kb.lexical_candidates(query, depth)
        dense = sample_kb.dense_candidates([query], depth)[0]
        expected = rrf({"lexical": [c for c, _ in lexical], "dense": [c for c, _ in dense]},
                       rrf_k=10, limit=k)
        [ranked] = retriever.rank_many([query], k, "hybrid")
        assert [cid for cid, _ in ranked] == [f.id for f in expected]
        assert [s["fused"] for _, s in ranked] == [f.score for f in expected]


def test_store_primitives(sample_kb: KnowledgeBase) -> None:
    lexical = sample_kb.lexical_candidates("insulin pump", 4)
    assert len(lexical) == 4 and [s for _, s in lexical] == sorted(
        (s for _, s in lexical), reverse=True)
    assert sample_kb.lexical_candidates("?!", 4) == []
    dense = sample_kb.dense_candidates(["insulin", "glaucoma"], 3)
    assert [len(d) for d in dense] == [3, 3]
    assert sample_kb.dense_candidates([], 3) == []
    ids = [cid for cid, _ in lexical]
    chunks = sample_kb.chunks([*ids, 10**9])
    assert sorted(chunks) == sorted(ids)
    assert all(isinstance(c, StoredChunk) and c.id == cid for cid, c in chunks.items())
    assert sample_kb.chunks([]) == {}


def test_fuse_candidates_by_hand() -> None:
    lexical, dense = [(1, 9.0), (2, 5.0)], [(2, 0.8), (3, 0.7)]
    assert fuse_candidates(lexical, None, 1) == [(1, {"lexical": 9.0, "fused": 9.0})]
    assert fuse_candidates(None, dense, 5) == [(2, {"dense": 0.8, "fused": 0.8}),
                                               (3, {"dense": 0.7, "fused": 0.7})]
    fused = fuse_candidates(lexical, dense, 3, rrf_k=60)
    assert [cid for cid, _ in fused] == [2, 1, 3]
    assert fused[0][1] == {"lexical": 5.0, "dense": 0.8,
                           "fused": pytest.approx(1 / 62 + 1 / 61)}
    assert fused[1][1] == {"lexical": 9.0, "fused": pytest.approx(1 / 61)}


class ListStore:
    """A KB store over a list of texts (what a plugin store provides; no faiss, no SQLite)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.texts = list(texts)
        self.retrieval = RetrievalSettings(top_k=2)
        self.embedder = HashEmbedder(dim=64)
        self.vectors = self.embedder.embed(self.texts)
        self.bm25 = BM25(self.texts)
        self.reads = 0

    @property
    def snapshot_id(self) -> str:
        return "list-1"

    @contextmanager
    def reading(self) -> Iterator[None]:
        self.reads += 1
        yield

    def lexical_candidates(self, query: str, depth: int) -> list[tuple[int, float]]:
        scores = self.bm25.scores(query)
        return [(i, float(scores[i])) for i in order(scores)[:depth] if scores[i] > 0]

    def dense_candidates(self, queries: Sequence[str],
                         depth: int) -> list[list[tuple[int, float]]]:
        sims = self.embedder.embed(list(queries)) @ self.vectors.T if queries else []
        return [[(i, float(row[i])) for i in order(row)[:depth]] for row in sims]

    def chunks(self, ids: Sequence[int]) -> dict[int, StoredChunk]:
        return {i: StoredChunk(i, 0, self.texts[i], 0, len(self.texts[i]), f"d{i}", None,
                               None, "list") for i in ids}

    def close(self) -> None:
        pass


def test_a_plugin_store_is_ranked_by_the_retriever() -> None:
    store = ListStore(["warfarin is reversed by vitamin K", "measles vaccine MMR",
                       "statins lower LDL", "vitamin D and bones"])
    assert isinstance(store, KBStore)
    retriever = Retriever(store)
    found = retriever.search("vitamin K reverses warfarin")
    assert len(found) == 2 and found[0].id == "d0#0" and found[0].source == "list"
    assert retriever.search("measles", mode="lexical")[0].doc_id == "d1"
    assert store.reads > 0


def test_kb_store_registry_opens_the_embedded_store(tmp_path: Path) -> None:
    assert "embedded" in KB_STORES.names() and KB_STORES.plugin("embedded") is None
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="w", title="Warfarin", text="Vitamin K reverses warfarin.")])
    config = Config(kb=tmp_path / "kb", retrieval=RetrievalSettings(top_k=1, rrf_k=5))
    store = open_store(config)
    try:
        assert isinstance(store, KnowledgeBase) and isinstance(store, KBStore)
        assert store.retrieval == config.retrieval
        assert Retriever(store).search("warfarin")[0].doc_id == "w"
    finally:
        store.close()
    with pytest.raises(ConfigError, match="no knowledge base given"):
        open_store(Config())
    with pytest.raises(ConfigError, match="unknown KB store 'nope'"):
        open_store(config, "nope")


def test_a_registered_store_factory_gets_path_and_config(tmp_path: Path) -> None:
    seen: list[tuple[Path, Config]] = []

    def factory(path: Path, config: Config) -> ListStore:
        seen.append((path, config))
        return ListStore(["one text"])

    KB_STORES.register("test-list", factory)
    try:
        config = Config(kb=tmp_path / "x")
        store = open_store(config, "test-list")
        assert isinstance(store, ListStore) and seen == [(tmp_path / "x", config)]
    finally:
        KB_STORES._factories.pop("test-list")


def test_text_index_ranks_in_memory() -> None:
    texts = ["the cat sat", "metformin lowers glucose", "glucose in the blood", "dogs bark"]
    index = TextIndex(texts)
    lexical = index.rank("metformin glucose", 2)
    assert [i for i, _ in lexical] == [1, 2] and set(lexical[0][1]) == {"bm25"}
    vectors = HashEmbedder(dim=64).embed(texts)
    hybrid = TextIndex(texts, vectors).rank("metformin glucose", 3, vector=vectors[1])
    assert hybrid[0][0] == 1 and set(hybrid[0][1]) == {"rrf", "bm25", "dense"}
    assert hybrid[0][1]["dense"] == pytest.approx(float(vectors[1] @ vectors[1]))
    with pytest.raises(ValueError, match="without vectors"):
        index.dense(vectors[0])


def test_fuse_scores_adds_other_rankings_after_bm25_and_dense() -> None:
    lexical, dense = np.array([0.0, 2.0, 1.0]), np.array([0.9, 0.1, 0.5])
    plain = fuse_scores(lexical, dense, 3)
    expected = rrf({"bm25": [1, 2, 0], "dense": [0, 2, 1]}, limit=3)
    assert [i for i, _ in plain] == [f.id for f in expected]
    with_retrieval = fuse_scores(lexical, dense, 3, also={"retrieval": [2, 1, 0]})
    expected = rrf({"bm25": [1, 2, 0], "dense": [0, 2, 1], "retrieval": [2, 1, 0]}, limit=3)
    assert [(i, s["rrf"]) for i, s in with_retrieval] == [(f.id, f.score) for f in expected]
    assert order(np.array([1.0, 3.0, 3.0])) == [1, 2, 0]  # ties by position


def test_audit_selection_ranks_through_the_retrieval_stage() -> None:
    assert select.BM25 is BM25  # moved to the retrieval stage, still importable here
    assert select.terms("The cat and the hat") == ["cat", "hat"]
