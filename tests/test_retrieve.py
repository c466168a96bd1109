from __future__ import annotations

import pytest

from medverify.records import Passage
from medverify.retrieve import dedupe_documents, rrf


def test_rrf_by_hand() -> None:
    fused = rrf({"lexical": ["a", "b", "c"], "dense": ["c", "a", "d"]}, rrf_k=60)
    scores = {f.id: f.score for f in fused}
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert scores["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert scores["b"] == pytest.approx(1 / 62)
    assert [f.id for f in fused] == ["a", "c", "b", "d"]
    assert fused[0].ranks == {"lexical": 1, "dense": 2}


def test_rrf_ties_limit_weights_and_duplicates() -> None:
    fused = rrf({"x": ["p", "q"], "y": ["q", "p"]}, limit=1)
    assert [f.id for f in fused] == ["p"]  # equal scores: first seen wins
    weighted = rrf({"x": ["p"], "y": ["q"]}, weights={"y": 2.0})
    assert [f.id for f in weighted] == ["q", "p"]
    dup = rrf({"x": ["p", "p", "q"]}, rrf_k=1)
    assert dup[0].score == pytest.approx(1 / 2) and dup[1].ranks == {"x": 3}
    assert rrf({}) == [] and rrf({"x": []}) == []


def test_rrf_small_k_rewards_top_ranks() -> None:
    lists = {"a": ["top", "x1", "x2", "both"], "b": ["y1", "y2", "y3", "both"]}
    assert rrf(lists, rrf_k=1)[0].id == "top"
    assert rrf(lists, rrf_k=1000)[0].id == "both"


def test_dedupe_documents() -> None:
    passages = [Passage(id=f"{d}#{i}", doc_id=d, text="t")
                for d, i in [("a", 0), ("b", 0), ("a", 1), ("c", 0)]]
    assert dedupe_documents(passages) == ["a", "b", "c"]
    assert dedupe_documents(passages, limit=2) == ["a", "b"]
