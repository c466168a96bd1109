"""Calibrated confidence for the built-in judge: what its probabilities are worth, per data
set family, and where a verdict stops being one to present as confident.

The verifier's raw probabilities are not probabilities of being right (its P(SUPPORTED) of
0.9 was right about 4 times in 10 on claim/abstract sets). A :class:`Calibration` maps the
verifier's three probabilities for one (claim, passage) pair plus cheap lexical features
(:data:`FEATURES`: how much of the claim's key content the passage holds, a missing number,
a negation on one side only, a verbatim statement) to calibrated probabilities of
SUPPORTED / CONTRADICTED / NOT_ENOUGH_INFO, with a multinomial logistic regression fitted on
training-allowed pairs only (``scripts/calibrate_judge.py``). It is fitted once per *family*
(the kind of claim and evidence: Check-COVID news claims vs abstracts, Citation-Integrity
citing sentences vs cited papers, SciFact claims vs rationales) and once pooled
(``general``, the default for a user's knowledge base).

Each family also records, per category, the smallest calibrated probability at which the
category's precision reached its target (FACT 0.70, HALLUCINATION 0.50, COVERAGE_GAP 0.50)
in cross-validation with one-sided 95 % confidence (Wilson lower bound), at that threshold
and every higher one. The pooled family takes the
largest of the families' thresholds (it must hold on each family), and has none where
some family never reached the target: then no verdict of that category is confident.
A threshold of None means "never confident": the honest answer when the data say the
judge cannot reach the target.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from medverify.errors import ConfigError
from medverify.terms import coverage, key_terms
from medverify.text import line_sentences

FEATURES: tuple[str, ...] = (
    "log_p_supported",
    "log_p_contradicted",
    "log_p_nei",
    "key_content_in_passage",
    "key_content_in_best_sentence",
    "claim_number_missing",
    "negation_differs",
    "verbatim",
    "log_claim_words",
    "claim_hedged",
)
"""The features of one pair, in order (fixed before any result was seen; see the module
docstring)."""

TARGETS = {"FACT": 0.70, "HALLUCINATION": 0.50, "COVERAGE_GAP": 0.50}
"""The precision a category must reach before its verdicts are presented as confident."""

COLUMN = {"FACT": 0, "HALLUCINATION": 1, "COVERAGE_GAP": 2}
SHIPPED = Path(__file__).with_name("calibration.json")
"""The shipped calibration of the int8 verifier's scores."""
SHIPPED_SCORING = {"bf16": Path(__file__).with_name("calibration-bf16.json"),
                   "onnx_int8": Path(__file__).with_name("calibration-onnx-int8.json")}
"""Shipped calibrations of the verifier's other arithmetic (``Verifier.scoring``): the same
weights score differently in bfloat16 or ONNX Runtime's int8 (about 15 % of labels move), so
each arithmetic has its own fit, matched by the verifier's ``scores_id``."""
_EPS = 1e-4


def pair_features(claim: str, passage: str, probs: Sequence[float], *,
                  verbatim: bool) -> list[float]:
    """The :data:`FEATURES` of one (claim, passage) pair with the verifier's probabilities."""
    in_passage, in_sentence, number_missing, negation = lexical_features(claim, passage)
    return [
        math.log(float(probs[0]) + _EPS),
        math.log(float(probs[1]) + _EPS),
        math.log(float(probs[2]) + _EPS),
        in_passage,
        in_sentence,
        number_missing,
        negation,
        float(verbatim),
        math.log1p(len(claim.split())),
        float(key_terms(claim).hedged),
    ]


def lexical_features(claim: str, passage: str) -> tuple[float, float, float, float]:
    """How much of the claim's key content ``passage`` holds (all of it, and its best
    sentence), whether a number of the claim is missing from it, and whether the best
    sentence is negated where the claim is not (or the other way round)."""
    ck = key_terms(claim)
    sentences = line_sentences(passage) or [passage]
    scored = [(coverage(ck, key_terms(s)), s) for s in sentences[:200]]
    best, sentence = max(scored, key=lambda t: t[0]) if scored else (0.0, "")
    passage_terms = key_terms(passage)
    return (coverage(ck, passage_terms), best,
            float(bool(ck.numbers) and not ck.numbers <= passage_terms.numbers),
            float(ck.negated != key_terms(sentence).negated))


