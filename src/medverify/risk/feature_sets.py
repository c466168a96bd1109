"""Feature sets: which of a feature file's columns the risk classifier uses, and how the
default one is chosen.

A feature name says its family: ``m{i}.<series>.<stat>`` is model ``i``'s series
(``logprob``, ``entropy``, ...), ``<cross>.m{i}_m{j}.<stat>`` a pair's cross-model series
(``kl``, ``dlogprob``, ``dentropy``, ...), ``unit.*`` the text itself (its length).
:data:`FEATURE_SETS` names the candidate sets by family; every set keeps the ``unit.*``
columns and each model's token count.

``auto`` (what ``medverify risk train`` uses unless told otherwise) follows the evidence:
each candidate is scored by cross-validation over *groups* (the question an example
answers, so a statement and its edited copy never sit on both sides of a fold), on the
training file only, with a standardised logistic regression (fast and stable on a few
thousand rows); the best mean AUC wins. The candidates' AUCs go on the classifier's card.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import Field

from medverify.errors import InputError
from medverify.risk.records import Record

LIKELIHOOD = ("logprob", "prob", "rank", "log_rank")
"""The answer tokens' own likelihood: where the K-QA signal sits (risk_feature_groups.md)."""
PREDICTIVE = ("top1", "top5", "topk_mass", "entropy", "entropy_lb")
"""The predictive distribution at each answer position."""
CROSS = ("kl", "kl_ab", "kl_ba", "dlogprob", "dentropy")
"""Cross-model series of a pair of scorers on the same characters."""
MEAN_LOGPROB = ("logprob.mean",)
"""Each model's mean token log-prob alone (a ``series.stat`` entry): the fewest columns,
for small training sets where the full families overfit (PubMedQA: 338 rows)."""

FEATURE_SETS: dict[str, tuple[str, ...] | None] = {
    "all": None,
    "likelihood": LIKELIHOOD,
    "likelihood+cross": LIKELIHOOD + CROSS,
    "likelihood+predictive": LIKELIHOOD + PREDICTIVE,
    "mean-logprob": MEAN_LOGPROB,
}
"""Candidate feature sets by family (``None``: every column)."""
CHOICES = ("auto", *FEATURE_SETS)
"""What ``risk train --feature-set`` takes: ``auto`` chooses among :data:`FEATURE_SETS`."""
MAX_FOLDS = 5


class FeatureSelection(Record):
    """The feature set a classifier uses and, for ``auto``, why: the grouped
    cross-validation AUC of every candidate on the training data."""

    name: str
    columns: list[str]
    cv_auc: dict[str, float] = Field(default_factory=dict)
    folds: int = 0
    groups: int = 0
    note: str = ""


def _model_of(head: str) -> int | None:
    return int(head[1:]) if head[:1] == "m" and head[1:].isdigit() else None


def columns(names: Sequence[str], families: tuple[str, ...] | None,
            models: set[int] | None = None) -> list[int]:
    """Indices of ``names`` in a feature set: ``families`` (None: all) of the models in
    ``models`` (None: all), the cross-model pairs within them, and the ``unit.*`` columns."""
    keep = []
    for j, name in enumerate(names):
        head, *rest = name.split(".")
        model = _model_of(head)
        if head == "unit":
            keep.append(j)
        elif model is not None:
            series = rest[0] if rest else ""
            if (models is None or model in models) and (
                    families is None or series in families or series == "n_tokens"
                    or ".".join(rest[:2]) in families):
                keep.append(j)
        elif head in CROSS and rest and "_" in rest[0]:
            pair = {_model_of(x) for x in rest[0].split("_")}
            if (models is None or pair <= models) and (families is None or head in families):
                keep.append(j)
        elif families is None:
            keep.append(j)
    return keep


def named(names: Sequence[str], name: str) -> FeatureSelection:
    """The feature set ``name`` (one of :data:`FEATURE_SETS`) over ``names``."""
    if name not in FEATURE_SETS:
        raise InputError(f"unknown feature set {name!r}; choose one of {', '.join(CHOICES)}")
    picked = [names[j] for j in columns(names, FEATURE_SETS[name])]
    if not picked:
        raise InputError(f"feature set {name!r} keeps none of the {len(names)} features")
    return FeatureSelection(name=name, columns=picked)


def cv_auc(x: np.ndarray, y: np.ndarray, groups: np.ndarray, folds: int) -> float:
    """Mean ROC AUC of a standardised logistic regression over grouped folds."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import GroupKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    aucs = []
    for train, test in GroupKFold(n_splits=folds).split(x, y, groups):
        if len(set(y[test])) < 2 or len(set(y[train])) < 2:
            continue
        clf = make_pipeline(SimpleImputer(strategy="median", keep_empty_features=True),
                            StandardScaler(), LogisticRegression(C=0.1, max_iter=2000))
        clf.fit(x[train], y[train])
        aucs.append(roc_auc_score(y[test], clf.predict_proba(x[test])[:, 1]))
    return float(np.mean(aucs)) if aucs else float("nan")


def choose(x: np.ndarray, y: np.ndarray, groups: Sequence[Any],
           names: Sequence[str]) -> FeatureSelection:
    """The candidate with the best grouped cross-validation AUC on (x, y); ``all`` when
    there are too few groups to cross-validate (said in ``note``)."""
    group_arr = np.asarray([str(g) for g in groups])
    n_groups = len(set(group_arr))
    folds = min(MAX_FOLDS, n_groups)
    if folds < 2:
        return named(names, "all").model_copy(update={
            "groups": n_groups, "note": f"{n_groups} group(s): too few to cross-validate, "
                                        "all features kept"})
    scores: dict[str, float] = {}
    for name, families in FEATURE_SETS.items():
        cols = columns(names, families)
        if cols:
            scores[name] = round(cv_auc(x[:, cols], y, group_arr, folds), 4)
    finite = {k: v for k, v in scores.items() if np.isfinite(v)}
    best = max(finite, key=lambda k: finite[k]) if finite else "all"
    note = "" if finite else "no fold held both classes: all features kept"
    return named(names, best).model_copy(update={
        "cv_auc": scores, "folds": folds, "groups": n_groups, "note": note})


def indices(names: Sequence[str], chosen: Sequence[str]) -> list[int]:
    """Positions of ``chosen`` in ``names`` (a clear error for a name that is not there)."""
    where = {n: j for j, n in enumerate(names)}
    absent = [n for n in chosen if n not in where]
    if absent:
        raise InputError(f"{len(absent)} of the classifier's features are not in the feature "
                         f"schema (first: {absent[0]!r})")
    return [where[n] for n in chosen]
