"""Pairs/s of the built-in judge with the claim-level rule, calibration and exact checks,
against the verifier's work alone, and against the judge's work before issue 27 (the
verifier scoring 32 windows per batch), in one run.

    .venv/bin/python benchmarks/bench_judge_speed.py [--n 300] [--rounds 5]

Since issue 45 the int8 verifier scores windows in fixed-shape batches with one activation
scale per window (``Verifier.scoring`` "window_scales", on ``Verifier.threads`` = 1 intra-op
thread, WINDOW_WORKERS = 2 batches side by side); the full judge with one window at a time
(issue 27's "per_window", short windows on one thread) is timed too.
All sides judge the same pairs (the first --n of healthver_dev and of checkcovid_dev: short
and long evidence; made-up pairs when the data folder is absent), one passage per claim,
quotes off, as `eval pairs` does. Rounds alternate the two so the machine's load hits both
alike; the ratio of the full judge's median to the judge's before issue 27 is the number issue 45's
target (>= 1.5) is about.
Writes benchmarks/results/judge_speed.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from medverify.files import data_dir
from medverify.judge import JudgeItem
from medverify.judge.builtin import BuiltinJudge
from medverify.judge.quotes import is_verbatim
from medverify.records import Claim, Passage
from medverify.verdict_rules import passage_label

SHIPPED = "window_scales"

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "pairs"
RESULTS = ROOT / "benchmarks" / "results"


def pairs(n: int) -> dict[str, list[tuple[str, str]]]:
    out = {}
    for name in ("healthver_dev", "checkcovid_dev"):
        path = DATA / f"{name}.jsonl"
        if path.exists():
            rows = [json.loads(line) for line in path.read_text("utf-8").splitlines()[:n]]
            out[name] = [(r["claim"], r["evidence"]) for r in rows]
    if not out:
        out["made_up"] = [(f"Drug {i} lowers blood pressure in adults.",
                           f"In a trial of {i * 10} adults, drug {i} lowered blood pressure "
                           "by 5 mmHg. It did not change heart rate.") for i in range(n)]
    return out


def verifier_only(judge: BuiltinJudge, batch: list[tuple[str, str]]) -> None:
    """What the judge computed per pair before this issue: probabilities, the verbatim
    rule and the per-passage label."""
    probs = np.asarray(judge.verifier.predict(batch, batch_size=judge.batch_size))
    thresholds = (judge.support_threshold, judge.contradict_threshold)
    for (claim, text), row in zip(batch, probs, strict=True):
        is_verbatim(claim, text)
        passage_label(row, thresholds)


def before_issue(judge: BuiltinJudge, batch: list[tuple[str, str]]) -> None:
    """The judge's work before issue 27: the verifier's batched windows (its int8 model
    scored 32 windows at a time then), the verbatim rule and the per-passage label."""
    judge.verifier.scoring = "batched"  # type: ignore[attr-defined]
    try:
        verifier_only(judge, batch)
    finally:
        judge.verifier.scoring = SHIPPED  # type: ignore[attr-defined]


def full_judge_per_window(judge: BuiltinJudge, batch: list[tuple[str, str]]) -> None:
    """The full judge before issue 45's batched scoring: one window at a time."""
    judge.verifier.scoring = "per_window"  # type: ignore[attr-defined]
    try:
        full_judge(judge, batch)
    finally:
        judge.verifier.scoring = SHIPPED  # type: ignore[attr-defined]


def full_judge(judge: BuiltinJudge, batch: list[tuple[str, str]]) -> None:
    items = [JudgeItem(claim=Claim(id=str(i), text=c),
                       passages=[Passage(id=f"{i}#e", doc_id=str(i), text=e)])
             for i, (c, e) in enumerate(batch)]
    asyncio.run(judge.judge(items))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    judge = BuiltinJudge(quotes=False)
    assert judge.verifier.scoring == SHIPPED  # type: ignore[attr-defined]
    result: dict = {"judge": judge.judge_id, "calibration": judge.calibration,
                    "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
                    "sets": {}}
    lines = ["# Built-in judge speed: before issue 27, one window at a time, the verifier alone, "
             "the full judge", "",
             "| set | pairs | before issue 27 (batched int8, torch's threads), pairs/s | full "
             "judge, one window at a time (issue 27), pairs/s | verifier only (per-window "
             "scales in batches, 2 workers of 1 thread), pairs/s | full judge, pairs/s | "
             "full / before issue 27 | full / one window at a time |",
             "|---|---|---|---|---|---|---|---|"]
    load_before = os.getloadavg()
    result["load_before"] = load_before
    for name, batch in pairs(args.n).items():
        times: dict[str, list[float]] = {"before": [], "verifier_only": [], "full_judge": [],
                                         "full_judge_per_window": []}
        full_judge(judge, batch[:16])  # warm-up: model, caches, lazy loads
        for _ in range(args.rounds):
            for label, fn in (("before", before_issue), ("verifier_only", verifier_only),
                              ("full_judge", full_judge),
                              ("full_judge_per_window", full_judge_per_window)):
                started = time.perf_counter()
                fn(judge, batch)
                times[label].append(time.perf_counter() - started)
        rate = {k: len(batch) / statistics.median(v) for k, v in times.items()}
        ratio = rate["full_judge"] / rate["before"]
        vs_one = rate["full_judge"] / rate["full_judge_per_window"]
        result["sets"][name] = {"pairs": len(batch), "seconds": times, "pairs_per_s": rate,
                                "ratio": round(ratio, 3), "ratio_vs_per_window": round(vs_one, 3)}
        lines.append(f"| {name} | {len(batch)} | {rate['before']:.1f} | "
                     f"{rate['full_judge_per_window']:.1f} | "
                     f"{rate['verifier_only']:.1f} | {rate['full_judge']:.1f} | {ratio:.2f} | "
                     f"{vs_one:.2f} |")
    result["load_average"] = os.getloadavg()
    lines += ["", f"Median of {args.rounds} alternating rounds; load average after: "
              f"{result['load_average'][0]:.2f} (before: {load_before[0]:.2f}) on "
              f"{result['cpus']} CPUs ({result['machine']}). Target (issue 45): "
              "full / before issue 27 >= 1.5.", ""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "judge_speed.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "judge_speed.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
