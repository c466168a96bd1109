"""Classification metrics for verifier evaluation (pure functions, no model)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SUPPORTED = "SUPPORTED"
NOT_SUPPORTED = "NOT_SUPPORTED"


def fold_binary(labels: Sequence[str]) -> list[str]:
    """Fold 3-way labels to SUPPORTED / NOT_SUPPORTED (2-way labels pass through)."""
    return [SUPPORTED if label == SUPPORTED else NOT_SUPPORTED for label in labels]


def confusion(
    y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str]
) -> list[list[int]]:
    """Confusion matrix: rows are gold labels, columns predictions, both in ``labels`` order."""
    index = {label: i for i, label in enumerate(labels)}
    matrix = [[0] * len(labels) for _ in labels]
    for gold, pred in zip(y_true, y_pred, strict=True):
        if gold in index and pred in index:
            matrix[index[gold]][index[pred]] += 1
    return matrix


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def per_class(matrix: list[list[int]], labels: Sequence[str]) -> dict[str, dict[str, float]]:
    """Precision, recall, F1 and support of each label from a confusion matrix."""
    out = {}
    for i, label in enumerate(labels):
        tp = matrix[i][i]
        predicted = sum(row[i] for row in matrix)
        support = sum(matrix[i])
        precision, recall = _ratio(tp, predicted), _ratio(tp, support)
        f1 = _ratio(2 * precision * recall, precision + recall)
        out[label] = {"precision": precision, "recall": recall, "f1": f1, "support": support}
    return out


def classification_metrics(
    y_true: Sequence[str], y_pred: Sequence[str], labels: Sequence[str]
) -> dict[str, Any]:
    """n, accuracy, macro-F1 and balanced accuracy over the labels present in ``y_true``.

    Macro-F1 and balanced accuracy average over labels with gold support > 0 (a label absent
    from the gold data would otherwise count as a free zero).
    """
    matrix = confusion(y_true, y_pred, labels)
    classes = per_class(matrix, labels)
    present = [label for label in labels if classes[label]["support"] > 0]
    n = len(y_true)
    return {
        "n": n,
        "accuracy": _ratio(sum(matrix[i][i] for i in range(len(labels))), n),
        "macro_f1": _ratio(sum(classes[lab]["f1"] for lab in present), len(present)),
        "balanced_accuracy": _ratio(sum(classes[lab]["recall"] for lab in present), len(present)),
        "per_class": classes,
        "labels": list(labels),
        "confusion": matrix,
    }


def supported_vs_rest(y_true: Sequence[str], y_pred: Sequence[str]) -> dict[str, Any]:
    """Binary SUPPORTED-vs-rest metrics after folding both gold and predictions."""
    return classification_metrics(
        fold_binary(y_true), fold_binary(y_pred), (SUPPORTED, NOT_SUPPORTED)
    )
