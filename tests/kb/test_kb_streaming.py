"""Ingest streams: large files are read, chunked, embedded and committed in bounded pieces."""

from __future__ import annotations

import json
import logging
import random
import sqlite3
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from medverify.config import KBSettings
from medverify.kb import KnowledgeBase, LoadReport, chunk_text
from medverify.kb import loaders as kb_loaders
from medverify.kb.chunking import iter_chunks
from medverify.kb.embed_base import HashEmbedder, WordTokenizer, normalize
from medverify.kb.ingest_batches import PARTIAL, document_hash
from medverify.kb.loaders import TextFile, iter_documents, iter_sources, read_text
from medverify.records import Document

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "medverify" / "data" / "medquad_sample.jsonl"
SETTINGS = KBSettings(chunk_tokens=64, chunk_overlap=8, embedder="hash")
WORDS = ["metformin", "dose", "(mg)", "kidney", "naïve", "U.S.", "e.g.", '"quoted."', "end.",
         "why?", "α-blocker", "3.5", "[ref]."]
SEPARATORS = [" ", " ", " ", "  ", "\n", "\n\n", "\n- ", ". ", '." ', "\t", "\u2022 "]


class FlatEmbedder:
    """No model, no work: the same unit vector for every text (memory tests measure the
    store, not an embedder). Records the largest batch it was given."""

    id = "flat-8"
    dim = 8

    def __init__(self) -> None:
        self.tokenizer = WordTokenizer()
        self.largest = 0
        self.calls = 0
        self.fail_after: int | None = None

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise RuntimeError("power cut")
        self.largest = max(self.largest, len(texts))
        return normalize(np.ones((len(texts), self.dim), dtype=np.float32))


def medical_text(size: int, seed: int = 7) -> str:
    """About ``size`` characters of sentences from the shipped MedQuAD sample."""
    rows = [json.loads(line)["text"] for line in SAMPLE.read_text("utf-8").splitlines()[:40]]
    sentences = [s for row in rows for s in row.split(". ") if len(s) > 20]
    rng, parts, total = random.Random(seed), [], 0
    while total < size:
        block = ". ".join(rng.sample(sentences, 5)) + ".\n\n"
        parts.append(block)
        total += len(block)
    return "".join(parts)


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def stored_chunks(kb_dir: Path) -> list[tuple[int, int, int, str]]:
    conn = sqlite3.connect(kb_dir / "kb.sqlite")
    try:
        return conn.execute('SELECT ord, start, "end", text FROM chunks ORDER BY ord').fetchall()
    finally:
        conn.close()


def test_windows_give_the_chunks_of_the_whole_text() -> None:
    rng = random.Random(3)
    for _ in range(60):
        text = "".join(rng.choice(WORDS) + rng.choice(SEPARATORS)
                       for _ in range(rng.randint(0, 800)))
        size, overlap = rng.choice([(16, 4), (20, 0), (32, 15), (64, 8)])
        whole = chunk_text(text, WordTokenizer(), size, overlap)
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text), 6)))
        pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        windowed = list(iter_chunks(pieces, WordTokenizer(), size, overlap,
                                    window_chars=rng.choice([40, 120, 500])))
        assert windowed == whole
        assert all(text[c.span.start:c.span.end] == c.text for c in windowed)


def test_large_text_file_is_streamed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kb_loaders, "STREAM_BYTES", 64 * 1024)
    monkeypatch.setattr(kb_loaders, "READ_BYTES", 8 * 1024)
    text = medical_text(250_000)
    path = write(tmp_path / "big.txt", text)
    sources = list(iter_sources([path], LoadReport()))
    assert len(sources) == 1 and isinstance(sources[0], TextFile)
    assert sources[0].load().text == text
    assert document_hash(sources[0]) == document_hash(next(iter_documents([path])))
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS, embedder=HashEmbedder()) as kb:
        kb.flush_chunks, kb.window_chars = 50, 20_000
        stats = kb.ingest(sources)
        streamed_snapshot = kb.snapshot_id
    expected = chunk_text(text, WordTokenizer(), 64, 8)
    rows = stored_chunks(tmp_path / "kb")
    assert stats.documents_added == 1 and stats.chunks_added == len(expected) == len(rows)
    assert [(r[1], r[2], r[3]) for r in rows] == [(c.span.start, c.span.end, c.text)
                                                 for c in expected]
    assert all(text[start:end] == chunk for _, start, end, chunk in rows)
    with KnowledgeBase.create(tmp_path / "kb2", SETTINGS, embedder=HashEmbedder()) as kb:
        kb.ingest(iter_documents([path]))  # the same document, read whole
        assert kb.snapshot_id == streamed_snapshot


