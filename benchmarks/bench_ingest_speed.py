"""Ingest at the embedder's speed (issue 19): end-to-end ingest chunks/s against the
encoder's own forward-pass throughput over the same chunks' windows, fp32 vs int8, and
retrieval recall of fp32 vs int8 vectors.

Part ``speed`` (one process, so every number shares the machine's load; configurations
alternate): a MedQuAD slice (every ``--step``-th XML file, sorted; step 40 gives ~300
chunks of up to 512 tokens) is chunked once to get the exact texts ingest embeds; then

- forward pass: the model alone over those texts' token windows (pre-tokenised,
  length-sorted batches of 64), fp32 and int8: chunks/s;
- end-to-end: ``KnowledgeBase.ingest`` of the same files into a fresh KB (XML parsing,
  chunking, tokenising, embedding, SQLite, faiss), "before" (the serial, row-by-row path
  with sentence-transformers' ``encode``: ``Ingester.overlap = bulk = False``) and "after"
  (the default path) in fp32, and "after" in int8;
- per-phase time of each ingest (timers around parsing, chunking, embedding, SQLite writes,
  faiss adds, and the main thread's wait for the embedding thread), tokenisation cost and
  padding share of the old and new batching.

Part ``recall``: recall@1/5/10 and MRR@10 on ``../shared/data/retrieval`` (dense and
hybrid), fp32 vs int8 vectors (and queries). Check-COVID by default (347 abstracts, 1,275
dev+train queries); ``--datasets checkcovid citint`` adds CitInt (3,063 documents: ~10 more
minutes).

    .venv/bin/python benchmarks/bench_ingest_speed.py [--step 40] [--parts speed recall]

Writes benchmarks/results/ingest_speed.json and ingest_speed.md (a part not run keeps its
previous results, so ``--parts speed`` and ``--parts recall`` can run one after the other,
or at once: the recall part does not time anything).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from medverify.config import KBSettings
from medverify.evals.retrieval import evaluate_retrieval
from medverify.files import data_dir
from medverify.kb import KnowledgeBase, LoadReport, iter_documents
from medverify.kb.chunking import chunk_text
from medverify.kb.embed import minilm
from medverify.kb.index import VectorIndex
from medverify.kb.ingest import Ingester, _embed_text
from medverify.kb.sentence_embed import SentenceTransformerEmbedder, length_batches

ROOT = Path(__file__).resolve().parents[1]
MEDQUAD = data_dir() / "raw" / "medquad"
RETRIEVAL = data_dir() / "retrieval"
RESULTS = ROOT / "benchmarks" / "results"
PHASES = ("parse", "chunk", "embed", "sqlite", "faiss", "wait")


def files(step: int) -> list[Path]:
    return sorted(MEDQUAD.glob("*/*.xml"))[::step]


def chunk_texts(paths: list[Path], emb: SentenceTransformerEmbedder) -> list[str]:
    """What ingest embeds for these files: ``title\\nchunk`` per 512-token chunk."""
    settings = KBSettings()
    return [_embed_text(doc.title, chunk)
            for doc in iter_documents(paths, LoadReport())
            for chunk in chunk_text(doc.text, emb.tokenizer, settings.chunk_tokens,
                                    settings.chunk_overlap)]


# ---- timers -------------------------------------------------------------------------


class Phases:
    """Seconds spent per ingest phase, from wrappers installed for one ingest."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    def add(self, phase: str, since: float) -> None:
        self.seconds[phase] += time.perf_counter() - since

    def timed_iter(self, phase: str, items: Iterator[Any]) -> Iterator[Any]:
        while True:
            started = time.perf_counter()
            try:
                item = next(items)
            except StopIteration:
                self.add(phase, started)
                return
            self.add(phase, started)
            yield item

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(phase, started)
        return wrapped


