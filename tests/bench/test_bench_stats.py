from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from medverify.audit.metrics import audit_metrics, claim_supported
from medverify.audit.records import AnswerAudit, ClaimAudit, PairJudgement
from medverify.bench.stats import (
    METRICS,
    CountTable,
    answer_counts,
    compare_models,
    compare_tables,
    count_table,
    holm,
    question_key,
    swap_masks,
)
from medverify.records import Analysis, Answer, Claim, Source, Verdict
from medverify.stats import bootstrap_weights

# --- builders ------------------------------------------------------------------------------


def judged(claim_id: str, source_id: str, supported: bool | None) -> PairJudgement:
    """A FACT (supported), HALLUCINATION (not) or failed (None) judgement."""
    if supported is None:
        verdict = Verdict(claim_id=claim_id, error="judge timed out")
    else:
        verdict = Verdict(claim_id=claim_id, factual=Analysis(holds=supported),
                          counterfactual=Analysis(holds=not supported))
    return PairJudgement(claim_id=claim_id, source_id=source_id, verdict=verdict)


def source(sid: str, url: str, valid: bool) -> Source:
    if valid:
        return Source(id=sid, url=url, text="Page text.", status="fetched", http_status=200)
    return Source(id=sid, url=url, status="invalid", http_status=404)


def answer_audit(
    model: str,
    qid: str,
    claims: list[bool | None],
    *,
    valid: int = 1,
    invalid: int = 0,
    qsource: str = "set-a",
    domain: str = "example.org",
) -> AnswerAudit:
    """An answer with ``valid`` + ``invalid`` sources; claim k is judged against every
    valid source, supported by the first one when ``claims[k]`` is True."""
    sources = [source(f"s{i}", f"https://www.{domain}/{qid}/{i}", i < valid)
               for i in range(valid + invalid)]
    audits = []
    for k, value in enumerate(claims):
        cid = f"c{k}"
        pairs = [judged(cid, s.id, value if i == 0 else (False if value is not None else None))
                 for i, s in enumerate(sources) if s.valid]
        audits.append(ClaimAudit(claim=Claim(id=cid, text=f"Statement {k} of {qid}."),
                                 pairs=pairs, supported=claim_supported(pairs),
                                 supporting_source_ids=[p.source_id for p in pairs
                                                        if p.supported]))
    meta = {"model": model, "question_id": qid, "question_source": qsource,
            "reply_status": "ok"}
    answer = Answer(id=f"{model}::{qid}", question=f"Question {qid}?", text="An answer.",
                    sources=sources, meta=meta)
    return AnswerAudit(answer=answer, claims=audits)


def model_audits(model: str, pattern: list[list[bool | None]], **kw: object) -> list[AnswerAudit]:
    return [answer_audit(model, f"q{i}", claims, **kw)  # type: ignore[arg-type]
            for i, claims in enumerate(pattern)]


def table(rows: list[tuple[int, int]], metric: str = "statement_support") -> CountTable:
    counts = np.asarray(rows, dtype=float).reshape(len(rows), 1, 2)
    return CountTable([f"q{i}" for i in range(len(rows))], (metric,), counts)


# --- counts --------------------------------------------------------------------------------


def test_answer_counts_follow_the_audit_definitions() -> None:
    audit = answer_audit("m", "q1", [True, False, None], valid=2, invalid=1)
    counts = answer_counts(audit)
    assert counts["url_validity"] == (2, 3)
    assert counts["statement_support"] == (1, 2)  # the failed claim is unscored
    assert counts["response_support"] == (0, 1)  # one unsupported claim: known, False
    # s0 supports claim 0; s1 supports nothing but a pair of it failed: its use is unknown
    assert counts["unused_sources"] == (0, 1)
    assert answer_counts(answer_audit("m", "q2", [True, False], valid=2))["unused_sources"] \
        == (1, 2)
    assert question_key(audit) == "q1"


def test_question_key_falls_back_on_the_answer_id() -> None:
    audit = AnswerAudit(answer=Answer(id="gpt::q7", text="x"))
    assert question_key(audit) == "q7"


