from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from medverify.config import KBSettings
from medverify.errors import KBError
from medverify.kb import HashEmbedder, KnowledgeBase, chunk_text, fts_query
from medverify.kb.embed import get_embedder
from medverify.kb.embed_base import WordTokenizer, split_windows
from medverify.kb.fts import select_terms
from medverify.records import Document
from medverify.retrieve import Retriever

FACTS = {
    "metformin": "Metformin is first-line therapy for type 2 diabetes. It lowers glucose.",
    "warfarin": "Warfarin is an anticoagulant. Vitamin K reverses warfarin.",
    "statin": "Statins lower LDL cholesterol and reduce heart attacks.",
    "asthma": "Inhaled corticosteroids control asthma. Albuterol relieves acute wheeze.",
    "measles": "Measles is prevented by the MMR vaccine given in two doses.",
}
SMALL = KBSettings(chunk_tokens=16, chunk_overlap=4, embedder="hash")


def docs(items: dict[str, str] = FACTS) -> list[Document]:
    return [Document(doc_id=k, title=k.title(), text=v) for k, v in items.items()]


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with KnowledgeBase.create(tmp_path / "kb", SMALL) as kb:
        kb.ingest(docs())
        yield kb


def test_chunk_offsets_and_overlap() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(40))
    chunks = chunk_text(text, WordTokenizer(), max_tokens=20, overlap=5)
    assert len(chunks) > 5
    for chunk in chunks:
        assert text[chunk.span.start:chunk.span.end] == chunk.text
        assert chunk.n_tokens <= 20
    for before, after in itertools.pairwise(chunks):
        assert after.span.start < before.span.end  # overlapping
        assert after.span.start > before.span.start
    assert chunks[-1].span.end == len(text)
    assert all(c.text.endswith("here.") for c in chunks)  # cut at sentence ends
    assert all(c.text.startswith("Sentence") for c in chunks)


def test_chunk_without_sentences_and_short_text() -> None:
    text = "word " * 50
    chunks = chunk_text(text, WordTokenizer(), max_tokens=16, overlap=0)
    assert [c.n_tokens for c in chunks] == [16, 16, 16, 2]
    assert chunk_text("", WordTokenizer()) == []
    assert len(chunk_text("one two", WordTokenizer())) == 1


def test_hash_embedder_is_normalised_and_deterministic() -> None:
    emb = HashEmbedder(64)
    a, b = emb.embed(["aspirin and bleeding", "aspirin and bleeding"])
    assert a.shape == (64,) and abs(float(a @ a) - 1) < 1e-5 and (a == b).all()
    assert emb.embed([]).shape == (0, 64)


def test_split_windows_balanced() -> None:
    text = " ".join(str(i) for i in range(25))
    pieces = split_windows(text, WordTokenizer(), 10)
    assert [len(p.split()) for p in pieces] == [9, 9, 7]


def test_search_modes_find_the_right_document(kb: KnowledgeBase) -> None:
    for mode in ("lexical", "dense", "hybrid"):
        top = Retriever(kb).search("what reverses warfarin anticoagulant", k=3, mode=mode)
        assert top[0].doc_id == "warfarin", mode
        assert top[0].score == top[0].scores["fused"]
    hybrid = Retriever(kb).search("warfarin vitamin K", k=2)[0]
    assert {"lexical", "dense", "fused"} <= set(hybrid.scores)
    assert hybrid.title == "Warfarin" and hybrid.span is not None


def test_search_many_matches_search(kb: KnowledgeBase) -> None:
    queries = ["measles vaccine", "asthma inhaler", "cholesterol"]
    retriever = Retriever(kb)
    assert retriever.search_many(queries, k=2) == [retriever.search(q, k=2) for q in queries]


@pytest.mark.parametrize("query", [
    '"', '""', "NEAR(a b)", "AND", "OR OR NOT", "*", "^x", "title:foo", "a:b:c",
    "'); DROP TABLE chunks; --", "(((", "\x00", "", "   ", "warfarin\" OR \"x", "🙂 naïve",
    "the of and", "-- + - ~",
])
def test_hostile_queries_never_break_search(kb: KnowledgeBase, query: str) -> None:
    for mode in ("lexical", "hybrid", "dense"):
        assert isinstance(Retriever(kb).search(query, k=3, mode=mode), list)
    assert kb.stats().documents == len(FACTS)


def test_fts_query_quotes_terms() -> None:
    assert fts_query('warfarin NEAR "K" and*') == '"warfarin" OR "near" OR "k"'
    assert fts_query("the of") == '"the" OR "of"'
    assert fts_query("?!") is None


def test_reingest_is_idempotent(kb: KnowledgeBase) -> None:
    before, snapshot = kb.stats(), kb.snapshot_id
    again = kb.ingest(docs())
    assert again.documents_unchanged == len(FACTS) and again.chunks_added == 0
    assert kb.stats().chunks == before.chunks and kb.snapshot_id == snapshot


def test_changed_document_is_replaced(kb: KnowledgeBase) -> None:
    snapshot = kb.snapshot_id
    stats = kb.ingest([Document(doc_id="statin", title="Statin", text="Statins cause myalgia.")])
    assert stats.documents_updated == 1 and kb.snapshot_id != snapshot
    assert kb.stats().documents == len(FACTS)
    assert Retriever(kb).search("myalgia", k=1, mode="dense")[0].doc_id == "statin"
    assert not Retriever(kb).search("LDL", k=5, mode="lexical")


