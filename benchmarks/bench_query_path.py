"""The query encoder's path, profiled, and cheaper query encoders against fp32 (issue 45,
item 2: "a query path under 10 ms at 1M").

One process, one thread (search embeds a query on one). 200 real claims (Check-COVID and
Citation-Integrity dev, as bench_query_embedding.py) one at a time:

1. **Stages** of ``SentenceTransformerEmbedder.embed([q])`` on ONNX Runtime fp32: the
   tokenizer (windows of ids, no padding: one query is one window of its own length),
   building the id and mask arrays, the session run, the normalisation, and the whole call.
2. **Encoders**, each query through every one in an order rotated query by query (the
   machine is shared): ``onnx fp32`` (the export the KB uses, ``embed_runtime = "onnx"``);
   ``onnx fp32 fused`` (the model exported with eager attention and ONNX Runtime's
   transformer optimizer: Attention, SkipLayerNormalization, BiasGelu fused; fp32, the same
   vectors to ~1e-7); ``int8 dynamic`` (every MatMul, per-channel weights: the encoder
   bench_search_e2e.py measured); ``int8 smooth a=0.8, FFN-down fp32`` and ``int8 smooth
   a=0.9, all`` (:mod:`medverify.kb.onnx_quant`, calibrated on ``--calibration`` training
   claims of each set); ``bf16`` (the default ``embed_runtime = "auto"`` on a CPU with AMX:
   :mod:`medverify.kb.bf16_encoder`; left out without AMX). Latency p50 / p95 and the
   cosine of each query vector to fp32's, and the CPU time of the thread (``thread_time``:
   less inflated than wall time on a loaded machine, but not immune: shared caches and
   cores); ``torch fp32`` (the default before ``auto``). ``--encoders`` picks some (the
   first one listed must be ``onnx fp32``, the reference).
3. **Quality** (``--quality``): recall@5 and MRR of the dev claims on the Check-COVID and
   Citation-Integrity corpora (``eval retrieval``'s data and scoring), the documents
   embedded once in fp32 (the KB's embedder) and the queries, one at a time, by each
   encoder; hybrid and dense. The issue's bar: recall@5 within 0.005 of fp32.

    .venv/bin/python benchmarks/bench_query_path.py [--queries 200] [--quality]
        [--encoders "onnx fp32" bf16 ...]

Writes benchmarks/results/query_path.json and .md.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
RESULTS = ROOT / "benchmarks" / "results"

from bench_query_embedding import RETRIEVAL, claims  # noqa: E402

from medverify.kb import onnx_quant, onnx_runtime  # noqa: E402
from medverify.kb.embed import minilm  # noqa: E402
from medverify.kb.embed_base import normalize  # noqa: E402
from medverify.kb.sentence_embed import _padded  # noqa: E402


def pct(values: list[float]) -> dict[str, float]:
    return {"p50": round(float(np.percentile(values, 50)), 2),
            "p95": round(float(np.percentile(values, 95)), 2),
            "mean": round(float(np.mean(values)), 2)}


def calibration(embedder: Any, per_set: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Padded batches of training claims of both sets (never the dev claims measured)."""
    texts: list[str] = []
    for name in ("checkcovid", "citint"):
        path = RETRIEVAL / name / "queries_train.jsonl"
        texts += [json.loads(line)["query"] for line in path.read_text("utf-8").splitlines()
                  if line.strip()][:per_set]
    windows = embedder.tokenizer.windows(texts, embedder.window)[0]
    size = onnx_quant.CALIBRATION_BATCH
    return [_padded(windows[i:i + size]) for i in range(0, len(windows), size)]


def fused_fp32(embedder: Any, target: Path) -> Path:
    """The model exported with eager attention, then ONNX Runtime's BERT fusions."""
    from onnxruntime.transformers import optimizer

    if target.is_file():
        return target
    model = copy.deepcopy(embedder._model)
    model[0].auto_model.set_attn_implementation("eager")
    plain = target.with_suffix(".plain.onnx")
    onnx_runtime.export(model, plain)
    config = model[0].auto_model.config
    fused = optimizer.optimize_model(str(plain), model_type="bert",
                                     num_heads=config.num_attention_heads,
                                     hidden_size=config.hidden_size, opt_level=1)
    fused.save_model_to_file(str(target))
    plain.unlink()
    return target


INT8: dict[str, tuple[float | None, Callable[[str], bool]]] = {
    "int8 dynamic": (None, lambda name: False),
    "int8 smooth a=0.8, FFN-down fp32": (0.8, onnx_quant.ffn_down),
    "int8 smooth a=0.9, all": (0.9, lambda name: False)}
ENCODERS = ("onnx fp32", "onnx fp32 fused", *INT8, "bf16", "torch fp32")


