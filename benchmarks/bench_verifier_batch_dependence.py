"""Does the built-in verifier give a pair the same probabilities whatever it is batched with?

    .venv/bin/python benchmarks/bench_verifier_batch_dependence.py [--n 200]

Scores the first --n pairs of healthver_dev and checkcovid_dev (bench_judge_speed.py's pairs;
made-up ones without the data folder) three ways: each pair alone (batch size 1), all
together in the judge's batches (32), and in batches of 32 in reverse order (other
companions). Reports the largest change of any probability, how many pairs change their
one-passage label (the judge's rule with the verifier's thresholds), and pairs/s at batch
size 32 and 1. Torch's dynamic int8 scales activations per batch tensor: a pair's result
depends on its companions. That is measured with ``Verifier.scoring`` = "batched" (the
behaviour before issue 27). Then, for each batch-independent mode of issue 45 this machine
runs ("onnx_int8": ONNX Runtime's int8 one window a run, what "auto" picks where it is
installed; "bf16": packed bfloat16 on AMX, when forced; "window_scales": torch's int8 with
one activation scale per window, batches of one padded length), one row checks that a pair
gets the same probabilities alone, in batches and with other companions, on one intra-op
thread and two workers (shipped) as on torch's two threads, and as on one thread and one
worker, and how far they are from issue 27's "per_window" scoring (one window at a time).
Writes benchmarks/results/verifier_batch_dependence.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
from bench_judge_speed import pairs as load  # the same pairs as the speed benchmark
from bench_queue import write_results

from medverify.verdict_rules import passage_label
from medverify.verifier import get_verifier
from medverify.verifier.infer import PER_WINDOW_THREADS, WINDOW_WORKERS

ROOT = Path(__file__).resolve().parents[1]
Pairs = list[tuple[str, str]]


def flips(a: np.ndarray, b: np.ndarray, thresholds: tuple[float, float]) -> int:
    return sum(passage_label(x, thresholds) != passage_label(y, thresholds)
               for x, y in zip(a, b, strict=True))


def batched_row(verifier, pairs: Pairs, thresholds: tuple[float, float]) -> dict:
    """Torch's dynamic int8 in batches (before issue 27): alone, batched, other companions."""
    verifier.scoring = "batched"
    started = time.perf_counter()
    alone = verifier.predict(pairs, batch_size=1)
    single_s = time.perf_counter() - started
    started = time.perf_counter()
    batched = verifier.predict(pairs, batch_size=32)
    batch_s = time.perf_counter() - started
    others = verifier.predict(pairs[::-1], batch_size=32)[::-1]
    return {"pairs": len(pairs), "alone_vs_batched": float(np.abs(alone - batched).max()),
            "alone_vs_batched_label_changes": flips(alone, batched, thresholds),
            "batched_vs_others": float(np.abs(batched - others).max()),
            "batched_vs_others_label_changes": flips(batched, others, thresholds),
            "pairs_per_s_batch_32": len(pairs) / batch_s,
            "pairs_per_s_batch_1": len(pairs) / single_s}


def mode_row(verifier, pairs: Pairs, mode: str, per_window: np.ndarray,
             thresholds: tuple[float, float]) -> dict:
    """One batch-independent mode: its scores against themselves in other batches,
    companions, threads and workers (all should be 0), and against one window at a time."""
    verifier.scoring = mode
    shipped = verifier.predict(pairs, batch_size=32)
    variants = {"others": verifier.predict(pairs[::-1], batch_size=32)[::-1],
                "alone": verifier.predict(pairs, batch_size=1)}
    verifier.threads = None  # on torch's threads (2), two workers
    variants["two_threads"] = verifier.predict(pairs, batch_size=32)
    verifier.threads, verifier.workers = PER_WINDOW_THREADS, 1  # one thread, one worker
    variants["one_worker"] = verifier.predict(pairs, batch_size=32)
    verifier.workers = WINDOW_WORKERS
    variants["per_window"] = per_window
    row: dict = {"mode": mode}
    for key, other in variants.items():
        row[key] = float(np.abs(shipped - other).max())
        row[f"{key}_label_changes"] = flips(shipped, other, thresholds)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    verifier = get_verifier()
    thresholds = (verifier.thresholds["support"], verifier.thresholds["contradict"])
    auto = verifier.scoring
    modes = [m for m, enc in (("onnx_int8", verifier.onnx), ("bf16", verifier.bf16),
                              ("window_scales", verifier.int8)) if enc]
    result: dict = {"verifier": verifier.provenance, "load_before": os.getloadavg(),
                    "modes": modes, "sets": {}}
    lines = ["# Verifier: batch dependence of one pair's probabilities", "",
             f"Verifier `{verifier.id}`; `auto` picks `{auto}` on this CPU.", "",
             "Torch's dynamic int8 in batches (before issue 27):", "",
             "| set | pairs | max abs change, alone vs batched | label changes | max abs change, "
             "batched vs other companions | label changes | pairs/s batch 32 | pairs/s batch 1 |",
             "|---|---|---|---|---|---|---|---|"]
    table = ["", "Batch-independent modes (issue 45): max abs change of any probability "
             "(label changes)", "",
             "| set | mode | vs other companions | alone vs batched | 1 thread, 2 workers vs 2 "
             "threads | 2 workers vs 1 worker (1 thread) | vs one window at a time |",
             "|---|---|---|---|---|---|---|"]
    for name, pairs in load(args.n).items():
        row = batched_row(verifier, pairs, thresholds)
        lines.append(f"| {name} | {len(pairs)} | {row['alone_vs_batched']:.4f} | "
                     f"{row['alone_vs_batched_label_changes']} | "
                     f"{row['batched_vs_others']:.4f} | "
                     f"{row['batched_vs_others_label_changes']} | "
                     f"{row['pairs_per_s_batch_32']:.1f} | {row['pairs_per_s_batch_1']:.1f} |")
        verifier.scoring = "per_window"  # issue 27: one window at a time
        per_window = verifier.predict(pairs, batch_size=32)
        row["modes"] = {m: mode_row(verifier, pairs, m, per_window, thresholds) for m in modes}
        for mode, m in row["modes"].items():
            table.append(f"| {name} | {mode} | " + " | ".join(
                f"{m[k]:.2e} ({m[k + '_label_changes']})"
                for k in ("others", "alone", "two_threads", "one_worker", "per_window")) + " |")
        result["sets"][name] = row
    verifier.scoring = auto
    result["load_after"] = os.getloadavg()
    lines += table
    lines += ["", f"Load average before {result['load_before'][0]:.2f}, after "
              f"{result['load_after'][0]:.2f}, on {os.cpu_count()} CPUs. Guarantee (issue 27, "
              "45): every batch-independent column but the last 0 label changes and changes "
              "<= 1e-6."]
    write_results("verifier_batch_dependence", result, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