@contextlib.contextmanager
def instrumented(phases: Phases) -> Iterator[None]:
    """Timers around the ingest phases (class attributes patched for one ingest)."""
    saved = {(Ingester, "_chunk"): Ingester._chunk, (Ingester, "_embed"): Ingester._embed,
             (Ingester, "_store_batch"): Ingester._store_batch,
             (Ingester, "_settle"): Ingester._settle, (VectorIndex, "add"): VectorIndex.add}

    def chunk(self: Ingester, doc: Any) -> Iterator[Any]:
        return phases.timed_iter("chunk", saved[(Ingester, "_chunk")](self, doc))

    def settle(self: Ingester, stats: Any) -> None:
        if self._in_flight is None:
            return
        started = time.perf_counter()
        self._in_flight.vectors.result()  # the main thread waiting for the embedding thread
        phases.add("wait", started)
        saved[(Ingester, "_settle")](self, stats)

    Ingester._chunk = chunk  # type: ignore[method-assign]
    Ingester._embed = phases.wrap("embed", saved[(Ingester, "_embed")])  # type: ignore[method-assign]
    Ingester._store_batch = phases.wrap("sqlite", saved[(Ingester, "_store_batch")])  # type: ignore[method-assign]
    Ingester._settle = settle  # type: ignore[method-assign]
    VectorIndex.add = phases.wrap("faiss", saved[(VectorIndex, "add")])  # type: ignore[method-assign]
    try:
        yield
    finally:
        for (owner, name), fn in saved.items():
            setattr(owner, name, fn)


# ---- measurements -------------------------------------------------------------------


def forward(emb: SentenceTransformerEmbedder, windows: list[list[int]], n_chunks: int
            ) -> dict[str, float]:
    started = time.perf_counter()
    emb._forward(windows)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "chunks_per_s": n_chunks / seconds,
            "windows_per_s": len(windows) / seconds}


def ingest(paths: list[Path], emb: SentenceTransformerEmbedder, work: Path, name: str,
           old: bool) -> dict[str, Any]:
    phases = Phases()
    overlap, bulk = Ingester.overlap, Ingester.bulk
    Ingester.overlap = Ingester.bulk = not old
    try:
        with (KnowledgeBase.create(work / name, KBSettings(), embedder=emb) as kb,
              instrumented(phases)):
            docs = phases.timed_iter("parse", iter_documents(paths, LoadReport()))
            started = time.perf_counter()
            stats = kb.ingest(docs)
            seconds = time.perf_counter() - started
            precision = kb.embed_precision
    finally:
        Ingester.overlap, Ingester.bulk = overlap, bulk
    return {"seconds": seconds, "chunks": stats.chunks_added, "precision": precision,
            "chunks_per_s": stats.chunks_added / seconds, "phases_s": phases.seconds}


def tokenising(emb: SentenceTransformerEmbedder, texts: list[str]) -> dict[str, float]:
    """Seconds to tokenise the texts for embedding: old (split_windows on offsets, then
    sentence-transformers tokenises the pieces again) vs new (one batch call)."""
    started = time.perf_counter()
    pieces, _ = emb._windows(texts)
    emb._model.tokenizer(pieces, truncation=True, max_length=emb.window + 2)
    old = time.perf_counter() - started
    started = time.perf_counter()
    emb.tokenizer.windows(texts, emb.window)
    return {"old_s": old, "new_s": time.perf_counter() - started}


def padding(emb: SentenceTransformerEmbedder, texts: list[str], flush: int) -> dict[str, float]:
    """Share of the model's input that is padding: old = sentence-transformers' batches
    (pieces sorted by characters within each ingest batch of ``flush`` chunks), new =
    batches sorted by token count."""
    def share(batches: list[list[int]], lengths: list[int]) -> float:
        padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
        return 1 - sum(lengths) / padded

    old_real = old_padded = new_real = new_padded = 0
    for start in range(0, len(texts), flush):
        part = texts[start:start + flush]
        pieces, _ = emb._windows(part)
        tokens = [len(ids) for ids in emb._model.tokenizer(
            pieces, truncation=True, max_length=emb.window + 2)["input_ids"]]
        order = sorted(range(len(pieces)), key=lambda i: -len(pieces[i]))
        batches = [order[i:i + emb.batch_size] for i in range(0, len(order), emb.batch_size)]
        old_real += sum(tokens)
        old_padded += round(sum(tokens) / (1 - share(batches, tokens)))
        windows, _ = emb.tokenizer.windows(part, emb.window)
        lengths = [len(w) for w in windows]
        new_real += sum(lengths)
        new_share = share(length_batches(lengths, emb.batch_size), lengths)
        new_padded += round(sum(lengths) / (1 - new_share))
    return {"old": 1 - old_real / old_padded, "new": 1 - new_real / new_padded}


