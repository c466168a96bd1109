"""Typed metric records: their dumps are the JSON the files hold, and those files load."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from medverify.risk.records import ClassifierCard, FeatureSchema, RiskMetrics, TrainingMetrics

SCHEMA = FeatureSchema(version="t", granularity="answer", scorers=["hf:x"], names=["a", "b"])

# the metrics of a card.json as training writes them (numbers shortened)
CARD_METRICS = {
    "threshold": 0.5,
    "accuracy": 0.9,
    "majority_baseline_accuracy": 0.75,
    "classification_report": {
        "FACT": {"precision": 0.9, "recall": 1.0, "f1-score": 0.95, "support": 48.0},
        "HALLUCINATION": {"precision": 1.0, "recall": 0.6, "f1-score": 0.75, "support": 16.0},
        "accuracy": 0.9,
        "macro avg": {"precision": 0.95, "recall": 0.8, "f1-score": 0.85, "support": 64.0},
        "weighted avg": {"precision": 0.93, "recall": 0.9, "f1-score": 0.9, "support": 64.0},
    },
    "roc_auc": {"HALLUCINATION": 0.97, "FACT": 0.97, "macro": 0.97},
    "roc_curve": {"fpr": [0.0, 0.0, 1.0], "tpr": [0.0, 0.5, 1.0]},
    "confusion_matrix": {"labels": ["FACT", "HALLUCINATION"], "matrix": [[48, 0], [6, 10]]},
    "fit_seconds": 1.234,
    "n_estimators": 15,
    "class_counts": {"train": {"FACT": 192, "HALLUCINATION": 64},
                     "test": {"FACT": 48, "HALLUCINATION": 16}},
    "imputed_values": 0,
    "pca": {"explained_variance_ratio": [0.4, 0.2], "points": [[0.1, -2.0, 0], [3.5, 1.0, 1]]},
    "importance": {"random_forest": {"a": 0.7, "b": 0.3}, "xgboost_gain": {"a": 2.0, "b": 1.0},
                   "random_forest_share": {"a": 0.7, "b": 0.3},
                   "xgboost_gain_share": {"a": 0.6667, "b": 0.3333}},
}


def test_training_metrics_round_trip_the_card_json_exactly() -> None:
    record = TrainingMetrics.model_validate(CARD_METRICS)
    assert json.dumps(record.model_dump(mode="json")) == json.dumps(CARD_METRICS)
    assert record.pca.points[1] == (3.5, 1.0, 1)
    assert record.roc_auc.HALLUCINATION == 0.97 and record.confusion_matrix.matrix[1] == [6, 10]


def test_metric_records_read_like_the_dicts_they_replaced() -> None:
    record = TrainingMetrics.model_validate(CARD_METRICS)
    assert record["roc_auc"]["FACT"] == 0.97
    assert record["classification_report"]["HALLUCINATION"]["precision"] == 1.0
    with pytest.raises(KeyError):
        record["no_such_metric"]


def test_card_metrics_stay_plain_json_and_read_as_a_record() -> None:
    card = ClassifierCard(schema=SCHEMA, training_data_sha256="x", n_train=1, n_test=1,
                          metrics=CARD_METRICS)
    assert card.training_metrics() == TrainingMetrics.model_validate(CARD_METRICS)
    dumped = card.model_dump(mode="json", by_alias=True)["metrics"]
    assert json.dumps(dumped) == json.dumps(CARD_METRICS)
    bare = ClassifierCard(schema=SCHEMA, training_data_sha256="x", n_train=1, n_test=1)
    assert bare.training_metrics().confusion_matrix.matrix == [[0, 0], [0, 0]]


def test_metric_records_refuse_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        RiskMetrics.model_validate({"accuracy": 0.5, "acuracy": 0.5})
    with pytest.raises(ValidationError):
        TrainingMetrics.model_validate({"roc_auc": {"HALLUCINATION": 0.5, "other": 1.0}})


# --- verifier evaluations --------------------------------------------------------------------

S, C, N = "SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO"


def _file_entry(three_way: bool) -> dict[str, object]:
    from medverify.verifier.metrics import classification_metrics, supported_vs_rest

    gold, pred = [S, C, N, S], [S, N, N, C]
    entry: dict[str, object] = {"n": 4, "seconds": 0.2, "pairs_per_s": 20.0}
    if three_way:
        entry["three_way"] = classification_metrics(gold, pred, (S, C, N))
    entry["supported_vs_rest"] = supported_vs_rest(gold, pred)
    return entry


@pytest.mark.parametrize("three_way", [True, False])
def test_pairs_file_scores_dump_the_evaluation_file_json(three_way: bool) -> None:
    from medverify.verifier.records import PairsFileScores

    entry = json.loads(json.dumps(_file_entry(three_way)))
    record = PairsFileScores.model_validate(entry)
    assert json.dumps(record.model_dump()) == json.dumps(entry)
    assert ("three_way" in record.model_dump()) is three_way
    assert (record.three_way is not None) is three_way
    assert record.supported_vs_rest.per_class[S].support == 2


def test_summary_table_reads_records_and_their_json_alike() -> None:
    from medverify.verifier.evaluate import summary_table
    from medverify.verifier.records import PairsFileScores

    results = {"a": _file_entry(True), "b": _file_entry(False)}
    records = {k: PairsFileScores.model_validate(v) for k, v in results.items()}
    table = summary_table(results)
    assert table == summary_table(records)
    assert table.splitlines()[-1] == "| b | 4 | - | - | - | 0.750 | 20.0 |"


def test_classification_metrics_record_matches_the_function() -> None:
    from medverify.verifier.metrics import classification_metrics, supported_vs_rest
    from medverify.verifier.records import ClassificationMetrics

    gold, pred = [S, C, N, S, C], [S, C, S, N, C]
    assert ClassificationMetrics.measure(gold, pred, (S, C, N)).model_dump() == \
        classification_metrics(gold, pred, (S, C, N))
    assert ClassificationMetrics.measure_supported_vs_rest(gold, pred).model_dump() == \
        supported_vs_rest(gold, pred)


class _StubVerifier:
    """Predicts the gold label of each claim (its text), except that it calls every
    NOT_ENOUGH_INFO a CONTRADICTED."""

    def predict(self, pairs: list[tuple[str, str]]) -> list[str]:
        return [claim for claim, _ in pairs]

    def label_pairs(self, probs: list[str]) -> list[str]:
        return [C if p == N else p for p in probs]


@pytest.mark.parametrize("labels", ["3-way", "2-way"])
def test_evaluate_rows_gives_the_json_of_score_rows(labels: str) -> None:
    from medverify.verifier.evaluate import evaluate_rows, score_rows
    from medverify.verifier.metrics import classification_metrics, supported_vs_rest

    gold = [S, C, N, S] if labels == "3-way" else [S, "NOT_SUPPORTED", S]
    rows = [{"claim": g, "evidence": "e", "label": g, "labels": labels} for g in gold]
    pred = _StubVerifier().label_pairs(gold)
    out = evaluate_rows(_StubVerifier(), rows)  # type: ignore[arg-type]
    assert list(out) == ["n", "seconds", "pairs_per_s",
                         *(["three_way"] if labels == "3-way" else []), "supported_vs_rest"]
    assert out["supported_vs_rest"] == supported_vs_rest(gold, pred)
    if labels == "3-way":
        assert out["three_way"] == classification_metrics(gold, pred, (S, C, N))
    record = score_rows(_StubVerifier(), rows)  # type: ignore[arg-type]
    assert {**record.model_dump(), "seconds": 0, "pairs_per_s": 0} == \
        {**out, "seconds": 0, "pairs_per_s": 0}