def encoder_files(embedder: Any, work: Path, per_set: int,
                  names: tuple[str, ...] = ENCODERS) -> dict[str, Path]:
    """The ONNX file of each encoder of ``names`` that runs on one (built into ``work``
    once)."""
    work.mkdir(parents=True, exist_ok=True)
    files = {"onnx fp32": embedder._onnx.path}
    if "onnx fp32 fused" in names:
        files["onnx fp32 fused"] = fused_fp32(embedder, work / "fused.onnx")
    batches = calibration(embedder, per_set) if set(INT8) & set(names) else []
    for i, (name, (alpha, keep)) in enumerate(INT8.items()):
        if name not in names:
            continue
        target = work / f"int8-{i}-{per_set}.onnx"
        if not target.is_file():
            onnx_quant.build(embedder._model, target, batches, alpha, keep)
        files[name] = target
    return files


def bf16_embedder() -> Any:
    """The default embedder (``embed_runtime = "auto"``) when its queries run in bfloat16
    (a CPU with AMX); None otherwise."""
    embedder = minilm("fp32", "cpu", "auto")
    return embedder if embedder.query_runtime == "bf16" else None


def with_file(embedder: Any, path: Path) -> Any:
    """The embedder with its ONNX session on ``path`` (its tokenizer and windows kept)."""
    if path == embedder._onnx.path:
        return embedder
    other = copy.copy(embedder)
    other._onnx = onnx_runtime.OnnxEncoder(path)
    return other


def stages(embedder: Any, queries: list[str]) -> dict[str, dict[str, float]]:
    """Each stage of one query's embedding, timed separately, query by query."""
    session = embedder._onnx.session(1)
    times: dict[str, list[float]] = {k: [] for k in ("tokenize", "arrays", "session run",
                                                     "normalize", "embed() whole")}
    for query in queries:
        started = time.perf_counter()
        windows = embedder.tokenizer.windows([query], embedder.window)[0]
        tokenized = time.perf_counter()
        ids, mask = _padded(windows)
        arrays = time.perf_counter()
        [raw] = session.run(None, {"ids": ids, "mask": mask})
        ran = time.perf_counter()
        normalize(np.asarray(raw, dtype=np.float32))
        done = time.perf_counter()
        embedder.embed([query])
        whole = time.perf_counter()
        for key, value in zip(times, (tokenized - started, arrays - tokenized, ran - arrays,
                                      done - ran, whole - done), strict=True):
            times[key].append(1000 * value)
    return {key: pct(values) for key, values in times.items()}


def latency(encoders: dict[str, Any], queries: list[str], rounds: int) -> dict[str, Any]:
    """Each query through every encoder (rotated); per encoder p50/p95 and cosine to the
    first encoder's vectors."""
    names = list(encoders)
    times: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}  # this thread's CPU time
    vectors: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for query in queries[:20]:
        for name in names:
            encoders[name].embed([query])
    for r in range(rounds):
        for i, query in enumerate(queries):
            for name in names[i % len(names):] + names[:i % len(names)]:
                started, on_cpu = time.perf_counter(), time.thread_time()
                vector = encoders[name].embed([query])
                times[name].append(1000 * (time.perf_counter() - started))
                cpu[name].append(1000 * (time.thread_time() - on_cpu))
                if r == 0:
                    vectors[name].append(vector[0])
    first = np.asarray(vectors[names[0]])
    out = {}
    for name in names:
        cosine = np.sum(np.asarray(vectors[name]) * first, axis=1)
        out[name] = {**pct(times[name]), "cpu": pct(cpu[name]),
                     "cosine_mean": round(float(cosine.mean()), 6),
                     "cosine_p5": round(float(np.percentile(cosine, 5)), 6),
                     "cosine_min": round(float(cosine.min()), 6)}
    return out


class OneAtATime:
    """An embedder that embeds each text alone (as search embeds a query), so a batch of
    queries gets the vectors single queries get (dynamic int8 scales a whole batch)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.id, self.dim = inner, inner.id, inner.dim
        self.tokenizer, self.precision = inner.tokenizer, inner.precision

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.concatenate([self.inner.embed([t]) for t in texts])


def quality(encoders: dict[str, Any], work: Path) -> dict[str, Any]:
    """recall@5 / MRR on each set's dev claims: documents in fp32, queries per encoder."""
    from medverify.config import KBSettings
    from medverify.evals.retrieval import build_kb, load_queries, score_mode

    fp32 = next(iter(encoders.values()))
    out: dict[str, Any] = {}
    for name in ("checkcovid", "citint"):
        queries = load_queries(RETRIEVAL / name / "queries_dev.jsonl")
        settings = KBSettings(embed_runtime="onnx")
        with build_kb(RETRIEVAL / name / "corpus.jsonl", work / f"kb-{name}", settings,
                      fp32) as kb:
            rows = {}
            for label, encoder in encoders.items():
                kb._embedder = OneAtATime(encoder)
                rows[label] = {mode: {"recall_at_5": round(r.recall[5], 4),
                                      "recall_at_1": round(r.recall[1], 4),
                                      "mrr": round(r.mrr, 4)}
                               for mode in ("hybrid", "dense")
                               for r in [score_mode(kb, queries, mode, (1, 5, 10))]}
                print(f"{name} {label}: {rows[label]}", file=sys.stderr, flush=True)
            out[name] = {"queries": len(queries), "encoders": rows}
    return out