class Family(BaseModel):
    """One family's fitted model and confidence thresholds."""

    model_config = ConfigDict(extra="forbid")

    name: str
    trained_on: list[str]
    datasets: list[str] = Field(default_factory=list)  # the pairs' `dataset` names
    rows: int
    mean: list[float]
    scale: list[float]
    coef: list[list[float]]  # 3 x len(FEATURES), rows in SUPPORTED, CONTRADICTED, NEI order
    intercept: list[float]
    thresholds: dict[str, float | None]  # category -> calibrated probability, None: never
    cv_precision: dict[str, float | None] = Field(default_factory=dict)
    cv_coverage: dict[str, float | None] = Field(default_factory=dict)

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """Calibrated (n, 3) probabilities for an (n, len(FEATURES)) feature matrix."""
        x = (np.asarray(features, dtype=np.float64) - np.asarray(self.mean)) / np.asarray(
            self.scale)
        logits = x @ np.asarray(self.coef).T + np.asarray(self.intercept)
        logits -= logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return np.asarray(exp / exp.sum(axis=1, keepdims=True))

    def threshold(self, category: str) -> float | None:
        return self.thresholds.get(category)


class Calibration(BaseModel):
    """Families fitted for one verifier (its id is checked when the judge loads it)."""

    model_config = ConfigDict(extra="forbid")

    version: str
    verifier: str
    features: list[str]
    targets: dict[str, float]
    families: dict[str, Family]
    notes: str = ""

    def family(self, name: str) -> Family:
        if name not in self.families:
            raise ConfigError(f"no calibration family {name!r}; known: {sorted(self.families)}")
        return self.families[name]


def load_calibration(path: str | Path | None = None, *,
                     scores_id: str | None = None) -> Calibration:
    """The calibration at ``path``; default: the shipped one fitted for ``scores_id`` (a
    verifier's :attr:`~medverify.verifier.infer.Verifier.scores_id`), else the int8 one."""
    if path:
        return _load(str(Path(path)))
    if scores_id is not None:
        for file in SHIPPED_SCORING.values():
            if file.is_file() and _load(str(file)).verifier == scores_id:
                return _load(str(file))
    return _load(str(SHIPPED))


@lru_cache(maxsize=4)
def _load(path: str) -> Calibration:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        calibration = Calibration.model_validate(data)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the judge calibration {path}: {exc}") from exc
    if tuple(calibration.features) != FEATURES:
        raise ConfigError(f"the judge calibration {path} was fitted on other features; refit it "
                          "with scripts/calibrate_judge.py")
    return calibration


def family_for(dataset: str | None, calibration: Calibration, default: str = "general") -> str:
    """The family for pairs of ``dataset`` (a pair's ``dataset`` field, "check-covid", or a
    file name, "checkcovid_dev"), else ``default``: a set with no training data of its own
    gets the pooled calibration."""
    if dataset:
        for name, family in calibration.families.items():
            if name == "general":
                continue
            if dataset in family.datasets or dataset.startswith(name):
                return name
    return default


# --------------------------------------------------------------------------- fitting

LABEL_INDEX = {"SUPPORTED": 0, "CONTRADICTED": 1, "NOT_ENOUGH_INFO": 2}
MIN_CONFIDENT = 15  # a threshold must hold with at least this many pairs above it


def confident_threshold(p: np.ndarray, correct: np.ndarray, target: float,
                        min_rows: int = MIN_CONFIDENT, z: float = 1.645) -> float | None:
    """The smallest probability ``t`` such that, among the pairs with ``p >= t`` (the
    pairs of that category), the share ``correct`` is at least ``target`` with one-sided
    95 % confidence at ``t`` (its Wilson lower bound, ``z``; 0 gives the plain share), and
    the plain share is at least ``target`` at every higher threshold with at least
    ``min_rows`` pairs above it; None when no such threshold exists. The bound leaves a
    margin for the shift between training and unseen data that a point estimate would not."""
    order = np.argsort(-p, kind="stable")
    hits = np.cumsum(np.asarray(correct, dtype=float)[order])
    n = np.arange(1, len(p) + 1)
    share = hits / n
    lower = (share + z * z / (2 * n) - z * np.sqrt(share * (1 - share) / n
                                                   + z * z / (4 * n * n))) / (1 + z * z / n)
    best = None
    for k in range(min_rows - 1, len(p)):
        if share[k] < target:
            break
        last_of_value = k + 1 == len(p) or p[order][k + 1] < p[order][k]
        if last_of_value and lower[k] >= target:  # only cut between values
            best = float(p[order][k])
    return best


