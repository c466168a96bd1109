"""Training and evaluation of the risk classifier (:mod:`medverify.risk.classifier`).

Training holds out a stratified 20 % test split and records on it the classification
report, ROC AUC per class, the confusion matrix and accuracy (:func:`evaluate`), plus a
2-D PCA of the standardized features and the feature importances of the random forest
and XGBoost, all in the card's :class:`~medverify.risk.records.TrainingMetrics`.

A feature with no finite value in the whole training set is refused
(:class:`InputError`), as are infinite values and too few examples of a class.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from medverify.errors import InputError
from medverify.risk.classifier import (
    BASE_MODELS,
    CLASS_NAMES,
    CV_FOLDS,
    MIN_PER_CLASS,
    TestPredictions,
    TrainedRisk,
    build_model,
    encode_labels,
    names_text,
)
from medverify.risk.feature_sets import FeatureSelection, indices
from medverify.risk.persist import versions
from medverify.risk.records import (
    ClassifierCard,
    ConfusionMatrix,
    FeatureSchema,
    Importances,
    PcaSummary,
    RiskMetrics,
    RocAuc,
    RocCurve,
    TrainingMetrics,
)

MAX_PCA_POINTS = 2000


# --------------------------------------------------------------------------- checks


def _validate(x: np.ndarray, y: np.ndarray, schema: FeatureSchema, test_size: float) -> None:
    if x.ndim != 2 or x.shape[0] != y.shape[0]:
        raise InputError(f"features must be a 2-D array with one row per label; got shape "
                         f"{x.shape} for {y.shape[0]} labels")
    if x.shape[1] != len(schema.names):
        raise InputError(f"features have {x.shape[1]} columns but schema {schema.version!r} "
                         f"names {len(schema.names)}")
    if not 0.0 < test_size < 1.0:
        raise InputError(f"test_size must be between 0 and 1, got {test_size}")
    _check_finite(x, schema)
    _check_classes(y)


def _check_finite(x: np.ndarray, schema: FeatureSchema) -> None:
    infinite = np.isinf(x).any(axis=0)
    if infinite.any():
        names = [schema.names[j] for j in np.flatnonzero(infinite)]
        raise InputError(f"infinite feature values in {names_text('features', names)}: fix the "
                         "feature extraction (missing values should be NaN)")
    empty = np.isnan(x).all(axis=0)
    if x.shape[0] and empty.any():
        names = [schema.names[j] for j in np.flatnonzero(empty)]
        raise InputError(f"{names_text('features', names)} have no value in any training row")


def _check_classes(y: np.ndarray) -> None:
    counts = {name: int((y == code).sum()) for code, name in enumerate(CLASS_NAMES)}
    if min(counts.values()) == 0:
        present = [name for name, n in counts.items() if n]
        raise InputError(f"training needs both FACT and HALLUCINATION examples; got only "
                         f"{present or 'none'} ({counts})")
    if min(counts.values()) < MIN_PER_CLASS:
        raise InputError(f"too few examples: training needs at least {MIN_PER_CLASS} of each "
                         f"class (stratified {CV_FOLDS}-fold stacking and a test split); got "
                         f"{counts}")


# --------------------------------------------------------------------------- training


def train_classifier(x: np.ndarray, y: np.ndarray, schema: FeatureSchema, *, seed: int = 0,
                     test_size: float = 0.2, data_sha256: str, n_estimators: int = 100,
                     n_jobs: int = 1, selection: FeatureSelection | None = None,
                     groups: Sequence[Any] | None = None,
                     trained_on: Mapping[str, Any] | None = None) -> TrainedRisk:
    """Train the stacking classifier on a stratified split and score it on the held-out
    part. ``y``: 0/1 (1 = HALLUCINATION) or label strings; ``data_sha256`` names the
    training data (e.g. :func:`medverify.risk.data.examples_sha256`). ``selection``: the
    feature set (:mod:`medverify.risk.feature_sets`; None: every column of ``schema``);
    ``groups``: split by group (e.g. the question) instead of by example, so related
    examples never sit on both sides; ``trained_on``: the data's description for the card."""
    x = np.asarray(x, dtype=np.float64)
    y = encode_labels(y)
    if x.ndim == 2 and x.shape[1] != len(schema.names):
        raise InputError(f"features have {x.shape[1]} columns but schema {schema.version!r} "
                         f"names {len(schema.names)}")
    used = schema
    if selection is not None:
        x = x[:, indices(schema.names, selection.columns)]
        used = schema.model_copy(update={"names": list(selection.columns)})
    _validate(x, y, used, test_size)
    train, test = _split(y, test_size, seed, groups)
    _check_split(y[train], y[test])
    model = build_model(seed=seed, n_estimators=n_estimators, n_jobs=n_jobs)
    started = time.perf_counter()
    model.fit(x[train], y[train])
    fit_s = time.perf_counter() - started
    proba = model.predict_proba(x[test])[:, 1]
    metrics = TrainingMetrics(**dict(evaluate(y[test], proba)), fit_seconds=round(fit_s, 3),
                              n_estimators=n_estimators,
                              class_counts=_split_counts(y, train, test),
                              imputed_values=int(np.isnan(x).sum()),
                              pca=pca_summary(x, y, seed), importance=importances(model, used))
    card = ClassifierCard(
        schema=schema, training_data_sha256=data_sha256, n_train=len(train),
        n_test=len(test), seed=seed, base_models=list(BASE_MODELS),
        meta_model="logistic_regression", metrics=metrics.model_dump(mode="json"),
        versions=versions(), columns=None if selection is None else list(selection.columns),
        feature_selection={} if selection is None else selection.model_dump(
            exclude={"columns"}) | {"n_columns": len(selection.columns)},
        trained_on={**(trained_on or {}), "inner_split": "by group" if groups is not None
                    else "by example (stratified)"})
    return TrainedRisk(model, card, TestPredictions(test, y[test], proba))


