"""Query embedding latency of all-MiniLM-L6-v2 on CPU: torch fp32 vs int8, ONNX Runtime
fp32 and the default ``embed_runtime = "auto"`` (issue 19's target: p50 <= 10 ms per query).

One process; 200 real claims (Check-COVID and Citation-Integrity dev queries, as
bench_kb_scale.py uses) embedded one at a time through ``SentenceTransformerEmbedder.embed``
(a single query runs on one torch thread, as search does), the configurations alternating
query by query so they share the machine's load (one-thread and all-thread runs in
separate passes of each round: torch's idle OpenMP threads spin after a multi-thread
run); 20 warm-up queries each first. Rows
"2 threads" run the same with both threads (search keeps one for a single query:
``medverify.kb.sentence_embed.SMALL_INPUT``, because two threads collapse under load). Also
the cosine of each query's int8 (and ONNX Runtime, when installed: ``embed_runtime =
"onnx"``) vector to its fp32 torch vector, each query embedded alone. ``fp32`` is torch's
runtime (``embed_runtime = "torch"``); ``fp32 auto (X)`` is the default runtime, X what runs
its queries on this machine (bf16 on a CPU with AMX, else onnx where ONNX Runtime is
installed, else torch); in the two-thread rows a call is not query-sized, so ``auto`` runs
it on torch. Each row's p50 is also given as a ratio to fp32's in the same pass.

    .venv/bin/python benchmarks/bench_query_embedding.py [--queries 200] [--rounds 3]
        [--configs fp32 "fp32 auto" ...] [--no-two-threads] [--out query_embedding]

Writes benchmarks/results/<out>.json and <out>.md (default query_embedding).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medverify.files import data_dir
from medverify.kb import sentence_embed as embed_module
from medverify.kb.embed import minilm

ROOT = Path(__file__).resolve().parents[1]
RETRIEVAL = data_dir() / "retrieval"
RESULTS = ROOT / "benchmarks" / "results"


def claims(n: int) -> list[str]:
    out: list[str] = []
    for name in ("checkcovid", "citint"):
        path = RETRIEVAL / name / "queries_dev.jsonl"
        out += [json.loads(line)["query"] for line in path.read_text("utf-8").splitlines()
                if line.strip()][: n // 2]
    return out[:n]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def summarize(queries: list[str], rounds: int, embedders: dict[str, Any],
              times: dict[str, list[float]], load_before: tuple[float, ...],
              load_after: tuple[float, ...]) -> dict[str, Any]:
    """The results: latency per configuration (overall and per data set), the cosine of
    each configuration's query vectors to fp32's, the mean token count."""
    half = len(queries) // 2
    # one query per call, as search embeds them (a batch would not take auto's query path)
    vectors = {name: np.concatenate([embedder.embed([q]) for q in queries])
               for name, embedder in embedders.items()}
    cosine = {name: np.sum(vectors["fp32"] * v, axis=1)
              for name, v in vectors.items() if name != "fp32"}
    tokens = [len(w) for w in embedders["fp32"].forward_throughput_input(queries)]
    return {
        "queries": len(queries), "rounds": rounds, "cpus": os.cpu_count(),
        "mean_tokens": statistics.mean(tokens),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "latency_ms": {name: {"p50": round(percentile(v, 50), 2),
                              "p95": round(percentile(v, 95), 2),
                              "mean": round(statistics.mean(v), 2),
                              # the first half of the queries are Check-COVID's, the rest
                              # Citation-Integrity's (longer); each round in that order
                              "p50_checkcovid": round(percentile(
                                  [t for i, t in enumerate(v) if i % len(queries) < half],
                                  50), 2),
                              "p50_citint": round(percentile(
                                  [t for i, t in enumerate(v) if i % len(queries) >= half],
                                  50), 2)}
                       for name, v in times.items()},
        "cosine_to_fp32": {name: {"mean": round(float(c.mean()), 7),
                                  "min": round(float(c.min()), 7)}
                           for name, c in cosine.items()},
    }


CONFIGS = ("fp32", "int8", "fp32 onnx", "fp32 auto")  # fp32 (torch) is the reference


def build(configs: list[str]) -> dict[str, Any]:
    """The embedders of ``configs`` (ONNX Runtime's left out where it is not installed),
    ``fp32 auto`` labelled with what runs its queries."""
    onnx = importlib.util.find_spec("onnxruntime") is not None
    embedders: dict[str, Any] = {"fp32": minilm("fp32", "cpu", "torch")}
    for name in configs:
        if name == "int8":
            embedders[name] = minilm("int8", "cpu", "torch")
        elif name == "fp32 onnx" and onnx:
            embedders[name] = minilm("fp32", "cpu", "onnx")
        elif name == "fp32 auto":
            auto = minilm("fp32", "cpu", "auto")
            embedders[f"fp32 auto ({auto.query_runtime})"] = auto
    return embedders


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS),
                        help="what to run besides fp32 (torch), the reference")
    parser.add_argument("--two-threads", action=argparse.BooleanOptionalAction, default=True,
                        help="also the passes with all torch threads")
    parser.add_argument("--out", default="query_embedding",
                        help="the results' file name, without .json / .md")
    args = parser.parse_args()
    queries = claims(args.queries)
    embedders = build(args.configs)
    for embedder in embedders.values():
        for query in queries[:20]:
            embedder.embed([query])
    times: dict[str, list[float]] = {}
    load_before = os.getloadavg()
    small, threads = embed_module.SMALL_INPUT, torch.get_num_threads()
    try:
        for _ in range(args.rounds):
            # one thread and two in separate passes: after a two-thread run, torch's idle
            # OpenMP thread spins for a while and would slow the next one-thread query
            for two in (False, True) if args.two_threads else (False,):
                embed_module.SMALL_INPUT = 0 if two else small
                torch.set_num_threads(threads)
                for query in queries:
                    for name, embedder in embedders.items():
                        label = f"{name}, {threads} threads" if two else f"{name}, 1 thread"
                        started = time.perf_counter()
                        embedder.embed([query])
                        times.setdefault(label, []).append(
                            1000 * (time.perf_counter() - started))
    finally:
        embed_module.SMALL_INPUT = small
        torch.set_num_threads(threads)
    load_after = os.getloadavg()
    out = summarize(queries, args.rounds, embedders, times, load_before, load_after)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out["command"] = command(args)
    (RESULTS / f"{args.out}.json").write_text(json.dumps(out, indent=2) + "\n", "utf-8")
    passes = " (one-thread and two-thread configurations in separate passes)"
    lines = [
        "# Query embedding latency, all-MiniLM-L6-v2 on CPU",
        "",
        f"`{out['command']}`: {len(queries)} real claims (mean {out['mean_tokens']:.1f} "
        f"tokens with specials), one query at a time, {', '.join(embedders)}, one torch "
        f"thread (as search runs a query){' and all' if args.two_threads else ''}, "
        f"configurations alternating query by query"
        f"{passes if args.two_threads else ''}; "
        f"{args.rounds} rounds; "
        f"load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after ({out['cpus']} CPUs, shared).",
        "",
        "| configuration, torch threads | p50 ms | p50 / fp32's | p95 ms | mean ms | "
        "p50 Check-COVID | p50 Citation-Integrity |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, lat in out["latency_ms"].items():
        reference = out["latency_ms"][name.replace(name.split(",")[0], "fp32", 1)]["p50"]
        lines.append(f"| {name} | {lat['p50']} | {lat['p50'] / reference:.3f} | "
                     f"{lat['p95']} | {lat['mean']} | {lat['p50_checkcovid']} | "
                     f"{lat['p50_citint']} |")
    lines += [""] + [f"{name} query vectors vs fp32 (torch): cosine mean {c['mean']}, "
                     f"min {c['min']}." for name, c in out["cosine_to_fp32"].items()]
    (RESULTS / f"{args.out}.md").write_text("\n".join(lines) + "\n", "utf-8")
    print("\n".join(lines))


def command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run."""
    configs = " ".join(f'"{c}"' if " " in c else c for c in args.configs)
    return (f"python benchmarks/bench_query_embedding.py --queries {args.queries} "
            f"--rounds {args.rounds} --configs {configs}"
            f"{'' if args.two_threads else ' --no-two-threads'} --out {args.out}")


if __name__ == "__main__":
    main()