def _ingest_peak(tmp_path: Path, name: str, size: int,
                 in_memory: bool) -> tuple[int, int, FlatEmbedder]:
    """Peak of Python allocations (tracemalloc) while ingesting one document of ``size``
    characters, read from a file or (``in_memory``) already held as a Document."""
    path = write(tmp_path / f"{name}.txt", medical_text(size))
    source: Document | TextFile = TextFile(doc_id=name, path=path, title=name)
    if in_memory:
        source = Document(doc_id=name, title=name, text=read_text(path, LoadReport()))
    embedder = FlatEmbedder()
    with KnowledgeBase.create(tmp_path / name, KBSettings(chunk_tokens=128, chunk_overlap=16),
                              embedder=embedder) as kb:
        kb.flush_chunks, kb.window_chars = 32, 16 * 1024
        tracemalloc.start()
        try:
            kb.ingest([source])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return peak, kb.stats().chunks, embedder


@pytest.mark.parametrize("in_memory", [False, True], ids=["file", "document"])
def test_ingest_memory_does_not_grow_with_the_document(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_memory: bool) -> None:
    monkeypatch.setattr(kb_loaders, "READ_BYTES", 8 * 1024)
    _ingest_peak(tmp_path, "warm-up", 40_000, in_memory)  # imports and caches
    small, small_chunks, _ = _ingest_peak(tmp_path, "small", 100_000, in_memory)
    large, large_chunks, embedder = _ingest_peak(tmp_path, "large", 400_000, in_memory)
    assert large_chunks > 3 * small_chunks > 60
    assert embedder.largest <= 32  # never more than one batch of chunks at once
    assert large < 1.25 * small + 100_000  # four times the text, about the same peak
    # tokenizing the whole text at once would hold ~7 MB of token offsets here
    assert large < 1_500_000


def test_kill_inside_a_large_document_resumes(tmp_path: Path) -> None:
    text = medical_text(150_000)
    source = TextFile(doc_id="big", path=write(tmp_path / "big.txt", text), title="Big")
    embedder = FlatEmbedder()
    embedder.fail_after = 3
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS, embedder=embedder) as kb:
        kb.flush_chunks = 20
        with pytest.raises(RuntimeError, match="power cut"):
            kb.ingest([source])
        assert kb.stats().chunks == 60  # three committed batches survive
        row = kb._conn.execute("SELECT content_hash, n_chunks FROM documents").fetchone()
        assert row == (PARTIAL + document_hash(source), 60)
        embedder.fail_after = None
        stats = kb.ingest([source])
        assert (stats.documents_resumed, stats.documents_added) == (1, 1)
        again = kb.ingest([source])
        assert again.documents_unchanged == 1 and again.chunks_added == 0
        assert kb.stats().vector_index == "fresh"
    expected = chunk_text(text, WordTokenizer(), 64, 8)
    rows = stored_chunks(tmp_path / "kb")
    assert [r[0] for r in rows] == list(range(len(expected)))
    assert [(r[1], r[2]) for r in rows] == [(c.span.start, c.span.end) for c in expected]


def test_resume_that_does_not_match_starts_over(tmp_path: Path,
                                                caplog: pytest.LogCaptureFixture) -> None:
    text = medical_text(60_000)
    source = TextFile(doc_id="big", path=write(tmp_path / "big.txt", text), title="Big")
    embedder = FlatEmbedder()
    embedder.fail_after = 1
    with KnowledgeBase.create(tmp_path / "kb", SETTINGS, embedder=embedder) as kb:
        kb.flush_chunks = 10
        with pytest.raises(RuntimeError):
            kb.ingest([source])
        kb._conn.execute('UPDATE chunks SET "end" = "end" - 1 WHERE ord = 9')
        kb._conn.commit()
        embedder.fail_after = None
        with caplog.at_level(logging.WARNING):
            stats = kb.ingest([source])
        assert "does not match" in caplog.text
        assert stats.documents_updated == 1 and stats.documents_resumed == 0
    rows = stored_chunks(tmp_path / "kb")
    assert len(rows) == len(chunk_text(text, WordTokenizer(), 64, 8))
    assert all(text[start:end] == chunk for _, start, end, chunk in rows)


def test_large_markdown_and_undecodable_bytes(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kb_loaders, "STREAM_BYTES", 1024)
    monkeypatch.setattr(kb_loaders, "READ_BYTES", 100)
    body = medical_text(5_000)
    md = write(tmp_path / "notes.md", f"\n\nintro\n## Kidney disease ##\n\n{body}")
    raw = b"\xef\xbb\xbf" + body.encode("utf-8")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(raw[:2000] + b"\xff\xfe" + raw[2000:] + "\ufffd".encode())
    blank = write(tmp_path / "blank.txt", " \n" * 1000)
    report = LoadReport()
    md_file, bad_file = list(iter_sources([md, bad, blank], report))
    assert isinstance(md_file, TextFile) and md_file.title == "Kidney disease"
    assert isinstance(bad_file, TextFile) and bad_file.errors == "replace"
    reference = LoadReport()
    assert bad_file.load().text == read_text(bad, reference)
    assert (report.files_with_replacements, report.replaced_chars) == (1, 2)
    assert reference.replaced_chars == 2
    assert [s.reason for s in report.skipped] == ["no text"]