def test_pooled_values_match_audit_metrics() -> None:
    a = model_audits("a", [[True, True], [True, False], [False], [True, None]], valid=2)
    b = model_audits("b", [[False], [True], [True, True, True], []], invalid=1)
    found = compare_models({"a": a, "b": b}, n_boot=200, n_perm=200)
    assert [c.metric for c in found] == list(METRICS)
    for item in found:
        expected_a = getattr(audit_metrics(a, n_boot=10), item.metric).value
        expected_b = getattr(audit_metrics(b, n_boot=10), item.metric).value
        assert item.value_a == pytest.approx(expected_a)
        assert item.value_b == pytest.approx(expected_b)
        assert item.difference == pytest.approx(expected_a - expected_b)
    # n: questions where both models have a value (b's 4th answer has no statement)
    assert [c.n_questions for c in found] == [4, 3, 3, 4]


# --- the test ------------------------------------------------------------------------------


def test_identical_models_differ_by_zero_with_p_one() -> None:
    pattern = [[True, False], [True], [False, False], [True, True, None]] * 5
    found = compare_models({"a": model_audits("a", pattern), "b": model_audits("b", pattern)},
                           n_boot=500, n_perm=1000)
    for item in found:
        assert item.difference == 0.0
        assert item.ci == (0.0, 0.0)
        assert item.p_value == 1.0
        assert item.p_holm == 1.0
        assert "paired bootstrap" in item.test and "permutation" in item.test
        assert "Holm" in item.test


def test_a_clearly_better_model_gets_a_small_p_value() -> None:
    good = model_audits("good", [[True, True]] * 30 + [[True, False]] * 5)
    bad = model_audits("bad", [[False, False]] * 25 + [[True, True]] * 10)
    item = next(c for c in compare_models({"good": good, "bad": bad}, n_boot=1000,
                                          n_perm=2000) if c.metric == "response_support")
    assert item.difference == pytest.approx(30 / 35 - 10 / 35)
    assert item.p_value is not None and item.p_value < 0.001
    assert item.ci is not None and 0 < item.ci[0] < item.difference < item.ci[1]


def test_only_questions_both_models_answered_are_compared() -> None:
    a = model_audits("a", [[True]] * 6)
    b = model_audits("b", [[False]] * 4)[:4]  # b never answered q4, q5
    b += [answer_audit("b", "extra", [True])]
    item = next(c for c in compare_models({"a": a, "b": b}, n_boot=100, n_perm=100)
                if c.metric == "statement_support")
    assert item.n_questions == 4
    assert (item.value_a, item.value_b) == (1.0, 0.0)


def test_undefined_metric_has_no_difference() -> None:
    a = model_audits("a", [[True]] * 3, valid=0)  # no URL at all
    b = model_audits("b", [[True]] * 3)
    item = next(c for c in compare_models({"a": a, "b": b}, n_boot=50, n_perm=100)
                if c.metric == "url_validity")
    assert item.value_a is None and item.value_b == 1.0
    assert item.difference is None and item.p_value is None and item.p_holm is None


def test_permutation_p_matches_exact_enumeration() -> None:
    rows_a = [(3, 4), (1, 2), (2, 2), (0, 3), (4, 5), (2, 3), (1, 1), (3, 3), (0, 1)]
    rows_b = [(1, 4), (1, 3), (0, 2), (1, 2), (2, 5), (1, 3), (0, 1), (2, 4), (1, 1)]
    a, b = np.asarray(rows_a, float), np.asarray(rows_b, float)
    observed = a[:, 0].sum() / a[:, 1].sum() - b[:, 0].sum() / b[:, 1].sum()
    extreme = 0
    for swaps in itertools.product((0, 1), repeat=len(a)):
        s = np.asarray(swaps, float)[:, None]
        pa, pb = a * (1 - s) + b * s, b * (1 - s) + a * s
        d = pa[:, 0].sum() / pa[:, 1].sum() - pb[:, 0].sum() / pb[:, 1].sum()
        extreme += abs(d) >= abs(observed) - 1e-12
    exact = extreme / 2 ** len(a)
    item = compare_tables({"a": table(rows_a), "b": table(rows_b)}, n_boot=100,
                          n_perm=40_000)[0]
    assert item.difference == pytest.approx(observed)
    assert item.p_value == pytest.approx(exact, abs=0.01)


