"""Agreement of a citation audit with gold claim labels (``medverify eval audit``).

Claims that carry a gold label (``SUPPORTED`` / ``NOT_SUPPORTED``, from the input's
``claims[].label``) are compared with the audit's prediction (``ClaimAudit.supported``:
supported by at least one source). A claim whose prediction is unknown (its judge calls
failed) is *unscored*: excluded from every score and counted in ``n_unscored``.

Scores, each with a 95 % percentile bootstrap interval that resamples claims:
balanced accuracy (mean of the recalls of the gold classes present), agreement
(accuracy) and Cohen's kappa (agreement corrected for the agreement expected from the
two base rates; undefined, None, when both sides use one single class).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import Field, ValidationError

from medverify.audit.metrics import group_audits
from medverify.audit.records import AnswerAudit, Estimate, SupportLabel
from medverify.errors import InputError
from medverify.records import Record
from medverify.stats import Stat, bootstrap_ci

log = logging.getLogger(__name__)

ANSWERS_FILE = "answers.jsonl"
LABELS = (SupportLabel.SUPPORTED.value, SupportLabel.NOT_SUPPORTED.value)


class AgreementScores(Record):
    """Agreement of predicted with gold support over one set of claims.

    ``n`` claims with a gold label and a known prediction; ``confusion`` is gold (rows)
    -> predicted (columns) -> count; the rates are shares of ``SUPPORTED`` among those
    ``n`` claims.
    """

    n: int = 0
    n_unscored: int = 0
    balanced_accuracy: Estimate = Field(default_factory=Estimate)
    agreement: Estimate = Field(default_factory=Estimate)
    kappa: Estimate = Field(default_factory=Estimate)
    confusion: dict[str, dict[str, int]] = Field(default_factory=dict)
    gold_supported_rate: float | None = None
    predicted_supported_rate: float | None = None


class AuditEvaluation(Record):
    """``medverify eval audit``: the audit's claim-level agreement with gold labels,
    overall and per value of one answer field (``by``)."""

    path: str | None = None
    n_answers: int = 0
    n_claims: int = 0
    n_gold: int = 0
    n_boot: int = 2000
    seed: int = 0
    overall: AgreementScores = Field(default_factory=AgreementScores)
    with_source: AgreementScores = Field(
        default_factory=AgreementScores,
        description="Only claims judged against at least one valid source: without one a "
        "claim is unsupported by definition, which says nothing about the judge (offline "
        "audits of answers whose pages were not frozen).",
    )
    by: str | None = None
    breakdown: dict[str, AgreementScores] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)


# --- scores of coded pairs -----------------------------------------------------------
# A claim is coded 2 * gold + predicted (1 = supported): 0 TN, 1 FP, 2 FN, 3 TP.


def _counts(codes: np.ndarray) -> np.ndarray:
    return np.bincount(codes.astype(int), minlength=4).astype(float)


def balanced_accuracy(codes: np.ndarray) -> float:
    """Mean recall over the gold classes present."""
    tn, fp, fn, tp = _counts(codes)
    recalls = [hit / (hit + miss) for hit, miss in ((tp, fn), (tn, fp)) if hit + miss]
    return float(np.mean(recalls)) if recalls else math.nan


def agreement(codes: np.ndarray) -> float:
    tn, _, _, tp = _counts(codes)
    return float((tn + tp) / len(codes)) if len(codes) else math.nan


def cohen_kappa(codes: np.ndarray) -> float:
    """(observed - expected agreement) / (1 - expected); NaN when expected is 1."""
    tn, fp, fn, tp = _counts(codes)
    n = tn + fp + fn + tp
    if not n:
        return math.nan
    expected = ((tp + fn) * (tp + fp) + (tn + fp) * (tn + fn)) / n**2
    if expected >= 1.0:
        return math.nan
    return float(((tp + tn) / n - expected) / (1.0 - expected))


def _estimate(codes: np.ndarray, stat: Stat, n_boot: int, seed: int) -> Estimate:
    value = stat(codes) if len(codes) else math.nan
    if not math.isfinite(value):
        return Estimate(n=len(codes))
    ci = bootstrap_ci(codes, stat=stat, n=n_boot, seed=seed)
    finite = all(math.isfinite(v) for v in ci)
    return Estimate(value=value, ci=ci if finite else None, n=len(codes))


def _confusion(codes: np.ndarray) -> dict[str, dict[str, int]]:
    tn, fp, fn, tp = (int(c) for c in _counts(codes))
    supported, not_supported = LABELS
    return {
        supported: {supported: tp, not_supported: fn},
        not_supported: {supported: fp, not_supported: tn},
    }


def score_codes(codes: np.ndarray, n_unscored: int, *, n_boot: int, seed: int) -> AgreementScores:
    """All agreement scores of coded claims (see the comment above ``_counts``)."""
    _, fp, fn, tp = _counts(codes)
    n = len(codes)
    return AgreementScores(
        n=n,
        n_unscored=n_unscored,
        balanced_accuracy=_estimate(codes, balanced_accuracy, n_boot, seed),
        agreement=_estimate(codes, agreement, n_boot, seed),
        kappa=_estimate(codes, cohen_kappa, n_boot, seed),
        confusion=_confusion(codes),
        gold_supported_rate=float((tp + fn) / n) if n else None,
        predicted_supported_rate=float((tp + fp) / n) if n else None,
    )


# --- from audits ---------------------------------------------------------------------


def claim_codes(audits: Sequence[AnswerAudit], *,
                with_source: bool = False) -> tuple[np.ndarray, int]:
    """Codes of the gold-labelled claims with a known prediction, and how many
    gold-labelled claims were unscored (``with_source``: only claims with judged pairs)."""
    codes: list[int] = []
    unscored = 0
    claims = (c for a in audits for c in a.claims if c.gold is not None)
    for claim in (c for c in claims if c.pairs or not with_source):
        if claim.supported is None:
            unscored += 1
        else:
            codes.append(2 * (claim.gold == SupportLabel.SUPPORTED) + int(claim.supported))
    return np.asarray(codes, dtype=float), unscored


def score_audits(audits: Sequence[AnswerAudit], *, n_boot: int, seed: int,
                 with_source: bool = False) -> AgreementScores:
    codes, unscored = claim_codes(audits, with_source=with_source)
    return score_codes(codes, unscored, n_boot=n_boot, seed=seed)


def _breakdown(
    audits: Sequence[AnswerAudit], by: str, n_boot: int, seed: int
) -> dict[str, AgreementScores]:
    groups = group_audits(audits, by)
    return {
        value: score_audits(members, n_boot=n_boot, seed=seed)
        for value, members in groups.items()
        if any(c.gold is not None for a in members for c in a.claims)
    }


def evaluate_audit_records(
    audits: Sequence[AnswerAudit],
    *,
    by: str | None = "system",
    n_boot: int = 2000,
    seed: int = 0,
) -> AuditEvaluation:
    """Agreement with the gold labels of in-memory audits (no error when none has one:
    ``n_gold`` is then 0)."""
    warnings: list[str] = []
    breakdown: dict[str, AgreementScores] = {}
    if by:
        if any(by in a.answer.meta for a in audits):
            breakdown = _breakdown(audits, by, n_boot, seed)
        else:
            warnings.append(f"no answer has the field {by!r}: no breakdown")
    return AuditEvaluation(
        n_answers=len(audits),
        n_claims=sum(len(a.claims) for a in audits),
        n_gold=sum(1 for a in audits for c in a.claims if c.gold is not None),
        n_boot=n_boot,
        seed=seed,
        overall=score_audits(audits, n_boot=n_boot, seed=seed),
        with_source=score_audits(audits, n_boot=n_boot, seed=seed, with_source=True),
        by=by if breakdown else None,
        breakdown=breakdown,
        warnings=warnings,
    )


# --- reading an audit directory ------------------------------------------------------


def answers_path(out_dir: Path) -> Path:
    """``DIR/answers.jsonl`` (or the file itself when given one); InputError if absent."""
    path = out_dir if out_dir.is_file() else out_dir / ANSWERS_FILE
    if not path.is_file():
        raise InputError(
            f"{out_dir} has no {ANSWERS_FILE}: give the --out directory of "
            "`medverify audit FILE --out DIR`"
        )
    return path


def _parse_line(line: str, where: str) -> AnswerAudit | None:
    """One answers.jsonl line; None for a line that is not JSON (an interrupted write)."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    try:
        return AnswerAudit.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{where} is not an audited answer: {exc.errors()[0]['msg']}") from exc


