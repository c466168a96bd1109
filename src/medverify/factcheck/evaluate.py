"""Fact-checking against human labels (``medverify eval factcheck``).

Detection is scored with FALSE as the positive class, as in the paper: a fact the human
says is false is a positive. The prediction is the fact's *initial* verdict (the first
round, before any correction):

- FALSE and UNVERIFIABLE are predicted positive: both send the fact to correction or to a
  reader's attention, i.e. neither vouches for the fact;
- TRUE is predicted negative;
- ERROR is no prediction at all: counted in ``n_unscored``, never as a score.

Sensitivity = TP / (TP + FN), specificity = TN / (TN + FP), PPV = TP / (TP + FP),
F1 = 2 TP / (2 TP + FP + FN), balanced accuracy = (sensitivity + specificity) / 2. A
score whose denominator is zero is None (undefined), and so is the balanced accuracy
unless both of its halves are defined.

Labels (JSONL or CSV) name the answer (``answer_id``, or ``question``), the fact's text
and a label; they are matched to the facts of the reports by normalised text of the
initial claim (case, whitespace, quotes and a final full stop ignored), or by ``fact_id``.
Ratings (JSONL or CSV) give per answer ``improved`` / ``equal`` / ``worse``, or an
``initial`` and a ``final`` score that are compared.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationError

from medverify.errors import InputError
from medverify.factcheck.records import (
    FactCheckReport,
    FactCheckScores,
    FactVerdict,
    RatingSummary,
)
from medverify.records import Answer, Record
from medverify.stats import bootstrap_ci

POSITIVE = (FactVerdict.FALSE, FactVerdict.UNVERIFIABLE)

_FALSE_WORDS = frozenset({"false", "incorrect", "wrong", "no", "0", "hallucination",
                          "inaccurate", "contradicted", "not_supported", "unsupported", "f"})
_TRUE_WORDS = frozenset({"true", "correct", "right", "yes", "1", "fact", "accurate",
                         "supported", "t"})
_OUTCOMES: dict[str, Literal["improved", "equal", "worse"]] = {
    "improved": "improved", "better": "improved", "+1": "improved", "1": "improved",
    "equal": "equal", "same": "equal", "unchanged": "equal", "0": "equal",
    "worse": "worse", "worsened": "worse", "-1": "worse",
}
_ANSWER_KEYS = ("answer_id", "answer", "id")
_FACT_KEYS = ("fact", "fact_text", "text", "claim")
_LABEL_KEYS = ("label", "human", "gold", "verdict", "correct", "is_true")


class FactLabel(Record):
    """A human label of one fact: ``false`` when the human says the fact is false."""

    fact: str
    false: bool
    answer_id: str | None = None
    question: str | None = None
    fact_id: str | None = None
    line: int = 0


class AnswerRating(Record):
    answer_id: str
    outcome: Literal["improved", "equal", "worse"]


class LabelMatch(Record):
    """Labels paired with the facts' initial verdicts, and those that found no fact."""

    pairs: list[tuple[FactVerdict, bool]] = Field(default_factory=list)
    unmatched: list[str] = Field(default_factory=list)


class FactCheckEvaluation(Record):
    """``medverify eval factcheck``: detection scores with 95 % bootstrap intervals
    (resampling the scored facts), and the answer ratings when given."""

    n_reports: int = 0
    n_facts: int = 0
    n_labels: int = 0
    n_matched: int = 0
    scores: FactCheckScores = Field(default_factory=FactCheckScores)
    intervals: dict[str, tuple[float, float]] = Field(default_factory=dict)
    ratings: RatingSummary | None = None
    unmatched: list[str] = Field(default_factory=list)


# -- scores ---------------------------------------------------------------------------------


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def score_verdicts(pairs: Sequence[tuple[FactVerdict, bool]]) -> FactCheckScores:
    """Confusion matrix and scores of (predicted verdict, human says false) pairs."""
    scored = [(v in POSITIVE, false) for v, false in pairs if v != FactVerdict.ERROR]
    tp = sum(p and g for p, g in scored)
    fp = sum(p and not g for p, g in scored)
    fn = sum(g and not p for p, g in scored)
    tn = len(scored) - tp - fp - fn
    return scores_from_counts(tp, fp, tn, fn, n_unscored=len(pairs) - len(scored))


def scores_from_counts(tp: int, fp: int, tn: int, fn: int, *,
                       n_unscored: int = 0) -> FactCheckScores:
    """Every score of one confusion matrix (None where a denominator is zero)."""
    sens, spec = _ratio(tp, tp + fn), _ratio(tn, tn + fp)
    return FactCheckScores(
        n=tp + fp + tn + fn, n_unscored=n_unscored, tp=tp, fp=fp, tn=tn, fn=fn,
        sensitivity=sens, specificity=spec, ppv=_ratio(tp, tp + fp),
        f1=_ratio(2 * tp, 2 * tp + fp + fn),
        balanced_accuracy=(sens + spec) / 2 if sens is not None and spec is not None else None,
    )


