"""Fit the built-in judge's calibration (medverify.judge.calibration) on training-allowed pairs.

    .venv/bin/python scripts/calibrate_judge.py [--data-dir ../shared/data/pairs]
        [--out src/medverify/judge/calibration.json]
    MEDVERIFY_VERIFIER_SCORING=bf16 .venv/bin/python scripts/calibrate_judge.py

The verifier's scoring mode (int8 ``window_scales`` or ``bf16``, ``Verifier.scoring``) picks
the default output: calibration.json or calibration-bf16.json.

Reads only checkcovid_train, citint_train and scifact_train (the sets ../shared/data/README.md
allows training on; anything else is refused by name). Every pair is judged by the built-in
judge exactly as `eval pairs` does (one passage, exact checks on, no calibration), which gives
its category and the verifier's probabilities; the features of each pair
(`calibration.FEATURES`) are fitted per family (one per training set) and pooled
(`general`, thresholds that hold on every set). Folds are grouped by evidence text. The
output names the verifier it was fitted for; the judge ignores it for any other verifier.
Deterministic: the same data and verifier give the same file.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from medverify.files import data_dir
from medverify.judge import JudgeItem
from medverify.judge.builtin import BuiltinJudge
from medverify.judge.calibration import (
    FEATURES,
    SHIPPED,
    SHIPPED_SCORING,
    TARGETS,
    Calibration,
    fit_family,
    pair_features,
)
from medverify.judge.decide import outcome_from_passages
from medverify.records import Claim, Passage
from medverify.verdict_rules import categorize

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "pairs"
ALLOWED = ("checkcovid_train", "citint_train", "scifact_train")
VERSION = "judge-calibration-v1"


def read(path: Path) -> list[dict]:
    if path.stem not in ALLOWED:
        raise SystemExit(f"{path.name}: calibration may only read {', '.join(ALLOWED)}")
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def judged(judge: BuiltinJudge, rows: list[dict]) -> tuple[np.ndarray, list[str]]:
    """Each pair's features and the category the uncalibrated judge gives it."""
    items = [JudgeItem(claim=Claim(id=str(i), text=r["claim"]),
                       passages=[Passage(id=f"{i}#e", doc_id=str(i), text=r["evidence"])])
             for i, r in enumerate(rows)]
    feats, cats = [], []
    for start in range(0, len(items), 256):
        for scores in judge.score(items[start:start + 256]):
            [row] = judge.passage_scores(scores)
            outcome = outcome_from_passages([row])
            vetoed = outcome.vetoed is not None
            cats.append(categorize(outcome.support is not None and not vetoed,
                                   outcome.contradict is not None).value)
            feats.append(pair_features(scores.item.claim.text, row.passage.text, row.raw,
                                       verbatim=row.verbatim))
    return np.asarray(feats), cats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DATA)
    parser.add_argument("--out", type=Path, default=None,
                        help="default: the shipped file of the verifier's scoring mode")
    args = parser.parse_args()
    judge = BuiltinJudge(family=None, quotes=False)
    scoring = getattr(judge.verifier, "scoring", "")
    args.out = args.out or SHIPPED_SCORING.get(scoring, SHIPPED)
    print(f"verifier {judge.verifier.scores_id} (scoring {scoring}) -> {args.out}")
    start = time.perf_counter()
    sets = {}
    for name in ALLOWED:
        rows = read(args.data_dir / f"{name}.jsonl")
        x, cats = judged(judge, rows)
        sets[name] = (rows, x, cats)
        print(f"{name}: {len(rows)} pairs judged ({time.perf_counter() - start:.0f} s)")
    families = {}
    for name in (*ALLOWED, "general"):
        members = ALLOWED if name == "general" else (name,)
        rows = [r for m in members for r in sets[m][0]]
        x = np.vstack([sets[m][1] for m in members])
        cats = [c for m in members for c in sets[m][2]]
        strata = [m for m in members for _ in sets[m][0]]
        groups = np.unique([r["evidence"] for r in rows], return_inverse=True)[1]
        family = name.removesuffix("_train")
        families[family] = fit_family(family, list(members), x, [r["label"] for r in rows],
                                      cats, groups, strata,
                                      datasets=[r.get("dataset", "") for r in rows])
        print(f"{family}: thresholds {families[family].thresholds}, "
              f"cv precision {families[family].cv_precision}")
    calibration = Calibration(
        version=VERSION, verifier=judge.verifier.scores_id, features=list(FEATURES),
        targets=TARGETS, families=families,
        notes="Fitted by scripts/calibrate_judge.py on " + ", ".join(ALLOWED) + ".")
    args.out.write_text(calibration.model_dump_json(indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
