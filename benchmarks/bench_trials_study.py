"""The clinical-trial study end to end on the 7 ClinicalTrials.gov samples, offline, and
how well a judge recovers labels planted by the scripted models.

Scripted models (``medverify.testing.trial_models``) answer CHECK's 15 questions about each
of the 7 real sample records (``../shared/data/raw/clinicaltrials``) under the three
contexts; the answers are judged against the curated summaries at paragraph, sentence and
claim level by the chosen judge. Measured: wall time per phase (ask, judge), judge time per
answer, a rerun (everything resumed: no model call, no judgment) and ``trials report``
(recomputed from the run directory).

Planted labels. Two of the scripted behaviours make units whose truth is known by
construction, which lets the study grade its judge:

* a unit copied verbatim from the trial's summary (``grounded`` and ``confabulating`` with
  the summary context, when no number was changed) is planted FACT;
* a unit that equals a summary sentence except for its numbers (``confabulating`` changes
  every number it copies) is planted HALLUCINATION: the summary contradicts it.

Units of the title context (invented specifics) and everything else have no planted label
and are left out of the grading. Reported: per level, the judge's label counts on the
planted units, accuracy, and the hallucination recall / precision on them.

    .venv/bin/python benchmarks/bench_trials_study.py [--judge builtin|numbers]
        [--models grounded,confabulating,unreliable] [--levels paragraph,sentence,claim]

Writes benchmarks/results/trials_study_<judge>.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from medverify.config import Config
from medverify.files import data_dir
from medverify.kit import FlowKit
from medverify.study.records import read_run
from medverify.study.report import LABELS, SCORED, finish, pct
from medverify.study.runner import TrialStudy
from medverify.study.selection import study_trials
from medverify.testing.trial_models import HABITS, NumberJudge, register_trial_models
from medverify.trials.reader import iter_studies

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = data_dir() / "raw" / "clinicaltrials"
RESULTS = ROOT / "benchmarks" / "results"
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _norm(text: str) -> str:
    return " ".join(text.split())


def planted(run: Path) -> dict[str, dict[str, Any]]:
    """Per level: the judge's category counts on planted-FACT and planted-HALLUCINATION
    units (see the module doc)."""
    _, trials, answers, judgments = read_run(run)
    summaries = {t.nct_id: _norm(" ".join(s.text for sec in t.summary.sections
                                          for s in sec.sentences)) for t in trials}
    masked = {nct: _NUMBER.sub("#", text) for nct, text in summaries.items()}
    by_id = {a.id: a for a in answers}
    out: dict[str, dict[str, Any]] = {}
    for judgment in judgments:
        answer = by_id.get(judgment.answer_id)
        if answer is None or answer.context.value != "summary" or \
                answer.model not in ("grounded", "confabulating"):
            continue
        level = out.setdefault(judgment.granularity.value,
                               {"FACT": Counter(), "HALLUCINATION": Counter()})
        for unit in judgment.units:
            text = _norm(unit.text)
            if len(text) < 12:
                continue
            if text in summaries[answer.nct_id]:
                level["FACT"][unit.category.value] += 1
            elif _NUMBER.search(text) and _NUMBER.sub("#", text) in masked[answer.nct_id]:
                level["HALLUCINATION"][unit.category.value] += 1
    graded: dict[str, dict[str, Any]] = {}
    for name, level in out.items():
        facts, halls = level["FACT"], level["HALLUCINATION"]
        n_fact, n_hall = sum(facts.values()), sum(halls.values())
        scored = n_fact + n_hall - facts["ERROR"] - halls["ERROR"]
        correct = facts["FACT"] + halls["HALLUCINATION"]
        flagged = facts["HALLUCINATION"] + halls["HALLUCINATION"]
        graded[name] = {
            "planted_fact": dict(facts), "planted_hallucination": dict(halls),
            "accuracy": correct / scored if scored else None,
            "hallucination_recall": halls["HALLUCINATION"] / n_hall if n_hall else None,
            "hallucination_precision": halls["HALLUCINATION"] / flagged if flagged else None,
            "fact_recall": facts["FACT"] / n_fact if n_fact else None,
        }
    return graded


async def study(run: Path, judge: str, models: list[str], levels: list[str]) -> TrialStudy:
    specs = register_trial_models(models)
    config = Config.load(store=run / "runs.db", cache_path=run / "cache.db",
                         retrieval={"mode": "lexical"}, env={})
    trials = study_trials(list(iter_studies([SAMPLES])))
    runner = TrialStudy.from_config(
        config, models=[f"{label}={spec}" for label, spec in specs.items()], run_dir=run,
        granularities=levels, kit=FlowKit(judge=NumberJudge() if judge == "numbers" else None))
    async with runner:
        await runner.run(trials)
    return runner


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge", choices=["builtin", "numbers"], default="builtin")
    parser.add_argument("--models", default=",".join(HABITS))
    parser.add_argument("--levels", default="paragraph,sentence,claim")
    args = parser.parse_args(argv)
    if not list(SAMPLES.glob("*.json")):
        print(f"no samples in {SAMPLES}", file=sys.stderr)
        return 2
    models, levels = args.models.split(","), args.levels.split(",")
    work = Path(tempfile.mkdtemp(prefix="trials-study-bench-"))
    try:
        run = work / "run"
        started = time.perf_counter()
        first = asyncio.run(study(run, args.judge, models, levels))
        first_s = time.perf_counter() - started
        started = time.perf_counter()
        second = asyncio.run(study(run, args.judge, models, levels))
        rerun_s = time.perf_counter() - started
        started = time.perf_counter()
        summary = finish(run, Config.load(env={}))
        report_s = time.perf_counter() - started
        grading = planted(run)
        report_md = (run / "report.md").read_text("utf-8")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ok_answers = sum(r["ok"] for r in summary["answers"])
    result = {
        "judge": summary["judge"], "models": models, "levels": levels,
        "trials": summary["n_trials"], "questions": summary["n_questions"],
        "answers": sum(r["ok"] + r["empty"] + r["error"] for r in summary["answers"]),
        "answers_ok": ok_answers,
        "first_run": {"wall_s": round(first_s, 2), **first.timing, **first.counts},
        "judge_ms_per_answer": round(1000 * first.timing["judge_s"] / max(ok_answers, 1), 1),
        "rerun": {"wall_s": round(rerun_s, 2), **second.counts},
        "report_s": round(report_s, 3),
        "planted": grading,
        "rates": summary["rates"],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"trials_study_{args.judge}"
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    lines = [
        f"# Trial study on the 7 samples, scripted models, judge {summary['judge']}", "",
        f"{summary['n_trials']} trials x {summary['n_questions']} questions x 3 contexts x "
        f"{len(models)} models ({', '.join(models)}) = {result['answers']} answers "
        f"({ok_answers} with text), judged at {', '.join(levels)} level; 2 CPUs.", "",
        "| measure | value |", "|---|---|",
        f"| first run, wall | {first_s:.1f} s (ask {first.timing['ask_s']:.1f} s, judge "
        f"{first.timing['judge_s']:.1f} s) |",
        f"| judge time per answer (all levels) | {result['judge_ms_per_answer']} ms |",
        f"| rerun (all resumed) | {rerun_s:.1f} s; answers asked "
        f"{second.counts['answers_asked']} (the scripted outages), judgments made "
        f"{second.counts['judgments_made']} |",
        f"| `trials report` (recompute) | {report_s:.2f} s |", "",
        "## Planted labels (units whose truth the scripts fix)", "",
        "| level | planted FACT: judge's labels | planted HALLUCINATION: judge's labels | "
        "accuracy | hallucination recall | hallucination precision |",
        "|---|---|---|---|---|---|",
    ]
    for level, g in grading.items():
        def fmt(v: float | None) -> str:
            return "n/a" if v is None else f"{100 * v:.1f}%"
        lines.append(f"| {level} | {dict(sorted(g['planted_fact'].items()))} | "
                     f"{dict(sorted(g['planted_hallucination'].items()))} | "
                     f"{fmt(g['accuracy'])} | {fmt(g['hallucination_recall'])} | "
                     f"{fmt(g['hallucination_precision'])} |")
    lines += ["", "## Label distribution (scripted models: not a statement about any real "
              "model)", "", "| model | context | level | " + " | ".join(LABELS.values())
              + " | scored | unscored |", "|---|---|---|" + "---|" * (len(LABELS) + 2)]
    for row in summary["rates"]:
        lines.append(f"| {row['model']} | {row['context']} | {row['granularity']} | "
                     + " | ".join(pct(row["categories"][c.value]) for c in SCORED)
                     + f" | {row['units_scored']} | {row['units_unscored']} |")
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n", "utf-8")
    print("\n".join(lines))
    print(f"\n(first lines of the study report)\n{report_md[:600]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