# A scored fact is coded 2 * human_false + predicted_positive: 0 TN, 1 FP, 2 FN, 3 TP.
_METRICS: dict[str, Callable[[FactCheckScores], float | None]] = {
    "sensitivity": lambda s: s.sensitivity,
    "specificity": lambda s: s.specificity,
    "ppv": lambda s: s.ppv,
    "f1": lambda s: s.f1,
    "balanced_accuracy": lambda s: s.balanced_accuracy,
}


def _scores_of_codes(codes: np.ndarray) -> FactCheckScores:
    tn, fp, fn, tp = (int(c) for c in np.bincount(codes.astype(int), minlength=4))
    return scores_from_counts(tp, fp, tn, fn)


def intervals(pairs: Sequence[tuple[FactVerdict, bool]], *, n_boot: int = 2000,
              seed: int = 0) -> dict[str, tuple[float, float]]:
    """95 % percentile bootstrap intervals of the defined scores (resampling facts); a
    score undefined in some resamples gets no interval."""
    codes = np.array([2 * g + (v in POSITIVE) for v, g in pairs if v != FactVerdict.ERROR])
    out: dict[str, tuple[float, float]] = {}
    if len(codes) < 2:
        return out
    for name, get in _METRICS.items():
        def stat(sample: np.ndarray, get: Callable[[FactCheckScores], float | None] = get
                 ) -> float:
            value = get(_scores_of_codes(sample))
            return math.nan if value is None else value

        low, high = bootstrap_ci(codes, stat=stat, n=n_boot, seed=seed)
        if math.isfinite(low) and math.isfinite(high):
            out[name] = (round(low, 4), round(high, 4))
    return out


# -- reading labels and ratings -------------------------------------------------------------


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """Rows of a JSONL or CSV file (by extension; ``.json`` may hold a list), numbered."""
    if not path.is_file():
        raise InputError(f"no such file: {path}")
    text = path.read_text("utf-8-sig")
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(io.StringIO(text))
        return [(n, {k.strip().lower(): v for k, v in row.items() if k})
                for n, row in enumerate(reader, 2)]
    return _json_rows(path, text)


def _json_rows(path: Path, text: str) -> list[tuple[int, dict[str, Any]]]:
    if path.suffix.lower() == ".json":
        data = _loads(text, path, 1)
        items = data if isinstance(data, list) else [data]
        rows = list(enumerate(items, 1))
    else:
        rows = [(n, _loads(line, path, n)) for n, line in enumerate(text.splitlines(), 1)
                if line.strip()]
    for n, row in rows:
        if not isinstance(row, dict):
            raise InputError(f"{path}:{n}: expected a JSON object")
    return [(n, {str(k).lower(): v for k, v in row.items()}) for n, row in rows]


def _loads(text: str, path: Path, line: int) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{line}: not valid JSON ({exc.msg})") from None


def _first(row: Mapping[str, Any], keys: Iterable[str]) -> Any:
    return next((row[k] for k in keys if row.get(k) not in (None, "")), None)


def parse_label(value: Any) -> bool:
    """True when the label says the fact is false (false, incorrect, 0, ...)."""
    if isinstance(value, bool):
        return not value
    word = str(value).strip().lower().replace(" ", "_").replace("-", "_")
    if word in _FALSE_WORDS:
        return True
    if word in _TRUE_WORDS:
        return False
    raise InputError(f"unknown fact label {value!r}: use true/false (or correct/incorrect)")


def read_fact_labels(path: str | Path) -> list[FactLabel]:
    """Human fact labels from JSONL, JSON or CSV: ``answer_id`` (or ``question``), ``fact``
    (or ``text``/``claim``, or ``fact_id``) and ``label`` (true/false, correct/incorrect,
    1/0, ...)."""
    path = Path(path)
    labels = []
    for n, row in _rows(path):
        fact, label = _first(row, _FACT_KEYS), _first(row, _LABEL_KEYS)
        if (fact is None and not row.get("fact_id")) or label is None:
            raise InputError(f"{path}:{n}: a label needs a fact (or fact_id) and a label")
        try:
            false = parse_label(label)
        except InputError as exc:
            raise InputError(f"{path}:{n}: {exc}") from None
        answer = _first(row, _ANSWER_KEYS)
        labels.append(FactLabel(
            fact=str(fact or ""), false=false, line=n,
            answer_id=None if answer is None else str(answer),
            question=row.get("question") or None,
            fact_id=None if not row.get("fact_id") else str(row["fact_id"])))
    return labels


