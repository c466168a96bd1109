from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from medverify.errors import InputError
from medverify.risk.classifier import (
    MIN_PER_CLASS,
    TrainedRisk,
    check_schema,
    encode_labels,
    feature_matrix,
    predict_proba,
)
from medverify.risk.persist import load_classifier, read_card, save
from medverify.risk.plots import plots_svg
from medverify.risk.records import FeatureRow, FeatureSchema
from medverify.risk.training import evaluate, train_classifier

TREES = 15
NAMES = ["entropy_mean", "kl<a&b>\"x\"", "logprob_min", "rank_mean", "noise_1", "noise_2"]
SCHEMA = FeatureSchema(version="test-1", granularity="answer", scorers=["hf:tiny"], names=NAMES)
SVG = "{http://www.w3.org/2000/svg}"


def blobs(n_fact: int, n_hall: int, shift: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two Gaussian blobs; the hallucinations are shifted by ``shift`` on the first two
    features only (the rest is noise)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_fact + n_hall, len(NAMES)))
    y = np.array([0] * n_fact + [1] * n_hall)
    x[y == 1, :2] += shift
    order = rng.permutation(len(y))
    return x[order], y[order]


def train(x: np.ndarray, y: np.ndarray, **kwargs: object) -> TrainedRisk:
    return train_classifier(x, y, SCHEMA, data_sha256="d" * 64, n_estimators=TREES,
                            **kwargs)  # type: ignore[arg-type]


def rows(x: np.ndarray) -> list[FeatureRow]:
    return [FeatureRow(unit_id=f"u{i}", granularity="answer", text="t",
                       values=dict(zip(NAMES, map(float, r), strict=True)))
            for i, r in enumerate(x)]


@pytest.fixture(scope="module")
def separable() -> tuple[TrainedRisk, np.ndarray, np.ndarray]:
    x, y = blobs(240, 80, shift=3.0)
    return train(x, y, seed=3), x, y


def test_separable_blobs_score_high(separable: tuple[TrainedRisk, np.ndarray, np.ndarray]) -> None:
    trained, _, _ = separable
    auc = trained.card.metrics["roc_auc"]
    assert auc["HALLUCINATION"] > 0.95
    assert auc["FACT"] == pytest.approx(auc["HALLUCINATION"])
    assert trained.card.metrics["accuracy"] > 0.9
    assert trained.card.metrics["accuracy"] > trained.card.metrics["majority_baseline_accuracy"]


def test_overlapping_blobs_score_near_chance() -> None:
    x, y = blobs(450, 450, shift=0.0, seed=5)
    auc = train(x, y, seed=1).card.metrics["roc_auc"]["HALLUCINATION"]
    assert abs(auc - 0.5) < 0.12


def test_training_is_deterministic_with_a_seed() -> None:
    x, y = blobs(60, 30, shift=1.0, seed=2)
    first, second = train(x, y, seed=7), train(x, y, seed=7)
    np.testing.assert_array_equal(first.test.indices, second.test.indices)
    np.testing.assert_array_equal(first.test.proba, second.test.proba)
    other = train(x, y, seed=8)
    assert not np.array_equal(first.test.indices, other.test.indices)


def test_split_is_stratified(separable: tuple[TrainedRisk, np.ndarray, np.ndarray]) -> None:
    trained, _, y = separable
    card = trained.card
    assert (card.n_train, card.n_test) == (256, 64)
    assert card.metrics["class_counts"]["test"] == {"FACT": 48, "HALLUCINATION": 16}
    assert card.metrics["class_counts"]["train"] == {"FACT": 192, "HALLUCINATION": 64}
    np.testing.assert_array_equal(trained.test.y_true, y[trained.test.indices])