def _split(y: np.ndarray, test_size: float, seed: int,
           groups: Sequence[Any] | None) -> tuple[np.ndarray, np.ndarray]:
    """Train/test indices: stratified by label, or by group when ``groups`` is given."""
    from sklearn.model_selection import GroupShuffleSplit, train_test_split

    if groups is None:
        train, test = train_test_split(np.arange(len(y)), test_size=test_size, stratify=y,
                                       random_state=seed)
        return np.asarray(train), np.asarray(test)
    group_arr = np.asarray([str(g) for g in groups])
    if len(group_arr) != len(y):
        raise InputError(f"{len(group_arr)} groups for {len(y)} labels")
    if len(set(group_arr)) < 2:
        raise InputError("a split by group needs at least 2 groups")
    split = GroupShuffleSplit(n_splits=1, test_size=test_size, random_state=seed)
    train, test = next(split.split(np.zeros(len(y)), y, group_arr))
    return train, test


def _check_split(y_train: np.ndarray, y_test: np.ndarray) -> None:
    train_min = min(int((y_train == c).sum()) for c in (0, 1))
    test_min = min(int((y_test == c).sum()) for c in (0, 1))
    if train_min < CV_FOLDS or test_min < 1:
        raise InputError(f"test_size leaves {train_min} training and {test_min} test examples "
                         f"of the rarer class; need at least {CV_FOLDS} and 1")


def _split_counts(y: np.ndarray, train: np.ndarray,
                  test: np.ndarray) -> dict[str, dict[str, int]]:
    return {part: {name: int((y[idx] == code).sum()) for code, name in enumerate(CLASS_NAMES)}
            for part, idx in (("train", train), ("test", test))}


# --------------------------------------------------------------------------- evaluation