def _outcome(row: Mapping[str, Any], where: str) -> Literal["improved", "equal", "worse"]:
    rating = _first(row, ("rating", "outcome", "comparison"))
    if rating is not None:
        key = str(rating).strip().lower()
        if key not in _OUTCOMES:
            raise InputError(f"{where}: unknown rating {rating!r}: use improved/equal/worse")
        return _OUTCOMES[key]
    try:
        initial, final = float(row["initial"]), float(row["final"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{where}: a rating needs 'rating' (improved/equal/worse) or "
                         "numeric 'initial' and 'final' scores") from None
    return "improved" if final > initial else "worse" if final < initial else "equal"


def read_ratings(path: str | Path) -> list[AnswerRating]:
    """Answer ratings from JSONL, JSON or CSV (``answer_id`` + ``rating``, or ``initial`` and
    ``final`` scores: higher final is improved)."""
    path = Path(path)
    out = []
    for n, row in _rows(path):
        answer = _first(row, (*_ANSWER_KEYS, "question"))
        if answer is None:
            raise InputError(f"{path}:{n}: a rating needs an answer_id")
        out.append(AnswerRating(answer_id=str(answer), outcome=_outcome(row, f"{path}:{n}")))
    return out


def rating_summary(ratings: Sequence[AnswerRating]) -> RatingSummary:
    """Counts of improved, equal and worse answers."""
    outcomes = [r.outcome for r in ratings]
    return RatingSummary(n=len(outcomes), improved=outcomes.count("improved"),
                         equal=outcomes.count("equal"), worse=outcomes.count("worse"))


# -- matching -------------------------------------------------------------------------------

_QUOTES = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'"})


def normalise_fact(text: str) -> str:
    """Case, whitespace, curly quotes and final punctuation ignored."""
    return " ".join(text.translate(_QUOTES).casefold().split()).rstrip(" .;:!")


def answer_id(report: FactCheckReport) -> str:
    """The report's answer id (as given in the input), else the id an :class:`Answer` with
    the report's question and initial text gets."""
    return report.answer_id or Answer(text=report.initial_answer, question=report.question).id


def _answer_matches(label: FactLabel, report: FactCheckReport) -> bool:
    if label.answer_id is not None:
        return label.answer_id == answer_id(report)
    if label.question is not None:
        return normalise_fact(label.question) == normalise_fact(report.question or "")
    return True


def _find(label: FactLabel, reports: Sequence[FactCheckReport]) -> list[FactVerdict]:
    key = normalise_fact(label.fact)
    found = []
    for report in reports:
        if not _answer_matches(label, report):
            continue
        for fact in report.facts:
            by_id = label.fact_id is not None and fact.id == label.fact_id
            if by_id or (key and normalise_fact(fact.claim.text) == key):
                found.append(fact.initial_verdict)
                break
    return found


def match_labels(reports: Sequence[FactCheckReport], labels: Sequence[FactLabel]) -> LabelMatch:
    """Each label with the initial verdict of the one fact it names; a label naming no
    fact, or facts of several answers, is unmatched."""
    match = LabelMatch()
    for label in labels:
        found = _find(label, reports)
        if len(found) == 1:
            match.pairs.append((found[0], label.false))
        else:
            why = "no such fact" if not found else f"matches facts of {len(found)} answers"
            match.unmatched.append(f"line {label.line}: {why}: {label.fact or label.fact_id}")
    return match


def evaluate_reports(reports: Sequence[FactCheckReport],
                     labels: Sequence[FactLabel]) -> FactCheckScores:
    """Detection scores of the reports' initial verdicts against the human labels."""
    return score_verdicts(match_labels(reports, labels).pairs)


def evaluate(reports: Sequence[FactCheckReport], labels: Sequence[FactLabel],
             ratings: Sequence[AnswerRating] | None = None, *, n_boot: int = 2000,
             seed: int = 0) -> FactCheckEvaluation:
    """Everything ``medverify eval factcheck`` prints."""
    match = match_labels(reports, labels)
    return FactCheckEvaluation(
        n_reports=len(reports), n_facts=sum(len(r.facts) for r in reports),
        n_labels=len(labels), n_matched=len(match.pairs),
        scores=score_verdicts(match.pairs),
        intervals=intervals(match.pairs, n_boot=n_boot, seed=seed),
        ratings=rating_summary(ratings) if ratings is not None else None,
        unmatched=match.unmatched,
    )


# -- reading reports ------------------------------------------------------------------------

BASELINE_SUFFIX = ".selfrefine.json"


def _report_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InputError(f"no such file or directory: {path}")
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in (".json", ".jsonl")
                   and not p.name.endswith(BASELINE_SUFFIX))
    if not files:
        raise InputError(f"no fact-check reports (*.json) in {path}")
    return files


def read_reports(path: str | Path) -> list[FactCheckReport]:
    """Fact-check reports from a JSON file (one report or a list), a JSONL file, or a
    directory of them (``*.selfrefine.json`` baselines are skipped)."""
    reports = []
    for file in _report_files(Path(path)):
        text = file.read_text("utf-8")
        if file.suffix.lower() == ".jsonl":
            items = [_loads(line, file, n) for n, line in enumerate(text.splitlines(), 1)
                     if line.strip()]
        else:
            data = _loads(text, file, 1)
            items = data if isinstance(data, list) else [data]
        reports.extend(_validate(item, file) for item in items)
    return reports


def _validate(item: Any, file: Path) -> FactCheckReport:
    try:
        return FactCheckReport.model_validate(item)
    except ValidationError as exc:
        detail = re.sub(r"\s+", " ", str(exc).splitlines()[0])
        raise InputError(f"{file}: not a fact-check report ({detail})") from None
