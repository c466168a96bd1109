"""Records of hallucination-risk scoring without a knowledge base (CHECK's classifier).

An answer is force-decoded through one or more language models (:class:`TokenTrace`: per
answer token its log-probability, rank and the top-k alternatives, with character offsets
so traces of models with different tokenizers can be aligned); features are computed per
model and across models and aggregated per answer, sentence or claim
(:class:`FeatureRow`, named by a versioned :class:`FeatureSchema`); a stacking classifier
turns them into a hallucination probability (:class:`RiskScore`), trained on
:class:`LabeledExample` records whose provenance is always kept. A trained classifier's
:class:`ClassifierCard` keeps its test-split scores (:class:`TrainingMetrics`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import ConfigDict, Field

from medverify.records import Record, Span, utcnow

Granularity = Literal["answer", "sentence", "claim"]


class TopToken(Record):
    token: str
    logprob: float


class TokenStep(Record):
    """One answer token as a model saw it when forced to produce the answer."""

    token: str  # decoded text of the token
    start: int  # character offsets of the token in the answer text
    end: int
    logprob: float  # log p(this token | everything before), natural log
    rank: int  # 1 = the model's most likely token
    top: list[TopToken] = Field(default_factory=list)  # top-k, most likely first


class TokenTrace(Record):
    """One scorer's forced pass over one answer (``steps`` cover the answer only)."""

    scorer: str  # model id, e.g. "hf:/models/tiny-llama" or "vllm:llama@http://..."
    question: str | None = None
    answer: str
    context: str | None = None
    k: int = 50
    steps: list[TokenStep] = Field(default_factory=list)
    prompt_variant: str = "original"  # or "rephrase-1".. for rephrased questions
    error: str | None = None  # the scorer failed: no features from this trace


class FeatureSchema(Record):
    """The names and order of the features a classifier was trained on."""

    version: str
    granularity: Granularity
    scorers: list[str]
    names: list[str]


class FeatureRow(Record):
    """The features of one unit (an answer, a sentence or a claim)."""

    unit_id: str
    granularity: Granularity
    text: str
    span: Span | None = None
    values: dict[str, float] = Field(default_factory=dict)
    missing: list[str] = Field(default_factory=list)  # features that could not be computed


class RiskLabel(StrEnum):
    FACT = "FACT"
    HALLUCINATION = "HALLUCINATION"


class LabeledExample(Record):
    """A training example with where its label came from (``provenance``: e.g.
    {"source": "kb_judge", "judge": ..., "kb": ...}, {"source": "synthetic", "generator":
    ..., "prompt_version": ..., "original": ...} or {"source": "human", "file": ...})."""

    id: str
    question: str | None = None
    text: str
    context: str | None = None
    label: RiskLabel
    provenance: dict[str, Any] = Field(default_factory=dict)


class _Metrics(Record):
    """A record of scores. ``record["name"]`` reads field ``name`` too, as code written
    for the plain dicts these records replaced did. Every field has a default: it stands
    for a score a file lacks (training always fills them all)."""

    def __getitem__(self, name: str) -> Any:
        if name not in type(self).model_fields:
            raise KeyError(name)
        return getattr(self, name)


class RocAuc(_Metrics):
    """ROC AUC of each class and their mean; None when the split has one class only."""

    HALLUCINATION: float | None = None
    FACT: float | None = None
    macro: float | None = None


class RocCurve(_Metrics):
    """The ROC curve of P(HALLUCINATION): false and true positive rates (5 decimals)."""

    fpr: list[float] = Field(default_factory=list)
    tpr: list[float] = Field(default_factory=list)


class ConfusionMatrix(_Metrics):
    """Counts: rows are true classes, columns predicted ones, both in ``labels`` order."""

    labels: list[str] = Field(default_factory=lambda: [label.value for label in RiskLabel])
    matrix: list[list[int]] = Field(default_factory=lambda: [[0, 0], [0, 0]])


