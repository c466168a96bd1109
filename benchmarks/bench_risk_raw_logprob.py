"""The untrained baseline beside the ensemble's classifiers: each model's mean token
log-probability of the text, with its direction fixed beforehand (lower = riskier), on the
same test questions as ``bench_risk_ensemble.py`` (same split, same seed). Nothing is
fitted, so nothing can overfit: where the trained classifier falls below this, the
classifier is the problem, not the signal.

Reads the feature files that ``bench_risk_ensemble.py DATASET --work WORK`` left (no model
runs). Per data set and model: ROC AUC with a 95 % cluster-bootstrap CI over test
questions, and where the data set has pairs (a true statement and its edited copy), the
share of test pairs whose edited copy has the lower mean log-prob, with its CI.

    .venv/bin/python benchmarks/bench_risk_raw_logprob.py \\
        --work kqa=/work/ens/kqa pubmedqa=/work/ens/pubmedqa medqa=/work/ens/medqa \\
        --scorers smollm2-135m gemma3-270m qwen2.5-0.5b qwen2.5-1.5b

Writes benchmarks/results/risk_raw_logprob.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_risk_ensemble as E
import bench_risk_real_model as RM

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def paired(rows: list[Any], score: np.ndarray, seed: int) -> dict[str, Any] | None:
    """Share of test pairs whose HALLUCINATION copy scores riskier, CI over questions."""
    pairs: dict[str, dict[str, float]] = {}
    qid: dict[str, str] = {}
    for row, s in zip(rows, score, strict=True):
        pid = row.provenance.get("pair_id")
        if pid:
            pairs.setdefault(pid, {})[str(row.label)] = float(s)
            qid[pid] = row.provenance["question_id"]
    full = [p for p in pairs if len(pairs[p]) == 2]
    if not full:
        return None
    wins = np.array([pairs[p]["HALLUCINATION"] > pairs[p]["FACT"] for p in full], dtype=float)
    groups = np.array([qid[p] for p in full])
    lo, hi = RM.cluster_bootstrap(groups, lambda i: float(wins[i].mean()), n=1000, seed=seed)
    return {"pairs": len(full), "win_rate": round(float(wins.mean()), 4),
            "ci95": [round(lo, 4), round(hi, 4)]}


def one(dataset: str, work: Path, scorers: list[str], seed: int) -> dict[str, Any]:
    data = E.load_split(work, seed, 0.3, scorers)
    names = data["schema"].names
    out = {"dataset": dataset, "test_examples": len(data["rows"]["test"]),
           "test_questions": len(set(data["groups"]["test"])), "models": []}
    for i, name in enumerate(scorers):
        risk = -data["x"]["test"][:, names.index(f"m{i}.logprob.mean")]
        out["models"].append({"model": name, **E.auc_ci(data, risk, seed),
                              "paired": paired(data["rows"]["test"], risk, seed)})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", nargs="+", required=True, metavar="DATASET=DIR")
    parser.add_argument("--scorers", nargs="+", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results = [one(spec.split("=", 1)[0], Path(spec.split("=", 1)[1]), args.scorers,
                   args.seed) for spec in args.work]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "risk_raw_logprob.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (RESULTS / "risk_raw_logprob.md").write_text(text, "utf-8")
    print(text)


def markdown(results: list[dict[str, Any]]) -> str:
    lines = ["# Untrained baseline: each model's mean token log-prob (lower = riskier)", "",
             "`python benchmarks/bench_risk_raw_logprob.py` on the feature files of "
             "`bench_risk_ensemble.py`, the same test questions (split by question, seed 0, "
             "test share 0.3). Nothing fitted. ROC AUC (HALLUCINATION positive) and the "
             "share of test pairs whose edited copy has the lower mean log-prob, each with "
             "a 95 % cluster-bootstrap CI over test questions; chance is 0.5 for both.", "",
             "| data set | model | ROC AUC | 95 % CI | pairs | edited copy riskier | 95 % CI |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        for m in r["models"]:
            p = m["paired"]
            tail = f"{p['pairs']} | {p['win_rate']} | {p['ci95']}" if p else "- | - | -"
            lines.append(f"| {r['dataset']} ({r['test_questions']} test questions) | "
                         f"{m['model']} | {m['roc_auc']} | {m['ci95']} | {tail} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
