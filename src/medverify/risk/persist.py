"""Saving and loading the risk classifier (:mod:`medverify.risk.classifier`).

A saved classifier is a directory: ``model.joblib`` (the fitted pipeline), ``card.json``
(the :class:`~medverify.risk.records.ClassifierCard`, the joblib file's sha256 and the
format) and ``plots/*.svg`` (:mod:`medverify.risk.plots`). WARNING: loading a joblib file
runs code from it; only load classifiers you trust.
"""

from __future__ import annotations

import json
import logging
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from medverify.errors import InputError
from medverify.files import atomic_write_text, file_sha256
from medverify.risk.classifier import LoadedRisk, TrainedRisk
from medverify.risk.plots import plots_svg
from medverify.risk.records import ClassifierCard

log = logging.getLogger("medverify.risk")

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data" / "risk_classifiers"
"""Classifiers shipped with medverify, one directory each (``medverify risk classifiers``)."""
CARD_FORMAT = "medverify-risk-classifier/1"
MODEL_FILE = "model.joblib"
CARD_FILE = "card.json"
PLOTS_DIR = "plots"


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


def shipped_classifiers() -> dict[str, Path]:
    """The classifiers shipped with medverify: name -> directory."""
    if not SHIPPED_DIR.is_dir():
        return {}
    return {p.name: p for p in sorted(SHIPPED_DIR.iterdir()) if (p / CARD_FILE).is_file()}


def classifier_dir(value: str | Path) -> Path:
    """A classifier directory, or the name of one shipped with medverify (a directory of
    that name wins)."""
    folder = Path(value).expanduser()
    if folder.is_dir():
        return folder
    return shipped_classifiers().get(str(value), folder)


def read_card(directory: str | Path) -> tuple[ClassifierCard, dict[str, Any]]:
    """The card of a saved classifier (a directory or a shipped name) and its envelope
    (format, model file, sha256)."""
    path = classifier_dir(directory) / CARD_FILE
    if not path.is_file():
        names = ", ".join(shipped_classifiers()) or "none"
        raise InputError(f"{path} not found: not a saved classifier directory or the name of "
                         f"a shipped one ({names})")
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
    folder = classifier_dir(directory)
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
    wanted = len(card.model_columns())
    if not hasattr(model, "predict_proba") or n_features != wanted:
        raise InputError(f"{path} is not a classifier for the {wanted} "
                         f"features of its card (it takes {n_features})")
    if list(getattr(model, "classes_", [])) != [0, 1]:
        raise InputError(f"{path}: classifier classes are {getattr(model, 'classes_', None)}, "
                         "expected [0, 1]")


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
