"""Accuracy of the built-in judge in one verifier scoring mode (new) against another (old),
on the four dev sets, in one run. By default int8 with per-window activation scales in
batches (issue 45) against one window at a time (issue 27); ``--new bf16 --old
window_scales`` compares the bfloat16 scoring (AMX CPUs) with the int8 one; ``--new
onnx_int8`` ONNX Runtime's int8, one window a run.

    .venv/bin/python benchmarks/bench_verifier_int8_batched.py [--limit N]
    .venv/bin/python benchmarks/bench_verifier_int8_batched.py --new bf16 --old window_scales

Judges every pair of checkcovid_dev, citint_dev, healthver_dev and expertqa_val exactly as
``medverify eval pairs --judge builtin`` does (the configured built-in judge, quotes off),
once by a judge whose verifier scores in mode --new and once by one in mode --old (each with
the calibration fitted for its own arithmetic, or none), alternating per file, and writes
per file: 3-way macro-F1 (SUPPORTED-vs-rest balanced accuracy for 2-way files), the
difference with its 95 % paired bootstrap interval (1,000 resamples of the pairs, seeded:
the noise a bar such as "within 0.005" has to be read against), the confident precision
of each category (``eval pairs``' confidence), their differences, label changes between
the two runs, and pairs/s. The load average is recorded. Writes
benchmarks/results/verifier_int8_batched.{json,md} (the default pair of modes) or
verifier_<new>_vs_<old>.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import time

import numpy as np
from bench_judge_speed import cpu_model
from bench_queue import write_results
from bench_verifier_threads_eval import SETS, summary

from medverify.config import Config
from medverify.evals.pairs import (
    ERROR,
    JUDGMENT_ERROR,
    THREE_WAY,
    judge_pairs,
    load_pairs,
    predicted_label,
    score_pairs,
)
from medverify.files import data_dir
from medverify.judge.builtin import BuiltinJudge
from medverify.stats import percentile_ci
from medverify.verifier.infer import Verifier
from medverify.verifier.metrics import classification_metrics, supported_vs_rest

MODES = [("new", "window_scales"), ("old", "per_window")]  # set from the arguments


def mode_judges(config: Config) -> dict[str, BuiltinJudge]:
    """One judge per scoring mode, each on its own verifier loaded in that mode: the judge
    picks its calibration by the verifier's ``scores_id`` when it is made, so switching a
    loaded verifier's mode would score one arithmetic with another's calibration."""
    options = BuiltinJudge.config_options(config)
    options["quotes"] = False  # as pairs_judge: labels never depend on the quote
    path = options.pop("path")
    return {key: BuiltinJudge(Verifier.load(path, scoring=scoring), **options)
            for key, scoring in MODES}


def run_set(judges: dict[str, BuiltinJudge], name: str, limit: int | None) -> dict:
    """Both scorings on one dev file: summaries, differences, label changes."""
    pairs = load_pairs(data_dir() / "pairs" / f"{name}.jsonl", limit)
    runs, labels = {}, {}
    for key, _scoring in MODES:
        judge = judges[key]
        started = time.perf_counter()
        verdicts = asyncio.run(judge_pairs(judge, pairs))
        runs[key] = summary(score_pairs(name, pairs, verdicts, time.perf_counter() - started))
        labels[key] = [predicted_label(v) if v is not None else "ERROR" for v in verdicts]
    new, old = runs["new"], runs["old"]
    precision_diff = {k: (v - old["confident_precision"][k]
                          if v is not None and old["confident_precision"].get(k) is not None
                          else None)
                      for k, v in new["confident_precision"].items()}
    f1_diff = (new["macro_f1"] - old["macro_f1"]
               if new["macro_f1"] is not None and old["macro_f1"] is not None else None)
    gold = [p.label for p in pairs]
    three_way = all(p.labels == "3-way" for p in pairs)
    return {"pairs": len(pairs), "new": new, "old": old, "macro_f1_diff": f1_diff,
            "diff_interval": paired_interval(gold, labels["new"], labels["old"], three_way),
            "confident_precision_diff": precision_diff,
            "label_changes": sum(a != b for a, b in zip(labels["new"], labels["old"],
                                                        strict=True))}


def _measure(gold: list[str], predicted: list[str], three_way: bool) -> float | None:
    """The file's headline measure as ``score_pairs`` computes it: 3-way macro-F1 (3-way
    files) or SUPPORTED-vs-rest balanced accuracy, over the pairs given a label."""
    kept = [(g, p) for g, p in zip(gold, predicted, strict=True)
            if p not in (ERROR, JUDGMENT_ERROR)]
    if not kept:
        return None
    g, p = [k[0] for k in kept], [k[1] for k in kept]
    return (classification_metrics(g, p, THREE_WAY)["macro_f1"] if three_way
            else supported_vs_rest(g, p)["balanced_accuracy"])


def paired_interval(gold: list[str], new: list[str], old: list[str], three_way: bool,
                    rounds: int = 1000, seed: int = 45) -> dict | None:
    """new - old of the headline measure with its 95 % paired bootstrap interval: the
    pairs resampled together (both modes judged the same pairs), ``rounds`` times."""
    point = [_measure(gold, labels, three_way) for labels in (new, old)]
    if None in point or len(gold) < 2:
        return None
    rng = np.random.default_rng(seed)
    g, a, b = np.asarray(gold), np.asarray(new), np.asarray(old)
    diffs = []
    for _ in range(rounds):
        i = rng.integers(0, len(g), len(g))
        pair = [_measure(g[i].tolist(), x[i].tolist(), three_way) for x in (a, b)]
        if None not in pair:
            diffs.append(pair[0] - pair[1])
    interval = percentile_ci(np.asarray(diffs), 0.05)
    if interval is None:
        return None
    low, high = interval
    measure = "macro_f1" if three_way else "supported_vs_rest_balanced_accuracy"
    return {"measure": measure, "diff": point[0] - point[1], "low": low, "high": high,
            "rounds": rounds}


def _num(value: float | None, fmt: str = ".4f") -> str:
    return format(value, fmt) if value is not None else "-"


def _precisions(row: dict, fmt: str = ".3f") -> str:
    return ", ".join(f"{k} {_num(v, fmt)}" for k, v in sorted(row.items()))


def _interval(found: dict | None) -> str:
    if found is None:
        return "-"
    name = "macro-F1" if found["measure"] == "macro_f1" else "S-vs-rest bal. acc."
    return f"{name} {found['diff']:+.4f} ({found['low']:+.4f} to {found['high']:+.4f})"


def line(name: str, row: dict) -> str:
    new, old = row["new"], row["old"]
    return (f"| {name} | {row['pairs']} | {_num(new['macro_f1'])} | {_num(old['macro_f1'])} | "
            f"{_num(row['macro_f1_diff'], '+.4f')} | {_interval(row['diff_interval'])} | "
            f"{_precisions(new['confident_precision'])} | "
            f"{_precisions(old['confident_precision'])} | "
            f"{_precisions(row['confident_precision_diff'], '+.4f')} | {row['label_changes']} | "
            f"{new['pairs_per_s']:.1f} | {old['pairs_per_s']:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--new", default="window_scales")
    parser.add_argument("--old", default="per_window")
    args = parser.parse_args()
    MODES[:] = [("new", args.new), ("old", args.old)]
    stem = ("verifier_int8_batched" if (args.new, args.old) == ("window_scales", "per_window")
            else f"verifier_{args.new}_vs_{args.old}")
    judges = mode_judges(Config(judge="builtin"))
    result: dict = {"judges": {k: j.judge_id for k, j in judges.items()},
                    "thresholds": {k: j.verifier.thresholds for k, j in judges.items()},
                    "calibrations": {k: j.calibration for k, j in judges.items()},
                    "machine": platform.processor() or platform.machine(),
                    "cpu": cpu_model(),
                    "modes": {"new": args.new, "old": args.old},
                    "cpus": os.cpu_count(), "load_before": os.getloadavg(), "sets": {}}
    lines = [f"# Built-in judge on the dev sets: scoring `{args.new}` (new) vs `{args.old}` "
             "(old)", "", *(f"Judge {k} `{j.judge_id}`, verifier thresholds "
                            f"{j.verifier.thresholds}." for k, j in judges.items()), "",
             "| set | pairs | macro-F1, new | macro-F1, old | difference | new - old, 95 % "
             "paired bootstrap interval | confident precision, new | confident precision, old | "
             "difference | label changes | pairs/s, new | pairs/s, old |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in SETS:
        if (data_dir() / "pairs" / f"{name}.jsonl").exists():
            result["sets"][name] = run_set(judges, name, args.limit)
            lines.append(line(name, result["sets"][name]))
            print(lines[-1], flush=True)
    result["load_after"] = os.getloadavg()
    lines += ["", f"Full files{'' if args.limit is None else f' (first {args.limit})'}; "
              f"{result['cpus']} CPUs ({result['cpu']}); load average before "
              f"{result['load_before'][0]:.2f}, after {result['load_after'][0]:.2f}. The pairs/s "
              "are timed on a shared machine, one run each: see "
              "judge_speed.md for the speed comparison.", ""]
    write_results(stem, result, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
