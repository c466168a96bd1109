"""Accuracy of the built-in judge with the verifier on one intra-op thread (issue 45, shipped)
against torch's own threads (before), on the four dev sets, in one run.

    .venv/bin/python benchmarks/bench_verifier_threads_eval.py [--limit N]

Judges every pair of checkcovid_dev, citint_dev, healthver_dev and expertqa_val exactly as
``medverify eval pairs --judge builtin`` does (:func:`medverify.evals.pairs.pairs_judge`, quotes
off), once with ``Verifier.threads`` = 1 and once with None (torch's threads), alternating per
file, and writes per file: 3-way macro-F1, the confident precision of FACT/SUPPORTED and of
the other categories (``eval pairs``' confidence), label changes between the two runs, and
pairs/s. Writes benchmarks/results/verifier_threads_eval.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

from medverify.config import Config
from medverify.evals.pairs import (
    judge_pairs,
    load_pairs,
    pairs_judge,
    predicted_label,
    score_pairs,
)
from medverify.files import data_dir
from medverify.verifier.infer import PER_WINDOW_THREADS

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
SETS = ("checkcovid_dev", "citint_dev", "healthver_dev", "expertqa_val")


def summary(scores) -> dict:
    """macro-F1, pairs/s and each category's confident precision of one file."""
    confidence = scores.confidence
    precision = ({name: c.precision for name, c in confidence.categories.items()}
                 if confidence is not None else {})
    return {"macro_f1": scores.macro_f1, "pairs_per_s": scores.pairs_per_second,
            "supported_vs_rest_balanced_accuracy": scores.supported_vs_rest_balanced_accuracy,
            "confident_precision": precision}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    judge = pairs_judge(Config(judge="builtin"), None)
    verifier = judge.verifier  # type: ignore[attr-defined]
    result: dict = {"judge": judge.judge_id, "load_before": os.getloadavg(), "sets": {}}
    lines = ["# Built-in judge on the dev sets: verifier on 1 thread (shipped) vs torch's threads",
             "", "| set | pairs | macro-F1, 1 thread | macro-F1, torch's threads | S vs rest "
             "balanced accuracy, 1 thread | torch's threads | confident "
             "precision, 1 thread | confident precision, torch's threads | label changes | "
             "pairs/s, 1 thread | pairs/s, torch's threads |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in SETS:
        path = data_dir() / "pairs" / f"{name}.jsonl"
        if not path.exists():
            continue
        pairs = load_pairs(path, args.limit)
        runs, labels = {}, {}
        for key, threads in (("one", PER_WINDOW_THREADS), ("torch", None)):
            verifier.threads = threads
            started = time.perf_counter()
            verdicts = asyncio.run(judge_pairs(judge, pairs))
            runs[key] = score_pairs(name, pairs, verdicts, time.perf_counter() - started)
            labels[key] = [predicted_label(v) if v is not None else "ERROR" for v in verdicts]
        verifier.threads = PER_WINDOW_THREADS
        one, torch_run = summary(runs["one"]), summary(runs["torch"])
        changes = sum(a != b for a, b in zip(labels["one"], labels["torch"], strict=True))
        row = {"pairs": len(pairs), "one_thread": one, "torch_threads": torch_run,
               "label_changes": changes}
        result["sets"][name] = row
        lines.append(
            f"| {name} | {row['pairs']} | {_num(one['macro_f1'])} | "
            f"{_num(torch_run['macro_f1'])} | {_num(one['supported_vs_rest_balanced_accuracy'])} | "
            f"{_num(torch_run['supported_vs_rest_balanced_accuracy'])} | "
            f"{_precisions(one)} | {_precisions(torch_run)} | "
            f"{changes} | "
            f"{one['pairs_per_s']:.1f} | {torch_run['pairs_per_s']:.1f} |")
        print(lines[-1], flush=True)
    result["load_after"] = os.getloadavg()
    lines += ["", f"torch's threads: {os.cpu_count()} CPUs; load average before "
              f"{result['load_before'][0]:.2f}, after {result['load_after'][0]:.2f}.", ""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "verifier_threads_eval.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "verifier_threads_eval.md").write_text("\n".join(lines))
    print("\n".join(lines))


def _num(value: float | None) -> str:
    return f"{value:.4f}" if value is not None else "-"


def _precisions(summary_row: dict) -> str:
    return ", ".join(f"{k} {v:.3f}" if v is not None else f"{k} -"
                     for k, v in sorted(summary_row["confident_precision"].items()))


if __name__ == "__main__":
    main()
