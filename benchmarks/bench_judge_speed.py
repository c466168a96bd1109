"""Pairs/s of the built-in judge with the claim-level rule, calibration and exact checks,
against the verifier's work alone, and against the judge's work before issue 27 (the
verifier scoring 32 windows per batch), in one run.

    .venv/bin/python benchmarks/bench_judge_speed.py [--n 300] [--rounds 5] [--tag NAME]

Since issue 45 the verifier scores windows batch-independently, in the mode
``Verifier.scoring``: "auto" picks "onnx_int8" (ONNX Runtime's int8, one window a run) where
ONNX Runtime is installed, else "window_scales" (torch's int8 with one activation scale per
window, in fixed-shape batches); "bf16" (packed bfloat16 on AMX CPUs) is opt-in,
``MEDVERIFY_VERIFIER_SCORING=bf16`` (its verdicts carry no calibrated confidence, so the
full judge skips that step there). Each mode runs two windows or batches side by side on
one intra-op thread each. The full judge in "window_scales" and with one window at a time
(issue 27's "per_window", short windows on one thread) is timed too.
All sides judge the same pairs (the first --n of healthver_dev and of checkcovid_dev: short
and long evidence; made-up pairs when the data folder is absent), one passage per claim,
quotes off, as `eval pairs` does. Rounds alternate the two so the machine's load hits both
alike; the ratio of the full judge's median to the judge's before issue 27 is the number issue 45's
target (>= 1.5) is about.
Writes benchmarks/results/judge_speed.{json,md} (judge_speed_NAME with --tag: runs on a busy
machine that should not replace the quiet one's).
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

from medverify.bf16 import amx_available
from medverify.files import data_dir
from medverify.judge import JudgeItem
from medverify.judge.builtin import BuiltinJudge
from medverify.judge.quotes import is_verbatim
from medverify.records import Claim, Passage
from medverify.verdict_rules import passage_label

SHIPPED = "window_scales"  # replaced in main() by the mode the verifier picked
PICKED = "what `auto` picked"  # or the forcing variable, in main()

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
    full_judge_in(judge, batch, "per_window")


def full_judge_window_scales(judge: BuiltinJudge, batch: list[tuple[str, str]]) -> None:
    """The full judge with issue 45's int8 scoring (what runs where AMX is missing)."""
    full_judge_in(judge, batch, "window_scales")


def full_judge_in(judge: BuiltinJudge, batch: list[tuple[str, str]], scoring: str) -> None:
    judge.verifier.scoring = scoring  # type: ignore[attr-defined]
    try:
        full_judge(judge, batch)
    finally:
        judge.verifier.scoring = SHIPPED  # type: ignore[attr-defined]


def full_judge(judge: BuiltinJudge, batch: list[tuple[str, str]]) -> None:
    items = [JudgeItem(claim=Claim(id=str(i), text=c),
                       passages=[Passage(id=f"{i}#e", doc_id=str(i), text=e)])
             for i, (c, e) in enumerate(batch)]
    asyncio.run(judge.judge(items))


RUNS = (("before", before_issue), ("verifier_only", verifier_only),
        ("full_judge", full_judge), ("full_judge_window_scales", full_judge_window_scales),
        ("full_judge_per_window", full_judge_per_window))


def time_set(judge: BuiltinJudge, batch: list[tuple[str, str]], rounds: int) -> dict:
    """Medians of ``rounds`` alternating rounds of every side on one set of pairs."""
    runs = [(k, fn) for k, fn in RUNS if k != "full_judge_window_scales"
            or SHIPPED != "window_scales"]
    times: dict[str, list[float]] = {label: [] for label, _ in runs}
    full_judge(judge, batch[:16])  # warm-up: model, caches, lazy loads
    for _ in range(rounds):
        for label, fn in runs:
            started = time.perf_counter()
            fn(judge, batch)
            times[label].append(time.perf_counter() - started)
    rate = {k: len(batch) / statistics.median(v) for k, v in times.items()}
    rate.setdefault("full_judge_window_scales", rate["full_judge"])
    return {"pairs": len(batch), "seconds": times, "pairs_per_s": rate,
            "ratio": round(rate["full_judge"] / rate["before"], 3),
            "ratio_vs_window_scales": round(rate["full_judge"]
                                            / rate["full_judge_window_scales"], 3),
            "ratio_vs_per_window": round(rate["full_judge"] / rate["full_judge_per_window"], 3)}


def main() -> None:
    global SHIPPED, PICKED
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    stem = f"judge_speed_{args.tag}" if args.tag else "judge_speed"
    judge = BuiltinJudge(quotes=False)
    SHIPPED = judge.verifier.scoring  # type: ignore[attr-defined]
    forced = os.environ.get("MEDVERIFY_VERIFIER_SCORING")
    PICKED = (f"forced by MEDVERIFY_VERIFIER_SCORING={forced}" if forced
              else "what `auto` picked")
    result: dict = {"judge": judge.judge_id, "scoring": SHIPPED,
                    "calibration": judge.calibration, "cpus": os.cpu_count(),
                    "machine": platform.processor() or platform.machine(),
                    "cpu_model": cpu_model(), "amx": amx_available(), "sets": {}}
    lines = ["# Built-in judge speed: before issue 27, one window at a time, int8 window "
             "scales, the verifier alone, the full judge", "",
             f"Full judge: `{result['judge']}`, scoring `{SHIPPED}` ({PICKED}).", "",
             "| set | pairs | before issue 27 (batched int8, torch's threads), pairs/s | full "
             "judge, one window at a time (issue 27), pairs/s | full judge, int8 window "
             "scales, pairs/s | verifier only (2 workers of 1 thread), pairs/s | full judge, "
             "pairs/s | full / before issue 27 | full / int8 window scales | full / one "
             "window at a time |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    load_before = os.getloadavg()
    result["load_before"] = load_before
    for name, batch in pairs(args.n).items():
        row = result["sets"][name] = time_set(judge, batch, args.rounds)
        rate = row["pairs_per_s"]
        lines.append(f"| {name} | {len(batch)} | {rate['before']:.1f} | "
                     f"{rate['full_judge_per_window']:.1f} | "
                     f"{rate['full_judge_window_scales']:.1f} | "
                     f"{rate['verifier_only']:.1f} | {rate['full_judge']:.1f} | "
                     f"{row['ratio']:.2f} | {row['ratio_vs_window_scales']:.2f} | "
                     f"{row['ratio_vs_per_window']:.2f} |")
    result["load_average"] = os.getloadavg()
    lines += ["", f"Median of {args.rounds} alternating rounds; load average after: "
              f"{result['load_average'][0]:.2f} (before: {load_before[0]:.2f}) on "
              f"{result['cpus']} CPUs ({result['cpu_model']}, AMX "
              f"{'present' if result['amx'] else 'absent'}). Target (issue 45): "
              "full / before issue 27 >= 1.5.", ""]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / f"{stem}.md").write_text("\n".join(lines))
    print("\n".join(lines))


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