def markdown(out: dict[str, Any]) -> str:
    lines = ["# The query path: stages, and cheaper query encoders against fp32", "",
             f"`{out['command']}` ({out['date']}): {out['queries']} real dev claims (mean "
             f"{out['mean_tokens']} tokens with [CLS] and [SEP]), one at a time, one thread; "
             f"load average {out['load_before']} before, {out['load_after']} after "
             f"({out['cpus']} CPUs, shared with other jobs: absolute times are inflated, "
             "compare within the run). Encoders rotated query by query.", "",
             "## Stages of one query on ONNX Runtime fp32", "", "| stage | p50 ms | p95 ms |",
             "|---|---|---|"]
    lines += [f"| {k} | {v['p50']} | {v['p95']} |" for k, v in out["stages"].items()]
    lines += ["", "## Encoders", "",
              "| encoder | p50 ms | p95 ms | mean ms | p50 vs fp32 | CPU ms of the thread p50 "
              "/ p95 | CPU p50 vs fp32 | cosine to fp32: mean / p5 / min |",
              "|---|---|---|---|---|---|---|---|"]
    base = next(iter(out["latency"].values()))
    for name, v in out["latency"].items():
        c = v.get("cpu", {"p50": float("nan"), "p95": float("nan")})
        lines.append(f"| {name} | {v['p50']} | {v['p95']} | {v['mean']} | "
                     f"{base['p50'] / v['p50']:.2f}x | {c['p50']} / {c['p95']} | "
                     f"{base.get('cpu', c)['p50'] / c['p50']:.2f}x | {v['cosine_mean']} / "
                     f"{v['cosine_p5']} / {v['cosine_min']} |")
    if "quality" in out:
        lines += ["", "## Retrieval quality (documents fp32, queries per encoder)", "",
                  "| set | encoder | hybrid recall@5 | hybrid MRR | dense recall@5 | "
                  "dense MRR | hybrid recall@5 vs fp32 |", "|---|---|---|---|---|---|---|"]
        for name, q in out["quality"].items():
            rows = q["encoders"]
            ref = next(iter(rows.values()))["hybrid"]["recall_at_5"]
            for label, r in rows.items():
                lines.append(f"| {name} ({q['queries']} claims) | {label} | "
                             f"{r['hybrid']['recall_at_5']} | {r['hybrid']['mrr']} | "
                             f"{r['dense']['recall_at_5']} | {r['dense']['mrr']} | "
                             f"{r['hybrid']['recall_at_5'] - ref:+.4f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--calibration", type=int, default=300,
                        help="training claims of each set to calibrate the int8 encoders")
    parser.add_argument("--work", type=Path, default=Path("/tmp/query_path"))
    parser.add_argument("--quality", action="store_true")
    parser.add_argument("--encoders", nargs="+", choices=ENCODERS, default=list(ENCODERS))
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    queries = claims(args.queries)
    fp32 = minilm("fp32", "cpu", "onnx")
    names = ("onnx fp32", *(n for n in args.encoders if n != "onnx fp32"))
    files = encoder_files(fp32, args.work, args.calibration, names)
    encoders = {name: with_file(fp32, path) for name, path in files.items()}
    bf16 = bf16_embedder() if "bf16" in names else None
    if bf16 is not None:
        encoders["bf16"] = bf16
    if "torch fp32" in names:
        encoders["torch fp32"] = minilm("fp32", "cpu", "torch")
    elif "bf16" in names:
        print("bf16: this CPU has no AMX bfloat16; left out", file=sys.stderr)
    load_before = round(os.getloadavg()[0], 2)
    out: dict[str, Any] = {
        "queries": len(queries), "cpus": os.cpu_count(), "load_before": load_before,
        "mean_tokens": round(float(np.mean([len(w) for w in fp32.tokenizer.windows(
            queries, fp32.window)[0]])), 1),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join([".venv/bin/python benchmarks/bench_query_path.py",
                             *(argv if argv is not None else sys.argv[1:])])}
    out["stages"] = stages(fp32, queries)
    out["latency"] = latency(encoders, queries, args.rounds)
    out["load_after"] = round(os.getloadavg()[0], 2)
    if args.quality:
        out["quality"] = quality(encoders, args.work)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "query_path.json").write_text(json.dumps(out, indent=1) + "\n", "utf-8")
    (RESULTS / "query_path.md").write_text(markdown(out), "utf-8")
    print(markdown(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
