"""CHECK's database-free classifier: a stacking ensemble over token-statistics features.

Random forest, logistic regression (standardized) and XGBoost are the base models; a
logistic regression combines their out-of-fold probabilities (stratified 5-fold). Training
holds out a stratified 20 % test split and records on it the classification report, ROC
AUC per class, the confusion matrix and accuracy, plus a 2-D PCA of the standardized
features and the feature importances of the random forest and XGBoost, all in the
:class:`~medverify.risk.records.ClassifierCard` (``card.metrics``). :func:`plots_svg`
draws them as self-contained SVG.

Labels: 1 (or ``"HALLUCINATION"``) is a hallucination, 0 (or ``"FACT"``) a fact; the
probability everything here returns is P(HALLUCINATION).

Missing values: a NaN feature (a :class:`FeatureRow` lists it in ``missing``) is imputed
with that feature's median over the training split, at training and at prediction time
(the imputer is the first step of the saved pipeline). Infinite values are refused
(:class:`InputError`): they are a bug in feature extraction, not a missing value. A
feature with no finite value in the whole training set is refused too.

Saved classifiers are a joblib file plus ``card.json``. WARNING: loading a joblib file
runs code from it; only load classifiers you trust.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from medverify.errors import InputError, MissingDependencyError
from medverify.files import atomic_write_text
from medverify.risk.records import ClassifierCard, FeatureRow, FeatureSchema, RiskLabel

log = logging.getLogger("medverify.risk")

MIN_PER_CLASS = 10  # 5-fold stacking needs 5 per class in training, the test split 1+
CV_FOLDS = 5
CARD_FORMAT = "medverify-risk-classifier/1"
MODEL_FILE = "model.joblib"
CARD_FILE = "card.json"
PLOTS_DIR = "plots"
CLASS_NAMES = (RiskLabel.FACT.value, RiskLabel.HALLUCINATION.value)  # index = class code
BASE_MODELS = ["random_forest", "logistic_regression", "xgboost"]
MAX_PCA_POINTS = 2000
TOP_FEATURES = 20


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
    """A classifier loaded from disk (:func:`load_classifier`)."""

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
            f"({len(schema.names)} features): {_names('unknown', unknown)}"
            f"{'; ' if unknown and absent else ''}{_names('absent', absent)}. Extract the "
            "features with the same scorers and schema version as the classifier's card.")


def _names(what: str, names: list[str]) -> str:
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
        detail = "; ".join(p for p in (_names("missing", missing), _names("extra", extra)) if p)
        raise InputError("feature schema mismatch: feature names differ from the classifier's "
                         f"schema {expected.version!r}: {detail or 'same names, other order'}")


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
        raise InputError(f"infinite feature values in {_names('features', names)}: fix the "
                         "feature extraction (missing values should be NaN)")
    empty = np.isnan(x).all(axis=0)
    if x.shape[0] and empty.any():
        names = [schema.names[j] for j in np.flatnonzero(empty)]
        raise InputError(f"{_names('features', names)} have no value in any training row")


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


def train_classifier(x: np.ndarray, y: np.ndarray, schema: FeatureSchema, *, seed: int = 0,
                     test_size: float = 0.2, data_sha256: str, n_estimators: int = 100,
                     n_jobs: int = 1) -> TrainedRisk:
    """Train the stacking classifier on a stratified split and score it on the held-out
    part. ``y``: 0/1 (1 = HALLUCINATION) or label strings; ``data_sha256`` names the
    training data (e.g. :func:`medverify.risk.data.examples_sha256`)."""
    from sklearn.model_selection import train_test_split

    x = np.asarray(x, dtype=np.float64)
    y = encode_labels(y)
    _validate(x, y, schema, test_size)
    train, test = train_test_split(np.arange(len(y)), test_size=test_size, stratify=y,
                                   random_state=seed)
    _check_split(y[train], y[test])
    model = build_model(seed=seed, n_estimators=n_estimators, n_jobs=n_jobs)
    started = time.perf_counter()
    model.fit(x[train], y[train])
    fit_s = time.perf_counter() - started
    proba = model.predict_proba(x[test])[:, 1]
    metrics = evaluate(y[test], proba)
    metrics.update(fit_seconds=round(fit_s, 3), n_estimators=n_estimators,
                   class_counts=_split_counts(y, train, test),
                   imputed_values=int(np.isnan(x).sum()),
                   pca=pca_summary(x, y, seed), importance=importances(model, schema))
    card = ClassifierCard(schema=schema, training_data_sha256=data_sha256, n_train=len(train),
                          n_test=len(test), seed=seed, base_models=list(BASE_MODELS),
                          meta_model="logistic_regression", metrics=metrics,
                          versions=versions())
    return TrainedRisk(model, card, TestPredictions(test, y[test], proba))


def _check_split(y_train: np.ndarray, y_test: np.ndarray) -> None:
    train_min = min(int((y_train == c).sum()) for c in (0, 1))
    test_min = min(int((y_test == c).sum()) for c in (0, 1))
    if train_min < CV_FOLDS or test_min < 1:
        raise InputError(f"test_size leaves {train_min} training and {test_min} test examples "
                         f"of the rarer class; need at least {CV_FOLDS} and 1")


def _split_counts(y: np.ndarray, train: np.ndarray, test: np.ndarray) -> dict[str, Any]:
    return {part: {name: int((y[idx] == code).sum()) for code, name in enumerate(CLASS_NAMES)}
            for part, idx in (("train", train), ("test", test))}


def versions() -> dict[str, str]:
    """Versions that a saved classifier depends on."""
    out = {"python": platform.python_version()}
    for package, dist in (("sklearn", "scikit-learn"), ("xgboost", None), ("numpy", None),
                          ("joblib", None), ("medverify", None)):
        out[package] = _version(dist or package)
    return out


def _version(dist: str) -> str:
    candidates = [dist, "xgboost-cpu"] if dist == "xgboost" else [dist]
    for name in candidates:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


# --------------------------------------------------------------------------- evaluation


def evaluate(y_true: np.ndarray, proba: np.ndarray, threshold: float = 0.5) -> dict[str, Any]:
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
    return {
        "threshold": threshold,
        "accuracy": float(accuracy_score(y_true, pred)),
        "majority_baseline_accuracy": majority,
        "classification_report": _plain(report),
        "roc_auc": _aucs(y_true, np.asarray(proba)),
        "roc_curve": _roc_curve(y_true, np.asarray(proba)),
        "confusion_matrix": {"labels": list(CLASS_NAMES), "matrix": matrix.tolist()},
    }


def _aucs(y_true: np.ndarray, proba: np.ndarray) -> dict[str, float | None]:
    from sklearn.metrics import roc_auc_score

    if len(set(y_true.tolist())) < 2:
        return {"HALLUCINATION": None, "FACT": None, "macro": None}
    hallucination = float(roc_auc_score(y_true, proba))
    fact = float(roc_auc_score(1 - y_true, 1.0 - proba))
    return {"HALLUCINATION": hallucination, "FACT": fact, "macro": (hallucination + fact) / 2}


def _roc_curve(y_true: np.ndarray, proba: np.ndarray) -> dict[str, list[float]]:
    from sklearn.metrics import roc_curve

    if len(set(y_true.tolist())) < 2:
        return {"fpr": [], "tpr": []}
    fpr, tpr, _ = roc_curve(y_true, proba, drop_intermediate=True)
    return {"fpr": [round(float(v), 5) for v in fpr], "tpr": [round(float(v), 5) for v in tpr]}


def _plain(value: Any) -> Any:
    """numpy scalars and nested containers as plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def pca_summary(x: np.ndarray, y: np.ndarray, seed: int = 0) -> dict[str, Any]:
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
    return {
        "explained_variance_ratio": [float(v) for v in pca.explained_variance_ratio_],
        "points": [[round(float(points[i, 0]), 4), round(float(points[i, 1]), 4), int(y[i])]
                   for i in keep],
    }


