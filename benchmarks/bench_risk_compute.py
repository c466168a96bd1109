"""Risk-guided compute on MedQA-USMLE with what runs offline: the paper's protocol (force
each option, pick by P(FACT), send the least confident questions to an expensive path)
with local models only.

- Cheap path: a stacking classifier trained on the train questions (``WORK/classifier``,
  from ``bench_risk_real_model.py`` for one model or ``bench_risk_ensemble.py medqa`` for
  an ensemble) scores each option of a test question (``WORK/test.jsonl``); the option
  with the highest P(FACT) is the answer; the question's risk is that option's
  P(HALLUCINATION).
- Expensive path: a 3-way vote of the same scorers and classifier under three prompts (the
  original question, the question with "Choose the single best answer." appended, and
  "Clinical vignette: " prepended): three times the forward passes. Ties go to the
  original prompt's pick.
- ``medverify.risk.compute.budget_curve``: accuracy against the share of questions given
  the expensive path, with the random-allocation and oracle baselines; the classifier's
  AUC on the same test options (95 % cluster-bootstrap CI over questions) says whether
  its risk has anything to allocate by.

One model (Gemma 3 270M base), then the four-model ensemble:

    .venv/bin/python benchmarks/bench_risk_real_model.py --model DIR --questions 1000 --work W
    .venv/bin/python benchmarks/bench_risk_compute.py --scorer hf:DIR --work W
    .venv/bin/python benchmarks/bench_risk_ensemble.py medqa --questions 200 \\
        --scorers smollm2-135m gemma3-270m qwen2.5-0.5b qwen2.5-1.5b --work E
    .venv/bin/python benchmarks/bench_risk_compute.py --work E --config E/risk.toml \\
        --scorer hf:smollm2-135m --scorer hf:gemma3-270m --scorer hf:qwen2.5-0.5b \\
        --scorer hf:qwen2.5-1.5b --label "4-model ensemble" --stem risk_compute_ensemble

Writes benchmarks/results/STEM.{json,md,svg} (STEM: ``risk_compute`` unless ``--stem``).
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

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_risk_real_model as RM

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


def variant_votes(args: argparse.Namespace, rows_p: list[tuple[dict[str, Any], float]],
                  votes: dict[str, list[str]]) -> dict[str, float]:
    """Each prompt variant's pick per question, added to ``votes`` (features computed once
    per variant with the same scorers; a partial run resumes); seconds per variant."""
    originals = {r["id"]: r for r in (json.loads(line) for line in
                 (args.work / "examples.jsonl").read_text("utf-8").splitlines())}
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
            cmd = [str(BIN / "medverify"), "risk", "features", str(ex_file), "--out", str(feats)]
            cmd += [x for spec in args.scorers for x in ("--scorer", spec)]
            cmd += ["--config", str(args.config)] if args.config else []
            subprocess.run(cmd, check=True)
        timing[f"features_{name}_s"] = round(time.perf_counter() - started, 1)
        v_rows, v_p = score(args.work, feats)
        for qid, (option, _) in picks(v_rows, v_p).items():
            votes[qid].append(option)
    return timing


def main() -> int:
    from medverify.risk.compute import ComputeItem, budget_curve, curve_svg

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scorer", dest="scorers", action="append", required=True, metavar="SPEC",
                        help="a scorer of the classifier's features (repeat, in its order)")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--config", type=Path, help="TOML for `risk features` ([risk] dtype)")
    parser.add_argument("--questions", type=int, default=150)
    parser.add_argument("--label", default="Gemma 3 270M base", help="the scorers, in titles")
    parser.add_argument("--stem", default="risk_compute", help="results file name")
    args = parser.parse_args()
    rows, p_hall = score(args.work, args.work / "test.jsonl")
    qids = sorted({r["provenance"]["question_id"] for r in rows})[: args.questions]
    keep = set(qids)
    rows_p = [(r, p) for r, p in zip(rows, p_hall, strict=True)
              if r["provenance"]["question_id"] in keep]
    gold = {r["provenance"]["question_id"]: r["provenance"]["answer_idx"] for r, _ in rows_p}
    votes: dict[str, list[str]] = defaultdict(list)
    cheap = picks([r for r, _ in rows_p], [p for _, p in rows_p])
    for qid, (option, _) in cheap.items():
        votes[qid].append(option)
    timing = variant_votes(args, rows_p, votes)
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
    auc = option_auc(rows_p)
    result = {"questions": len(items), "scorers": args.scorers, "label": args.label,
              "variants": list(VARIANTS), "timing": timing, "classifier_auc": auc,
              "curve": curve.model_dump()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = RESULTS / args.stem
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    stem.with_suffix(".svg").write_text(
        curve_svg(curve, f"MedQA, {args.label}: accuracy vs share sent to a 3-prompt vote"),
        "utf-8")
    text = markdown(result, curve, args.stem)
    stem.with_suffix(".md").write_text(text, "utf-8")
    print(text)
    return 0


def option_auc(rows_p: list[tuple[dict[str, Any], float]]) -> dict[str, Any]:
    """ROC AUC of P(HALLUCINATION) over the test options (wrong = positive), 95 % CI by a
    cluster bootstrap over questions."""
    y = np.array([r["label"] == "HALLUCINATION" for r, _ in rows_p], dtype=int)
    p = np.array([q for _, q in rows_p])
    groups = np.array([r["provenance"]["question_id"] for r, _ in rows_p])
    lo, hi = RM.cluster_bootstrap(groups, lambda i: RM.roc_auc(y[i], p[i]), n=1000, seed=0)
    return {"roc_auc": round(RM.roc_auc(y, p), 4), "ci95": [round(lo, 4), round(hi, 4)]}


def markdown(result: dict[str, Any], curve: Any, stem: str) -> str:
    auc, label = result["classifier_auc"], result["label"]
    at = {p.budget: p for p in curve.points}
    signal = auc["ci95"][0] > 0.5
    lines = [f"# Risk-guided compute on MedQA-USMLE, {label} (offline)", "",
             f"{result['questions']} test questions (split by question). Scorers: "
             f"{', '.join(result['scorers'])}. Cheap: the classifier's top option; expensive: "
             "a 3-prompt vote of the same scorers (3x the forward passes). "
             f"`benchmarks/bench_risk_compute.py`; chart `{stem}.svg`.", "",
             f"Classifier ROC AUC on these test options (wrong option = positive): "
             f"{auc['roc_auc']} (95 % CI {auc['ci95'][0]}-{auc['ci95'][1]}). Cheap accuracy "
             f"{curve.cheap_accuracy:.3f}, expensive {curve.expensive_accuracy:.3f} (random "
             f"answer 0.25); mean gain of risk-guided over random allocation "
             f"{curve.gain_over_random:+.4f}.", "",
             "| budget | questions escalated | risk-guided | random allocation | oracle |",
             "|---|---|---|---|---|"]
    for budget in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
        p = at[budget]
        lines.append(f"| {budget:.1f} | {p.escalated} | {p.accuracy:.3f} | {p.random:.3f} | "
                     f"{p.oracle:.3f} |")
    reading = ("The classifier's AUC CI is above 0.5: its risk carries some signal to "
               "allocate by; the curve against the random column says how much that buys."
               if signal else
               "What this does not show: that risk-guided compute helps. The classifier's "
               "AUC CI includes 0.5, so its risk cannot tell which answers to redo.")
    lines += ["", reading + " The oracle column is the headroom a perfect risk would have "
              "with these two paths. Feature extraction of the two extra prompts: "
              + ", ".join(f"{k} {v} s" for k, v in result["timing"].items())
              + " (2 CPU cores)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