def speed(step: int) -> dict[str, Any]:
    paths = files(step)
    fp32, int8 = minilm("fp32", "cpu"), minilm("int8", "cpu")
    texts = chunk_texts(paths, fp32)
    windows = fp32.forward_throughput_input(texts)
    fp32._forward(windows[:8])  # warm both models up
    int8._forward(windows[:8])
    n = len(texts)
    print(f"{len(paths)} files, {n} chunks, {len(windows)} windows", file=sys.stderr)
    runs: dict[str, list[dict[str, Any]]] = {}

    def record(name: str, result: dict[str, Any]) -> None:
        runs.setdefault(name, []).append(result)
        print(f"{name}: {result['chunks_per_s']:.2f} chunks/s", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="mv-bench-ingest-speed-") as tmp:
        work = Path(tmp)
        # alternating, so a change of the machine's load hits every configuration
        record("forward_fp32", forward(fp32, windows, n))
        record("ingest_before_fp32", ingest(paths, fp32, work, "before", old=True))
        record("ingest_after_fp32", ingest(paths, fp32, work, "after32", old=False))
        record("forward_fp32", forward(fp32, windows, n))
        record("forward_int8", forward(int8, windows, n))
        record("ingest_after_int8", ingest(paths, int8, work, "after8", old=False))
        record("forward_int8", forward(int8, windows, n))
    mean = {name: float(np.mean([r["chunks_per_s"] for r in rs])) for name, rs in runs.items()}
    return {
        "step": step, "files": len(paths), "chunks": n, "windows": len(windows),
        "window_tokens_mean": float(np.mean([len(w) for w in windows])),
        "cpus": os.cpu_count(), "load_avg": os.getloadavg(), "runs": runs,
        "chunks_per_s": mean,
        "ratio_end_to_end_over_forward": {
            "before_fp32": mean["ingest_before_fp32"] / mean["forward_fp32"],
            "after_fp32": mean["ingest_after_fp32"] / mean["forward_fp32"],
            "after_int8": mean["ingest_after_int8"] / mean["forward_int8"]},
        "encoder_speedup_int8": mean["forward_int8"] / mean["forward_fp32"],
        "ingest_speedup_after_int8_over_before_fp32":
            mean["ingest_after_int8"] / mean["ingest_before_fp32"],
        "tokenising_s": tokenising(fp32, texts),
        "padding_share": padding(fp32, texts, KBSettings().batch_size * 4),
    }