def importances(model: Any, schema: FeatureSchema) -> dict[str, dict[str, float]]:
    """Feature importances of the fitted base models, by schema name: the random forest's
    impurity importance and XGBoost's gain (average gain of the splits on the feature),
    each also normalised to sum to 1 (``*_share``)."""
    stack = model.named_steps["stack"]
    forest = stack.named_estimators_["rf"].feature_importances_
    booster = stack.named_estimators_["xgb"].get_booster()
    gain = booster.get_score(importance_type="gain")
    gains = np.array([float(gain.get(f"f{j}", 0.0)) for j in range(len(schema.names))])
    return {
        "random_forest": _by_name(schema, forest),
        "xgboost_gain": _by_name(schema, gains),
        "random_forest_share": _by_name(schema, _share(forest)),
        "xgboost_gain_share": _by_name(schema, _share(gains)),
    }


def _share(values: np.ndarray) -> np.ndarray:
    total = float(np.sum(values))
    return values / total if total > 0 else np.zeros_like(values, dtype=np.float64)


def _by_name(schema: FeatureSchema, values: np.ndarray) -> dict[str, float]:
    return {name: float(v) for name, v in zip(schema.names, values, strict=True)}


# --------------------------------------------------------------------------- save / load


def save(trained: TrainedRisk, directory: str | Path) -> Path:
    """Write ``model.joblib``, ``card.json`` (the card, the joblib file's sha256 and its
    format) and ``plots/*.svg`` into ``directory``; returns the directory."""
    import joblib

    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    model_path = folder / MODEL_FILE
    joblib.dump(trained.model, model_path)
    envelope = {"format": CARD_FORMAT, "model_file": MODEL_FILE,
                "model_sha256": file_sha256(model_path),
                "card": trained.card.model_dump(mode="json", by_alias=True)}
    atomic_write_text(folder / CARD_FILE, json.dumps(envelope, indent=2) + "\n")
    (folder / PLOTS_DIR).mkdir(exist_ok=True)
    for name, svg in plots_svg(trained).items():
        atomic_write_text(folder / PLOTS_DIR / f"{name}.svg", svg)
    return folder


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_card(directory: str | Path) -> tuple[ClassifierCard, dict[str, Any]]:
    """The card of a saved classifier and its envelope (format, model file, sha256)."""
    path = Path(directory) / CARD_FILE
    if not path.is_file():
        raise InputError(f"{path} not found: not a saved classifier directory")
    try:
        envelope = json.loads(path.read_text("utf-8"))
        if envelope.get("format") != CARD_FORMAT:
            raise InputError(f"{path}: format {envelope.get('format')!r} is not {CARD_FORMAT!r}")
        return ClassifierCard.model_validate(envelope["card"]), envelope
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise InputError(f"{path} is not a valid classifier card: {exc}") from None


