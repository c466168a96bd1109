"""One vector set, end to end: hybrid search latency with query embedding, ranking and
fetching the passages, and the approximate index's recall@10 against exact search, in one
run (issue 32, "scale numbers that hold").

The KB: N synthetic passages (``make_large_corpus.py``: real sentences of MedQuAD,
Check-COVID and Citation-Integrity reshuffled, 3-6 a passage, labelled synthetic) written
into a real KB (SQLite rows, FTS5, term counts, stored lexical postings, the index the KB
chooses by size: hnswlib where it is installed, else faiss HNSW or IVF, memory-mapped where
faiss) whose embedder is all-MiniLM-L6-v2. MiniLM embeds
tens of passages a second on these 2 shared cores (1M passages: hours, measured in the
``fidelity`` stage), so the stored vectors follow a documented model of MiniLM instead:

    v(passage) = normalise(n_title * e(title) + sum over its sentences of n_s * e(s))

where ``e`` is the real all-MiniLM-L6-v2 vector (fp32; on ONNX Runtime, whose vectors
are torch's to a cosine of 0.9999999, because it is faster here) of every sentence and
title of the pool, embedded once (``pool`` stage; ``--pool`` sentences of whole source
documents, seeded, out of the 127k: all of them would take ~90 min at the rate measured
on this loaded machine), and ``n`` its token count (mean pooling weighs a piece by its
tokens; ``--model uniform`` drops the weights). The ``fidelity`` stage measures how
close that is to MiniLM itself on the KB's first ``--fidelity`` passages embedded for
real (title + text, as ingest embeds them): cosine to the real vector, agreement of exact
top-10 lists, and IVF recall on the real vectors against the model vectors at equal size
and settings.

Stages (child processes, so each peak RSS is its own; results cached in ``--work``):

1. ``pool``: MiniLM vectors of every sentence and title of the pool.
2. ``fidelity``: the model against real MiniLM passage vectors (see above).
3. ``build``: the KB (bulk writer, one chunk a passage), then the KB's own index choice
   rebuilt from SQLite (IVF above 100k: nlist about 4 sqrt N), a flat (exact) index file
   beside it, and the stored lexical postings.
4. ``search``: 200 real claims (Check-COVID and Citation-Integrity dev), one at a time
   through ``Retriever.search_many([q], 7, "hybrid")``: the query embedded by the KB's
   encoder, dense (IVF) + lexical (stored postings) + fusion, and the 7 passages fetched
   from SQLite. Also timed: the query embedding alone, and ranking alone and ranking +
   fetching with the query vector computed before. Warm: one untimed pass of every
   configuration first; then every query runs through every configuration, in an order
   rotated query by query (the machine is shared). Encoders: ONNX Runtime fp32
   (``embed_runtime = "onnx"``) and ONNX Runtime int8 (the exported model quantised
   dynamically with ``onnxruntime.quantization`` here: a benchmark-only encoder, not a
   setting) at nprobe 16, 32 (the default) and 64; torch fp32 (the default encoder) at
   32; on request (``--encoders``) ``onnx-int8-smooth`` and ``onnx-int8-smooth-all``, the
   SmoothQuant-style int8 query encoders of ``medverify.kb.onnx_quant`` (issue 45; see
   bench_query_path.py), and ``bf16`` (the default ``embed_runtime = "auto"`` on a CPU with
   AMX: queries through ``medverify.kb.bf16_encoder``; refused without AMX). For each:
   recall@10 of the KB's dense top 10 against the exact flat scan of the same query
   vectors, and the hybrid top 7 against the one on the exact index (same vectors); and
   against the first encoder's (the reference, fp32) twice, so that an encoder's own loss
   is apart from the index's: both on the exact index, and both on the same IVF nprobe.

    .venv/bin/python benchmarks/bench_search_e2e.py --n 1000000 [--work /tmp/e2e]

Writes benchmarks/results/search_e2e.json and .md (``search_e2e_N`` for other sizes).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = ROOT / "benchmarks" / "results"
EMBEDDER = "all-MiniLM-L6-v2"

from bench_kb_scale import dir_bytes, finish_kb, load_queries, peak_mb, rss_mb, write_rows  # noqa: E402


def pct(values: Sequence[float]) -> dict[str, float]:
    ordered = np.asarray(sorted(values), dtype=np.float64)
    if not len(ordered):
        return {"p50": 0.0, "p95": 0.0, "mean": 0.0}
    return {"p50": round(float(np.percentile(ordered, 50)), 2),
            "p95": round(float(np.percentile(ordered, 95)), 2),
            "mean": round(float(ordered.mean()), 2)}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return 1000 * (time.perf_counter() - started), value


def load() -> float:
    return round(os.getloadavg()[0], 2)


# ---- the vector model -----------------------------------------------------------------------


def load_pool(args: argparse.Namespace) -> Any:
    """The sentence pool of every stage: ``--pool`` sentences of whole documents (seeded)."""
    import make_large_corpus

    pool = make_large_corpus.load_pool()
    return pool.restricted(args.pool, seed=0) if args.pool else pool


def stage_pool(args: argparse.Namespace) -> dict[str, Any]:
    """MiniLM (fp32 on ONNX Runtime, 64 texts a call as ingest) of every sentence and
    title of the pool, with their token counts."""
    from medverify.kb.embed import get_embedder

    pool = load_pool(args)
    embedder = get_embedder(EMBEDDER, "fp32", "cpu", "onnx")
    texts = pool.sentences + [d.title for d in pool.docs]
    started = time.perf_counter()
    parts = []
    for start in range(0, len(texts), 4096):
        block = texts[start:start + 4096]
        parts += [embedder.embed(block[i:i + 64]) for i in range(0, len(block), 64)]
        print(f"pool: {start + len(block)} of {len(texts)} in "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - started
    vectors = np.concatenate(parts).astype(np.float32)
    tokens = np.array([len(w) for w in embedder.tokenizer.windows(texts, 10**6)[0]],
                      dtype=np.float32) - 2  # without [CLS] and [SEP]
    np.savez(Path(args.work) / f"pool_minilm_{args.pool}.npz", vectors=vectors,
             tokens=tokens, sentences=len(pool.sentences))
    return {"sentences": len(pool.sentences), "titles": len(pool.docs),
            "seconds": round(seconds, 1), "texts_per_s": round(len(texts) / seconds, 1),
            "mean_tokens": round(float(tokens.mean()), 1), "load_after": load()}


class VectorModel:
    """Passage vectors from the pool's MiniLM vectors (see the module doc)."""

    def __init__(self, work: Path, pool: int, weighting: str) -> None:
        data = np.load(work / f"pool_minilm_{pool}.npz")
        count = int(data["sentences"])
        weights = data["tokens"] if weighting == "tokens" else np.ones(len(data["tokens"]))
        weighted = data["vectors"] * weights[:, None].astype(np.float32)
        self.sentences, self.titles = weighted[:count], weighted[count:]

    def vectors(self, plans: Sequence[tuple[int, list[int]]]) -> np.ndarray:
        from medverify.kb.embed_base import normalize

        flat = np.fromiter((s for _, chosen in plans for s in chosen), dtype=np.int64)
        offsets = np.cumsum([0] + [len(c) for _, c in plans[:-1]])
        sums = np.add.reduceat(self.sentences[flat], offsets, axis=0)
        sums += self.titles[[home for home, _ in plans]]
        return normalize(sums)


