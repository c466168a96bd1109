from __future__ import annotations

import json
from pathlib import Path

import pytest

from medverify.config import KBSettings
from medverify.errors import InputError
from medverify.evals.retrieval import evaluate_retrieval, load_queries, rank_metrics

CORPUS = [
    {"doc_id": "d1", "title": "Warfarin", "text": "Vitamin K reverses the effect of warfarin."},
    {"doc_id": "d2", "title": "Measles", "text": "The MMR vaccine prevents measles infection."},
    {"doc_id": "d3", "title": "Asthma", "text": "Albuterol relieves acute asthma symptoms."},
    {"doc_id": "d4", "title": "Gout", "text": "Allopurinol lowers uric acid in gout."},
]
QUERIES = [
    {"id": "q1", "query": "what reverses warfarin", "relevant": ["d1"]},
    {"id": "q2", "query": "vaccine against measles", "relevant": ["d2"]},
    {"id": "q3", "query": "allopurinol uric acid", "relevant": ["d4", "d9"]},
    {"id": "q4", "query": "zebra", "relevant": ["d3"]},
    {"id": "q5", "query": "no answer known", "relevant": []},
]


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    return path


def test_rank_metrics_by_hand() -> None:
    ranked = [["a", "b"], ["x", "y", "b"], ["z"]]
    recall, mrr = rank_metrics(ranked, [["a"], ["b"], ["b"]], ks=[1, 3])
    assert recall == {1: pytest.approx(1 / 3), 3: pytest.approx(2 / 3)}
    assert mrr == pytest.approx((1 + 1 / 3) / 3)


def test_evaluate_retrieval_on_tiny_corpus(tmp_path: Path) -> None:
    corpus = write(tmp_path / "corpus.jsonl", CORPUS)
    queries = write(tmp_path / "queries.jsonl", QUERIES)
    settings = KBSettings(embedder="hash", chunk_tokens=32, chunk_overlap=4)
    result = evaluate_retrieval(corpus, queries, ks=[1, 4], settings=settings)
    assert result.embedder_id == "hash-256" and Path(result.kb_path).is_dir()
    lexical = result.by_mode("lexical")
    assert lexical.n_queries == 4  # q5 has no relevant docs
    assert lexical.recall == {1: 0.75, 4: 0.75}  # "zebra" matches nothing lexically
    assert lexical.mrr == pytest.approx(0.75)
    for mode in ("dense", "hybrid"):
        assert result.by_mode(mode).recall[1] >= 0.75
        assert result.by_mode(mode).recall[4] == 1.0  # four docs: all are retrieved
    again = evaluate_retrieval(corpus, queries, ks=[1, 4], settings=settings)
    assert again.kb_path == result.kb_path and again.snapshot_id == result.snapshot_id


def test_load_queries_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no queries"):
        load_queries(write(tmp_path / "q.jsonl", [QUERIES[-1]]))
    (tmp_path / "bad.jsonl").write_text("{not json\n", "utf-8")
    with pytest.raises(InputError, match="bad query record"):
        load_queries(tmp_path / "bad.jsonl")