def load_classifier(directory: str | Path) -> LoadedRisk:
    """Load a classifier saved by :func:`save`, after checking that the joblib file's
    sha256 is the one recorded in ``card.json``.

    WARNING: joblib (pickle) files execute code when loaded. Only load classifiers you
    trust. The sha256 check detects a corrupted or swapped model file, not an attacker who
    can rewrite ``card.json`` as well.
    """
    folder = Path(directory)
    card, envelope = read_card(folder)
    model_path = folder / str(envelope.get("model_file", MODEL_FILE))
    if model_path.parent != folder or not model_path.is_file():
        raise InputError(f"{model_path} not found (named in {folder / CARD_FILE})")
    digest = file_sha256(model_path)
    if digest != envelope.get("model_sha256"):
        raise InputError(f"{model_path} does not match the sha256 recorded in card.json "
                         f"(tampered with or corrupted); refusing to load it")
    import joblib

    _warn_versions(card, model_path)
    model = joblib.load(model_path)
    _check_loaded(model, card, model_path)
    return LoadedRisk(model, card, folder, digest)


def _warn_versions(card: ClassifierCard, path: Path) -> None:
    now = versions()
    for package in ("sklearn", "xgboost", "numpy"):
        saved = card.versions.get(package)
        if saved and saved != now[package]:
            log.warning("%s was saved with %s %s; this is %s %s: predictions may differ",
                        path, package, saved, package, now[package])


