"""Issue 27's trial-study target: the offline example, grounded model, built-in judge.

    .venv/bin/python benchmarks/bench_trials_offline.py [--out DIR] [--reuse]

Runs `examples/trials_offline/run_study.py --models grounded` (the 7 real registry records in
../shared/data/raw/clinicaltrials, 15 questions, 3 contexts; a study resumes, `--reuse` reads
an existing DIR without judging again) and counts, per context and level, the share of
scored units the built-in judge calls FACT and the share it calls FACT confidently. The
grounded model copies the curated summary verbatim under the `summary` context (target:
>= 0.90 FACT) and, under `title`, writes "The trial, <title>, was studied." plus one
invented specific (enrolment, response rates, serious adverse events, sites; target: <= 0.20
FACT). Under `title`, about half the units are the true sentence "The trial, <title>, was
studied."; the share among the other units (the invented specifics) is reported apart.
Writes benchmarks/results/trials_offline.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TARGETS = {"summary": ("FACT share >= 0.90", lambda s: s >= 0.90),
           "title": ("FACT share <= 0.20", lambda s: s <= 0.20)}


def shares(judgments: Path) -> dict[str, dict[str, dict[str, float | int]]]:
    counts: dict[tuple[str, str], Counter[str]] = {}
    for line in judgments.read_text("utf-8").splitlines():
        record = json.loads(line)
        context = record["answer_id"].rsplit("|", 1)[-1]
        tally = counts.setdefault((context, record["granularity"]), Counter())
        for unit in record.get("units") or []:
            if unit.get("category") in (None, "ERROR"):
                continue
            verdict = unit.get("verdict") or {}
            tally["scored"] += 1
            tally["fact"] += unit["category"] == "FACT"
            tally["fact_confident"] += unit["category"] == "FACT" and verdict.get(
                "confident") is True
            if not unit.get("text", "").startswith("The trial,"):  # not the title sentence
                tally["other"] += 1
                tally["other_fact"] += unit["category"] == "FACT"
    out: dict[str, dict[str, dict[str, float | int]]] = {}
    for (context, level), tally in sorted(counts.items()):
        n = tally["scored"] or 1
        out.setdefault(context, {})[level] = {
            "scored": tally["scored"], "fact": round(tally["fact"] / n, 4),
            "fact_confident": round(tally["fact_confident"] / n, 4),
            "without_title_sentence": tally["other"],
            "fact_without_title_sentence": round(tally["other_fact"] / (tally["other"] or 1), 4)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    parser.add_argument("--reuse", action="store_true")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="trials-offline-"))
    if not args.reuse:
        subprocess.run([sys.executable, str(ROOT / "examples" / "trials_offline" /
                                            "run_study.py"), "--out", str(out),
                        "--models", "grounded"], check=True, stdout=subprocess.DEVNULL)
    result = shares(out / "judgments.jsonl")
    run = json.loads((out / "run.json").read_text("utf-8")) if (out / "run.json").exists() \
        else {}
    lines = ["# Trial study, offline example, grounded model, built-in judge", "",
             "`python benchmarks/bench_trials_offline.py`. Share of scored units per context "
             "and level: FACT (the category, confident or not) and FACT confidently.", "",
             "| context | level | scored | FACT | FACT, confident | FACT among units other than "
             "\"The trial, <title>, was studied.\" | target (on FACT) |",
             "|---|---|---|---|---|---|---|"]
    for context, levels in result.items():
        for level, row in levels.items():
            target = TARGETS.get(context)
            verdict = "—" if target is None else (
                f"{target[0]}: {'met' if target[1](float(row['fact'])) else 'missed'}")
            lines.append(f"| {context} | {level} | {row['scored']} | {row['fact']:.3f} | "
                         f"{row['fact_confident']:.3f} | {row['fact_without_title_sentence']:.3f}"
                         f" ({row['without_title_sentence']}) | {verdict} |")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "trials_offline.json").write_text(
        json.dumps({"shares": result, "judge": run.get("judge")}, indent=1) + "\n")
    (RESULTS / "trials_offline.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
