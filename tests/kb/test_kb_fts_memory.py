"""A small KB's lexical queries ranked from posting lists held in memory
(:mod:`medverify.kb.fts_memory`) equal FTS5's bm25(): the same ids, scores and order, before
and after the KB changes; a change by another connection is never mixed in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from medverify.config import KBSettings
from medverify.kb import KnowledgeBase, fts, fts_memory
from medverify.records import Document

SETTINGS = KBSettings(chunk_tokens=48, chunk_overlap=8, embedder="hash-64")
WORDS = ("warfarin", "metformin", "asthma", "insulin", "aspirin", "fever", "kidney", "heart",
         "treatment", "treatments", "treated", "dose", "doses", "vaccines", "children",
         "Cerván", "covid-19", "multi_cit")
QUERIES = ("warfarin and aspirin treatment", "treated children with vaccines",
           "Treatment treatments treated", "cervan covid 19 fever", "multi_cit heart failure",
           "other_cit kidney", "zzzunknown heart", "the", "_ heart", "heart", "nothing",
           "marker7 dose", "marker1003 insulin")


def corpus(n: int, start: int = 0) -> list[Document]:
    docs = []
    for i in range(start, start + n):
        rng = np.random.default_rng(i)
        words = rng.choice(WORDS, int(rng.integers(3, 40)))
        docs.append(Document(doc_id=f"d{i}", title=f"Topic {WORDS[i % len(WORDS)]}",
                             text=" ".join(words) + f" marker{i}."))
    docs += [Document(doc_id=f"twin{j}-{start}", title="Twins", text="warfarin dose heart")
             for j in range(3)]  # tied scores: ranked by chunk id
    return docs


def bm25(kb: KnowledgeBase, query: str, depth: int) -> list[tuple[int, float]]:
    saved, kb.lexical_postings_from = kb.lexical_postings_from, None  # None: bm25() always
    try:
        return kb.lexical_candidates(query, depth)
    finally:
        kb.lexical_postings_from = saved


def equal_to_bm25(kb: KnowledgeBase) -> None:
    for query in QUERIES:
        for depth in (1, 5, 50):
            assert kb.lexical_candidates(query, depth) == bm25(kb, query, depth), (query, depth)


def test_memory_postings_equal_bm25_as_the_kb_changes(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[bool] = []
    original = fts.memory_ranked

    def spy(conn: object, terms: list[str], depth: int) -> object:
        ranked = original(conn, terms, depth)  # type: ignore[arg-type]
        used.append(ranked is not None)
        return ranked

    monkeypatch.setattr(fts, "memory_ranked", spy)
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS) as kb:
        kb.ingest(corpus(60))
        assert kb.lexical_postings_from == 100_000 and kb.lexical_postings_state() == "missing"
        equal_to_bm25(kb)
        assert used.count(True) >= len(QUERIES) * 3 - 6  # ("_": no FTS5 token: bm25())
        with KnowledgeBase.open(tmp_path / "kb") as other:  # another connection changes it
            other.ingest(corpus(5, start=1000))
        equal_to_bm25(kb)  # the new generation read: marker1003 found
        assert kb.lexical_candidates("marker1003", 5)
        kb.remove_documents(["d7"])
        equal_to_bm25(kb)
        assert kb.lexical_candidates("marker7", 5) == []
    monkeypatch.setattr(fts_memory, "MEMORY_ROWS", 10)  # too large: bm25() ranks
    used.clear()
    with KnowledgeBase.open(tmp_path / "kb") as kb:
        equal_to_bm25(kb)
        assert used and not any(used)


def test_a_change_while_reading_drops_what_was_read(tmp_path: Path) -> None:
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS) as kb:
        kb.ingest(corpus(20))
        kb.lexical_candidates("heart", 5)
        memory = fts_memory.held(kb._conn)
        generation = memory.generation
        assert generation is not None and memory.postings("warfarin")
        memory.generation = "-1"  # as if the KB had moved since the lists were read
        assert memory.postings("aspirin") is False and memory.ranker is None
        assert memory.lengths("-1") is None  # lengths read at another generation: dropped
        assert kb.lexical_candidates("aspirin", 5) == bm25(kb, "aspirin", 5)
        assert memory.generation == generation