def _check_loaded(model: Any, card: ClassifierCard, path: Path) -> None:
    n_features = getattr(model, "n_features_in_", None)
    if not hasattr(model, "predict_proba") or n_features != len(card.schema_.names):
        raise InputError(f"{path} is not a classifier for the {len(card.schema_.names)} "
                         f"features of its card (it takes {n_features})")
    if list(getattr(model, "classes_", [])) != [0, 1]:
        raise InputError(f"{path}: classifier classes are {getattr(model, 'classes_', None)}, "
                         "expected [0, 1]")


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
    if np.isinf(matrix).any():
        raise InputError("infinite feature values: missing features should be listed in "
                         "FeatureRow.missing")
    return [float(p) for p in loaded.model.predict_proba(matrix)[:, 1]]


# --------------------------------------------------------------------------- plots

BLUE, ORANGE, INK, MUTED, GRID = "#0072B2", "#E69F00", "#1b2330", "#5b6575", "#dde2ea"
CLASS_COLOURS = (BLUE, ORANGE)
FONT = 'font-family="system-ui, sans-serif"'


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _svg(width: int, height: int, title: str, body: Sequence[str]) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" '
            f'aria-label="{_e(title)}" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" {FONT}><title>{_e(title)}</title>'
            f'<text x="12" y="22" font-size="14" font-weight="600" fill="{INK}">{_e(title)}'
            f"</text>{''.join(body)}</svg>")


def _text(x: float, y: float, text: object, *, size: int = 11, anchor: str = "start",
          fill: str = MUTED, extra: str = "", tip: str | None = None) -> str:
    title = f"<title>{_e(tip)}</title>" if tip is not None else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="{fill}"{extra}>{title}{_e(text)}</text>')


@dataclass(frozen=True)
class _Box:
    """A plot area mapping data ranges to pixels (y grows upwards)."""

    left: float
    top: float
    width: float
    height: float
    x_range: tuple[float, float] = (0.0, 1.0)
    y_range: tuple[float, float] = (0.0, 1.0)

    def x(self, value: float) -> float:
        low, high = self.x_range
        return self.left + self.width * (value - low) / ((high - low) or 1.0)

    def y(self, value: float) -> float:
        low, high = self.y_range
        return self.top + self.height - self.height * (value - low) / ((high - low) or 1.0)

    def frame(self) -> str:
        return (f'<rect x="{self.left}" y="{self.top}" width="{self.width}" '
                f'height="{self.height}" fill="none" stroke="{MUTED}" stroke-width="1"/>')


def _unit_ticks(box: _Box) -> list[str]:
    parts = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x, y = box.x(tick), box.y(tick)
        parts.append(f'<path d="M{x:.1f} {box.top}V{box.top + box.height}M{box.left} {y:.1f}'
                     f'H{box.left + box.width}" stroke="{GRID}" stroke-width="1"/>')
        parts.append(_text(x, box.top + box.height + 14, f"{tick:g}", anchor="middle"))
        parts.append(_text(box.left - 6, y + 4, f"{tick:g}", anchor="end"))
    return parts