def evaluate(y_true: np.ndarray, proba: np.ndarray, threshold: float = 0.5) -> RiskMetrics:
    """Test-split metrics: classification report, ROC AUC per class (and macro) with the ROC
    curve of P(HALLUCINATION), confusion matrix (rows true, columns predicted), accuracy and
    the majority-class baseline accuracy."""
    from sklearn.metrics import accuracy_score, classification_report, confusion_matrix

    y_true = encode_labels(y_true)
    pred = (np.asarray(proba) >= threshold).astype(np.int64)
    report = classification_report(y_true, pred, labels=[0, 1], target_names=list(CLASS_NAMES),
                                   output_dict=True, zero_division=0)
    matrix = confusion_matrix(y_true, pred, labels=[0, 1])
    majority = max(float(np.mean(y_true)), 1.0 - float(np.mean(y_true))) if len(y_true) else 0.0
    return RiskMetrics(
        threshold=threshold,
        accuracy=float(accuracy_score(y_true, pred)),
        majority_baseline_accuracy=majority,
        classification_report=_plain(report),
        roc_auc=_aucs(y_true, np.asarray(proba)),
        roc_curve=_roc_curve(y_true, np.asarray(proba)),
        confusion_matrix=ConfusionMatrix(labels=list(CLASS_NAMES), matrix=matrix.tolist()),
    )


def _aucs(y_true: np.ndarray, proba: np.ndarray) -> RocAuc:
    from sklearn.metrics import roc_auc_score

    if len(set(y_true.tolist())) < 2:
        return RocAuc(HALLUCINATION=None, FACT=None, macro=None)
    hallucination = float(roc_auc_score(y_true, proba))
    fact = float(roc_auc_score(1 - y_true, 1.0 - proba))
    return RocAuc(HALLUCINATION=hallucination, FACT=fact, macro=(hallucination + fact) / 2)


def _roc_curve(y_true: np.ndarray, proba: np.ndarray) -> RocCurve:
    from sklearn.metrics import roc_curve

    if len(set(y_true.tolist())) < 2:
        return RocCurve(fpr=[], tpr=[])
    fpr, tpr, _ = roc_curve(y_true, proba, drop_intermediate=True)
    return RocCurve(fpr=[round(float(v), 5) for v in fpr], tpr=[round(float(v), 5) for v in tpr])


def _plain(value: Any) -> Any:
    """numpy scalars and nested containers as plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def pca_summary(x: np.ndarray, y: np.ndarray, seed: int = 0) -> PcaSummary:
    """Two principal components of the standardized (median-imputed) features: the
    explained variance ratio and up to 2,000 points (a seeded sample) with their class."""
    from sklearn.decomposition import PCA
    from sklearn.impute import SimpleImputer
    from sklearn.preprocessing import StandardScaler

    filled = SimpleImputer(strategy="median", keep_empty_features=True).fit_transform(x)
    scaled = StandardScaler().fit_transform(filled)
    components = min(2, scaled.shape[1], scaled.shape[0])
    pca = PCA(n_components=components, random_state=seed)
    points = pca.fit_transform(scaled)
    if components < 2:
        points = np.column_stack([points, np.zeros(len(points))])
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(len(y), size=min(len(y), MAX_PCA_POINTS), replace=False))
    return PcaSummary(
        explained_variance_ratio=[float(v) for v in pca.explained_variance_ratio_],
        points=[(round(float(points[i, 0]), 4), round(float(points[i, 1]), 4), int(y[i]))
                for i in keep],
    )


def importances(model: Any, schema: FeatureSchema) -> Importances:
    """Feature importances of the fitted base models, by schema name: the random forest's
    impurity importance and XGBoost's gain (average gain of the splits on the feature),
    each also normalised to sum to 1 (``*_share``)."""
    stack = model.named_steps["stack"]
    forest = stack.named_estimators_["rf"].feature_importances_
    booster = stack.named_estimators_["xgb"].get_booster()
    gain = booster.get_score(importance_type="gain")
    gains = np.array([float(gain.get(f"f{j}", 0.0)) for j in range(len(schema.names))])
    return Importances(
        random_forest=_by_name(schema, forest),
        xgboost_gain=_by_name(schema, gains),
        random_forest_share=_by_name(schema, _share(forest)),
        xgboost_gain_share=_by_name(schema, _share(gains)),
    )


def _share(values: np.ndarray) -> np.ndarray:
    total = float(np.sum(values))
    return values / total if total > 0 else np.zeros_like(values, dtype=np.float64)


def _by_name(schema: FeatureSchema, values: np.ndarray) -> dict[str, float]:
    return {name: float(v) for name, v in zip(schema.names, values, strict=True)}