def test_card_content(separable: tuple[TrainedRisk, np.ndarray, np.ndarray]) -> None:
    trained, _, _ = separable
    card, metrics = trained.card, trained.card.metrics
    assert card.schema_ == SCHEMA and card.training_data_sha256 == "d" * 64 and card.seed == 3
    assert card.base_models == ["random_forest", "logistic_regression", "xgboost"]
    assert card.meta_model == "logistic_regression"
    assert {"sklearn", "xgboost", "numpy", "joblib", "medverify"} <= set(card.versions)
    report = metrics["classification_report"]
    assert {"FACT", "HALLUCINATION", "macro avg", "accuracy"} <= set(report)
    matrix = np.array(metrics["confusion_matrix"]["matrix"])
    assert matrix.sum() == card.n_test and matrix.sum(axis=1).tolist() == [48, 16]
    assert np.trace(matrix) / card.n_test == pytest.approx(metrics["accuracy"])
    assert len(metrics["pca"]["points"]) == 320
    assert 0 < sum(metrics["pca"]["explained_variance_ratio"]) <= 1
    json.dumps(metrics)  # plain JSON values only


def test_importance_names_the_informative_features(
        separable: tuple[TrainedRisk, np.ndarray, np.ndarray]) -> None:
    importance = separable[0].card.metrics["importance"]
    for key in ("random_forest", "xgboost_gain_share"):
        assert set(importance[key]) == set(NAMES)
        top_two = sorted(importance[key], key=lambda n: -importance[key][n])[:2]
        assert set(top_two) == {"entropy_mean", "kl<a&b>\"x\""}
    assert sum(importance["xgboost_gain_share"].values()) == pytest.approx(1.0)


def test_save_load_round_trip(separable: tuple[TrainedRisk, np.ndarray, np.ndarray],
                              tmp_path: Path) -> None:
    trained, x, _ = separable
    folder = save(trained, tmp_path / "clf")
    assert sorted(p.name for p in (folder / "plots").iterdir()) == [
        "confusion.svg", "importance.svg", "pca.svg", "roc.svg"]
    loaded = load_classifier(folder)
    assert loaded.card == trained.card
    test_rows = rows(x[trained.test.indices])
    np.testing.assert_allclose(predict_proba(loaded, test_rows), trained.test.proba, rtol=0,
                               atol=1e-12)
    assert predict_proba(loaded, []) == []
    card, envelope = read_card(folder)
    assert len(envelope["model_sha256"]) == 64 and card.n_test == trained.card.n_test


def test_tampered_model_file_is_refused(separable: tuple[TrainedRisk, np.ndarray, np.ndarray],
                                        tmp_path: Path) -> None:
    folder = save(separable[0], tmp_path / "clf")
    with (folder / "model.joblib").open("ab") as handle:
        handle.write(b"\x00")
    with pytest.raises(InputError, match="sha256"):
        load_classifier(folder)


def test_missing_or_foreign_card_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        load_classifier(tmp_path)
    (tmp_path / "card.json").write_text('{"format": "other"}')
    with pytest.raises(InputError, match="format"):
        load_classifier(tmp_path)


def test_schema_mismatch_is_refused(separable: tuple[TrainedRisk, np.ndarray, np.ndarray],
                                    tmp_path: Path) -> None:
    loaded = load_classifier(save(separable[0], tmp_path / "clf"))
    row = rows(np.zeros((1, len(NAMES))))[0]
    renamed = row.model_copy(update={"values": {**row.values, "entropy_v2": 0.0}})
    del renamed.values["rank_mean"]
    with pytest.raises(InputError, match=r"schema mismatch.*1 unknown \(entropy_v2\).*rank_mean"):
        predict_proba(loaded, [renamed])
    with pytest.raises(InputError, match="sentence level"):
        predict_proba(loaded, [row.model_copy(update={"granularity": "sentence"})])
    newer = SCHEMA.model_copy(update={"version": "test-2"})
    with pytest.raises(InputError, match="version 'test-1'"):
        predict_proba(loaded, [row], schema=newer)
    with pytest.raises(InputError, match="other order"):
        check_schema(SCHEMA, SCHEMA.model_copy(update={"names": NAMES[::-1]}))


