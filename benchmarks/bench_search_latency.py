"""Search latency of a 100,000-chunk knowledge base (hybrid, k=7), query embedding included.

Chunk texts are real (MedQuAD sample, Check-COVID and CitInt corpora), repeated with
variation (sentences rotated, a variant tag added) until the KB holds ``--chunks`` chunks.
Embedding 100k chunks with MiniLM takes hours on 2 cores, so the *stored* vectors are
pseudo-random unit vectors of the right dimension (384); the *queries* are embedded with
the real all-MiniLM-L6-v2, and that time is measured and reported separately.

    .venv/bin/python benchmarks/bench_search_latency.py [--chunks 100000] [--queries 200]

Writes benchmarks/results/search_latency.json and search_latency.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from medverify.config import DEFAULT_EMBEDDER, KBSettings
from medverify.files import data_dir
from medverify.kb import KnowledgeBase, iter_documents, sample_kb_path
from medverify.kb.embed import minilm
from medverify.kb.embed_base import Tokenizer, normalize
from medverify.records import Document
from medverify.retrieve import Retriever

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "retrieval"
RESULTS = ROOT / "benchmarks" / "results"
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


class SyntheticVectors:
    """Stands in for MiniLM while *building* the KB: same id, dim and tokenizer, but
    pseudo-random vectors seeded by the text (fast)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.id, self.dim, self.tokenizer = DEFAULT_EMBEDDER, 384, tokenizer

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = [np.random.default_rng(zlib.crc32(t.encode())).standard_normal(self.dim)
                for t in texts]
        return normalize(np.asarray(rows, dtype=np.float32).reshape(len(texts), self.dim))


class TimedEmbedder:
    """Wraps the real embedder and records how long each embed call took."""

    def __init__(self) -> None:
        self.inner = minilm()
        self.id, self.dim, self.tokenizer = self.inner.id, self.inner.dim, self.inner.tokenizer
        self.last = 0.0

    def embed(self, texts: list[str]) -> np.ndarray:
        started = time.perf_counter()
        out = self.inner.embed(texts)
        self.last = time.perf_counter() - started
        return out


def base_texts() -> list[str]:
    paths = [sample_kb_path()] + [DATA / n / "corpus.jsonl" for n in ("checkcovid", "citint")]
    return [d.text for d in iter_documents([p for p in paths if p.exists()])]


def synthetic_documents(texts: list[str]) -> Iterator[Document]:
    round_ = 0
    while True:
        for i, text in enumerate(texts):
            sentences = _SENTENCE.split(text)
            shift = round_ % max(len(sentences), 1)
            body = " ".join(sentences[shift:] + sentences[:shift])
            yield Document(doc_id=f"syn-{round_}-{i}", title=f"variant {round_}",
                           text=f"Variant {round_}. {body}")
        round_ += 1


def build(path: Path, n_chunks: int) -> float:
    started = time.perf_counter()
    fake = SyntheticVectors(minilm().tokenizer)
    with KnowledgeBase.create(path, KBSettings(), embedder=fake) as kb:  # type: ignore[arg-type]
        kb.flush_chunks = 2048
        docs = synthetic_documents(base_texts())
        while kb.stats().chunks < n_chunks:
            kb.ingest(next(docs) for _ in range(2000))
    return time.perf_counter() - started


def queries(n: int) -> list[str]:
    out: list[str] = []
    for name in ("checkcovid", "citint"):
        with (DATA / name / "queries_dev.jsonl").open(encoding="utf-8") as handle:
            out.extend(json.loads(line)["query"] for line in handle)
    return out[::max(1, len(out) // n)][:n]


def percentiles(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values)
    return {"p50_ms": statistics.median(ms), "p95_ms": ms[int(0.95 * (len(ms) - 1))],
            "mean_ms": statistics.fmean(ms)}


def measure(path: Path, qs: list[str]) -> dict[str, object]:
    timed = TimedEmbedder()
    with KnowledgeBase.open(path, embedder=timed) as kb:  # type: ignore[arg-type]
        Retriever(kb).search(qs[0], k=7)  # warm up: load the faiss index and the model
        total, embed, lexical, dense = [], [], [], []
        for q in qs:
            started = time.perf_counter()
            Retriever(kb).search(q, k=7, mode="hybrid")
            total.append(time.perf_counter() - started)
            embed.append(timed.last)
            started = time.perf_counter()
            Retriever(kb).search(q, k=7, mode="lexical")
            lexical.append(time.perf_counter() - started)
            started = time.perf_counter()
            Retriever(kb).search(q, k=7, mode="dense")
            dense.append(time.perf_counter() - started - timed.last)
        stats = kb.stats()
    return {"chunks": stats.chunks, "documents": stats.documents,
            "hybrid_total": percentiles(total), "query_embedding": percentiles(embed),
            "hybrid_without_embedding": percentiles([t - e for t, e in zip(total, embed,
                                                                           strict=True)]),
            "lexical_only": percentiles(lexical), "dense_only_without_embedding":
                percentiles(dense), "kb_size_bytes": stats.size_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--kb", type=Path, help="Reuse/keep the KB here.")
    parser.add_argument("--name", default="search_latency", help="Results file stem.")
    parser.add_argument("--torch-threads", type=int, help="torch.set_num_threads(N) first.")
    args = parser.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    with tempfile.TemporaryDirectory(prefix="mv-bench-latency-") as tmp:
        path = args.kb or Path(tmp) / "kb"
        build_s = build(path, args.chunks) if not (path / "kb.sqlite").exists() else None
        result = {"cpus": os.cpu_count(), "torch_threads": args.torch_threads or "default",
                  "build_seconds_synthetic_vectors": build_s,
                  "queries": args.queries, "k": 7, **measure(path, queries(args.queries))}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2), "utf-8")
    lines = [f"# Search latency ({result['chunks']} chunks, k=7, {result['cpus']} CPUs, "
             f"torch threads: {result['torch_threads']})", "",
             "| measure | p50 ms | p95 ms |", "|---|---|---|"]
    for key in ("hybrid_total", "query_embedding", "hybrid_without_embedding",
                "lexical_only", "dense_only_without_embedding"):
        row = result[key]
        lines.append(f"| {key} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} |")  # type: ignore[index]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n", "utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
