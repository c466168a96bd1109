"""Lexical ranking from the stored postings (bm25 computed in numpy) against FTS5's bm25():
equal where it is used, never used when stale or absent (docs/scale.md)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from medverify.config import KBSettings
from medverify.kb import KnowledgeBase
from medverify.kb.database import DB_NAME
from medverify.kb.fts import FtsTokenizer, bm25_top, tokenizer_spec
from medverify.records import Document

SETTINGS = KBSettings(chunk_tokens=48, chunk_overlap=8, embedder="hash-64")
WORDS = (
    "warfarin", "metformin", "statin", "asthma", "measles", "insulin", "aspirin", "fever",
    "cough", "rash", "kidney", "liver", "heart", "lung", "treatment", "treatments", "treated",
    "treating", "dose", "doses", "vaccine", "vaccines", "vaccination", "children", "Cerván",
    "covid-19", "multi_cit",
)
QUERIES = (
    "warfarin and aspirin treatment",
    "treated children with vaccines",  # stems shared by several query words
    "Treatment treatments treating treated",  # four words, one or two stems, counted each
    "measles vaccination doses in children",
    "cervan covid 19 fever",  # diacritics folded
    "multi_cit heart failure",  # a word FTS5 splits into two tokens, which matches
    "other_cit kidney",  # a split word that matches nothing
    "zzzunknown liver lung",
    "the",  # a stopword alone
    "_ heart",  # a word with no FTS5 token: bm25() ranks it
    "heart",
    "nothingmatcheshere",
)


def corpus(n: int, start: int = 0) -> list[Document]:
    docs = []
    for i in range(start, start + n):
        rng = np.random.default_rng(i)
        words = rng.choice(WORDS, int(rng.integers(3, 40)))  # lengths and tf vary
        docs.append(Document(doc_id=f"d{i}", title=f"Topic {WORDS[i % len(WORDS)]}",
                             text=" ".join(words) + f" marker{i}."))
    docs += [Document(doc_id=f"twin{j}-{start}", title="Twins", text="warfarin dose heart")
             for j in range(3)]  # identical chunks: tied scores, ranked by chunk id
    return docs


def bm25(kb: KnowledgeBase, query: str, depth: int) -> list[tuple[int, float]]:
    saved = kb.lexical_postings_from
    kb.lexical_postings_from = None
    try:
        return kb.lexical_candidates(query, depth)
    finally:
        kb.lexical_postings_from = saved


def postings_used(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """A record, per lexical query, of whether the stored postings ranked it."""
    used: list[bool] = []
    original = KnowledgeBase._postings_ranked

    def spy(self: KnowledgeBase, terms: list[str], depth: int) -> object:
        ranked = original(self, terms, depth)
        used.append(ranked is not None)
        return ranked

    monkeypatch.setattr(KnowledgeBase, "_postings_ranked", spy)
    return used


@pytest.fixture
def kb(tmp_path: Path) -> KnowledgeBase:
    kb = KnowledgeBase.create(tmp_path / "kb", SETTINGS)
    kb.ingest(corpus(120))
    return kb


def test_stored_postings_equal_bm25(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    assert kb.lexical_postings_state() == "missing"
    stats = kb.build_lexical_postings()
    assert stats["rows"] == kb.stats().chunks and stats["postings"] > stats["terms"] > 0
    assert kb.lexical_postings_state() == "fresh"
    kb.lexical_postings_from = 0  # on at any size
    used = postings_used(kb, monkeypatch)
    for query in QUERIES:
        for depth in (1, 3, 10, 50, 1000):
            assert kb.lexical_candidates(query, depth) == bm25(kb, query, depth), (query, depth)
    assert used.count(False) == 5  # only "_" (no FTS5 token) fell back to bm25()
    assert kb.lexical_candidates("multi_cit heart", 50)  # a phrase: bm25() of it, added
    kb.lexical_budget = 40  # common words dropped first: still equal on the words kept
    for query in QUERIES:
        assert kb.lexical_candidates(query, 20) == bm25(kb, query, 20)
    twins = kb.lexical_candidates("warfarin dose heart twins", 3)
    assert twins[0][1] == twins[1][1] == twins[2][1] and twins[0][0] < twins[1][0] < twins[2][0]
    kb.close()


def test_stale_postings_are_never_used(kb: KnowledgeBase,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    kb.build_lexical_postings()
    kb.lexical_postings_from = 0
    used = postings_used(kb, monkeypatch)
    kb.lexical_candidates("warfarin", 5)
    assert used == [True]
    kb.lexical_postings_from = None  # (on, the ingest would build them again)
    kb.ingest(corpus(5, start=500))  # a change: the postings no longer describe the KB
    kb.lexical_postings_from = 0
    assert kb.lexical_postings_state() == "stale"
    for query in ("marker502", "warfarin heart", *QUERIES):
        assert kb.lexical_candidates(query, 10) == bm25(kb, query, 10)
    found = kb.lexical_candidates("marker502", 5)
    assert found and kb.chunks([found[0][0]])[found[0][0]].doc_id == "d502"
    assert not any(used[1:])
    kb.build_lexical_postings()  # rebuilt: used again, and equal on the new content
    assert kb.lexical_postings_state() == "fresh"
    used.clear()
    for query in ("marker502", *QUERIES):
        assert kb.lexical_candidates(query, 10) == bm25(kb, query, 10)
    assert used[0] and any(used)
    kb.lexical_postings_from = None
    kb.remove_documents(["d3", "d4"])
    kb.lexical_postings_from = 0
    assert kb.lexical_postings_state() == "stale"
    used.clear()
    assert kb.lexical_candidates("marker3", 5) == bm25(kb, "marker3", 5) == []
    assert not any(used)
    kb.close()


def test_postings_rank_only_from_the_threshold(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS) as kb:
        kb.ingest(corpus(30))
        kb.build_lexical_postings()
        assert kb.lexical_postings_from == 100_000  # the default: large KBs only
        used = postings_used(kb, monkeypatch)
        kb.lexical_candidates("warfarin", 5)
        assert used == []  # below the threshold: bm25() without looking
    off = SETTINGS.model_copy(update={"lexical_postings_from": None})
    with KnowledgeBase.open(tmp_path / "kb", settings=off) as kb:
        assert kb.lexical_postings_from is None
    low = SETTINGS.model_copy(update={"lexical_postings_from": 10})
    with KnowledgeBase.open(tmp_path / "kb", settings=low) as kb:
        assert kb.lexical_candidates("warfarin", 5) == bm25(kb, "warfarin", 5)
        assert used == [True]


def test_missing_or_damaged_side_tables_fall_back(kb: KnowledgeBase) -> None:
    kb.build_lexical_postings()
    kb.lexical_postings_from = 0
    expected = bm25(kb, "warfarin heart", 10)
    kb.drop_lexical_postings()
    assert kb.lexical_postings_state() == "missing"
    assert kb.lexical_candidates("warfarin heart", 10) == expected
    kb.build_lexical_postings()
    kb.close()
    conn = sqlite3.connect(kb.path / DB_NAME)  # the tables dropped by hand, the meta kept
    conn.execute("DROP TABLE lexical_lengths")
    conn.commit()
    conn.close()
    with KnowledgeBase.open(kb.path) as again:
        again.lexical_postings_from = 0
        assert again.lexical_postings_state() == "stale"
        assert again.lexical_candidates("warfarin heart", 10) == expected


def test_fts_tokenizer_follows_fts5(kb: KnowledgeBase) -> None:
    tokenizer = FtsTokenizer(tokenizer_spec(kb._conn))
    assert tokenizer.tokens(["Treatments", "treated", "multi_cit", "Cerván", "_", "covid"]) == [
        ("treatment",), ("treat",), ("multi", "cit"), ("cervan",), (), ("covid",)]
    assert tokenizer.tokens(["treated"]) == [("treat",)]  # cached
    kb.close()


def test_bm25_top_orders_ties_by_id() -> None:
    lengths = np.array([0, 10, 10, 10, 5], dtype=np.uint32)
    docs = np.array([1, 2, 3, 4], dtype=np.uint32)
    tfs = np.array([1, 1, 1, 1], dtype=np.uint16)
    top = bm25_top([(docs, tfs)], 100, 10.0, lengths, 3)
    assert [i for i, _ in top] == [4, 1, 2] and top[1][1] == top[2][1]
    assert bm25_top([], 100, 10.0, lengths, 3) == []


def test_ingest_and_removal_keep_the_postings_of_a_large_kb_fresh(tmp_path: Path) -> None:
    low = SETTINGS.model_copy(update={"lexical_postings_from": 40})
    with KnowledgeBase.create(tmp_path / "kb", low) as kb:
        kb.ingest(corpus(20))  # below the threshold: none built
        assert kb.lexical_postings_state() == "missing"
        kb.ingest(corpus(40, start=20))  # crosses it: built at the ingest's end
        assert kb.lexical_postings_state() == "fresh" == kb.stats().lexical_postings
        kb.ingest(corpus(3, start=100))
        assert kb.lexical_postings_state() == "fresh"
        for query in ("marker101", *QUERIES):
            assert kb.lexical_candidates(query, 10) == bm25(kb, query, 10)
        kb.remove_documents(["d101"])
        assert kb.lexical_postings_state() == "fresh"
        assert kb.lexical_candidates("marker101", 5) == bm25(kb, "marker101", 5) == []


def test_kb_reindex_builds_the_postings_of_a_large_kb(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from medverify.cli import main

    off = SETTINGS.model_copy(update={"lexical_postings_from": None})
    with KnowledgeBase.create(tmp_path / "kb", off) as kb:
        kb.ingest(corpus(60))
        assert kb.lexical_postings_state() == "missing"
    config = tmp_path / "config.toml"
    config.write_text("[kb_settings]\nlexical_postings_from = 40\n", "utf-8")
    result = CliRunner().invoke(main, ["kb", "reindex", "--kb", str(tmp_path / "kb"),
                                       "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "built the lexical postings" in result.output
    assert "lexical postings: fresh" in result.output
