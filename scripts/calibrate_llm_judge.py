"""Fit the scored LLM judge's prior correction for one model (medverify.judge.llm_scored).

    .venv/bin/python scripts/calibrate_llm_judge.py --model local:qwen2.5-0.5b \
        [--per-set 100] [--seed 0] [--out src/medverify/judge/llm_calibration.json]

Reads only checkcovid_train, citint_train and scifact_train (the sets
../shared/data/README.md allows training on), samples ``--per-set`` pairs of each with the
seed, and asks the model both Yes/No passes of ``prompts/judge_scored`` for each pair with
the uncalibrated judge. Requests go through the model facade's persistent request cache
(``$MEDVERIFY_HOME``), so a killed run resumes where it stopped and ``eval judges`` on other
sets pays nothing twice. The pairs' features (``llm_scored.FEATURES``) are fitted with the
built-in judge's ``fit_family`` (multinomial logistic regression, folds grouped by evidence
text, Wilson-bounded confident thresholds that hold on every set); the entry for this
model id and prompt replaces any earlier one in ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import time
from pathlib import Path

import numpy as np

from medverify.config import Config
from medverify.evals.pairs import Pair, judge_pairs, load_pairs
from medverify.files import data_dir
from medverify.judge.calibration import LABEL_INDEX, fit_family
from medverify.judge.llm_scored import (
    CATEGORY_OF,
    FEATURES,
    LABELS,
    SHIPPED,
    LLMCalibration,
    ScoredLLMJudge,
    features,
)
from medverify.llm.facade import model_from_config

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "pairs"
ALLOWED = ("checkcovid_train", "citint_train", "scifact_train")


def sample(per_set: int, seed: int, data: Path = DATA) -> list[Pair]:
    """``per_set`` pairs of each training-allowed set, drawn with ``seed``."""
    pairs: list[Pair] = []
    for name in ALLOWED:
        rows = load_pairs(data / f"{name}.jsonl")
        pairs += random.Random(f"{seed}:{name}").sample(rows, min(per_set, len(rows)))
    return pairs


def pass_probabilities(raw: str | None) -> tuple[float, float] | None:
    """The first passage's (factual, counterfactual) P(yes) from a scored verdict's raw output."""
    try:
        first = json.loads(raw or "")["passages"][0]
        return float(first["factual_yes"]), float(first["counterfactual_yes"])
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--per-set", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=SHIPPED)
    parser.add_argument("--prior", choices=["balanced", "train"], default="train",
                        help="train (shipped: the better cross-validated macro-F1 on the "
                        "training pairs for both models): the sample's own label frequencies; "
                        "balanced: fit as if the three labels were equally frequent")
    args = parser.parse_args()
    pairs = sample(args.per_set, args.seed)
    config = Config().model_copy(update={"model": args.model})
    started = time.perf_counter()

    async def run() -> tuple[list, str, str]:
        async with model_from_config(config) as model:
            judge = ScoredLLMJudge(model, calibration=None)
            verdicts = await judge_pairs(judge, pairs, lambda n: print(".", end="", flush=True))
            return verdicts, model.id, judge.prompt_version

    verdicts, model_id, prompt = asyncio.run(run())
    rows = [(p, pass_probabilities(v.raw_output if v else None)) for p, v in zip(pairs, verdicts,
                                                                                strict=True)]
    kept = [(p, probs) for p, probs in rows if probs is not None]
    x = np.asarray([features(p.claim, p.evidence, *probs) for p, probs in kept])
    labels = [p.label for p, _ in kept]
    groups = [int(hashlib.sha256(p.evidence.encode()).hexdigest()[:8], 16) for p, _ in kept]
    strata = [p.dataset for p, _ in kept]
    raw_cats = [CATEGORY_OF[LABELS[_raw_label(*probs)]] for _, probs in kept]
    weight = "balanced" if args.prior == "balanced" else None
    first = fit_family("general", list(ALLOWED), x, labels, raw_cats, groups, strata,
                       class_weight=weight)
    cats = [CATEGORY_OF[LABELS[int(i)]] for i in first.probabilities(x).argmax(axis=1)]
    family = fit_family("general", list(ALLOWED), x, labels, cats, groups, strata,
                        datasets=strata, class_weight=weight)
    entry = LLMCalibration(model=model_id, prompt=prompt, features=list(FEATURES),
                           family=family, notes=(
                               f"{len(kept)} of {len(pairs)} sampled train pairs "
                               f"({args.per_set} per set, seed {args.seed}); prior "
                               f"{args.prior}; "
                               f"{time.perf_counter() - started:.0f} s to collect"))
    write(args.out, entry)
    report = diagnose(x, labels, groups)
    report |= {"model": model_id, "prompt": prompt, "pairs": len(kept), "prior": args.prior,
               "thresholds": family.thresholds, "cv_precision": family.cv_precision,
               "cv_coverage": family.cv_coverage}
    write_report(report)
    print(f"\n{json.dumps(report, indent=1)}")


def diagnose(x: np.ndarray, labels: list[str], groups: list[int]) -> dict:
    """What the two passes carry, on the training pairs: each pass's AUC for its label, the
    share of Yes answers (the yes-bias), the raw rule's macro-F1, and the cross-validated
    macro-F1 of the prior correction with and without the model's two log-odds."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score, roc_auc_score
    from sklearn.model_selection import GroupKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y = np.array([LABEL_INDEX[label] for label in labels])
    raw = [_raw_label(1 / (1 + np.exp(-f)), 1 / (1 + np.exp(-c))) for f, c in x[:, :2]]

    def cv_f1(columns: np.ndarray, weight: str | None = None) -> float:
        model = make_pipeline(StandardScaler(), LogisticRegression(C=0.3, max_iter=5000,
                                                                   class_weight=weight))
        predicted = cross_val_predict(model, columns, y, groups=groups, cv=GroupKFold(5))
        return round(float(f1_score(y, predicted, average="macro")), 4)

    return {
        "auc_factual_for_supported": round(float(roc_auc_score(y == 0, x[:, 0])), 4),
        "auc_counterfactual_for_contradicted": round(float(roc_auc_score(y == 1, x[:, 1])), 4),
        "yes_share_factual": round(float((x[:, 0] >= 0).mean()), 4),
        "yes_share_counterfactual": round(float((x[:, 1] >= 0).mean()), 4),
        "raw_rule_macro_f1": round(float(f1_score(y, raw, average="macro")), 4),
        "cv_macro_f1_prior_corrected": cv_f1(x),
        "cv_macro_f1_prior_corrected_balanced": cv_f1(x, "balanced"),
        "cv_macro_f1_lexical_only": cv_f1(x[:, 2:]),
        "cv_macro_f1_lexical_only_balanced": cv_f1(x[:, 2:], "balanced"),
    }


def write_report(report: dict) -> None:
    """Keep each model's diagnosis in benchmarks/results/llm_calibration.json."""
    path = ROOT / "benchmarks" / "results" / "llm_calibration.json"
    data = json.loads(path.read_text("utf-8")) if path.is_file() else {}
    data[f"{report['model']} {report['prompt']}"] = report
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", "utf-8")


def _raw_label(p_factual: float, p_counter: float) -> int:
    if p_factual >= 0.5:
        return 0
    return 1 if p_counter >= 0.5 else 2


def write(path: Path, entry: LLMCalibration) -> None:
    data = json.loads(path.read_text("utf-8")) if path.is_file() else {"calibrations": []}
    kept = [e for e in data["calibrations"]
            if not (e["model"] == entry.model and e["prompt"] == entry.prompt)]
    data["calibrations"] = sorted([*kept, entry.model_dump(mode="json")],
                                  key=lambda e: (e["model"], e["prompt"]))
    path.write_text(json.dumps(data, indent=1) + "\n", "utf-8")


if __name__ == "__main__":
    main()
