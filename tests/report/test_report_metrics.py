from __future__ import annotations

import math

import numpy as np
import pytest

from medverify.records import Category, ClaimResult, Metrics
from medverify.report.metrics import aggregate, compute_metrics, not_sure_counts
from medverify.stats import bootstrap_ci
from report_fixtures import example_report, example_results, result_of

F, H, J, G, E = (
    Category.FACT,
    Category.HALLUCINATION,
    Category.JUDGMENT_ERROR,
    Category.COVERAGE_GAP,
    Category.ERROR,
)


def results(*categories: Category) -> list[ClaimResult]:
    return [result_of(c, claim_id=f"c{i}") for i, c in enumerate(categories)]


def test_all_fact() -> None:
    m = compute_metrics(results(F, F, F))
    assert (m.n_claims, m.n_scored, m.n_errors) == (3, 3, 0)
    assert m.statement_support == 1.0
    assert m.response_support is True
    assert m.mean_score == 1.0
    assert m.counts == {
        "FACT": 3,
        "HALLUCINATION": 0,
        "JUDGMENT_ERROR": 0,
        "COVERAGE_GAP": 0,
        "ERROR": 0,
    }


def test_one_hallucination_makes_the_response_unsupported() -> None:
    m = compute_metrics(results(F, H, F))
    assert m.statement_support == pytest.approx(2 / 3)
    assert m.response_support is False
    assert m.mean_score == pytest.approx(2 / 3)
    assert m.counts["HALLUCINATION"] == 1


def test_errors_only_score_nothing() -> None:
    m = compute_metrics(results(E, E))
    assert (m.n_claims, m.n_scored, m.n_errors) == (2, 0, 2)
    assert m.statement_support is None
    assert m.response_support is None
    assert m.mean_score is None
    assert m.counts["ERROR"] == 2


def test_empty_list() -> None:
    m = compute_metrics([])
    assert (m.n_claims, m.n_scored, m.n_errors) == (0, 0, 0)
    assert m.statement_support is None and m.response_support is None and m.mean_score is None
    assert set(m.counts) == {c.value for c in Category}
    assert sum(m.counts.values()) == 0


def test_errors_with_only_facts_leave_response_support_unknown() -> None:
    m = compute_metrics(results(F, E, F))
    assert m.response_support is None
    assert m.statement_support == 1.0  # errors never enter the share
    assert (m.n_scored, m.n_errors) == (2, 1)


def test_errors_with_a_non_fact_are_unsupported_anyway() -> None:
    for bad in (H, J, G):
        m = compute_metrics(results(F, E, bad))
        assert m.response_support is False, bad
        assert m.statement_support == pytest.approx(0.5)


def test_mean_score_uses_category_scores_over_scored_claims() -> None:
    m = compute_metrics(results(F, J, G, H, E))
    assert m.mean_score == pytest.approx((1 + 0.5 + 0.5 + 0) / 4)
    assert m.statement_support == pytest.approx(1 / 4)


def test_an_explicit_claim_score_is_respected() -> None:
    custom = result_of(G).model_copy(update={"score": 0.8})
    assert compute_metrics([custom, result_of(F)]).mean_score == pytest.approx(0.9)


def test_example_report_metrics() -> None:
    m = compute_metrics(example_results())
    assert (m.n_claims, m.n_scored, m.n_errors) == (8, 7, 1)
    assert m.statement_support == pytest.approx(4 / 7)
    assert m.response_support is False
    assert m.mean_score == pytest.approx(5 / 7)


def test_bootstrap_ci_contains_the_mean_and_is_deterministic() -> None:
    values = np.random.default_rng(42).normal(3.0, 1.0, size=200)
    low, high = bootstrap_ci(values)
    assert low < float(np.mean(values)) < high
    assert high - low < 0.6  # about 4 standard errors (se = 0.07)
    assert bootstrap_ci(values) == (low, high)
    assert bootstrap_ci(values, seed=1) != (low, high)


def test_bootstrap_ci_narrows_with_a_larger_alpha() -> None:
    values = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    wide = bootstrap_ci(values, alpha=0.01)
    narrow = bootstrap_ci(values, alpha=0.5)
    assert wide[0] <= narrow[0] <= narrow[1] <= wide[1]
    assert wide[0] >= 0.0 and wide[1] <= 1.0


def test_bootstrap_ci_degenerate_cases() -> None:
    assert all(math.isnan(x) for x in bootstrap_ci([]))
    assert bootstrap_ci([0.25]) == (0.25, 0.25)
    assert bootstrap_ci([2.0] * 30) == (2.0, 2.0)


def test_bootstrap_ci_takes_another_statistic() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 100.0]
    low, high = bootstrap_ci(values, stat=np.median)
    assert 1.0 <= low <= 3.0 <= high <= 100.0


def test_bootstrap_ci_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="alpha"):
        bootstrap_ci([1.0, 2.0], alpha=1.5)
    with pytest.raises(ValueError, match="resample"):
        bootstrap_ci([1.0, 2.0], n=0)


def test_aggregate_pools_claims_and_answers() -> None:
    reports = [
        example_report(),  # 4 FACT of 7 scored, not supported, 1 error
        example_report(results(F, F)),  # supported
        example_report(results(E, E)),  # unknown: nothing scored
        example_report(results(F, E)),  # unknown: facts but an error
    ]
    agg = aggregate(reports)
    assert (agg.n_answers, agg.n_claims, agg.n_scored, agg.n_errors) == (4, 14, 10, 4)
    assert agg.statement_support == pytest.approx(7 / 10)
    assert agg.response_support == pytest.approx(1 / 2)  # of the 2 answers whose support is known
    assert (agg.n_answers_supported, agg.n_answers_unknown, agg.n_answers_with_errors) == (1, 2, 3)
    assert agg.counts["FACT"] == 7 and agg.counts["ERROR"] == 4
    assert agg.statement_support_ci is not None
    low, high = agg.statement_support_ci
    assert low <= agg.statement_support <= high
    assert agg.mean_score == pytest.approx((4 + 0 + 0.5 + 0.5 + 1 + 1 + 1) / 10)
    assert aggregate(reports) == agg


def test_aggregate_of_nothing() -> None:
    agg = aggregate([])
    assert agg.n_answers == 0 and agg.n_claims == 0
    assert agg.statement_support is None and agg.statement_support_ci is None
    assert agg.response_support is None and agg.response_support_ci is None


def test_confident_counts_per_category_only_once_verdicts_are_assessed() -> None:
    sure = result_of(F, "a").model_copy(update={"confident": True})
    unsure = result_of(F, "b").model_copy(update={"confident": False, "not_sure": "why"})
    gap = result_of(G, "c").model_copy(update={"confident": True})
    claims = [sure, unsure, gap, result_of(F, "d"), result_of(E, "e")]
    m = compute_metrics(claims)
    assert m.confident == {"FACT": 1, "HALLUCINATION": 0, "JUDGMENT_ERROR": 0,
                           "COVERAGE_GAP": 1, "ERROR": 0}
    assert not_sure_counts(claims)["FACT"] == 1 and sum(not_sure_counts(claims).values()) == 1
    assert compute_metrics(example_results()).confident == {}  # none assessed
    assert not_sure_counts(example_results()) == {}
    old = m.model_dump(exclude={"confident"})  # metrics recorded before the field
    assert Metrics.model_validate(old).confident == {}
