"""Pairs/s of the built-in judge with the claim-level rule, calibration and exact checks,
against the verifier's work alone, and against the judge's work before issue 27 (the
verifier scoring 32 windows per batch), in one run.

    .venv/bin/python benchmarks/bench_judge_speed.py [--n 300] [--rounds 5]

Since issue 45 the per-window verifier scores on one intra-op thread
(``Verifier.threads``); the full judge on torch's own threads (2 here) is timed too.
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
from medverify.verifier.infer import PER_WINDOW_THREADS

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
    judge.verifier.per_window = False  # type: ignore[attr-defined]
    try:
        verifier_only(judge, batch)
    finally:
        judge.verifier.per_window = True  # type: ignore[attr-defined]


def full_judge_two_threads(judge: BuiltinJudge, batch: list[tuple[str, str]]) -> None:
    """The full judge as before issue 45: per-window scoring on torch's threads (2 here)."""
    judge.verifier.threads = None  # type: ignore[attr-defined]
    try:
        full_judge(judge, batch)
    finally:
        judge.verifier.threads = PER_WINDOW_THREADS  # type: ignore[attr-defined]


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
    result: dict = {"judge": judge.judge_id, "calibration": judge.calibration,
                    "cpus": os.cpu_count(), "sets": {}}
    lines = ["# Built-in judge speed: before issue 27, before issue 45, the verifier alone, "
             "the full judge", "",
             "| set | pairs | before issue 27 (batched int8), pairs/s | full judge before issue 45 "
             "(per window, 2 threads), pairs/s | verifier only (per window, 1 thread), pairs/s | "
             "full judge, pairs/s | full / before issue 27 | full / before issue 45 |",
             "|---|---|---|---|---|---|---|---|"]
    load_before = os.getloadavg()
    result["load_before"] = load_before
    for name, batch in pairs(args.n).items():
        times: dict[str, list[float]] = {"before": [], "verifier_only": [], "full_judge": [],
                                         "full_judge_two_threads": []}
        full_judge(judge, batch[:16])  # warm-up: model, caches, lazy loads
        for _ in range(args.rounds):
            for label, fn in (("before", before_issue), ("verifier_only", verifier_only),
                              ("full_judge", full_judge),
                              ("full_judge_two_threads", full_judge_two_threads)):
                started = time.perf_counter()
                fn(judge, batch)
                times[label].append(time.perf_counter() - started)
        rate = {k: len(batch) / statistics.median(v) for k, v in times.items()}
        ratio = rate["full_judge"] / rate["before"]
        vs_two = rate["full_judge"] / rate["full_judge_two_threads"]
        result["sets"][name] = {"pairs": len(batch), "seconds": times, "pairs_per_s": rate,
                                "ratio": round(ratio, 3), "ratio_vs_two_threads": round(vs_two, 3)}
        lines.append(f"| {name} | {len(batch)} | {rate['before']:.1f} | "
                     f"{rate['full_judge_two_threads']:.1f} | "
                     f"{rate['verifier_only']:.1f} | {rate['full_judge']:.1f} | {ratio:.2f} | "
                     f"{vs_two:.2f} |")
    result["load_average"] = os.getloadavg()
    lines += ["", f"Median of {args.rounds} alternating rounds; load average after: "
              f"{result['load_average'][0]:.2f} (before: {load_before[0]:.2f}). Target (issue 45): "
              "full / before issue 27 >= 1.5.", ""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "judge_speed.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "judge_speed.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