def fit_family(name: str, trained_on: list[str], x: np.ndarray, labels: Sequence[str],
               categories: Sequence[str], groups: Sequence[int], strata: Sequence[str],
               folds: int = 5, datasets: Sequence[str] = (),
               class_weight: str | None = None) -> Family:
    """Fit one family: a multinomial logistic regression on ``x`` (standardised), and per
    category the confident threshold (:func:`robust_threshold`) of its cross-validated
    probabilities among the pairs the judge put in that category (``categories``, the
    uncalibrated verdicts). Folds are grouped by ``groups`` (one evidence text never sits
    on both sides); ``strata`` names each row's source set, and the threshold must hold on
    each of them. ``class_weight="balanced"`` fits as if the labels were equally frequent
    (a uniform prior instead of the training sets' own)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    y = np.array([LABEL_INDEX[label] for label in labels])
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = (x - mean) / scale

    def model() -> LogisticRegression:
        return LogisticRegression(C=0.3, max_iter=5000, class_weight=class_weight)

    cv = np.zeros((len(y), 3))
    for train, test in GroupKFold(folds).split(z, y, groups):
        fitted = model().fit(z[train], y[train])
        cv[np.ix_(test, fitted.classes_)] = fitted.predict_proba(z[test])
    final = model().fit(z, y)
    coef, intercept = np.zeros((3, x.shape[1])), np.full(3, -30.0)
    coef[final.classes_], intercept[final.classes_] = final.coef_, final.intercept_
    thresholds, precision, cover = {}, {}, {}
    cats, strata_arr = np.asarray(categories), np.asarray(strata)
    for category, column in COLUMN.items():
        t = robust_threshold(cv[:, column], y == column, cats == category, strata_arr,
                             TARGETS[category])
        thresholds[category] = t
        chosen = (cats == category) & (cv[:, column] >= t) if t is not None \
            else np.zeros(len(y), dtype=bool)
        precision[category] = round(float((y[chosen] == column).mean()), 4) if chosen.any() \
            else None
        truly = y == column
        cover[category] = round(float(chosen[truly].mean()), 4) if truly.any() else None
    return Family(name=name, trained_on=trained_on, datasets=sorted(set(datasets)),
                  rows=len(y), mean=mean.tolist(),
                  scale=scale.tolist(), coef=coef.tolist(), intercept=intercept.tolist(),
                  thresholds=thresholds, cv_precision=precision, cv_coverage=cover)


def robust_threshold(p: np.ndarray, correct: np.ndarray, in_category: np.ndarray,
                     strata: np.ndarray, target: float,
                     min_rows: int = MIN_CONFIDENT) -> float | None:
    """The largest of the strata's :func:`confident_threshold` (over the pairs of the
    category), so that the target holds on each source set; None if one never reaches
    it, or where the pairs at or above its threshold are less precise than those below
    (:func:`sure_beats_unsure`). A stratum in which the label never occurs (SciFact has no
    NOT_ENOUGH_INFO) is left out."""
    found: list[float] = []
    for stratum in np.unique(strata):
        rows = (strata == stratum) & in_category
        if not correct[strata == stratum].any():
            continue
        t = confident_threshold(p[rows], correct[rows], target, min_rows)
        if t is None or not sure_beats_unsure(p[rows], correct[rows], t):
            return None
        found.append(t)
    return max(found) if found else None


def sure_beats_unsure(p: np.ndarray, correct: np.ndarray, threshold: float) -> bool:
    """Whether the pairs at or above ``threshold`` are at least as often ``correct`` as those
    below it (a "sure" class no better than the unsure ones is not a sure class)."""
    sure = p >= threshold
    if sure.all() or not sure.any():
        return True
    return bool(correct[sure].mean() >= correct[~sure].mean())
