"""Does a calibration layer over the verifier help? (A stacking experiment; negative so far.)

    .venv/bin/python benchmarks/bench_verifier_stacker.py

The cross-encoder sees one window at a time. This experiment combines what it says about every
window of the evidence with cheap lexical evidence a small cross-encoder may not learn from a few
thousand pairs: how much of the claim's wording the evidence covers (words, word pairs, the best
sentence), whether the claim's numbers occur in the evidence, a negation cue on one side only,
a verbatim quote (feature list fixed before any result was seen: ``FEATURE_NAMES``).

Protocol: a multinomial logistic regression (balanced class weights, C = 1, standardised
features) is fitted on the calibration data the issue allows tuning on: the training run's
held-out split + checkcovid_dev + citint_dev. Those three are scored by 5-fold cross-validation
grouped by evidence text; healthver_dev (evaluation only) and expertqa_val are scored once by
the model fitted on all calibration rows. The baseline is the shipped verifier's own decision
(`Verifier.decide` on the deciding window; the built-in judge's verbatim-quote rule is not applied).
Writes benchmarks/results/verifier_stacker.{json,md}.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import time
from pathlib import Path

import numpy as np

from medverify.files import data_dir
from medverify.judge.builtin import is_verbatim
from medverify.verifier.evaluate import heldout_rows, read_rows
from medverify.verifier.infer import Verifier, aggregate, score_windows
from medverify.verifier.metrics import classification_metrics, supported_vs_rest
from medverify.verifier.model import LABELS
from medverify.verifier.windows import make_windows, sentence_spans

FEATURE_NAMES: tuple[str, ...] = (
    "log_p_supported",
    "log_p_contradicted",
    "log_p_nei",
    "log_max_p_supported",
    "log_max_p_contradicted",
    "log_mean_p_nei",
    "log_windows",
    "coverage_words",
    "coverage_best_sentence",
    "coverage_word_pairs",
    "claim_has_numbers",
    "numbers_missing",
    "negation_mismatch",
    "claim_negated",
    "verbatim",
    "log_claim_words",
)

_WORD = re.compile(r"[a-z0-9]+(?:\.[0-9]+)?")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_STOP_WORDS = """a an the of in on and or to for with by is are was were be been being that this
    these those as at from it its which can may might than into has have had do does did will would
    should could also such their there they them he she his her we our you your i"""
_STOP = frozenset(_STOP_WORDS.split())
_NEGATION_WORDS = """no not never none neither nor without cannot lack lacks lacked lacking absence
    absent fail fails failed unable nothing"""
_NEGATION = frozenset(_NEGATION_WORDS.split())
_STEM = 6
_EPS = 1e-4


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.casefold().replace("n't", " not"))


def stems(text: str) -> list[str]:
    """Content-word stems in order (lower-cased, stop words dropped, cut to 6 characters)."""
    return [t[:_STEM] for t in _tokens(text) if t not in _STOP and len(t) > 1]


def _negated(text: str) -> bool:
    return any(t in _NEGATION for t in _tokens(text))


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def _share(needles: list[str] | set[str], hay: set[str]) -> float:
    items = set(needles)
    return len(items & hay) / len(items) if items else 1.0


def pair_features(claim: str, evidence: str, window_probs: np.ndarray) -> np.ndarray:
    """The :data:`FEATURE_NAMES` vector of one (claim, evidence) pair.

    ``window_probs`` is the (windows, 3) probability matrix of the cross-encoder over the
    evidence's windows, in LABELS order; the deciding window is the one with the highest
    max(P(SUPPORTED), P(CONTRADICTED)), as in :func:`medverify.verifier.infer.aggregate`.
    """
    probs = np.asarray(window_probs, dtype=np.float64).reshape(-1, 3)
    if probs.shape[0] == 0:
        probs = np.full((1, 3), 1.0 / 3.0)
    deciding = probs[int(np.argmax(probs[:, :2].max(axis=1)))]
    claim_stems = stems(claim)
    evidence_stems = set(stems(evidence))
    pairs = set(itertools.pairwise(claim_stems))
    ev_list = stems(evidence)
    evidence_pairs = set(itertools.pairwise(ev_list))
    best_cov, best_sentence = 0.0, ""
    for a, b in sentence_spans(evidence):
        sentence = evidence[a:b]
        cov = _share(claim_stems, set(stems(sentence))) if claim_stems else 0.0
        if cov > best_cov:
            best_cov, best_sentence = cov, sentence
    numbers = _numbers(claim)
    claim_negated = _negated(claim)
    values = [
        math.log(deciding[0] + _EPS),
        math.log(deciding[1] + _EPS),
        math.log(deciding[2] + _EPS),
        math.log(probs[:, 0].max() + _EPS),
        math.log(probs[:, 1].max() + _EPS),
        math.log(probs[:, 2].mean() + _EPS),
        math.log(probs.shape[0]),
        _share(claim_stems, evidence_stems) if claim_stems else 0.0,
        best_cov,
        _share(pairs, evidence_pairs) if pairs else 0.0,
        1.0 if numbers else 0.0,
        1.0 - _share(numbers, _numbers(evidence)) if numbers else 0.0,
        1.0 if best_sentence and claim_negated != _negated(best_sentence) else 0.0,
        1.0 if claim_negated else 0.0,
        1.0 if is_verbatim(claim, evidence) else 0.0,
        math.log1p(len(claim.split())),
    ]
    return np.asarray(values, dtype=np.float64)


ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "pairs"
RESULTS = ROOT / "benchmarks" / "results"
CALIBRATION = ("heldout", "checkcovid_dev", "citint_dev")
MEASURED = ("healthver_dev", "expertqa_val")


def window_probabilities(verifier: Verifier, rows: list[dict]) -> list[np.ndarray]:
    """The (windows, 3) probabilities of every pair's evidence windows."""
    flat, owner = [], []
    for i, row in enumerate(rows):
        for window in make_windows(verifier.tokenizer, row["claim"], row["evidence"]):
            flat.append((row["claim"], window))
            owner.append(i)
    probs = score_windows(verifier.model, verifier.tokenizer, flat, verifier.max_tokens)
    out: list[list[np.ndarray]] = [[] for _ in rows]
    for i, p in zip(owner, probs, strict=True):
        out[i].append(p)
    return [np.asarray(p) for p in out]