def ivf_recall(base: np.ndarray, queries: np.ndarray, nlist: int,
               nprobes: Sequence[int]) -> dict[str, float]:
    """recall@10 of an IVF-flat index (k-means as the KB trains it) against exact."""
    import faiss

    flat = faiss.IndexFlatIP(base.shape[1])
    flat.add(base)
    _, truth = flat.search(queries, 10)
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(base.shape[1]), base.shape[1], nlist,
                               faiss.METRIC_INNER_PRODUCT)
    index.cp.niter = 10
    index.train(base)
    index.add(base)
    out = {}
    for nprobe in nprobes:
        index.nprobe = nprobe
        _, found = index.search(queries, 10)
        out[str(nprobe)] = round(float(np.mean([len(set(a) & set(b)) / 10
                                                for a, b in zip(found, truth, strict=True)])), 4)
    return out


def stage_fidelity(args: argparse.Namespace) -> dict[str, Any]:
    """The KB's first ``--fidelity`` passages embedded for real against the model."""
    from make_large_corpus import passage_plans

    from medverify.kb.embed import get_embedder

    pool = load_pool(args)
    plans = list(passage_plans(pool, args.fidelity, args.seed))
    texts = [f"{pool.docs[home].title}\n" + " ".join(pool.sentences[s] for s in chosen)
             for home, chosen in plans]
    embedder = get_embedder(EMBEDDER, "fp32", "cpu", "onnx")
    started = time.perf_counter()
    real = np.concatenate([embedder.embed(texts[i:i + 64]) for i in range(0, len(texts), 64)])
    seconds = time.perf_counter() - started
    queries = np.asarray(embedder.embed(load_queries(args.queries)), dtype=np.float32)
    out: dict[str, Any] = {"passages": len(texts), "embed_s": round(seconds, 1),
                           "passages_per_s": round(len(texts) / seconds, 2),
                           "mean_tokens": round(float(np.mean([
                               len(w) for w in embedder.tokenizer.windows(texts, 10**6)[0]])),
                               1),
                           "load_after_embedding": load()}
    out["hours_for_1m_real"] = round(1e6 / out["passages_per_s"] / 3600, 1)
    nlist = max(8, len(texts) // 64)  # ~64 vectors a list (1M: 244 a list at 4,096)
    out["ivf_nlist"] = nlist
    out["real"] = {"ivf_recall_at_10": ivf_recall(real, queries, nlist, (1, 2, 4, 8))}
    truth_real = np.argsort(-(queries @ real.T), axis=1)[:, :10]
    for weighting in ("tokens", "uniform"):
        model = VectorModel(Path(args.work), args.pool, weighting).vectors(plans)
        cosine = np.sum(model * real, axis=1)
        truth_model = np.argsort(-(queries @ model.T), axis=1)[:, :10]
        out[weighting] = {
            "cosine_to_real": {"mean": round(float(cosine.mean()), 4),
                               "p5": round(float(np.percentile(cosine, 5)), 4),
                               "min": round(float(cosine.min()), 4)},
            "exact_top10_overlap_with_real": round(float(np.mean([
                len(set(a) & set(b)) / 10 for a, b in zip(truth_model, truth_real,
                                                          strict=True)])), 4),
            "ivf_recall_at_10": ivf_recall(model, queries, nlist, (1, 2, 4, 8))}
    return out


# ---- the KB ---------------------------------------------------------------------------------


def stage_build(args: argparse.Namespace) -> dict[str, Any]:
    """The KB's rows, then its index (the KB's choice), a flat file, the lexical postings."""
    from make_large_corpus import passage_plans

    from medverify.config import KBSettings
    from medverify.kb import KnowledgeBase
    from medverify.kb.database import connect

    started = time.perf_counter()
    pool, model = load_pool(args), VectorModel(Path(args.work), args.pool, args.model)
    kb_dir = Path(args.kb)
    KnowledgeBase.create(kb_dir, KBSettings(embedder=EMBEDDER)).close()
    conn = connect(kb_dir / "kb.sqlite")
    terms: dict[str, int] = {}
    plans = passage_plans(pool, args.n, args.seed)
    written = 0
    while written < args.n:
        block = [next(plans) for _ in range(min(20_000, args.n - written))]
        write_rows(conn, pool, block, written, model.vectors(block), terms)
        written += len(block)
        if written % 100_000 == 0 or written == args.n:
            print(f"built {written} in {time.perf_counter() - started:.0f} s, load {load()}",
                  file=sys.stderr, flush=True)
    finish_kb(conn, terms)
    out: dict[str, Any] = {"rows_s": round(time.perf_counter() - started, 1),
                           "model": args.model, "load_after_rows": load()}
    out.update(build_indexes(kb_dir, Path(args.work), args.n, args.index))
    out["files"] = dir_bytes(kb_dir)
    out["peak_rss_mb"] = peak_mb()
    return out


def build_indexes(kb_dir: Path, work: Path, n: int, policy: str) -> dict[str, Any]:
    import faiss

    from medverify.kb import KnowledgeBase
    from medverify.kb.index import IndexSpec

    out: dict[str, Any] = {}
    with KnowledgeBase.open(kb_dir) as kb:
        started = time.perf_counter()
        spec = kb.rebuild_index(None if policy == "auto" else policy)
        out["index"] = {"spec": spec.describe(), "seconds": round(time.perf_counter() - started, 1),
                        "file_bytes": (kb_dir / "vectors.faiss").stat().st_size,
                        "load_after": load()}
        started = time.perf_counter()
        flat = kb.vector_index._build(IndexSpec("flat"))
        faiss.write_index(flat, str(work / f"flat_{n}.faiss"))
        out["flat_s"] = round(time.perf_counter() - started, 1)
        del flat
        started = time.perf_counter()
        postings = kb.build_lexical_postings()
        out["lexical_postings"] = {**postings, "seconds": round(time.perf_counter() - started, 1)}
    return out


# ---- the search -----------------------------------------------------------------------------


def int8_encoder(onnx_embedder: Any, work: Path) -> Any:
    """The ONNX embedder with its exported model quantised to int8 (dynamic, per channel,
    MatMul weights), for this benchmark only."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from medverify.kb import onnx_runtime

    source = onnx_embedder._onnx.path
    target = work / (source.stem + "-int8.onnx")
    if not target.is_file():
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8,
                         per_channel=True, op_types_to_quantize=["MatMul"])
    encoder = copy.copy(onnx_embedder)
    encoder._onnx = onnx_runtime.OnnxEncoder(target)
    return encoder


def bf16_encoder() -> Any:
    """The default embedder (``embed_runtime = "auto"``), whose queries run in bfloat16:
    refused where they would not (no AMX)."""
    from medverify.kb.embed import get_embedder

    embedder = get_embedder(EMBEDDER, "fp32", "cpu", "auto")
    if getattr(embedder, "query_runtime", None) != "bf16":
        raise SystemExit("bf16: this CPU has no AMX bfloat16 (auto runs queries on "
                         f"{getattr(embedder, 'query_runtime', 'torch')})")
    return embedder


def smooth_encoder(onnx_embedder: Any, work: Path, alpha: float, all_int8: bool) -> Any:
    """The ONNX embedder on the SmoothQuant-style int8 file of ``medverify.kb.onnx_quant``
    (calibrated on 300 training claims of each set, as bench_query_path.py builds it):
    ``alpha`` 0.8 with the FFN down-projections fp32, or every MatMul int8."""
    from bench_query_path import calibration

    from medverify.kb import onnx_quant, onnx_runtime

    target = work / f"int8-smooth-{alpha}-{'all' if all_int8 else 'ffn32'}.onnx"
    if not target.is_file():
        onnx_quant.build(onnx_embedder._model, target, calibration(onnx_embedder, 300), alpha,
                         (lambda name: False) if all_int8 else onnx_quant.ffn_down)
    encoder = copy.copy(onnx_embedder)
    encoder._onnx = onnx_runtime.OnnxEncoder(target)
    return encoder


class FixedVectors:
    """An embedder stand-in returning vectors computed before (to time ranking alone)."""

    def __init__(self, inner: Any, vectors: dict[str, np.ndarray]) -> None:
        self.id, self.dim, self.tokenizer = inner.id, inner.dim, inner.tokenizer
        self.precision = getattr(inner, "precision", "fp32")
        self.vectors = vectors

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])


def tie_aware_recall(found: Sequence[int], flat_scores: np.ndarray, base: Any,
                     query: np.ndarray) -> float:
    """Share of the approximate top 10 whose exact inner product reaches the exact 10th
    best (minus 1e-6): identical vectors (the same sentences in another order) tie."""
    kth = float(flat_scores[9]) - 1e-6
    ids = [i for i in found[:10] if i >= 0]
    scores = [float(np.dot(base.reconstruct(int(i)), query)) for i in ids]
    return sum(s >= kth for s in scores) / 10


class Bench:
    """The configurations (encoder, nprobe) of one search run, measured interleaved: every
    query runs through every configuration, in an order rotated query by query, so that
    the machine's load (shared) falls on all of them alike."""

    def __init__(self, kb: Any, retriever: Any, encoders: dict[str, Any],
                 configs: list[tuple[str, int]], queries: list[str]) -> None:
        self.kb, self.retriever, self.encoders = kb, retriever, encoders
        self.configs, self.queries = configs, queries
        self.fixed: dict[str, FixedVectors] = {}

    def use(self, encoder: Any, nprobe: int) -> None:
        self.kb._embedder = encoder
        self.kb.vector_index.set_knobs(nprobe=nprobe)

    def rotated(self, i: int) -> list[tuple[str, int]]:
        shift = i % len(self.configs)
        return self.configs[shift:] + self.configs[:shift]

    def embed_all(self) -> dict[str, dict[str, float]]:
        """Each encoder's vector of each query (timed, encoders alternating)."""
        names = list(self.encoders)
        for q in self.queries[:20]:  # warm-up
            for name in names:
                self.encoders[name].embed([q])
        times: dict[str, list[float]] = {name: [] for name in names}
        vectors: dict[str, dict[str, np.ndarray]] = {name: {} for name in names}
        for i, q in enumerate(self.queries):
            for name in names[i % len(names):] + names[:i % len(names)]:
                ms, v = timed(lambda q=q, name=name: self.encoders[name].embed([q]))
                times[name].append(ms)
                vectors[name][q] = np.asarray(v[0], dtype=np.float32)
        self.fixed = {name: FixedVectors(self.encoders[name], vectors[name]) for name in names}
        return {name: pct(values) for name, values in times.items()}

    def timed_pass(self, whats: Sequence[str]) -> dict[str, dict[tuple[str, int], list[float]]]:
        """Per query, per configuration (rotated), each of ``whats``: ``end_to_end``
        (search_many with the encoder), ``rank`` (rank_many with the vectors computed
        before), ``rank_and_fetch`` (search_many with them), ``dense`` and ``lexical``
        (rank_many of one list alone, at the depth hybrid fuses: the parts of ``rank``)."""
        times = {what: {c: [] for c in self.configs} for what in whats}
        for i, q in enumerate(self.queries):
            for name, nprobe in self.rotated(i):
                for what in whats:
                    encoder = self.encoders[name] if what == "end_to_end" else self.fixed[name]
                    self.use(encoder, nprobe)
                    call = (self.retriever.search_many if what in ("end_to_end",
                                                                   "rank_and_fetch")
                            else self.retriever.rank_many)
                    k, mode = ((7, "hybrid") if what not in ("dense", "lexical")
                               else (max(7, self.retriever.settings.candidates), what))
                    times[what][(name, nprobe)].append(timed(
                        lambda q=q, call=call, k=k, mode=mode: call([q], k, mode))[0])
        return times

    def quality(self, name: str, nprobe: int, flat: Any, exact_hybrid: list[list[str]],
                reference: list[list[str]]) -> tuple[dict[str, Any], list[list[str]]]:
        """recall@10 of the KB's dense top 10 against the exact scan of the same vectors;
        the hybrid top 7 against the one on the exact index (same vectors), and against
        ``reference`` (the first encoder's on the exact index)."""
        from medverify.kb.index import faiss_search

        fixed = self.fixed[name]
        self.use(fixed, nprobe)
        matrix = np.stack([fixed.vectors[q] for q in self.queries])
        scores, ids = faiss_search(flat, matrix, 10)
        dense = [[c for c, _ in found] for found in self.kb.dense_candidates(self.queries, 10)]
        approx = [[p.id for p in r] for r in self.retriever.search_many(self.queries, 7,
                                                                        "hybrid")]
        pairs = list(zip(approx, exact_hybrid, strict=True))
        return {
            "hybrid_top7_overlap_with_reference": overlap(approx, reference),
            "exact_top7_overlap_with_reference": overlap(exact_hybrid, reference),
            "recall_at_10": round(float(np.mean([len(set(d) & set(e.tolist())) / 10
                                                 for d, e in zip(dense, ids, strict=True)])), 4),
            "recall_at_10_tie_aware": round(float(np.mean([
                tie_aware_recall(d, s, flat, fixed.vectors[q])
                for d, s, q in zip(dense, scores, self.queries, strict=True)])), 4),
            "hybrid_top7_equal_to_exact": sum(a == e for a, e in pairs),
            "hybrid_top7_overlap": overlap(approx, exact_hybrid)}, approx

    def exact_hybrid(self, name: str, flat: Any, ivf: Any) -> list[list[str]]:
        """The hybrid top 7 with the exact flat index in place of the KB's own (``ivf``:
        whatever ``auto`` chose, hnswlib included; its spec is swapped too, since the
        search goes through the spec's backend)."""
        from medverify.kb.index import IndexSpec

        vectors = self.kb.vector_index
        saved = vectors.loaded, vectors.spec
        self.kb._embedder = self.fixed[name]
        vectors.loaded, vectors.spec = flat, IndexSpec("flat")
        try:
            return [[p.id for p in r] for r in self.retriever.search_many(self.queries, 7,
                                                                          "hybrid")]
        finally:
            vectors.loaded, vectors.spec = saved


def overlap(found: list[list[str]], truth: list[list[str]]) -> float:
    """Mean share of each truth list found in the other list of the same query."""
    return round(float(np.mean([len(set(a) & set(e)) / max(1, len(e))
                                for a, e in zip(found, truth, strict=True)])), 4)


def measure(bench: Bench, flat: Any, ivf: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"load_before": load()}
    out["embed"] = bench.embed_all()
    bench.timed_pass(["end_to_end"])  # warm: page cache, ONNX sessions, every configuration
    passes = bench.timed_pass(["end_to_end", "rank", "rank_and_fetch", "dense", "lexical"])
    out["load_after_timing"] = load()
    exact = {name: bench.exact_hybrid(name, flat, ivf) for name in bench.encoders}
    rows = []
    approx: dict[tuple[str, int], list[list[str]]] = {}
    first = bench.configs[0][0]
    for name, nprobe in bench.configs:
        row: dict[str, Any] = {"encoder": name, "nprobe": nprobe}
        row.update({what: pct(times[(name, nprobe)]) for what, times in passes.items()})
        numbers, approx[(name, nprobe)] = bench.quality(name, nprobe, flat, exact[name],
                                                        exact[first])
        row.update(numbers)
        if (first, nprobe) in approx:  # the reference encoder on the same IVF nprobe
            row["ivf_top7_overlap_with_reference"] = overlap(approx[(name, nprobe)],
                                                             approx[(first, nprobe)])
        rows.append(row)
        print(f"  {name} nprobe {nprobe}: e2e {row['end_to_end']}, recall "
              f"{row['recall_at_10']}", file=sys.stderr, flush=True)
    out["configs"] = rows
    first = next(iter(bench.fixed))
    out["cosine_to_" + first] = {}
    for name in list(bench.fixed)[1:]:
        cos = [float(np.dot(bench.fixed[name].vectors[q], bench.fixed[first].vectors[q]))
               for q in bench.queries]
        out["cosine_to_" + first][name] = {"mean": round(float(np.mean(cos)), 5),
                                           "min": round(float(np.min(cos)), 5)}
    return out


def stage_search(args: argparse.Namespace) -> dict[str, Any]:
    import faiss

    from medverify.config import KBSettings
    from medverify.kb import KnowledgeBase
    from medverify.kb.embed import get_embedder
    from medverify.retrieve import Retriever

    queries = load_queries(args.queries)
    kb = KnowledgeBase.open(args.kb, settings=KBSettings(embed_runtime="onnx"))
    started = time.perf_counter()
    ivf = kb.vector_index.ensure()
    out: dict[str, Any] = {"queries": len(queries), "open_ms": round(
        1000 * (time.perf_counter() - started), 1), "index": kb.stats().index_kind,
        "mapped": kb.vector_index.mapped, "rss_after_open_mb": rss_mb()}
    flat = faiss.read_index(str(Path(args.work) / f"flat_{args.n}.faiss"),
                            faiss.IO_FLAG_MMAP_IFC)
    onnx = kb.embedder
    makers = {"onnx-fp32": lambda: onnx, "onnx-int8": lambda: int8_encoder(onnx, args.work),
              "onnx-int8-smooth": lambda: smooth_encoder(onnx, args.work, 0.8, False),
              "onnx-int8-smooth-all": lambda: smooth_encoder(onnx, args.work, 0.9, True),
              "torch-fp32": lambda: get_embedder(EMBEDDER, "fp32", "cpu", "torch"),
              "bf16": bf16_encoder}
    encoders = {name: makers[name]() for name in args.encoders}
    configs = [(name, nprobe) for name in args.encoders
               for nprobe in (args.nprobes if name != "torch-fp32" else [32])]
    out.update(measure(Bench(kb, Retriever(kb), encoders, configs, queries), flat, ivf))
    out["load_after"] = load()
    out["peak_rss_mb"] = peak_mb()
    kb.close()
    return out


# ---- report ---------------------------------------------------------------------------------


def markdown(r: dict[str, Any]) -> str:
    stages = [f"{name}: `{r[name].get('command', r['command'])}` ({r[name].get('date', '')})"
              for name in ("pool", "fidelity", "build", "search") if name in r]
    lines = [f"# Hybrid search end to end at {r['n']:,} passages, with recall on the same vectors",
             "", f"{r['cpus']} CPUs shared with other jobs (load averages below). See the "
             "script's docstring for the vector model. Stages as run: " + "; ".join(stages)
             + ".", ""]
    lines += _model_lines(r)
    if "build" in r:
        b = r["build"]
        files = b["files"]
        lines += ["## Build", "", "| step | seconds |", "|---|---|",
                  f"| rows: SQLite, FTS5, term counts, model vectors (bulk writer) | "
                  f"{b['rows_s']} |",
                  f"| index: {b['index']['spec']} (train + add, from SQLite) | "
                  f"{b['index']['seconds']} |",
                  f"| flat (exact) index file for the truth | {b['flat_s']} |",
                  f"| stored lexical postings | {b['lexical_postings']['seconds']} |", "",
                  f"On disk: kb.sqlite {files.get('kb.sqlite', 0) / 1e9:.2f} GB, vectors.faiss "
                  f"{files.get('vectors.faiss', 0) / 1e9:.2f} GB; peak RSS "
                  f"{b['peak_rss_mb']:.0f} MB.", ""]
    if "search" in r:
        lines += _search_lines(r["search"])
    for earlier in r.get("earlier_searches", []):
        runs = "; ".join(f"{row['encoder']} nprobe {row['nprobe']} end to end "
                         f"{row['end_to_end']['p50']} / {row['end_to_end']['p95']} ms, recall "
                         f"{row['recall_at_10']}" for row in earlier["configs"])
        lines.append(f"- Earlier search run ({earlier.get('date', 'date not kept')}, load "
                     f"{earlier['load_before']} → {earlier.get('load_after_timing')}): {runs}.")
    return "\n".join(lines) + "\n"


def _model_lines(r: dict[str, Any]) -> list[str]:
    lines = []
    if "pool" in r:
        p = r["pool"]
        lines += [f"Pool: {p['sentences']:,} real sentences and {p['titles']:,} titles embedded "
                  f"with all-MiniLM-L6-v2 (fp32 on ONNX Runtime) in {p['seconds']} s "
                  f"({p['texts_per_s']}/s, mean {p['mean_tokens']} tokens).", ""]
    if "fidelity" in r:
        f = r["fidelity"]
        nprobes = list(f["real"]["ivf_recall_at_10"])
        lines += ["## The vector model against MiniLM itself", "",
                  f"The KB's first {f['passages']:,} passages embedded for real (title + text, "
                  f"mean {f['mean_tokens']} tokens): {f['passages_per_s']} passages/s, so 1M "
                  f"real passages would take **{f['hours_for_1m_real']} h** here. IVF-flat "
                  f"with nlist {f['ivf_nlist']} on each set, 200 real claims as queries:", "",
                  "| vectors | cosine to real: mean / p5 / min | exact top-10 shared with "
                  "real | " + " | ".join(f"IVF recall@10, nprobe {n}" for n in nprobes) + " |",
                  "|---|---|---|" + "---|" * len(nprobes),
                  "| real MiniLM passages | 1 | 1 | " + " | ".join(
                      str(f["real"]["ivf_recall_at_10"][n]) for n in nprobes) + " |"]
        for weighting in ("tokens", "uniform"):
            m = f[weighting]
            c = m["cosine_to_real"]
            lines.append(f"| model, {weighting} weights | {c['mean']} / {c['p5']} / {c['min']} "
                         f"| {m['exact_top10_overlap_with_real']} | " + " | ".join(
                             str(m["ivf_recall_at_10"][n]) for n in nprobes) + " |")
        lines.append("")
    return lines


def _search_lines(sr: dict[str, Any]) -> list[str]:
    parts = "dense" in sr["configs"][0]  # runs before issue 45 did not time the parts
    split = "exact_top7_overlap_with_reference" in sr["configs"][0]  # after the bf16 encoder
    lines = ["## Search", "",
             f"Index {sr['index']} (memory-mapped: {sr['mapped']}), opened in {sr['open_ms']} "
             f"ms; {sr['queries']} real claims one at a time, k = 7; every configuration "
             "runs each query (end to end, then ranking alone, then ranking + fetching, with "
             "the query vector computed before), in an order rotated query by query, after a "
             "warm pass of all; "
             f"load average {sr['load_before']} at the start, {sr['load_after_timing']} after "
             f"the timed passes; peak RSS {sr['peak_rss_mb']:.0f} MB. The reference: "
             f"{sr['configs'][0]['encoder']}'s query vectors on the exact (flat) index.", "",
             "| encoder | nprobe | **end to end** p50 / p95 ms | query embedding p50 / p95 | "
             "rank p50 / p95 | rank + fetch p50 / p95 | **recall@10** (tie-aware) | "
             "hybrid top 7 = exact index's | hybrid top 7 shared with the reference |"
             + (" dense list alone p50 | lexical list alone p50 |" if parts else "")
             + (" top 7 shared with the reference, both exact |"
                " both on this index (IVF: this nprobe) |" if split else ""),
             "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if parts else "")
             + ("---|---|" if split else "")]
    for row in sr["configs"]:
        e = sr["embed"][row["encoder"]]
        lines.append(
            f"| {row['encoder']} | {row['nprobe']} | **{row['end_to_end']['p50']}** / "
            f"{row['end_to_end']['p95']} | {e['p50']} / {e['p95']} | {row['rank']['p50']} / "
            f"{row['rank']['p95']} | {row['rank_and_fetch']['p50']} / "
            f"{row['rank_and_fetch']['p95']} | **{row['recall_at_10']}** "
            f"({row['recall_at_10_tie_aware']}) | {row['hybrid_top7_equal_to_exact']} of "
            f"{sr['queries']} (overlap {row['hybrid_top7_overlap']}) | "
            f"{row['hybrid_top7_overlap_with_reference']} |"
            + (f" {row['dense']['p50']} | {row['lexical']['p50']} |" if parts else "")
            + (f" {row['exact_top7_overlap_with_reference']} | "
               f"{row.get('ivf_top7_overlap_with_reference', '')} |" if split else ""))
    for key, value in sr.items():
        if key.startswith("cosine_to_") and value:
            lines += ["", f"Query vectors against {key[len('cosine_to_'):]}'s: " + "; ".join(
                f"{name}: mean {v['mean']}, min {v['min']}" for name, v in value.items()) + "."]
    return [*lines, ""]


# ---- driver ---------------------------------------------------------------------------------


def run_stage(name: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--stage", name, "--n", str(args.n),
            "--seed", str(args.seed), "--work", str(args.work), "--queries", str(args.queries),
            "--fidelity", str(args.fidelity), "--model", args.model, "--pool", str(args.pool),
            "--kb", str(args.kb), "--index", args.index,
            "--encoders", *args.encoders, "--nprobes", *map(str, args.nprobes)]
    log(f"stage {name} ...")
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"stage {name} failed ({done.returncode})")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = round(time.perf_counter() - started, 1)
    log(f"stage {name}: {result['wall_s']} s")
    return result


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/e2e"))
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--pool", type=int, default=40_000,
                        help="sentences of the pool (whole documents, seeded); 0: all")
    parser.add_argument("--fidelity", type=int, default=2000,
                        help="passages embedded for real to check the vector model")
    parser.add_argument("--model", choices=("tokens", "uniform"), default="tokens")
    parser.add_argument("--encoders", nargs="+", default=["onnx-fp32", "onnx-int8",
                                                          "torch-fp32"])
    parser.add_argument("--nprobes", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--index", default="auto",
                        help="the KB's index policy (auto: IVF from 100k passages)")
    parser.add_argument("--stages", nargs="+", default=["pool", "fidelity", "build", "search"])
    parser.add_argument("--stage", help=argparse.SUPPRESS)
    parser.add_argument("--kb", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.kb = args.kb or args.work / f"kb_{args.n}"
    stages: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
        "pool": stage_pool, "fidelity": stage_fidelity, "build": stage_build,
        "search": stage_search}
    if args.stage:
        print(json.dumps(stages[args.stage](args)))
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    partial = args.work / f"search_e2e_{args.n}.json"
    result: dict[str, Any] = json.loads(partial.read_text()) if partial.is_file() else {}
    command = " ".join([".venv/bin/python benchmarks/bench_search_e2e.py",
                        *(argv if argv is not None else sys.argv[1:])])
    for name in args.stages:
        shared = args.work / f"{name}_{args.pool}.json"  # the same for every --n
        if name in ("pool", "fidelity") and shared.is_file():
            result[name] = json.loads(shared.read_text())
            continue
        if name == "build":
            import shutil

            shutil.rmtree(args.kb, ignore_errors=True)
            result.pop("earlier_searches", None)
        if name == "search" and "search" in result:  # a rerun: the earlier ones are kept
            result.setdefault("earlier_searches", []).append(result["search"])
        result[name] = run_stage(name, args)
        result[name]["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        result[name]["command"] = command
        if name in ("pool", "fidelity"):
            shared.write_text(json.dumps(result[name], indent=1))
        partial.write_text(json.dumps(result, indent=1))
    result.update({"n": args.n, "seed": args.seed, "cpus": os.cpu_count(),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                   "command": command})
    name = "search_e2e" if args.n == 1_000_000 else f"search_e2e_{args.n}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown(result))
    log(f"wrote {RESULTS / name}.json and .md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