def load_audits(path: Path) -> tuple[list[AnswerAudit], list[str]]:
    """The audited answers of an ``answers.jsonl``, and warnings.

    A line that is not JSON (a write cut short, e.g. the last line of an interrupted run)
    is skipped with a warning; a JSON line that is not an ``AnswerAudit`` raises
    InputError. When an answer id appears twice, the later line wins.
    """
    audits: dict[str, AnswerAudit] = {}
    warnings: list[str] = []
    text = path.read_text("utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        audit = _parse_line(line, f"{path.name} line {number}")
        if audit is None:
            warnings.append(f"{path.name} line {number} is not complete JSON: skipped")
            continue
        if audit.answer.id in audits:
            warnings.append(f"{path.name} line {number} repeats answer {audit.answer.id}")
        audits[audit.answer.id] = audit
    for message in warnings:
        log.warning(message)
    return list(audits.values()), warnings


def evaluate_audit(
    out_dir: Path,
    *,
    by: str | None = "system",
    n_boot: int = 2000,
    seed: int = 0,
) -> AuditEvaluation:
    """Agreement of the audit in ``out_dir`` (its ``answers.jsonl``) with its gold labels.

    Raises InputError when the directory has no answers file or no claim has a gold label.
    """
    path = answers_path(out_dir)
    audits, warnings = load_audits(path)
    result = evaluate_audit_records(audits, by=by, n_boot=n_boot, seed=seed)
    if result.n_gold == 0:
        raise InputError(
            f"no claim in {path} has a gold label: give claims with "
            '"label": "SUPPORTED" or "NOT_SUPPORTED" in the audit input'
        )
    return result.model_copy(update={"path": str(path), "warnings": [*warnings, *result.warnings]})
