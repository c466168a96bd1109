from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from medverify.cli import main


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "warfarin.txt").write_text("Vitamin K reverses the effect of warfarin.", "utf-8")
    (folder / "measles.md").write_text("# Measles\n\nThe MMR vaccine prevents measles.", "utf-8")
    (folder / "blob.bin").write_bytes(b"\x00\x01\x02")
    return folder


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_ingest_search_stats(corpus: Path, tmp_path: Path) -> None:
    kb = str(tmp_path / "kb")
    code, out = invoke("kb", "ingest", str(corpus), "--kb", kb, "--embedder", "hash",
                       "--chunk-tokens", "32", "--chunk-overlap", "8")
    assert code == 0, out
    assert "added 2 documents" in out and "skipped 1" in out
    code, out = invoke("kb", "ingest", str(corpus), "--kb", kb, "--embedder", "hash",
                       "--chunk-tokens", "32", "--chunk-overlap", "8")
    assert code == 0 and "added 0 documents" in out and "unchanged 2" in out
    code, out = invoke("kb", "ingest", str(corpus), "--kb", kb)  # settings come from the KB
    assert code == 0 and "unchanged 2" in out, out
    code, out = invoke("kb", "search", "--kb", kb, "what reverses warfarin", "-k", "1", "--json")
    assert code == 0, out
    hits = json.loads(out)
    assert len(hits) == 1 and hits[0]["doc_id"].endswith("warfarin.txt")
    code, out = invoke("kb", "search", "--kb", kb, 'NEAR("measles', "--mode", "lexical")
    assert code == 0 and "Measles" in out
    code, out = invoke("kb", "stats", "--kb", kb, "--json")
    stats = json.loads(out)
    assert (stats["documents"], stats["embedder_id"], stats["chunk_tokens"]) == (2, "hash-256", 32)


def test_limit_option(corpus: Path, tmp_path: Path) -> None:
    code, out = invoke("kb", "ingest", str(corpus), "--kb", str(tmp_path / "kb"),
                       "--embedder", "hash", "--limit", "1")
    assert code == 0 and "KB now has 1 documents" in out


def test_missing_kb_and_wrong_embedder(corpus: Path, tmp_path: Path) -> None:
    code, out = invoke("kb", "search", "--kb", str(tmp_path / "none"), "x")
    assert code == 2 and "no knowledge base" in out and "medverify kb ingest" in out
    code, out = invoke("kb", "stats", "--kb", str(tmp_path / "none"))
    assert code == 2
    kb = str(tmp_path / "kb")
    assert invoke("kb", "ingest", str(corpus), "--kb", kb, "--embedder", "hash")[0] == 0
    code, out = invoke("kb", "ingest", str(corpus), "--kb", kb, "--embedder", "hash-64")
    assert code == 2 and "built with embedder 'hash-256'" in out


def test_eval_retrieval_cli(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in [
        {"doc_id": "a", "title": "", "text": "warfarin and vitamin K"},
        {"doc_id": "b", "title": "", "text": "measles vaccine"}]), "utf-8")
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"id": "1", "query": "warfarin", "relevant": ["a"]}) + "\n",
                       "utf-8")
    out_json = tmp_path / "out" / "r.json"
    code, out = invoke("eval", "retrieval", "--corpus", str(corpus), "--queries", str(queries),
                       "-k", "1,2", "--mode", "lexical", "--embedder", "hash",
                       "--kb", str(tmp_path / "kb"), "--json", str(out_json))
    assert code == 0, out
    assert "lexical" in out and "1.000" in out
    data = json.loads(out_json.read_text("utf-8"))
    assert data["results"][0]["recall"] == {"1": 1.0, "2": 1.0}
    code, out = invoke("eval", "retrieval", "--corpus", str(corpus), "--queries", str(queries),
                       "-k", "x", "--embedder", "hash")
    assert code == 2 and "comma-separated" in out
