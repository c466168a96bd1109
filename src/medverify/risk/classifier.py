"""CHECK's database-free classifier: a stacking ensemble over token-statistics features.

Random forest, logistic regression (standardized) and XGBoost are the base models; a
logistic regression combines their out-of-fold probabilities (stratified 5-fold). This
module holds the model (:func:`build_model`, :class:`TrainedRisk`, :class:`LoadedRisk`)
and scoring (:func:`predict_proba`); training and evaluation are in
:mod:`medverify.risk.training`, saving and loading in :mod:`medverify.risk.persist`, the
charts in :mod:`medverify.risk.plots`.

Labels: 1 (or ``"HALLUCINATION"``) is a hallucination, 0 (or ``"FACT"``) a fact; the
probability everything here returns is P(HALLUCINATION).

Missing values: a NaN feature (a :class:`FeatureRow` lists it in ``missing``) is imputed
with that feature's median over the training split, at training and at prediction time
(the imputer is the first step of the pipeline). Infinite values are refused
(:class:`InputError`): they are a bug in feature extraction, not a missing value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from medverify.errors import InputError, MissingDependencyError
from medverify.risk.records import ClassifierCard, FeatureRow, FeatureSchema, RiskLabel

MIN_PER_CLASS = 10  # 5-fold stacking needs 5 per class in training, the test split 1+
CV_FOLDS = 5
CLASS_NAMES = (RiskLabel.FACT.value, RiskLabel.HALLUCINATION.value)  # index = class code
BASE_MODELS = ["random_forest", "logistic_regression", "xgboost"]


@dataclass(frozen=True)
class TestPredictions:
    """The held-out split: row indices into the training matrix, true classes (1 =
    hallucination) and the predicted P(HALLUCINATION)."""

    __test__ = False  # not a pytest class

    indices: np.ndarray
    y_true: np.ndarray
    proba: np.ndarray


@dataclass
class TrainedRisk:
    """A freshly trained classifier: the fitted pipeline (median imputer, then the
    StackingClassifier), its card and its test-split predictions."""

    model: Any  # sklearn Pipeline
    card: ClassifierCard
    test: TestPredictions

    @property
    def stacking(self) -> Any:
        """The fitted sklearn StackingClassifier."""
        return self.model.named_steps["stack"]


@dataclass
class LoadedRisk:
    """A classifier loaded from disk (:func:`medverify.risk.persist.load_classifier`)."""

    model: Any
    card: ClassifierCard
    directory: Path
    model_sha256: str

    @property
    def schema(self) -> FeatureSchema:
        return self.card.schema_

    @property
    def id(self) -> str:
        """A short name for provenance (``RiskScore.classifier``)."""
        return f"{self.directory.name}@{self.card.training_data_sha256[:12]}"


# --------------------------------------------------------------------------- inputs


def encode_labels(y: Sequence[Any] | np.ndarray) -> np.ndarray:
    """Labels as a 0/1 int array (1 = HALLUCINATION); accepts 0/1, bools, RiskLabel or
    the strings "FACT"/"HALLUCINATION"."""
    out = np.empty(len(y), dtype=np.int64)
    for i, value in enumerate(y):
        out[i] = _label_code(value, i)
    return out


def _label_code(value: Any, position: int) -> int:
    text = str(value.value if isinstance(value, RiskLabel) else value).strip().upper()
    codes = {"0": 0, "1": 1, "FALSE": 0, "TRUE": 1, "FACT": 0, "HALLUCINATION": 1}
    if isinstance(value, float | np.floating) and float(value) in (0.0, 1.0):
        return int(value)
    if text not in codes:
        raise InputError(f"label {value!r} at row {position} is not FACT/HALLUCINATION (0/1)")
    return codes[text]


def feature_matrix(rows: Sequence[FeatureRow], schema: FeatureSchema) -> np.ndarray:
    """The rows' values in the schema's column order (NaN for features listed as missing).

    Raises :class:`InputError` when a row's granularity or feature names do not match the
    schema (a feature neither given nor listed as missing, or one the schema lacks).
    """
    known = set(schema.names)
    matrix = np.full((len(rows), len(schema.names)), np.nan, dtype=np.float64)
    for i, row in enumerate(rows):
        _check_row(row, schema, known)
        missing = set(row.missing)  # their values are fill-ins (0.0), not measurements
        for j, name in enumerate(schema.names):
            if name in row.values and name not in missing:
                matrix[i, j] = row.values[name]
    return matrix


def _check_row(row: FeatureRow, schema: FeatureSchema, known: set[str]) -> None:
    where = f"feature row {row.unit_id!r}"
    if row.granularity != schema.granularity:
        raise InputError(f"{where} is at {row.granularity} level but the classifier was trained "
                         f"on {schema.granularity}-level features (schema {schema.version})")
    present = set(row.values) | set(row.missing)
    unknown, absent = sorted(set(row.values) - known), sorted(known - present)
    if unknown or absent:
        raise InputError(
            f"feature schema mismatch: {where} does not match schema {schema.version!r} "
            f"({len(schema.names)} features): {names_text('unknown', unknown)}"
            f"{'; ' if unknown and absent else ''}{names_text('absent', absent)}. Extract the "
            "features with the same scorers and schema version as the classifier's card.")


def names_text(what: str, names: list[str]) -> str:
    """``names`` for an error message: "3 unknown (a, b, c)", at most five of them shown."""
    if not names:
        return ""
    shown = ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")
    return f"{len(names)} {what} ({shown})"


def check_schema(expected: FeatureSchema, actual: FeatureSchema) -> None:
    """Refuse features made under another schema (version, granularity, scorers, names)."""
    for field in ("version", "granularity", "scorers"):
        want, got = getattr(expected, field), getattr(actual, field)
        if want != got:
            raise InputError(f"feature schema mismatch: the classifier was trained with "
                             f"{field} {want!r}, these features have {got!r}")
    if expected.names != actual.names:
        missing = [n for n in expected.names if n not in set(actual.names)]
        extra = [n for n in actual.names if n not in set(expected.names)]
        parts = (names_text("missing", missing), names_text("extra", extra))
        detail = "; ".join(p for p in parts if p)
        raise InputError("feature schema mismatch: feature names differ from the classifier's "
                         f"schema {expected.version!r}: {detail or 'same names, other order'}")


# --------------------------------------------------------------------------- model


def build_model(*, seed: int = 0, n_estimators: int = 100, n_jobs: int = 1) -> Any:
    """The unfitted pipeline: median imputer, then the stacking ensemble."""
    from sklearn.ensemble import RandomForestClassifier, StackingClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    xgboost = _xgboost()
    base = [
        ("rf", RandomForestClassifier(n_estimators=n_estimators, random_state=seed,
                                      n_jobs=n_jobs)),
        ("lr", Pipeline([("scale", StandardScaler()),
                         ("lr", LogisticRegression(max_iter=2000, random_state=seed))])),
        ("xgb", xgboost.XGBClassifier(n_estimators=n_estimators, max_depth=4,
                                      learning_rate=0.1, tree_method="hist", n_jobs=n_jobs,
                                      random_state=seed, eval_metric="logloss")),
    ]
    stack = StackingClassifier(
        estimators=base, final_estimator=LogisticRegression(max_iter=2000),
        cv=StratifiedKFold(CV_FOLDS, shuffle=True, random_state=seed),
        stack_method="predict_proba")
    impute = SimpleImputer(strategy="median", keep_empty_features=True)
    return Pipeline([("impute", impute), ("stack", stack)])


def _xgboost() -> Any:
    try:
        import xgboost
    except ImportError:  # pragma: no cover - installed with the risk extra
        raise MissingDependencyError("xgboost-cpu", "risk") from None
    return xgboost


# --------------------------------------------------------------------------- scoring


def predict_proba(loaded: LoadedRisk | TrainedRisk, rows: Sequence[FeatureRow], *,
                  schema: FeatureSchema | None = None) -> list[float]:
    """P(HALLUCINATION) for each row. ``schema``, when given, is the schema the rows were
    extracted with, checked against the card's; every row's names are checked anyway."""
    expected = loaded.card.schema_
    if schema is not None:
        check_schema(expected, schema)
    if not rows:
        return []
    matrix = feature_matrix(rows, expected)
    if loaded.card.columns is not None:
        from medverify.risk.feature_sets import indices

        matrix = matrix[:, indices(expected.names, loaded.card.columns)]
    if np.isinf(matrix).any():
        raise InputError("infinite feature values: missing features should be listed in "
                         "FeatureRow.missing")
    return [float(p) for p in loaded.model.predict_proba(matrix)[:, 1]]