def recall(datasets: list[str], precisions: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mv-bench-ingest-recall-") as tmp:
        for precision in precisions:
            emb = minilm(precision, "cpu")  # type: ignore[arg-type]
            for dataset in datasets:
                folder = RETRIEVAL / dataset
                for split in ("dev", "train"):
                    started = time.perf_counter()
                    result = evaluate_retrieval(
                        folder / "corpus.jsonl", folder / f"queries_{split}.jsonl",
                        modes=("dense", "hybrid"), kb_dir=Path(tmp) / f"{dataset}-{precision}",
                        embedder=emb)
                    for r in result.results:
                        out[f"{dataset}/{split}/{r.mode}/{precision}"] = {
                            "queries": r.n_queries, "recall": r.recall, "mrr": r.mrr}
                    print(f"{dataset}/{split}/{precision}: {time.perf_counter() - started:.0f}s",
                          file=sys.stderr)
    return out


# ---- report -------------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    lines = ["# Ingest speed (issue 19)", ""]
    s = result.get("speed")
    if s:
        mean, ratio = s["chunks_per_s"], s["ratio_end_to_end_over_forward"]
        lines += [
            f"MedQuAD, every {s['step']}th XML file: {s['files']} files, {s['chunks']} chunks "
            f"of up to 512 tokens = {s['windows']} model windows (mean "
            f"{s['window_tokens_mean']:.0f} tokens); all-MiniLM-L6-v2, {s['cpus']} CPUs "
            f"(shared; load average at the end {s['load_avg'][0]:.1f}). One process, "
            "configurations alternating; forward passes measured twice, bracketing the "
            "ingests (means below, each run in the JSON).", "",
            "| measurement | chunks/s | end-to-end / forward |", "|---|---|---|",
            f"| forward pass fp32 | {mean['forward_fp32']:.2f} | |",
            f"| ingest before (serial, row by row, ST encode), fp32 | "
            f"{mean['ingest_before_fp32']:.2f} | {ratio['before_fp32']:.2f} |",
            f"| ingest after, fp32 | {mean['ingest_after_fp32']:.2f} | "
            f"{ratio['after_fp32']:.2f} |",
            f"| forward pass int8 | {mean['forward_int8']:.2f} | |",
            f"| ingest after, int8 | {mean['ingest_after_int8']:.2f} | "
            f"{ratio['after_int8']:.2f} |", "",
            f"Encoder int8 / fp32: **{s['encoder_speedup_int8']:.2f}x**; ingest after "
            f"(int8) / before (fp32): **{s['ingest_speedup_after_int8_over_before_fp32']:.2f}x**.",
            "", "Where an ingest's time goes (seconds; % of its wall time; `embed` runs in "
            "the embedding thread in the new path, overlapped with the main thread's "
            "phases, and `wait` is the main thread waiting for it):", "",
            "| ingest | wall | " + " | ".join(PHASES) + " | other |",
            "|---|---|" + "---|" * (len(PHASES) + 1)]
        for name in ("ingest_before_fp32", "ingest_after_fp32", "ingest_after_int8"):
            for run in s["runs"][name]:
                ph, wall = run["phases_s"], run["seconds"]
                serial = name == "ingest_before_fp32"  # embed on the main thread
                other = wall - sum(v for k, v in ph.items() if serial or k != "embed")
                cells = " | ".join(f"{ph[p]:.1f} ({100 * ph[p] / wall:.1f}%)" for p in PHASES)
                lines.append(f"| {name} | {wall:.1f} | {cells} | {max(other, 0):.1f} |")
        tok, pad = s["tokenising_s"], s["padding_share"]
        lines += ["", f"Tokenising the embedded texts: old {tok['old_s']:.2f} s (offsets to cut "
                  f"windows, then sentence-transformers tokenises the pieces again), new "
                  f"{tok['new_s']:.2f} s (one batch call). Padding share of the model's "
                  f"input: old {100 * pad['old']:.1f}% (sorted by characters), new "
                  f"{100 * pad['new']:.1f}% (sorted by tokens).", ""]
    r = result.get("recall")
    if r:
        lines += ["## Recall, fp32 vs int8 vectors (and queries)", "",
                  "`../shared/data/retrieval`, chunks 512/100; recall counts documents.", "",
                  "| dataset/split | mode | queries | R@5 fp32 | R@5 int8 | Δ | R@10 fp32 | "
                  "R@10 int8 | Δ | MRR@10 fp32 | MRR@10 int8 |",
                  "|---" * 11 + "|"]
        for key in sorted(k for k in r if k.endswith("/fp32")):
            base = key[:-len("/fp32")]
            a, b = r[key], r.get(base + "/int8")
            if b is None:
                continue
            dataset_split, mode = base.rsplit("/", 1)
            ra, rb = a["recall"], b["recall"]
            lines.append(
                f"| {dataset_split} | {mode} | {a['queries']} | {ra['5']:.3f} | {rb['5']:.3f} | "
                f"{rb['5'] - ra['5']:+.3f} | {ra['10']:.3f} | {rb['10']:.3f} | "
                f"{rb['10'] - ra['10']:+.3f} | {a['mrr']:.3f} | {b['mrr']:.3f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--step", type=int, default=40)
    parser.add_argument("--parts", nargs="+", default=["speed", "recall"],
                        choices=["speed", "recall"])
    parser.add_argument("--datasets", nargs="+", default=["checkcovid"])
    parser.add_argument("--precisions", nargs="+", default=["fp32", "int8"],
                        choices=["fp32", "int8"], help="recall: the others' results are kept")
    args = parser.parse_args()
    if not MEDQUAD.is_dir() or not RETRIEVAL.is_dir():
        sys.exit("../shared/data not found: this benchmark needs the shared data")
    path = RESULTS / "ingest_speed.json"
    new: dict[str, Any] = {}
    if "speed" in args.parts:
        new["speed"] = speed(args.step)
    if "recall" in args.parts:
        new["recall"] = recall(args.datasets, args.precisions)
        new["recall_datasets"] = args.datasets
    # read only now: the parts may run as two processes at once
    result: dict[str, Any] = json.loads(path.read_text("utf-8")) if path.is_file() else {}
    if "recall" in new and set(args.precisions) != {"fp32", "int8"}:
        new["recall"] = {**result.get("recall", {}), **new["recall"]}
    result.update(new)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2), "utf-8")
    md = markdown(json.loads(path.read_text("utf-8")))
    (RESULTS / "ingest_speed.md").write_text(md, "utf-8")
    print(md)


if __name__ == "__main__":
    main()
