"""Records of verifier evaluations: classification scores of one set of claim/evidence pairs
(:func:`medverify.verifier.metrics.classification_metrics` as a record) and one pairs
file's measurement (:func:`medverify.verifier.evaluate.score_rows`).

``model_dump()`` gives the JSON the evaluation files hold (benchmarks/results), and those
files load back with ``model_validate``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import SerializerFunctionWrapHandler, model_serializer

from medverify.records import Record
from medverify.verifier.metrics import classification_metrics, supported_vs_rest


class ClassScores(Record):
    """Precision, recall and F1 of one label, and its gold support."""

    precision: float
    recall: float
    f1: float
    support: int


class ClassificationMetrics(Record):
    """Scores over ``labels``: accuracy, and macro-F1 and balanced accuracy averaged over the
    labels present in gold; ``confusion`` rows are gold labels, columns predictions."""

    n: int
    accuracy: float
    macro_f1: float
    balanced_accuracy: float
    per_class: dict[str, ClassScores]
    labels: list[str]
    confusion: list[list[int]]

    @classmethod
    def measure(cls, gold: Sequence[str], predicted: Sequence[str],
                labels: Sequence[str]) -> ClassificationMetrics:
        """The scores of ``predicted`` against ``gold`` over ``labels``."""
        return cls.model_validate(classification_metrics(gold, predicted, labels))

    @classmethod
    def measure_supported_vs_rest(cls, gold: Sequence[str],
                                  predicted: Sequence[str]) -> ClassificationMetrics:
        """SUPPORTED-versus-rest scores (both sides folded to SUPPORTED / NOT_SUPPORTED)."""
        return cls.model_validate(supported_vs_rest(gold, predicted))


class PairsFileScores(Record):
    """A verifier on one pairs file: pairs, seconds and throughput, 3-way scores (3-way
    files only; absent from the dump otherwise) and SUPPORTED-versus-rest scores."""

    n: int
    seconds: float
    pairs_per_s: float
    three_way: ClassificationMetrics | None = None
    supported_vs_rest: ClassificationMetrics

    @model_serializer(mode="wrap")
    def _drop_missing_three_way(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        if out.get("three_way", 0) is None:
            del out["three_way"]
        return out
