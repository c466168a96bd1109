"""Fitting a card's categories: per category, P(right) from the verdict's features, and the
smallest threshold at which the category's precision holds.

For each category the judge gave (FACT, HALLUCINATION, COVERAGE_GAP), a logistic
regression of "the gold label is one the category stands for" on the standardised
:data:`~.signals.FEATURES` of that category's verdicts. Its held-out probabilities come from
cross-validation grouped by ``groups`` (one evidence text, or one answer, never on both
sides of a fold). The threshold is the built-in judge's rule
(:func:`medverify.judge.calibration.confident_threshold`: the smallest probability whose
precision reaches the target with one-sided 95 % Wilson confidence, and whose share stays
at the target above it, with at least 15 verdicts) on those held-out probabilities, and it
is kept only if the held-out verdicts at or above it are at least as precise as those below
(a "sure" class that is no better than the unsure ones is not a sure class). Examples from
several sources (data sets, or the review loop) are *strata*: as in the built-in
calibration, the threshold must hold on each stratum in which the category is ever right,
and the largest of theirs is kept. Too few verdicts, or none right, give no threshold and
say why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from medverify.judge.calibration import MIN_CONFIDENT, confident_threshold, sure_beats_unsure
from medverify.judge.confidence.card import RIGHT, TARGETS, CategoryFit
from medverify.records import Category
from medverify.stats import wilson

REGULARISATION = 0.3  # the inverse L2 strength C (as the built-in calibration)


@dataclass(frozen=True)
class Example:
    """One judged, labelled example."""

    features: list[float]
    category: Category  # the judge's verdict
    gold: str  # SUPPORTED / CONTRADICTED / NOT_ENOUGH_INFO / NOT_SUPPORTED
    group: str  # examples of one group never straddle a fold
    stratum: str = ""  # the source: the threshold must hold on each


def fit_categories(examples: Sequence[Example], folds: int = 5,
                   targets: dict[str, float] | None = None) -> dict[str, CategoryFit]:
    """A :class:`CategoryFit` for each category of :data:`TARGETS`."""
    goal = TARGETS | (targets or {})
    out = {}
    for name in TARGETS:
        category = Category(name)
        rows = [e for e in examples if e.category == category]
        truly = sum(e.gold in RIGHT[category] for e in examples)
        out[name] = fit_category(rows, RIGHT[category], goal[name], truly, folds)
    return out


def fit_category(rows: Sequence[Example], right: frozenset[str], target: float,
                 truly: int, folds: int) -> CategoryFit:
    """One category's fit (see the module docstring); ``truly``: the examples whose gold
    label the category stands for (the denominator of coverage)."""
    y = np.array([e.gold in right for e in rows], dtype=bool)
    base = {"target": target, "rows": len(rows), "right": int(y.sum())}
    if len(rows) < MIN_CONFIDENT or not y.any():
        why = (f"{len(rows)} verdicts (at least {MIN_CONFIDENT} needed)" if len(rows)
               < MIN_CONFIDENT else "none of its verdicts was right")
        return CategoryFit(**base, intercept=_log_odds(y), why_none=why)
    x = np.asarray([e.features for e in rows], dtype=np.float64)
    groups = [e.group for e in rows]
    held_out = _held_out(x, y, groups, folds)
    model = _fit(x, y)
    threshold, why = _robust_threshold(held_out, y, [e.stratum for e in rows], target)
    sure = held_out >= threshold if threshold is not None else np.zeros(len(y), dtype=bool)
    stats = _held_out_stats(y, sure, truly)
    return CategoryFit(**base, **model, threshold=threshold, why_none=why, **stats)


def _robust_threshold(p: np.ndarray, y: np.ndarray, strata: Sequence[str], target: float
                      ) -> tuple[float | None, str | None]:
    """The largest of the strata's thresholds (:func:`_threshold`); None with the first
    stratum's reason when one never reaches the target."""
    labels = np.asarray(strata)
    found = []
    for stratum in sorted(set(strata)):
        rows = labels == stratum
        if not y[rows].any():
            continue  # the category is never right here (no such label in this source)
        t, why = _threshold(p[rows], y[rows], target)
        if t is None:
            return None, f"{stratum}: {why}" if len(set(strata)) > 1 else why
        found.append(t)
    return (max(found), None) if found else (None, "none of its verdicts was right")


def _threshold(p: np.ndarray, y: np.ndarray, target: float) -> tuple[float | None, str | None]:
    t = confident_threshold(p, y, target)
    if t is None:
        return None, (f"held-out precision never reached {target:.2f} with one-sided 95 % "
                      f"confidence on {MIN_CONFIDENT}+ verdicts")
    if not sure_beats_unsure(p, y, t):
        sure = p >= t
        return None, (f"above the best threshold ({t:.3f}) the verdicts were less precise "
                      f"({y[sure].mean():.2f}) than below it ({y[~sure].mean():.2f})")
    return round(float(t), 6), None


def _held_out_stats(y: np.ndarray, sure: np.ndarray, truly: int) -> dict[str, object]:
    n, k = int(sure.sum()), int(y[sure].sum())
    below = ~sure
    return {"cv_confident": n,
            "cv_precision": round(k / n, 4) if n else None,
            "cv_precision_ci": wilson(k, n),
            "cv_precision_not_sure": round(float(y[below].mean()), 4) if below.any() else None,
            "cv_coverage": round(k / truly, 4) if truly else None}


def _held_out(x: np.ndarray, y: np.ndarray, groups: Sequence[str], folds: int) -> np.ndarray:
    """Out-of-fold P(right), folds grouped by ``groups``."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(set(groups))
    out = np.full(len(y), float(y.mean()))
    if n_groups < 2:
        return out
    for train, test in GroupKFold(min(folds, n_groups)).split(x, y, groups):
        fitted = _fit(x[train], y[train])
        out[test] = CategoryFit(target=0, rows=0, right=0, **fitted).probability(x[test])
    return out


def _fit(x: np.ndarray, y: np.ndarray) -> dict[str, object]:
    """Mean, scale, coefficients and intercept of the logistic model (a constant one when
    ``y`` holds one value)."""
    if y.all() or not y.any():
        return {"intercept": _log_odds(y)}
    from sklearn.linear_model import LogisticRegression

    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    model = LogisticRegression(C=REGULARISATION, max_iter=5000).fit((x - mean) / scale, y)
    return {"mean": mean.tolist(), "scale": scale.tolist(),
            "coef": model.coef_[0].tolist(), "intercept": float(model.intercept_[0])}


def _log_odds(y: np.ndarray) -> float:
    """The log-odds of the share right, smoothed (one pseudo-count on each side)."""
    p = (float(np.sum(y)) + 1.0) / (len(y) + 2.0)
    return float(np.log(p / (1 - p)))
