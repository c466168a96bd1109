"""Query embedding latency of all-MiniLM-L6-v2 on CPU, fp32 vs int8 (issue 19's target:
p50 <= 10 ms per query).

One process; 200 real claims (Check-COVID and Citation-Integrity dev queries, as
bench_kb_scale.py uses) embedded one at a time through ``SentenceTransformerEmbedder.embed``
(a single query runs on one torch thread, as search does), fp32 and int8 alternating
query by query so they share the machine's load (one-thread and all-thread runs in
separate passes of each round: torch's idle OpenMP threads spin after a multi-thread
run); 20 warm-up queries each first. Rows
"2 threads" run the same with both threads (search keeps one for a single query:
``medverify.kb.sentence_embed.SMALL_INPUT``, because two threads collapse under load). Also the
cosine of each query's int8 (and ONNX Runtime, when installed: ``embed_runtime = "onnx"``)
vector to its fp32 torch vector.

    .venv/bin/python benchmarks/bench_query_embedding.py [--queries 200] [--rounds 3]

Writes benchmarks/results/query_embedding.json and query_embedding.md.
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
    fp32 = embedders["fp32"].embed(queries)
    cosine = {name: np.sum(fp32 * embedder.embed(queries), axis=1)
              for name, embedder in embedders.items() if name != "fp32"}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    queries = claims(args.queries)
    embedders = {"fp32": minilm("fp32", "cpu"), "int8": minilm("int8", "cpu")}
    if importlib.util.find_spec("onnxruntime") is not None:
        embedders["fp32 onnx"] = minilm("fp32", "cpu", "onnx")
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
            for two in (False, True):
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
    (RESULTS / "query_embedding.json").write_text(json.dumps(out, indent=2) + "\n", "utf-8")
    lines = [
        "# Query embedding latency, all-MiniLM-L6-v2 on CPU",
        "",
        f"`python benchmarks/bench_query_embedding.py --queries {args.queries} --rounds "
        f"{args.rounds}`: {len(queries)} real claims (mean {out['mean_tokens']:.1f} tokens "
        f"with specials), one query at a time, fp32 and int8, one torch thread (as search "
        f"runs a query) and all, configurations alternating query by query (one-thread "
        f"and two-thread configurations in separate passes); {args.rounds} rounds; "
        f"load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after ({out['cpus']} CPUs, shared).",
        "",
        "| precision, torch threads | p50 ms | p95 ms | mean ms | p50 Check-COVID | "
        "p50 Citation-Integrity |",
        "|---|---|---|---|---|---|",
    ]
    for name, lat in out["latency_ms"].items():
        lines.append(f"| {name} | {lat['p50']} | {lat['p95']} | {lat['mean']} | "
                     f"{lat['p50_checkcovid']} | {lat['p50_citint']} |")
    lines += [""] + [f"{name} query vectors vs fp32 (torch): cosine mean {c['mean']}, "
                     f"min {c['min']}." for name, c in out["cosine_to_fp32"].items()]
    (RESULTS / "query_embedding.md").write_text("\n".join(lines) + "\n", "utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