def scores(rows: list[dict], pred: list[str]) -> dict[str, float]:
    gold = [r["label"] for r in rows]
    out = {"supported_vs_rest_bal_acc": supported_vs_rest(gold, pred)["balanced_accuracy"]}
    if rows[0].get("labels") == "3-way":
        out["macro_f1"] = classification_metrics(gold, pred, LABELS)["macro_f1"]
    return {k: round(v, 3) for k, v in out.items()}


def main() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", type=Path, default=DATA)
    args = parser.parse_args()
    verifier = Verifier.load()
    sets = {"heldout": heldout_rows(args.data_dir, 13, 0.15)}
    sets |= {n: read_rows(args.data_dir / f"{n}.jsonl") for n in CALIBRATION[1:] + MEASURED}
    start = time.perf_counter()
    feats, base = {}, {}
    for name, rows in sets.items():
        probs = window_probabilities(verifier, rows)
        feats[name] = np.array(
            [pair_features(r["claim"], r["evidence"], p) for r, p in zip(rows, probs, strict=True)]
        )
        base[name] = verifier.label_pairs(np.array([aggregate(p) for p in probs]))
    rows = [r for n in CALIBRATION for r in sets[n]]
    x = np.vstack([feats[n] for n in CALIBRATION])
    y = np.array([LABELS.index(r["label"]) for r in rows])
    groups = np.unique([r["evidence"] for r in rows], return_inverse=True)[1]

    def model():
        lr = LogisticRegression(C=1.0, class_weight="balanced", max_iter=2000)
        return make_pipeline(StandardScaler(), lr)

    cv = np.zeros(len(rows), dtype=int)
    for train, test in GroupKFold(5).split(x, y, groups):
        cv[test] = model().fit(x[train], y[train]).predict(x[test])
    final = model().fit(x, y)
    result: dict = {"sets": {}, "features": list(FEATURE_NAMES)}
    offset = 0
    for name, set_rows in sets.items():
        if name in CALIBRATION:
            pred = [LABELS[i] for i in cv[offset : offset + len(set_rows)]]
            offset += len(set_rows)
            how = "5-fold CV"
        else:
            pred = [LABELS[i] for i in final.predict(feats[name])]
            how = "fitted on calibration rows"
        result["sets"][name] = {
            "n": len(set_rows),
            "baseline": scores(set_rows, base[name]),
            "stacker": scores(set_rows, pred),
            "stacker_scored_by": how,
        }
    coef = final[-1].coef_
    result["coefficients"] = {
        name: dict(zip(LABELS, np.round(coef[:, j], 3).tolist(), strict=True))
        for j, name in enumerate(FEATURE_NAMES)
    }
    result["seconds"] = round(time.perf_counter() - start, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "verifier_stacker.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Verifier + stacker (logistic regression over window probabilities and lexical cues)",
        "",
        "| set | n | scored by | baseline macro-F1 | stacker macro-F1 | baseline S-vs-rest | "
        "stacker S-vs-rest |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in result["sets"].items():
        b, s = r["baseline"], r["stacker"]
        lines.append(
            f"| {name} | {r['n']} | {r['stacker_scored_by']} | {b.get('macro_f1', '-')} | "
            f"{s.get('macro_f1', '-')} | {b['supported_vs_rest_bal_acc']} | "
            f"{s['supported_vs_rest_bal_acc']} |"
        )
    (RESULTS / "verifier_stacker.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
