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


def test_ingest_sample_builds_the_shipped_sample(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # without --kb, --sample builds ./kb
    code, out = invoke("kb", "ingest", "--sample", "--embedder", "hash", "--limit", "5")
    assert code == 0, out
    assert "added 5 documents" in out and "from the shipped MedQuAD sample in" in out
    assert "KB now has 5 documents" in out and (tmp_path / "kb" / "kb.sqlite").exists()
    code, out = invoke("kb", "stats", "--kb", "kb", "--json")
    assert code == 0 and json.loads(out)["embedder_id"] == "hash-256"


def test_ingest_sample_usage_errors(corpus: Path, tmp_path: Path) -> None:
    kb = str(tmp_path / "kb")
    code, out = invoke("kb", "ingest", str(corpus), "--sample", "--kb", kb)
    assert code == 2 and "takes no PATHS" in out
    code, out = invoke("kb", "ingest", "--sample", str(corpus), "--kb", kb)  # not a number
    assert code == 2 and "is not a number" in out and "takes no PATHS" in out
    code, out = invoke("kb", "ingest", str(corpus), "--sample", "3", "--kb", kb)
    assert code == 2 and "needs --format ctgov" in out
    code, out = invoke("kb", "ingest", "--kb", kb)
    assert code == 2 and "--sample" in out
    code, out = invoke("kb", "ingest", str(corpus))
    assert code == 2 and "--kb" in out
    assert not (tmp_path / "kb").exists()


def test_large_folder_warns_with_an_estimate_and_goes_on(tmp_path: Path) -> None:
    from medverify.cli.kb import LARGE_FILES

    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(LARGE_FILES + 1):
        (folder / f"d{i}.txt").write_text(f"Note {i}: aspirin {i} mg.", "utf-8")
    code, out = invoke("kb", "ingest", str(folder), "--kb", str(tmp_path / "kb"),
                       "--embedder", "hash")
    assert code == 0, out
    flat = " ".join(out.split())
    assert f"reads {LARGE_FILES + 1:,} files" in flat and "takes about" in flat
    assert "--limit N" in flat and "--sample" in flat
    assert "measured:" in flat and "MB/s of input" in flat  # the rate after two batches
    assert f"added {LARGE_FILES + 1} documents" in flat
    small = tmp_path / "few"
    small.mkdir()
    (small / "a.txt").write_text("one small note", "utf-8")
    code, out = invoke("kb", "ingest", str(small), "--kb", str(tmp_path / "kb2"),
                       "--embedder", "hash")
    assert code == 0 and "warning" not in out
    code, out = invoke("kb", "ingest", str(folder), "--kb", str(tmp_path / "kb3"),
                       "--embedder", "hash", "--limit", "3")  # already made small
    assert code == 0 and "takes about" not in out


def test_large_input_by_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medverify.cli import kb as kb_cli

    monkeypatch.setattr(kb_cli, "LARGE_MB", 0.001)  # 1 kB
    big = tmp_path / "big.txt"
    big.write_text("Aspirin lowers fever. " * 100, "utf-8")
    code, out = invoke("kb", "ingest", str(big), "--kb", str(tmp_path / "kb"),
                       "--embedder", "hash")
    flat = " ".join(out.split())
    assert code == 0 and "reads 1 file (0 XML, 0.0 MB of others)" in flat
    assert "takes about" in flat


def test_estimate_counts_xml_by_file_and_other_files_by_size() -> None:
    from medverify.cli import kb as kb_cli

    estimate = kb_cli.estimate_seconds
    assert estimate(900, 900, 0) == pytest.approx(900 / kb_cli.FILES_PER_S)
    assert estimate(10, 0, 50_000_000) == pytest.approx(50 / kb_cli.MB_PER_S)
    assert estimate(3000, 0, 3000) == pytest.approx(3000 / kb_cli.CHUNKS_PER_S)  # tiny files
    assert [kb_cli._duration(s) for s in (42, 1500, 9000)] == ["42 s", "25 min", "2.5 h"]