def _axis_labels(box: _Box, x_label: str, y_label: str) -> list[str]:
    mid = box.top + box.height / 2
    return [_text(box.left + box.width / 2, box.top + box.height + 32, x_label, size=12,
                  anchor="middle"),
            _text(14, mid, y_label, size=12, anchor="middle",
                  extra=f' transform="rotate(-90 14 {mid:.1f})"')]


def roc_svg(metrics: Mapping[str, Any]) -> str:
    """The ROC curve of P(HALLUCINATION) on the test split, with the chance diagonal."""
    box = _Box(56, 40, 300, 300)
    curve = metrics.get("roc_curve", {})
    auc = metrics.get("roc_auc", {}).get("HALLUCINATION")
    points = " ".join(f"{box.x(f):.1f},{box.y(t):.1f}"
                      for f, t in zip(curve.get("fpr", []), curve.get("tpr", []), strict=True))
    label = f"AUC = {auc:.3f}" if auc is not None else "AUC undefined (one class)"
    body = [*_unit_ticks(box), box.frame(),
            f'<path d="M{box.x(0)} {box.y(0)}L{box.x(1)} {box.y(1)}" stroke="{MUTED}" '
            f'stroke-dasharray="5 4" fill="none"><title>chance (AUC = 0.5)</title></path>',
            f'<polyline points="{points}" fill="none" stroke="{BLUE}" stroke-width="2">'
            f"<title>{_e(label)}</title></polyline>",
            _text(box.x(0.97), box.y(0.05), label, size=12, anchor="end", fill=INK),
            *_axis_labels(box, "False positive rate", "True positive rate")]
    return _svg(380, 390, "ROC curve, hallucination class (test split)", body)


def confusion_svg(metrics: Mapping[str, Any]) -> str:
    """The confusion matrix with counts and row shares; darker = larger row share."""
    matrix = metrics.get("confusion_matrix", {}).get("matrix", [[0, 0], [0, 0]])
    cell, left, top = 110, 150, 70
    body = [_text(left + cell, top - 12, "Predicted", size=12, anchor="middle", fill=INK)]
    for j, name in enumerate(CLASS_NAMES):
        body.append(_text(left + cell * j + cell / 2, top + 2 * cell + 18, name, anchor="middle"))
        body.append(_text(left - 8, top + cell * j + cell / 2 + 4, name, anchor="end"))
    for i, row in enumerate(matrix):
        total = sum(row) or 1
        for j, count in enumerate(row):
            body.append(_cell(left + cell * j, top + cell * i, cell, count, count / total,
                              f"true {CLASS_NAMES[i]}, predicted {CLASS_NAMES[j]}"))
    body.append(_text(16, top + cell, "True", size=12, anchor="middle", fill=INK,
                      extra=f' transform="rotate(-90 16 {top + cell})"'))
    return _svg(left + 2 * cell + 20, top + 2 * cell + 36, "Confusion matrix (test split)", body)


def _cell(x: float, y: float, size: float, count: int, share: float, what: str) -> str:
    shade = 0.12 + 0.78 * share
    colour = "#ffffff" if share > 0.55 else INK
    return (f'<g><title>{_e(what)}: {count} ({share:.0%} of the row)</title>'
            f'<rect x="{x}" y="{y}" width="{size}" height="{size}" fill="{BLUE}" '
            f'fill-opacity="{shade:.2f}" stroke="{INK}" stroke-width="0.5"/>'
            + _text(x + size / 2, y + size / 2, f"{count:,}", size=16, anchor="middle",
                    fill=colour)
            + _text(x + size / 2, y + size / 2 + 18, f"{share:.0%}", anchor="middle", fill=colour)
            + "</g>")