def test_too_few_examples_and_one_class_are_refused() -> None:
    x, y = blobs(40, MIN_PER_CLASS - 1, shift=3.0)
    with pytest.raises(InputError, match=f"at least {MIN_PER_CLASS} of each class"):
        train(x, y)
    with pytest.raises(InputError, match="both FACT and HALLUCINATION"):
        train(x, np.zeros(len(y), dtype=int))
    with pytest.raises(InputError, match="columns"):
        train(x[:, :3], y)


def test_missing_values_are_imputed_and_infinities_refused() -> None:
    x, y = blobs(40, 20, shift=3.0, seed=4)
    x[::7, 2] = np.nan
    trained = train(x, y)
    assert trained.card.metrics["imputed_values"] == int(np.isnan(x).sum())
    row = rows(np.ones((1, len(NAMES))))[0]
    del row.values["logprob_min"]
    with pytest.raises(InputError, match="absent"):
        predict_proba(trained, [row])
    row.missing.append("logprob_min")
    assert 0.0 <= predict_proba(trained, [row])[0] <= 1.0
    assert np.isnan(feature_matrix([row], SCHEMA)[0, 2])
    x[0, 3] = np.inf
    with pytest.raises(InputError, match=r"infinite.*rank_mean"):
        train(x, y)


def test_evaluate_on_known_values() -> None:
    metrics = evaluate(np.array([0, 0, 1, 1]), np.array([0.1, 0.6, 0.4, 0.9]))
    assert metrics["roc_auc"]["HALLUCINATION"] == pytest.approx(0.75)
    assert metrics["confusion_matrix"]["matrix"] == [[1, 1], [1, 1]]
    assert metrics["accuracy"] == 0.5
    assert metrics["classification_report"]["HALLUCINATION"]["precision"] == 0.5


def test_labels_are_encoded() -> None:
    assert encode_labels(["FACT", "HALLUCINATION", 1, 0.0, True]).tolist() == [0, 1, 1, 0, 1]
    with pytest.raises(InputError, match="'maybe' at row 1"):
        encode_labels(["FACT", "maybe"])


def test_plots_are_well_formed_svg_with_escaped_names(
        separable: tuple[TrainedRisk, np.ndarray, np.ndarray]) -> None:
    plots = plots_svg(separable[0])
    assert set(plots) == {"roc", "confusion", "pca", "importance"}
    for svg in plots.values():
        root = ET.fromstring(svg)
        assert root.tag == f"{SVG}svg" and root.find(f"{SVG}title") is not None
    titles = [t.text for t in ET.fromstring(plots["importance"]).iter(f"{SVG}title")]
    assert "kl<a&b>\"x\"" in titles
    assert "AUC = " in plots["roc"]
    pca = ET.fromstring(plots["pca"])
    assert len(list(pca.iter(f"{SVG}circle"))) >= 240 and len(list(pca.iter(f"{SVG}rect"))) >= 80
    cells = [t.text for t in ET.fromstring(plots["confusion"]).iter(f"{SVG}text")]
    matrix = separable[0].card.metrics["confusion_matrix"]["matrix"]
    assert f"{matrix[0][0]:,}" in cells


def test_version_change_is_logged(separable: tuple[TrainedRisk, np.ndarray, np.ndarray],
                                  tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = save(separable[0], tmp_path / "clf")
    envelope = json.loads((folder / "card.json").read_text())
    envelope["card"]["versions"]["sklearn"] = "0.1"
    (folder / "card.json").write_text(json.dumps(envelope))
    with caplog.at_level("WARNING", logger="medverify.risk"):
        load_classifier(folder)
    assert "saved with sklearn 0.1" in caplog.text


def test_features_listed_as_missing_are_nan_for_the_imputer() -> None:
    values = dict.fromkeys(NAMES, 0.0)
    row = FeatureRow(unit_id="u", granularity="answer", text="t", values=values,
                     missing=[NAMES[0]])
    matrix = feature_matrix([row], SCHEMA)
    assert np.isnan(matrix[0, 0]) and not np.isnan(matrix[0, 1:]).any()
