"""Report metrics, computed from records only (never inside the model-calling loop).

Definitions (see ``docs/report.md``):

- a claim is *scored* when its category is not ``ERROR``; errors are counted apart and
  never enter a share or a mean;
- *statement-level support* (SourceCheckup): the share of scored claims that are ``FACT``;
- *response-level support* (SourceCheckup): an answer is supported when every one of its
  claims is ``FACT``. With errored claims the answer is *unknown* (``None``) unless some
  scored claim is already non-``FACT`` (then it is ``False`` whatever the errors hide);
- *mean score* (CHECK): the mean of the per-claim scores (FACT 1, HALLUCINATION 0,
  JUDGMENT_ERROR and COVERAGE_GAP 0.5) over scored claims;
- *decisions*: claims per arbitration decision (ACCEPT, FLAG, ESCALATE; see
  ``docs/arbitration.md``), ERROR claims included (the policy decides them too); empty when
  no claim carries a decision;
- *confident*: claims per category whose verdict is confident (``confident`` True); a
  verdict with ``confident`` False is shown as NOT SURE (:func:`not_sure_counts`); empty
  when no claim's verdict was assessed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from medverify.records import Category, ClaimResult, Decision, Metrics, Report
from medverify.stats import bootstrap_ci
from medverify.verdict_rules import CATEGORY_SCORE


def _scored(results: Sequence[ClaimResult]) -> list[ClaimResult]:
    return [r for r in results if r.category != Category.ERROR]


def claim_score(result: ClaimResult) -> float | None:
    """A claim's score: its own ``score`` when set, else the category's; None for ERROR."""
    if result.category == Category.ERROR:
        return None
    return result.score if result.score is not None else CATEGORY_SCORE[result.category]


def category_counts(results: Sequence[ClaimResult]) -> dict[str, int]:
    """Claims per category; all five categories are always present (ERROR included)."""
    counts = {category.value: 0 for category in Category}
    for result in results:
        counts[result.category.value] += 1
    return counts


def response_support(results: Sequence[ClaimResult]) -> bool | None:
    """Whether every claim of one answer is FACT.

    ``False`` as soon as one scored claim is not FACT (errors cannot change that);
    ``None`` (unknown) when nothing was scored, or when all scored claims are FACT but
    some claims errored; ``True`` only when all claims were scored and all are FACT.
    """
    scored = _scored(results)
    if any(r.category != Category.FACT for r in scored):
        return False
    if not scored or len(scored) < len(results):
        return None
    return True


def decision_counts(results: Sequence[ClaimResult]) -> dict[str, int]:
    """Claims per arbitration decision, all three decisions present; empty when no claim
    carries a decision (claims without one are not counted)."""
    decided = [r.arbitration.decision for r in results if r.arbitration is not None]
    if not decided:
        return {}
    counts = {decision.value: 0 for decision in Decision}
    for decision in decided:
        counts[decision.value] += 1
    return counts


def _assessed_counts(results: Sequence[ClaimResult], confident: bool) -> dict[str, int]:
    if all(r.confident is None for r in results):
        return {}
    counts = {category.value: 0 for category in Category}
    for result in results:
        if result.confident is confident:
            counts[result.category.value] += 1
    return counts


def confident_counts(results: Sequence[ClaimResult]) -> dict[str, int]:
    """Claims per category whose verdict is confident, all five categories present; empty
    when no claim's verdict was assessed (``confident`` None everywhere)."""
    return _assessed_counts(results, True)


def not_sure_counts(results: Sequence[ClaimResult]) -> dict[str, int]:
    """Claims per category whose verdict is shown as NOT SURE (``confident`` False), all
    five categories present; empty when no claim's verdict was assessed."""
    return _assessed_counts(results, False)


def compute_metrics(results: Sequence[ClaimResult]) -> Metrics:
    """The summary numbers of one report (see the module docstring for definitions)."""
    scored = _scored(results)
    n_fact = sum(1 for r in scored if r.category == Category.FACT)
    scores = [s for s in (claim_score(r) for r in scored) if s is not None]
    return Metrics(
        n_claims=len(results),
        n_scored=len(scored),
        n_errors=len(results) - len(scored),
        counts=category_counts(results),
        statement_support=n_fact / len(scored) if scored else None,
        response_support=response_support(results),
        mean_score=float(np.mean(scores)) if scores else None,
        decisions=decision_counts(results),
        confident=confident_counts(results),
    )


class AggregateMetrics(BaseModel):
    """Metrics over many reports (answers), with bootstrap confidence intervals.

    ``statement_support`` pools the scored claims of all answers; its interval resamples
    claims (it treats claims as independent, which narrows the interval when claims of
    one answer are correlated). ``response_support`` is the share of answers whose
    response-level support is known that are supported; answers whose support is
    unknown (errors, or nothing scored) are counted in ``n_answers_unknown``.
    Intervals are None when there is nothing to resample.
    """

    model_config = ConfigDict(extra="forbid")

    n_answers: int
    n_claims: int
    n_scored: int
    n_errors: int
    counts: dict[str, int]
    statement_support: float | None
    statement_support_ci: tuple[float, float] | None
    mean_score: float | None
    mean_score_ci: tuple[float, float] | None
    response_support: float | None
    response_support_ci: tuple[float, float] | None
    n_answers_supported: int
    n_answers_unknown: int
    n_answers_with_errors: int
    n_report_errors: int


def _mean_and_ci(values: list[float], seed: int) -> tuple[float | None, tuple[float, float] | None]:
    if not values:
        return None, None
    return float(np.mean(values)), bootstrap_ci(values, seed=seed)


def _pooled_counts(reports: Sequence[Report]) -> dict[str, int]:
    counts = {category.value: 0 for category in Category}
    for report in reports:
        for key, value in category_counts(report.results).items():
            counts[key] += value
    return counts


def aggregate(reports: Sequence[Report], seed: int = 0) -> AggregateMetrics:
    """Pool many reports: claim-level shares over claims, response-level over answers.

    Recomputes everything from ``report.results`` (not from ``report.metrics``), so a
    change of metric definition never needs a rerun of the models.
    """
    results = [r for report in reports for r in report.results]
    scored = _scored(results)
    facts = [1.0 if r.category == Category.FACT else 0.0 for r in scored]
    scores = [s for s in (claim_score(r) for r in scored) if s is not None]
    per_answer = [response_support(report.results) for report in reports]
    known = [1.0 if value else 0.0 for value in per_answer if value is not None]
    statement, statement_ci = _mean_and_ci(facts, seed)
    mean_score, mean_score_ci = _mean_and_ci(scores, seed)
    response, response_ci = _mean_and_ci(known, seed)
    return AggregateMetrics(
        n_answers=len(reports),
        n_claims=len(results),
        n_scored=len(scored),
        n_errors=len(results) - len(scored),
        counts=_pooled_counts(reports),
        statement_support=statement,
        statement_support_ci=statement_ci,
        mean_score=mean_score,
        mean_score_ci=mean_score_ci,
        response_support=response,
        response_support_ci=response_ci,
        n_answers_supported=int(sum(known)),
        n_answers_unknown=len(per_answer) - len(known),
        n_answers_with_errors=sum(
            1 for report in reports if any(r.category == Category.ERROR for r in report.results)
        ),
        n_report_errors=sum(len(report.errors) for report in reports),
    )
