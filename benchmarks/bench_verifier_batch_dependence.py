"""Does the built-in verifier give a pair the same probabilities whatever it is batched with?

    .venv/bin/python benchmarks/bench_verifier_batch_dependence.py [--n 200]

Scores the first --n pairs of healthver_dev and checkcovid_dev (bench_judge_speed.py's pairs;
made-up ones without the data folder) three ways: each pair alone (batch size 1), all
together in the judge's batches (32), and in batches of 32 in reverse order (other
companions). Reports the largest change of
any probability, how many pairs change their one-passage label (the judge's rule with the
verifier's thresholds), and pairs/s at batch size 32 and 1. The shipped model is dynamically
quantised to int8, which scales activations per batch tensor: a pair's result depends on
its companions. That is measured with ``Verifier.per_window`` switched off (the behaviour
before issue 27); the last column checks that with it on (the default for an int8 model)
a pair gets the same probabilities whatever it is batched with, alone or in batches, and
(issue 45) the same on one intra-op thread (the shipped ``Verifier.threads``) as on two.
Writes benchmarks/results/verifier_batch_dependence.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from bench_judge_speed import pairs as load  # the same pairs as the speed benchmark

from medverify.verdict_rules import passage_label
from medverify.verifier import get_verifier
from medverify.verifier.infer import PER_WINDOW_THREADS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    args = parser.parse_args()
    verifier = get_verifier()
    thresholds = (verifier.thresholds["support"], verifier.thresholds["contradict"])
    result: dict = {"verifier": verifier.id, "sets": {}}
    lines = ["# Verifier: batch dependence of one pair's probabilities", "",
             "| set | pairs | max abs change, alone vs batched | label changes | max abs change, "
             "batched vs other companions | label changes | pairs/s batch 32 | pairs/s batch 1 | "
             "per_window on: max abs change vs other companions | per_window on: alone vs "
             "batched | label changes | per_window, 1 thread vs 2 threads | label changes |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, pairs in load(args.n).items():
        verifier.per_window = False  # the behaviour before issue 27: batched windows
        started = time.perf_counter()
        alone = verifier.predict(pairs, batch_size=1)
        single_s = time.perf_counter() - started
        started = time.perf_counter()
        batched = verifier.predict(pairs, batch_size=32)
        batch_s = time.perf_counter() - started
        others = verifier.predict(pairs[::-1], batch_size=32)[::-1]
        verifier.per_window = True  # shipped: one window at a time, on one thread
        shipped = verifier.predict(pairs, batch_size=32)
        fixed = float(np.abs(shipped - verifier.predict(pairs[::-1], batch_size=32)[::-1]).max())
        shipped_alone = float(np.abs(shipped - verifier.predict(pairs, batch_size=1)).max())
        verifier.threads = None  # per window on torch's threads (2): before issue 45
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
               "one_vs_two_threads_label_changes": flips(shipped, two_threads)}
        result["sets"][name] = row
        lines.append(f"| {name} | {len(pairs)} | {row['alone_vs_batched']:.4f} | "
                     f"{row['alone_vs_batched_label_changes']} | {row['batched_vs_others']:.4f} | "
                     f"{row['batched_vs_others_label_changes']} | "
                     f"{row['pairs_per_s_batch_32']:.1f} | {row['pairs_per_s_batch_1']:.1f} | "
                     f"{fixed:.2e} | {shipped_alone:.2e} | {row['per_window_label_changes']} | "
                     f"{row['one_vs_two_threads']:.2e} | "
                     f"{row['one_vs_two_threads_label_changes']} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "verifier_batch_dependence.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "verifier_batch_dependence.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
