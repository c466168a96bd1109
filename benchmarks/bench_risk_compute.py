"""Risk-guided compute on MedQA-USMLE with what runs offline: the paper's protocol (force
each option, pick by P(FACT), send the least confident questions to an expensive path)
with Gemma 3 270M base as the only model.

- Cheap path: the stacking classifier of ``bench_risk_real_model.py`` (trained on its
  train questions) scores each option of a test question; the option with the highest
  P(FACT) is the answer; the question's risk is that option's P(HALLUCINATION).
- Expensive path: a 3-way vote of the same model and classifier under three prompts (the
  original question, the question with "Choose the single best answer." appended, and
  "Clinical vignette: " prepended): three times the forward passes. Ties go to the
  original prompt's pick.
- ``medverify.risk.compute.budget_curve``: accuracy against the share of questions given
  the expensive path, with the random-allocation and oracle baselines.

What it shows, plainly: the machinery end to end on real log-probabilities. It cannot show
that risk-guided compute helps: the 270M base model is at chance on MedQA (its classifier's
AUC is 0.48, ``risk_real_model.md``), so its risk carries no signal to allocate by and its
vote is no better answer. With a model that knows medicine, the same script measures the
real effect.

    .venv/bin/python benchmarks/bench_risk_real_model.py --model DIR --questions 1000 --work W
    .venv/bin/python benchmarks/bench_risk_compute.py --model DIR --work W [--questions 150]

Writes benchmarks/results/risk_compute.{json,md,svg}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BIN = Path(sys.executable).parent
VARIANTS = {"best": lambda q: q + "\nChoose the single best answer.",
            "vignette": lambda q: "Clinical vignette: " + q}


def picks(rows: list[dict[str, Any]], p_hall: list[float]) -> dict[str, tuple[str, float]]:
    """Per question: (the option with the lowest P(HALLUCINATION), that probability)."""
    best: dict[str, tuple[str, float]] = {}
    for row, p in zip(rows, p_hall, strict=True):
        qid, option = row["provenance"]["question_id"], row["provenance"]["option"]
        if qid not in best or p < best[qid][1]:
            best[qid] = (option, p)
    return best


def score(work: Path, features: Path) -> tuple[list[dict[str, Any]], list[float]]:
    from medverify.risk.classifier import predict_proba
    from medverify.risk.persist import load_classifier
    from medverify.risk.records import FeatureExample, FeatureSchema

    schema = FeatureSchema.model_validate_json(
        Path(str(features) + ".schema.json").read_text("utf-8"))
    rows = [json.loads(line) for line in features.read_text("utf-8").splitlines() if line]
    loaded = load_classifier(work / "classifier")
    examples = [FeatureExample.model_validate(r) for r in rows]
    return rows, list(predict_proba(loaded, [e.row for e in examples], schema=schema))


def main() -> int:
    from medverify.risk.compute import ComputeItem, budget_curve, curve_svg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--questions", type=int, default=150)
    args = parser.parse_args()
    rows, p_hall = score(args.work, args.work / "test.jsonl")
    qids = sorted({r["provenance"]["question_id"] for r in rows})[: args.questions]
    keep = set(qids)
    rows_p = [(r, p) for r, p in zip(rows, p_hall, strict=True)
              if r["provenance"]["question_id"] in keep]
    gold = {r["provenance"]["question_id"]: r["provenance"]["answer_idx"] for r, _ in rows_p}
    originals = {r["id"]: r for r in (json.loads(line) for line in
                 (args.work / "examples.jsonl").read_text("utf-8").splitlines())}
    votes: dict[str, list[str]] = defaultdict(list)
    cheap = picks([r for r, _ in rows_p], [p for _, p in rows_p])
    for qid, (option, _) in cheap.items():
        votes[qid].append(option)
    timing: dict[str, float] = {}
    for name, rewrite in VARIANTS.items():
        ex_file = args.work / f"compute_{name}.jsonl"
        feats = args.work / f"compute_{name}_features.jsonl"
        examples = []
        for row, _ in rows_p:
            original = dict(originals[row["id"]])
            original["question"] = rewrite(original["question"])
            examples.append(original)
        ex_file.write_text("".join(json.dumps(e) + "\n" for e in examples), "utf-8")
        started = time.perf_counter()
        if not feats.is_file():
            subprocess.run([str(BIN / "medverify"), "risk", "features", str(ex_file),
                            "--scorer", f"hf:{args.model}", "--out", str(feats)], check=True)
        timing[f"features_{name}_s"] = round(time.perf_counter() - started, 1)
        v_rows, v_p = score(args.work, feats)
        for qid, (option, _) in picks(v_rows, v_p).items():
            votes[qid].append(option)
    items = []
    for qid in qids:
        option, risk = cheap[qid]
        counts = Counter(votes[qid])
        top = max(counts.values())
        voted = option if counts[option] == top else \
            next(o for o in votes[qid] if counts[o] == top)
        items.append(ComputeItem(id=qid, risk=risk, cheap_correct=option == gold[qid],
                                 expensive_correct=voted == gold[qid]))
    curve = budget_curve(items)
    RESULTS.mkdir(parents=True, exist_ok=True)
    result = {"questions": len(items), "variants": list(VARIANTS), "timing": timing,
              "curve": curve.model_dump()}
    (RESULTS / "risk_compute.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    (RESULTS / "risk_compute.svg").write_text(
        curve_svg(curve, "MedQA, Gemma 3 270M: accuracy vs share sent to a 3-prompt vote"),
        "utf-8")
    at = {p.budget: p for p in curve.points}
    lines = ["# Risk-guided compute on MedQA-USMLE, Gemma 3 270M base (offline)", "",
             f"{len(items)} test questions of `risk_real_model` (split by question). Cheap: "
             "the classifier's top option; expensive: a 3-prompt vote of the same model "
             "(3x the forward passes). `benchmarks/bench_risk_compute.py`; chart "
             "`risk_compute.svg`.", "",
             f"Cheap accuracy {curve.cheap_accuracy:.3f}, expensive {curve.expensive_accuracy:.3f}"
             f" (random answer 0.25); mean gain of risk-guided over random allocation "
             f"{curve.gain_over_random:+.4f}.", "",
             "| budget | questions escalated | risk-guided | random allocation | oracle |",
             "|---|---|---|---|---|"]
    for budget in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        p = at[budget]
        lines.append(f"| {budget:.1f} | {p.escalated} | {p.accuracy:.3f} | {p.random:.3f} | "
                     f"{p.oracle:.3f} |")
    lines += ["", "What this does not show: that risk-guided compute helps. The model is at "
              "chance on MedQA (classifier AUC 0.48), so its risk cannot tell which answers "
              "to redo, and its vote is not a better answer. The oracle column is the "
              "headroom a perfect risk would have with these two paths. Feature extraction "
              "of the two extra prompts: " + ", ".join(f"{k} {v} s" for k, v in timing.items())
              + " (2 CPU cores)."]
    (RESULTS / "risk_compute.md").write_text("\n".join(lines) + "\n", "utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