class RiskMetrics(_Metrics):
    """A classifier's scores on labelled data (``medverify.risk.training.evaluate``):
    accuracy at ``threshold`` and the majority-class baseline, scikit-learn's
    classification report (per class: precision, recall, f1-score, support; "accuracy";
    "macro avg"; "weighted avg"), ROC AUC and curve, confusion matrix."""

    threshold: float = 0.5
    accuracy: float | None = None
    majority_baseline_accuracy: float | None = None
    classification_report: dict[str, dict[str, float | int] | float] = Field(
        default_factory=dict)
    roc_auc: RocAuc = Field(default_factory=RocAuc)
    roc_curve: RocCurve = Field(default_factory=RocCurve)
    confusion_matrix: ConfusionMatrix = Field(default_factory=ConfusionMatrix)


class PcaSummary(_Metrics):
    """Two principal components of the standardized features: their explained variance
    ratio and a sample of points as (PC1, PC2, class), class 1 = HALLUCINATION."""

    explained_variance_ratio: list[float] = Field(default_factory=list)
    points: list[tuple[float, float, int]] = Field(default_factory=list)


class Importances(_Metrics):
    """Feature importances by feature name: the random forest's impurity importance and
    XGBoost's gain, and each as a share of its model's total (``*_share``)."""

    random_forest: dict[str, float] = Field(default_factory=dict)
    xgboost_gain: dict[str, float] = Field(default_factory=dict)
    random_forest_share: dict[str, float] = Field(default_factory=dict)
    xgboost_gain_share: dict[str, float] = Field(default_factory=dict)


class TrainingMetrics(RiskMetrics):
    """What training records on the held-out split (:class:`RiskMetrics`), and how it went:
    fit time, trees per ensemble, class counts of each part of the split, imputed (NaN)
    feature values, a PCA of all the data and the base models' feature importances."""

    fit_seconds: float | None = None
    n_estimators: int | None = None
    class_counts: dict[str, dict[str, int]] = Field(default_factory=dict)
    imputed_values: int | None = None
    pca: PcaSummary = Field(default_factory=PcaSummary)
    importance: Importances = Field(default_factory=Importances)


class ClassifierCard(Record):
    """What a trained classifier is: its schema, data, split, scores and versions.

    ``metrics`` holds the JSON form of :class:`TrainingMetrics` (plain JSON values, as
    written to ``card.json``); :meth:`training_metrics` reads it as the record."""

    schema_: FeatureSchema = Field(alias="schema")
    created_at: datetime = Field(default_factory=utcnow)
    training_data_sha256: str
    n_train: int
    n_test: int
    seed: int = 0
    base_models: list[str] = Field(default_factory=list)
    meta_model: str = "logistic_regression"
    metrics: dict[str, Any] = Field(default_factory=dict)
    versions: dict[str, str] = Field(default_factory=dict)
    # the columns the model reads, in order: a subset of schema.names (None: all of them);
    # rows are still extracted (and checked) with the whole schema
    columns: list[str] | None = None
    # how the columns were chosen (medverify.risk.feature_sets.FeatureSelection: the set's
    # name and, for "auto", each candidate's grouped cross-validation AUC)
    feature_selection: dict[str, Any] = Field(default_factory=dict)
    # what the training data was, in the trainer's words (data set, split, dtype, command)
    trained_on: dict[str, Any] = Field(default_factory=dict)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def model_columns(self) -> list[str]:
        """The names of the columns the model reads, in order."""
        return list(self.columns) if self.columns is not None else list(self.schema_.names)

    def training_metrics(self) -> TrainingMetrics:
        """``metrics`` as a :class:`TrainingMetrics` record."""
        return TrainingMetrics.model_validate(self.metrics)


class RiskScore(Record):
    """A hallucination probability for one unit, and what produced it."""

    unit_id: str
    granularity: Granularity
    text: str
    probability: float | None = None
    classifier: str = ""  # the card's data hash / path
    error: str | None = None


class FeatureExample(Record):
    """One line of a feature file (``medverify risk features``): a labelled example's
    feature row, its label and where the label came from."""

    id: str
    row: FeatureRow
    label: RiskLabel | None = None
    provenance: dict[str, Any] = Field(default_factory=dict)