def test_bootstrap_ci_matches_a_plain_loop() -> None:
    rng = np.random.default_rng(1)
    n = 60
    rows_a = [(int(x), 3) for x in rng.integers(0, 4, n)]
    rows_b = [(int(x), 3) for x in rng.integers(0, 3, n)]
    a, b = np.asarray(rows_a, float), np.asarray(rows_b, float)
    loop = []
    for _ in range(4000):
        idx = rng.integers(0, n, n)
        loop.append(a[idx, 0].sum() / a[idx, 1].sum() - b[idx, 0].sum() / b[idx, 1].sum())
    low, high = np.percentile(loop, [2.5, 97.5])
    item = compare_tables({"a": table(rows_a), "b": table(rows_b)}, n_boot=4000, n_perm=100)[0]
    assert item.ci is not None
    assert item.ci[0] == pytest.approx(low, abs=0.02)
    assert item.ci[1] == pytest.approx(high, abs=0.02)


def test_results_are_deterministic_for_a_seed() -> None:
    tables = {"a": table([(1, 2), (2, 2), (0, 1)] * 10), "b": table([(1, 2), (0, 2), (1, 1)] * 10)}
    first = compare_tables(tables, n_boot=300, n_perm=300, seed=3)
    again = compare_tables(tables, n_boot=300, n_perm=300, seed=3)
    assert first == again


# --- Holm ----------------------------------------------------------------------------------


def test_holm_by_hand() -> None:
    assert holm([0.01, 0.04, 0.03, None]) == pytest.approx([0.03, 0.06, 0.06, None])
    assert holm([0.5, 0.2]) == pytest.approx([0.5, 0.4])
    assert holm([0.02, 0.5, 0.3]) == pytest.approx([0.06, 0.6, 0.6])
    assert holm([0.9, 0.8, 0.7]) == [1.0, 1.0, 1.0]
    assert holm([]) == []


def test_holm_is_monotone_and_not_below_raw_p() -> None:
    rng = np.random.default_rng(0)
    models = {f"m{k}": table([(int(x), 4) for x in rng.integers(0, 5 - k % 3, 40)])
              for k in range(5)}
    found = compare_tables(models, n_boot=100, n_perm=500)
    assert len(found) == 10
    ranked = sorted(found, key=lambda c: c.p_value or 0.0)
    holms = [c.p_holm or 0.0 for c in ranked]
    assert holms == sorted(holms)
    assert all((c.p_holm or 0) >= (c.p_value or 0) for c in found)
    assert all((c.p_holm or 0) <= 1.0 for c in found)


# --- resamples and speed -------------------------------------------------------------------


def test_resample_matrices() -> None:
    rng = np.random.default_rng(0)
    weights = bootstrap_weights(7, 50, rng)
    assert weights.shape == (50, 7) and (weights.sum(axis=1) == 7).all()
    masks = swap_masks(9, 1000, rng)
    assert masks.shape == (1000, 9) and set(np.unique(masks)) == {0.0, 1.0}
    assert 0.45 < masks.mean() < 0.55


def test_count_table_keeps_the_last_audit_per_question() -> None:
    audits = [answer_audit("m", "q1", [False]), answer_audit("m", "q1", [True])]
    found = count_table(audits, ["statement_support"])
    assert found.questions == ["q1"]
    assert found.counts[0, 0].tolist() == [1.0, 1.0]


def test_seven_models_by_800_questions_is_fast() -> None:
    rng = np.random.default_rng(0)
    tables = {}
    for k in range(7):
        counts = np.stack([rng.integers(0, 4, (800, 4)), np.full((800, 4), 3)], axis=-1)
        tables[f"m{k}"] = CountTable([f"q{i}" for i in range(800)], METRICS,
                                     counts.astype(float))
    started = time.perf_counter()
    found = compare_tables(tables, n_boot=2000, n_perm=10_000)
    assert len(found) == 21 * 4
    assert time.perf_counter() - started < 60.0  # hang guard (vectorised: ~1 s idle)


def test_unknown_metric_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown metric"):
        compare_models({}, metrics=["accuracy"])


def test_a_pair_gets_the_same_result_alone_or_among_others() -> None:
    rng = np.random.default_rng(5)
    tables = {f"m{k}": table([(int(x), 3) for x in rng.integers(0, 4, 50)]) for k in range(3)}
    tables["short"] = table([(1, 3)] * 20)  # another number of common questions
    alone = compare_tables({"m0": tables["m0"], "m2": tables["m2"]}, n_boot=300, n_perm=300)[0]
    among = next(c for c in compare_tables(tables, n_boot=300, n_perm=300)
                 if (c.model_a, c.model_b) == ("m0", "m2"))
    assert among.ci == alone.ci and among.p_value == alone.p_value
    assert among.p_holm is not None and alone.p_holm is not None
    assert among.p_holm >= alone.p_holm
