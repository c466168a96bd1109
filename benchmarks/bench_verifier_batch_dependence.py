"""Does the built-in verifier give a pair the same probabilities whatever it is batched with?

    .venv/bin/python benchmarks/bench_verifier_batch_dependence.py [--n 200]

Scores the first --n pairs of healthver_dev and checkcovid_dev (bench_judge_speed.py's pairs;
made-up ones without the data folder) three ways: each pair alone (batch size 1), all
together in the judge's batches (32), and in batches of 32 in reverse order (other
companions). Reports the largest change of
any probability, how many pairs change their one-passage label (the judge's rule with the
verifier's thresholds), and pairs/s at batch size 32 and 1. The shipped model is dynamically
quantised to int8, which scales activations per batch tensor: a pair's result depends on
its companions. That is measured with ``Verifier.scoring`` = "batched" (the behaviour
before issue 27); the last columns check that with the shipped "window_scales" (issue 45:
batches of one padded length, one activation scale per window) a pair gets the same
probabilities whatever it is batched with, alone or in batches, the same on one intra-op
thread (the shipped ``Verifier.threads``) as on two, and how far they are from issue 27's
"per_window" scoring (one window at a time).
Writes benchmarks/results/verifier_batch_dependence.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
from bench_judge_speed import pairs as load  # the same pairs as the speed benchmark

from medverify.verdict_rules import passage_label
from medverify.verifier import get_verifier
from medverify.verifier.infer import PER_WINDOW_THREADS

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = "window_scales"
RESULTS = ROOT / "benchmarks" / "results"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    verifier = get_verifier()
    thresholds = (verifier.thresholds["support"], verifier.thresholds["contradict"])
    assert verifier.scoring == SHIPPED
    result: dict = {"verifier": verifier.id, "load_before": os.getloadavg(), "sets": {}}
    lines = ["# Verifier: batch dependence of one pair's probabilities", "",
             "| set | pairs | max abs change, alone vs batched | label changes | max abs change, "
             "batched vs other companions | label changes | pairs/s batch 32 | pairs/s batch 1 | "
             "shipped: max abs change vs other companions | shipped: alone vs "
             "batched | label changes | shipped, 1 thread vs 2 threads | label changes | "
             "shipped vs one window at a time | label changes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, pairs in load(args.n).items():
        verifier.scoring = "batched"  # the behaviour before issue 27: batched windows
        started = time.perf_counter()
        alone = verifier.predict(pairs, batch_size=1)
        single_s = time.perf_counter() - started
        started = time.perf_counter()
        batched = verifier.predict(pairs, batch_size=32)
        batch_s = time.perf_counter() - started
        others = verifier.predict(pairs[::-1], batch_size=32)[::-1]
        verifier.scoring = "per_window"  # issue 27: one window at a time
        per_window = verifier.predict(pairs, batch_size=32)
        verifier.scoring = SHIPPED  # per-window scales in batches
        shipped = verifier.predict(pairs, batch_size=32)
        fixed = float(np.abs(shipped - verifier.predict(pairs[::-1], batch_size=32)[::-1]).max())
        shipped_alone = float(np.abs(shipped - verifier.predict(pairs, batch_size=1)).max())
        verifier.threads = None  # on torch's threads (2)
        two_threads = verifier.predict(pairs, batch_size=32)
        verifier.threads = PER_WINDOW_THREADS

        def flips(a: np.ndarray, b: np.ndarray) -> int:
            return sum(passage_label(x, thresholds) != passage_label(y, thresholds)
                       for x, y in zip(a, b, strict=True))

        row = {"pairs": len(pairs),
               "alone_vs_batched": float(np.abs(alone - batched).max()),
               "alone_vs_batched_label_changes": flips(alone, batched),
               "batched_vs_others": float(np.abs(batched - others).max()),
               "batched_vs_others_label_changes": flips(batched, others),
               "pairs_per_s_batch_32": len(pairs) / batch_s,
               "pairs_per_s_batch_1": len(pairs) / single_s,
               "per_window_batched_vs_others": fixed,
               "per_window_alone_vs_batched": shipped_alone,
               "per_window_label_changes": flips(shipped, verifier.predict(pairs[::-1])[::-1]),
               "one_vs_two_threads": float(np.abs(shipped - two_threads).max()),
               "one_vs_two_threads_label_changes": flips(shipped, two_threads),
               "vs_per_window": float(np.abs(shipped - per_window).max()),
               "vs_per_window_label_changes": flips(shipped, per_window)}
        result["sets"][name] = row
        lines.append(f"| {name} | {len(pairs)} | {row['alone_vs_batched']:.4f} | "
                     f"{row['alone_vs_batched_label_changes']} | {row['batched_vs_others']:.4f} | "
                     f"{row['batched_vs_others_label_changes']} | "
                     f"{row['pairs_per_s_batch_32']:.1f} | {row['pairs_per_s_batch_1']:.1f} | "
                     f"{fixed:.2e} | {shipped_alone:.2e} | {row['per_window_label_changes']} | "
                     f"{row['one_vs_two_threads']:.2e} | "
                     f"{row['one_vs_two_threads_label_changes']} | "
                     f"{row['vs_per_window']:.2e} | {row['vs_per_window_label_changes']} |")
    result["load_after"] = os.getloadavg()
    lines += ["", f"Load average before {result['load_before'][0]:.2f}, after "
              f"{result['load_after'][0]:.2f}, on {os.cpu_count()} CPUs. Guarantee (issue 27, "
              "45): the shipped columns 0 label changes and changes <= 1e-6."]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "verifier_batch_dependence.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "verifier_batch_dependence.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
