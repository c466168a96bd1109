"""Claim/evidence pairs with known labels: a judge's accuracy, macro-F1 and balanced
accuracy on them (``medverify eval pairs``), judged in-process or on an executor (local or
Ray). Retrieval has its own evaluation, :mod:`medverify.evals.retrieval`.

The shared pairs format: one JSON object per line, {id, dataset, claim, evidence, label,
labels}. ``labels`` is "3-way" (SUPPORTED / CONTRADICTED / NOT_ENOUGH_INFO) or "2-way"
(SUPPORTED / NOT_SUPPORTED). Each pair is judged as one claim with one passage (the
evidence) through the normal judge, and the judge's category is mapped back to a label
(see :func:`predicted_label`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from medverify.config import Config
from medverify.errors import InputError
from medverify.evals.confidence import ConfidenceScores, score_confidence
from medverify.executor import Executor
from medverify.harness import stage_id
from medverify.judge import JUDGES, Judge, JudgeItem, runs_offline
from medverify.judge.build import create_judge
from medverify.llm.facade import Model, model_from_config
from medverify.records import Category, Claim, Passage, Verdict, utcnow

T = TypeVar("T")

THREE_WAY = ("SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO")
TWO_WAY = ("SUPPORTED", "NOT_SUPPORTED")
JUDGMENT_ERROR = "JUDGMENT_ERROR"
ERROR = "ERROR"
PAIR_CHUNK = 256

_CATEGORY_LABEL = {
    Category.FACT: "SUPPORTED",
    Category.HALLUCINATION: "CONTRADICTED",
    Category.COVERAGE_GAP: "NOT_ENOUGH_INFO",
}


class Pair(BaseModel):
    """One labelled claim/evidence pair."""

    id: str
    dataset: str = ""
    claim: str
    evidence: str
    label: str
    labels: Literal["3-way", "2-way"] = "3-way"

    @model_validator(mode="after")
    def _known_label(self) -> Pair:
        allowed = THREE_WAY if self.labels == "3-way" else TWO_WAY
        if self.label not in allowed:
            raise ValueError(f"label {self.label!r} is not one of {allowed} ({self.labels})")
        return self


class PairScores(BaseModel):
    """Scores of one file (or of all files pooled).

    Metrics count the *scored* pairs: errors and unresolved judgment errors are counted
    apart. 3-way metrics only for 3-way files: accuracy, and macro-F1 and balanced accuracy
    averaged over the labels present in gold (``medverify.verifier.metrics``, the same
    definitions as the verifier's model card); SUPPORTED-versus-rest balanced accuracy for
    every file, folding CONTRADICTED and NOT_ENOUGH_INFO. ``confusion`` maps gold label ->
    predicted label -> count; ``decided_by`` counts verdicts by the kind of judge that gave
    them (``builtin`` / ``llm``: with the cascade judge, ``llm`` is the model calls not
    saved, one pair being one claim)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    datasets: list[str]
    labels: str
    n: int
    n_scored: int
    n_errors: int
    n_judgment_errors: int
    accuracy: float | None = None
    macro_f1: float | None = None
    balanced_accuracy: float | None = None
    per_class: dict[str, dict[str, float]] = Field(default_factory=dict)
    supported_vs_rest_balanced_accuracy: float | None
    confusion: dict[str, dict[str, int]]
    decided_by: dict[str, int] = Field(default_factory=dict)
    seconds: float
    pairs_per_second: float
    confidence: ConfidenceScores | None = None  # confident verdicts: precision, coverage


class PairsEval(BaseModel):
    """A pairs evaluation: one entry per file, plus everything pooled when several."""

    model_config = ConfigDict(extra="forbid")

    judge: str
    files: list[PairScores]
    overall: PairScores | None = None
    limit: int | None = None
    label_rule: str = (
        "FACT->SUPPORTED, HALLUCINATION->CONTRADICTED, COVERAGE_GAP->NOT_ENOUGH_INFO; "
        "JUDGMENT_ERROR->the label with the larger probability for the built-in judge, "
        "counted apart for the LLM judge; ERROR counted apart"
    )
    created_at: str = Field(default_factory=lambda: utcnow().isoformat())


def load_pairs(path: str | Path, limit: int | None = None) -> list[Pair]:
    """The pairs of a JSONL file (the first ``limit`` when given)."""
    pairs: list[Pair] = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if limit is not None and len(pairs) >= limit:
                break
            if line.strip():
                pairs.append(_parse_pair(line, f"{path}:{number}"))
    if not pairs:
        raise InputError(f"{path} has no pairs")
    return pairs


def _parse_pair(line: str, where: str) -> Pair:
    try:
        return Pair.model_validate_json(line)
    except ValueError as exc:
        raise InputError(f"{where}: bad pair record ({exc})") from exc


def predicted_label(verdict: Verdict) -> str:
    """The evidence label a verdict implies, or ``JUDGMENT_ERROR`` / ``ERROR``.

    A judgment error (both analyses hold) of the built-in judge is resolved to SUPPORTED or
    CONTRADICTED by the larger of its two maxima; one of the LLM judge stays
    ``JUDGMENT_ERROR`` and is counted apart."""
    category = verdict.category
    if category in _CATEGORY_LABEL:
        return _CATEGORY_LABEL[category]
    if category == Category.JUDGMENT_ERROR:
        probs = verdict.probabilities or {}
        if verdict.judge.startswith("builtin:") and {"SUPPORTED", "CONTRADICTED"} <= set(probs):
            return "SUPPORTED" if probs["SUPPORTED"] >= probs["CONTRADICTED"] else "CONTRADICTED"
        return JUDGMENT_ERROR
    return ERROR


def pair_item(pair: Pair) -> JudgeItem:
    passage = Passage(id=f"{pair.id}#evidence", doc_id=pair.id, text=pair.evidence,
                      title=pair.dataset or None)
    return JudgeItem(claim=Claim(id=pair.id, text=pair.claim), passages=[passage])


async def judge_pairs(judge: Judge, pairs: Sequence[Pair],
                      progress: Callable[[int], None] | None = None) -> list[Verdict | None]:
    """The judge's verdict on each pair (None where it returned none), judged in chunks."""
    out: list[Verdict | None] = []
    for start in range(0, len(pairs), PAIR_CHUNK):
        chunk = pairs[start:start + PAIR_CHUNK]
        out += await judge_chunk(judge, chunk)
        if progress is not None:
            progress(len(chunk))
    return out


async def judge_chunk(judge: Judge, chunk: Sequence[Pair]) -> list[Verdict | None]:
    """The verdicts of a chunk of pairs, in order. A judge with ``for_dataset`` (the
    built-in judge with calibration family ``auto``) judges each data set's pairs with the
    calibration fitted for it."""
    verdicts: dict[str, Verdict] = {}
    for dataset in dict.fromkeys(p.dataset for p in chunk):
        pick = getattr(judge, "for_dataset", None)
        used = pick(dataset) if callable(pick) else judge
        items = [pair_item(p) for p in chunk if p.dataset == dataset]
        verdicts |= {v.claim_id: v for v in await used.judge(items)}
    return [verdicts.get(pair.id) for pair in chunk]


def _decider(verdict: Verdict | None) -> str:
    """Which judge decided: the judge id's kind (``builtin``, ``llm``), ``none`` if missing."""
    return verdict.judge.split(":", 1)[0] if verdict is not None else "none"


def confusion_matrix(gold: Sequence[str], predicted: Sequence[str]) -> dict[str, dict[str, int]]:
    """gold -> predicted -> count; the three labels are always columns, JUDGMENT_ERROR and
    ERROR columns appear when predicted."""
    order = [*THREE_WAY, "NOT_SUPPORTED", JUDGMENT_ERROR, ERROR]
    rows = [g for g in order if g in set(gold)]
    columns = [c for c in order if c in THREE_WAY or c in set(predicted)]
    matrix = {g: dict.fromkeys(columns, 0) for g in rows}
    for g, p in zip(gold, predicted, strict=True):
        matrix[g][p] += 1
    return matrix


def score_pairs(name: str, pairs: Sequence[Pair], verdicts: Sequence[Verdict | None],
                seconds: float) -> PairScores:
    """All metrics of one set of judged pairs (see :class:`PairScores`)."""
    # imported here: the verifier package imports torch, which `eval retrieval` never needs
    from medverify.verifier.records import ClassificationMetrics

    gold = [p.label for p in pairs]
    predicted = [predicted_label(v) if v is not None else ERROR for v in verdicts]
    kinds = {p.labels for p in pairs}
    scored = [(g, p) for g, p in zip(gold, predicted, strict=True)
              if p not in (ERROR, JUDGMENT_ERROR)]
    sg, sp = [g for g, _ in scored], [p for _, p in scored]
    scores = PairScores(
        name=name, datasets=sorted({p.dataset for p in pairs}),
        labels=kinds.pop() if len(kinds) == 1 else "mixed", n=len(pairs), n_scored=len(scored),
        n_errors=predicted.count(ERROR), n_judgment_errors=predicted.count(JUDGMENT_ERROR),
        supported_vs_rest_balanced_accuracy=(
            ClassificationMetrics.measure_supported_vs_rest(sg, sp).balanced_accuracy
            if scored else None
        ),
        confusion=confusion_matrix(gold, predicted),
        decided_by=dict(Counter(_decider(v) for v in verdicts)), seconds=seconds,
        pairs_per_second=len(pairs) / seconds if seconds > 0 else 0.0,
    )
    confidence = score_confidence(gold, verdicts)
    scores.confidence = confidence if confidence.assessed else None
    if scores.labels == "3-way" and scored:
        metrics = ClassificationMetrics.measure(sg, sp, THREE_WAY)
        scores.accuracy = metrics.accuracy
        scores.macro_f1 = metrics.macro_f1
        scores.balanced_accuracy = metrics.balanced_accuracy
        scores.per_class = {label: c.model_dump() for label, c in metrics.per_class.items()}
    return scores


async def aevaluate_pairs(paths: Sequence[str | Path], judge: Judge, *,
                          judge_id: str | None = None, limit: int | None = None,
                          progress: Callable[[int], None] | None = None) -> PairsEval:
    """Judge every pair of every file and score them, per file and pooled."""
    runs = []
    for path, pairs in [(Path(p), load_pairs(p, limit)) for p in paths]:
        started = time.perf_counter()
        verdicts = await judge_pairs(judge, pairs, progress)
        runs.append(_Judged(path.stem, pairs, verdicts, time.perf_counter() - started))
    return _pairs_eval(judge_id or stage_id(judge), runs, limit)


@dataclass(frozen=True)
class _Judged:
    """One pairs file's verdicts and the seconds they took."""

    name: str
    pairs: list[Pair]
    verdicts: list[Verdict | None]
    seconds: float


def _pairs_eval(judge_id: str, runs: Sequence[_Judged], limit: int | None) -> PairsEval:
    """Scores per file, and pooled when there are several files."""
    files = [score_pairs(r.name, r.pairs, r.verdicts, r.seconds) for r in runs]
    overall = (score_pairs("all", [p for r in runs for p in r.pairs],
                           [v for r in runs for v in r.verdicts],
                           sum(r.seconds for r in runs)) if len(runs) > 1 else None)
    return PairsEval(judge=judge_id, files=files, overall=overall, limit=limit)


def evaluate_pairs(paths: Sequence[str | Path], judge: Judge, **options: Any) -> PairsEval:
    """Synchronous twin of :func:`aevaluate_pairs`."""
    return asyncio.run(aevaluate_pairs(paths, judge, **options))


# ---- pairs on an executor (local or Ray) ---------------------------------------------------


def pairs_model(config: Config) -> Model | None:
    """The model a configured judge calls (None for a judge that runs offline, e.g. the
    built-in one, or without a model)."""
    if not config.model or runs_offline(config.judge_name):
        return None
    return model_from_config(config)


def pairs_judge(config: Config, model: Model | None) -> Judge:
    """The configured judge for scoring labelled pairs: labels and categories never depend
    on the quoted sentence, so a judge that quotes one skips it (``[judge_settings] quotes``)."""
    settings = config.judge_settings.model_copy(update={"quotes": False})
    return create_judge(config.model_copy(update={"judge_settings": settings}),
                         model)


_WORKER_JUDGES: dict[str, Judge] = {}
"""Judges without a model, kept per worker process (a Ray worker judges many chunks)."""


def _model_free_judge(config: Config) -> Judge:
    key = f"{config.judge_name}|{config.model_dump_json()}"
    judge = _WORKER_JUDGES.get(key)
    if judge is None:
        judge = _WORKER_JUDGES[key] = pairs_judge(config, None)
    return judge


@dataclass(frozen=True)
class PairChunkJudge:
    """The picklable chunk function of ``eval pairs`` on an executor: judges a chunk of
    pairs with a judge made, in the process that runs it, from the config.

    ``factory`` is the judge's registry factory as the driver resolved it; the worker
    adopts it under the judge's name (``Registry.adopt``), so every process judges with
    the same judge."""

    config: Config
    factory: Callable[..., Judge] | None = field(default=None, compare=False)

    @classmethod
    def for_config(cls, config: Config) -> PairChunkJudge:
        return cls(config, JUDGES.get(config.judge_name))

    def __call__(self, chunk: list[Pair]) -> list[Verdict | None]:
        return asyncio.run(self._with_judge(lambda judge: self._judge(judge, chunk)))

    def describe(self, chunk: list[Any]) -> list[str]:
        """The judge's recorded id (``stage_id``), once per item of ``chunk``."""

        async def name(judge: Judge) -> list[str]:
            return [stage_id(judge)] * len(chunk)

        return asyncio.run(self._with_judge(name))

    async def _with_judge(self, use: Callable[[Judge], Awaitable[list[T]]]) -> list[T]:
        """``use`` the judge of this process (made once without a model, per call with one)."""
        JUDGES.adopt(self.config.judge_name, self.factory)
        model = pairs_model(self.config)
        try:
            return await use(_model_free_judge(self.config) if model is None
                             else pairs_judge(self.config, model))
        finally:
            if model is not None:
                await model.aclose()

    @staticmethod
    async def _judge(judge: Judge, chunk: list[Pair]) -> list[Verdict | None]:
        return await judge_chunk(judge, chunk)


def evaluate_pairs_on(executor: Executor, paths: Sequence[str | Path], config: Config, *,
                      limit: int | None = None, judge_id: str | None = None,
                      progress: Callable[[int], None] | None = None) -> PairsEval:
    """:func:`aevaluate_pairs` with the judging spread over ``executor``: chunks of
    :data:`PAIR_CHUNK` pairs, each judged by a judge the worker makes from ``config``; the
    verdicts come back to this process, which scores them (the same metrics)."""
    task = PairChunkJudge.for_config(config)
    runs = []
    for path, pairs in [(Path(p), load_pairs(p, limit)) for p in paths]:
        started = time.perf_counter()
        verdicts = executor.map(task, pairs, chunk_size=PAIR_CHUNK, progress=progress)
        runs.append(_Judged(path.stem, pairs, verdicts, time.perf_counter() - started))
    if judge_id is None:  # named where the judge is made: no judge (or weights) in the driver
        [judge_id] = executor.map(task.describe, [None])
    return _pairs_eval(judge_id, runs, limit)