def pca_svg(pca: Mapping[str, Any]) -> str:
    """The PCA scatter: facts as blue circles, hallucinations as orange squares."""
    points = pca.get("points", [])
    ratio = [*pca.get("explained_variance_ratio", []), 0.0, 0.0]
    xs = [p[0] for p in points] or [0.0]
    ys = [p[1] for p in points] or [0.0]
    box = _Box(56, 40, 360, 300, _padded(xs), _padded(ys))
    body = [box.frame(), *_axis_labels(box, f"PC1 ({ratio[0]:.0%} of variance)",
                                       f"PC2 ({ratio[1]:.0%} of variance)")]
    for x, y, cls in points:
        body.append(_marker(box.x(x), box.y(y), int(cls)))
    body += _class_legend(box.left + box.width + 12, box.top + 10)
    return _svg(560, 390, "PCA of the standardized features", body)


def _padded(values: Sequence[float]) -> tuple[float, float]:
    low, high = min(values), max(values)
    pad = (high - low) * 0.05 or 1.0
    return low - pad, high + pad


def _marker(x: float, y: float, cls: int) -> str:
    colour = CLASS_COLOURS[cls]
    if cls:
        return (f'<rect x="{x - 2.5:.1f}" y="{y - 2.5:.1f}" width="5" height="5" '
                f'fill="{colour}" fill-opacity="0.7"/>')
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.6" fill="{colour}" fill-opacity="0.6"/>'


def _class_legend(x: float, y: float) -> list[str]:
    parts = []
    for cls, name in enumerate(CLASS_NAMES):
        parts.append(_marker(x + 4, y + 22 * cls, cls))
        parts.append(_text(x + 14, y + 22 * cls + 4, name, fill=INK))
    return parts


def importance_svg(importance: Mapping[str, Mapping[str, float]],
                   top: int = TOP_FEATURES) -> str:
    """The ``top`` features by mean normalised importance: one bar for the random forest
    (impurity) and one for XGBoost (gain), each as a share of its model's total."""
    forest = importance.get("random_forest_share", {})
    gain = importance.get("xgboost_gain_share", {})
    ranked = sorted(forest, key=lambda n: -(forest.get(n, 0.0) + gain.get(n, 0.0)))[:top]
    peak = max([forest.get(n, 0.0) for n in ranked] + [gain.get(n, 0.0) for n in ranked]
               + [1e-12])
    left, row, bar, width = 230, 26, 10, 300
    body = []
    for i, name in enumerate(ranked):
        y = 44 + i * row
        body.append(_text(left - 8, y + 14, _short(name, 32), anchor="end", fill=INK, tip=name))
        for k, (series, values) in enumerate((("random forest", forest), ("XGBoost gain", gain))):
            value = values.get(name, 0.0)
            body.append(f'<rect x="{left}" y="{y + 2 + k * bar:.1f}" '
                        f'width="{max(width * value / peak, 0.8):.1f}" height="{bar - 1}" '
                        f'fill="{CLASS_COLOURS[k]}"><title>{_e(name)} · {series}: '
                        f"{value:.1%}</title></rect>")
    legend_y = 44 + len(ranked) * row + 10
    body += [f'<rect x="{left}" y="{legend_y}" width="12" height="10" fill="{BLUE}"/>',
             _text(left + 16, legend_y + 9, "random forest (impurity)", fill=INK),
             f'<rect x="{left + 170}" y="{legend_y}" width="12" height="10" fill="{ORANGE}"/>',
             _text(left + 186, legend_y + 9, "XGBoost (gain)", fill=INK)]
    title = f"Top {len(ranked)} features (share of each model's importance)"
    return _svg(left + width + 60, legend_y + 24, title, body)


def _short(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"


def plots_svg(trained: TrainedRisk | LoadedRisk | ClassifierCard) -> dict[str, str]:
    """The card's charts as inline SVG: ``roc``, ``confusion``, ``pca``, ``importance``."""
    card = trained if isinstance(trained, ClassifierCard) else trained.card
    metrics = card.metrics
    return {"roc": roc_svg(metrics), "confusion": confusion_svg(metrics),
            "pca": pca_svg(metrics.get("pca", {})),
            "importance": importance_svg(metrics.get("importance", {}))}