def test_resume_after_interruption(tmp_path: Path) -> None:
    def crashing() -> Iterator[Document]:
        yield from docs()[:3]
        raise RuntimeError("power cut")

    with KnowledgeBase.create(tmp_path / "kb", SMALL) as kb:
        kb.flush_chunks = 1  # commit after every document
        with pytest.raises(RuntimeError):
            kb.ingest(crashing())
    with KnowledgeBase.open(tmp_path / "kb") as kb:
        assert kb.stats().documents == 3
        stats = kb.ingest(docs())
        assert (stats.documents_unchanged, stats.documents_added) == (3, 2)
        assert kb.stats().vector_index == "fresh"
        assert Retriever(kb).search("measles", k=1, mode="dense")[0].doc_id == "measles"


def test_stale_or_missing_vector_index_is_rebuilt(kb: KnowledgeBase, tmp_path: Path) -> None:
    chunks = kb.stats().chunks
    kb.close()
    (tmp_path / "kb" / "vectors.json").write_text(json.dumps({"generation": -1}), "utf-8")
    with KnowledgeBase.open(tmp_path / "kb") as reopened:
        assert reopened.stats().vector_index == "stale"
        top = Retriever(reopened).search("albuterol wheeze", k=1, mode="dense")[0]
        assert top.doc_id == "asthma"
        assert reopened.stats().vector_index == "fresh"
    (tmp_path / "kb" / "vectors.faiss").unlink()
    with KnowledgeBase.open(tmp_path / "kb") as reopened:
        assert reopened.stats().vector_index == "missing"
        Retriever(reopened).search("asthma", k=1, mode="dense")
        assert reopened._index.ntotal == chunks


def test_embedder_mismatch_is_refused(kb: KnowledgeBase, tmp_path: Path) -> None:
    kb.close()
    with pytest.raises(KBError, match="built with embedder 'hash-256'"):
        KnowledgeBase.open(tmp_path / "kb", embedder=HashEmbedder(128))
    with pytest.raises(KBError, match="chunks of 16 tokens"):
        KnowledgeBase.open_or_create(tmp_path / "kb", KBSettings(embedder="hash"), "hash")
    assert KnowledgeBase.open(tmp_path / "kb", embedder="hash").embedder_id == "hash-256"


def test_missing_and_corrupt_kb(tmp_path: Path) -> None:
    with pytest.raises(KBError, match="medverify kb ingest"):
        KnowledgeBase.open(tmp_path / "nowhere")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "kb.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(KBError, match="not a readable knowledge base"):
        KnowledgeBase.open(tmp_path / "bad")
    (tmp_path / "empty").mkdir()
    conn = sqlite3.connect(tmp_path / "empty" / "kb.sqlite")
    conn.execute("CREATE TABLE x (y)")
    conn.close()
    with pytest.raises(KBError):
        KnowledgeBase.open(tmp_path / "empty")


def test_create_refuses_existing_and_unknown_embedder(kb: KnowledgeBase, tmp_path: Path) -> None:
    with pytest.raises(KBError, match="already exists"):
        KnowledgeBase.create(tmp_path / "kb", SMALL)
    with pytest.raises(KBError, match="unknown embedder"):
        get_embedder("no-such-model")


def test_snapshot_depends_on_content_and_settings(tmp_path: Path) -> None:
    ids = []
    for name, settings, items in [("a", SMALL, FACTS), ("b", SMALL, FACTS),
                                  ("c", KBSettings(chunk_tokens=32, chunk_overlap=4), FACTS),
                                  ("d", SMALL, dict(list(FACTS.items())[:4]))]:
        with KnowledgeBase.create(tmp_path / name, settings, embedder="hash") as kb:
            kb.ingest(docs(items))
            ids.append(kb.snapshot_id)
    assert ids[0] == ids[1] and len(set(ids)) == 3


def test_empty_kb_search_and_stats(tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", SMALL) as kb:
        assert Retriever(kb).search("anything") == []
        stats = kb.stats()
        assert (stats.documents, stats.chunks, stats.embedder_id) == (0, 0, "hash-256")


def test_select_terms_drops_common_terms_first() -> None:
    df = {"covid": 900, "vaccine": 300, "myocarditis": 5, "rare": 0}
    terms = ["covid", "vaccine", "myocarditis", "rare"]
    assert select_terms(terms, df, budget=10_000) == terms
    assert select_terms(terms, df, budget=400) == ["vaccine", "myocarditis", "rare"]
    assert select_terms(["covid"], df, budget=10) == ["covid"]  # never empty


def test_term_frequencies_follow_updates(kb: KnowledgeBase) -> None:
    assert kb._document_frequencies(["warfarin", "ldl"]) == {"warfarin": 1, "ldl": 1}
    kb.ingest([Document(doc_id="statin", title="Statin", text="Statins cause myalgia.")])
    assert kb._document_frequencies(["ldl", "myalgia"]) == {"ldl": 0, "myalgia": 1}


def test_lexical_budget_keeps_rare_terms(kb: KnowledgeBase) -> None:
    kb.lexical_budget = 1
    top = Retriever(kb).search("the vaccine measles mmr doses", k=1, mode="lexical")
    assert top[0].doc_id == "measles"
