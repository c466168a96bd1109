from __future__ import annotations

from typing import Any

import pytest

from medverify.audit.metrics import (
    MISSING,
    answer_metrics,
    audit_metrics,
    breakdown_fields,
    breakdowns,
    claim_supported,
    cluster_share_estimate,
    share_estimate,
)
from medverify.audit.records import (
    AnswerAudit,
    ClaimAudit,
    Estimate,
    PairJudgement,
    SupportLabel,
)
from medverify.records import Analysis, Answer, Claim, FetchFailure, Source, Verdict

# --- builders (also used by test_audit_evaluate and test_audit_urls) ------------------


def verdict(claim_id: str, supported: bool | None) -> Verdict:
    """A FACT verdict (supported), a COVERAGE_GAP one (not), or a failed call (None)."""
    if supported is None:
        return Verdict(claim_id=claim_id, error="judge timed out")
    return Verdict(
        claim_id=claim_id,
        factual=Analysis(holds=supported),
        counterfactual=Analysis(holds=False),
    )


def pair(claim_id: str, source_id: str, supported: bool | None) -> PairJudgement:
    return PairJudgement(
        claim_id=claim_id, source_id=source_id, verdict=verdict(claim_id, supported)
    )


def valid_source(sid: str, url: str | None = None, *, given: bool = False) -> Source:
    return Source(
        id=sid,
        url=url if url is not None else f"https://example.org/{sid}",
        text="Page text about the topic.",
        status="given" if given else "fetched",
        http_status=None if given else 200,
    )


def invalid_source(
    sid: str,
    url: str | None = None,
    failure: FetchFailure | None = FetchFailure.HTTP_STATUS,
    http_status: int | None = 404,
) -> Source:
    return Source(
        id=sid,
        url=url if url is not None else f"https://example.org/{sid}",
        status="invalid",
        failure=failure,
        http_status=http_status,
    )


def claim(
    cid: str, judged: dict[str, bool | None] | None = None, gold: str | None = None
) -> ClaimAudit:
    pairs = [pair(cid, sid, value) for sid, value in (judged or {}).items()]
    supported = claim_supported(pairs)
    return ClaimAudit(
        claim=Claim(id=cid, text=f"Statement {cid}."),
        gold=SupportLabel(gold) if gold else None,
        pairs=pairs,
        supported=supported,
        supporting_source_ids=[p.source_id for p in pairs if p.supported],
    )


def audit(aid: str, sources: list[Source], claims: list[ClaimAudit], **meta: Any) -> AnswerAudit:
    answer = Answer(id=aid, text=f"Answer {aid}.", sources=sources, meta=meta)
    return AnswerAudit(answer=answer, claims=claims)


def example_audits() -> list[AnswerAudit]:
    """Four answers whose pooled metrics are computed by hand in the tests below."""
    a1 = audit(
        "a1",
        [valid_source("s1"), invalid_source("s2"), valid_source("s3", given=True)],
        [
            claim("c1", {"s1": True, "s3": False}),
            claim("c2", {"s1": False, "s3": False}),
            claim("c3", {"s1": None, "s3": False}),
        ],
        system="gpt",
        field="Medicine",
    )
    a2 = audit(
        "a2",
        [valid_source("s1")],
        [claim("c1", {"s1": True}), claim("c2", {"s1": True})],
        system="claude",
        field="Medicine",
    )
    a3 = audit("a3", [], [], field="Biology")
    a4 = audit(
        "a4",
        [
            invalid_source("s1", failure=FetchFailure.DNS, http_status=None),
            Source(id="s2", url="https://example.org/s2"),
        ],
        [claim("c1")],
        system="gpt",
    )
    return [a1, a2, a3, a4]


# --- claim_supported -----------------------------------------------------------------


def test_claim_supported_rule() -> None:
    assert claim_supported([pair("c", "s1", False), pair("c", "s2", True)]) is True
    assert claim_supported([pair("c", "s1", None), pair("c", "s2", True)]) is True
    assert claim_supported([pair("c", "s1", False), pair("c", "s2", None)]) is None
    assert claim_supported([pair("c", "s1", False), pair("c", "s2", False)]) is False
    assert claim_supported([]) is False


def test_contradicted_or_conflicting_pairs_are_not_support() -> None:
    contradicted = Verdict(
        claim_id="c", factual=Analysis(holds=False), counterfactual=Analysis(holds=True)
    )
    both = Verdict(claim_id="c", factual=Analysis(holds=True), counterfactual=Analysis(holds=True))
    pairs = [
        PairJudgement(claim_id="c", source_id=s, verdict=v)
        for s, v in [("1", contradicted), ("2", both)]
    ]
    assert claim_supported(pairs) is False


# --- answer_metrics ------------------------------------------------------------------


def test_answer_metrics_by_hand() -> None:
    metrics = answer_metrics(example_audits()[0])
    assert (metrics.n_urls, metrics.n_valid_urls) == (3, 2)
    assert metrics.url_validity == pytest.approx(2 / 3)
    assert (metrics.n_claims, metrics.n_scored, metrics.n_supported) == (3, 2, 1)
    assert metrics.statement_support == 0.5
    assert metrics.response_support is False
    assert metrics.n_unused_sources == 1  # s3 supports nothing; s2 is invalid
    assert metrics.unused_source_share == 0.5


def test_answer_fully_supported() -> None:
    metrics = answer_metrics(example_audits()[1])
    assert metrics.statement_support == 1.0
    assert metrics.response_support is True
    assert (metrics.n_unused_sources, metrics.unused_source_share) == (0, 0.0)


def test_answer_without_urls_or_claims_has_undefined_shares() -> None:
    metrics = answer_metrics(audit("a", [], []))
    assert metrics.n_urls == 0 and metrics.url_validity is None
    assert metrics.statement_support is None and metrics.response_support is None
    assert metrics.unused_source_share is None


def test_all_invalid_urls() -> None:
    metrics = answer_metrics(example_audits()[3])
    assert (metrics.n_urls, metrics.n_valid_urls, metrics.url_validity) == (2, 0, 0.0)
    assert metrics.statement_support == 0.0  # a claim with no valid source is unsupported
    assert metrics.response_support is False
    assert metrics.unused_source_share is None


def test_judge_errors_make_support_unknown_not_false() -> None:
    metrics = answer_metrics(audit("a", [valid_source("s1")], [claim("c1", {"s1": None})]))
    assert metrics.n_scored == 0 and metrics.statement_support is None
    assert metrics.response_support is None
    assert metrics.n_unused_sources == 0 and metrics.unused_source_share is None
    mixed = audit("b", [valid_source("s1")], [claim("c1", {"s1": True}), claim("c2", {"s1": None})])
    assert answer_metrics(mixed).response_support is None
    assert answer_metrics(mixed).statement_support == 1.0


def test_source_without_url_is_no_url_but_can_be_used() -> None:
    given = Source(id="s1", text="Given text.", status="given")
    metrics = answer_metrics(audit("a", [given], [claim("c1", {"s1": True})]))
    assert metrics.n_urls == 0 and metrics.url_validity is None
    assert metrics.unused_source_share == 0.0


def test_empty_text_is_invalid_even_with_status_200() -> None:
    empty = Source(id="s1", url="https://e.org/", status="fetched", http_status=200, text=" ")
    assert answer_metrics(audit("a", [empty], [])).url_validity == 0.0


# --- audit_metrics -------------------------------------------------------------------


def test_pooled_metrics_by_hand() -> None:
    metrics = audit_metrics(example_audits(), n_boot=500, seed=1)
    assert (metrics.n_answers, metrics.n_urls, metrics.n_claims) == (4, 6, 6)
    assert metrics.n_scored_claims == 5
    assert (metrics.n_pairs, metrics.n_pair_errors) == (8, 1)
    assert (metrics.url_validity.value, metrics.url_validity.n) == (0.5, 6)
    assert (metrics.statement_support.value, metrics.statement_support.n) == (0.6, 5)
    assert metrics.response_support.value == pytest.approx(1 / 3)
    assert metrics.response_support.n == 3
    assert metrics.unused_sources.value == pytest.approx(1 / 3)
    assert metrics.unused_sources.n == 3
    assert metrics.invalid_reasons == {"http_status": 1, "dns": 1, "not_fetched": 1}


def test_cis_are_deterministic_and_contain_the_value() -> None:
    audits = example_audits() * 5
    first = audit_metrics(audits, n_boot=300, seed=7)
    assert first == audit_metrics(audits, n_boot=300, seed=7)
    assert first != audit_metrics(audits, n_boot=300, seed=8)
    for estimate in (
        first.url_validity,
        first.statement_support,
        first.response_support,
        first.unused_sources,
    ):
        assert estimate.ci is not None and estimate.value is not None
        assert estimate.ci[0] <= estimate.value <= estimate.ci[1]
        assert estimate.ci[0] < estimate.ci[1]


def test_empty_audit_set() -> None:
    metrics = audit_metrics([])
    assert metrics.n_answers == 0
    assert metrics.url_validity == Estimate(reason="no cited URL")
    assert metrics.statement_support.value is None
    assert metrics.statement_support.reason == "no statement to check (no answer)"


def test_share_estimate_single_value_and_empty() -> None:
    assert share_estimate([]) == Estimate()
    assert share_estimate([True]) == Estimate(value=1.0, ci=(1.0, 1.0), n=1)


def test_cluster_bootstrap_resamples_answers() -> None:
    # 20 answers of 10 claims each, all supported or all not: claims are perfectly
    # correlated within an answer, so 20 (not 200) independent units.
    clusters = [(10, 10) if i % 2 else (0, 10) for i in range(20)]
    clustered = cluster_share_estimate(clusters, n_boot=1000, seed=0)
    flags = [hits > 0 for hits, trials in clusters for _ in range(trials)]
    flat = share_estimate(flags, n_boot=1000, seed=0)
    assert clustered.value == flat.value == 0.5
    assert clustered.n == flat.n == 200
    assert clustered.ci is not None and flat.ci is not None
    width = clustered.ci[1] - clustered.ci[0]
    assert width > 2 * (flat.ci[1] - flat.ci[0])
    assert 0.3 < width < 0.6  # about 2 * 1.96 * sqrt(0.25 / 20) = 0.44


def test_cluster_share_ignores_empty_clusters_and_pools() -> None:
    estimate = cluster_share_estimate([(1, 4), (0, 0), (3, 4)], n_boot=200)
    assert estimate.value == 0.5 and estimate.n == 8
    assert cluster_share_estimate([(0, 0)]) == Estimate()
    assert cluster_share_estimate([(2, 3)]) == Estimate(value=2 / 3, ci=(2 / 3, 2 / 3), n=3)


def test_statement_support_cluster_is_default() -> None:
    audits = [
        audit(f"a{i}", [valid_source("s")], [claim(f"c{j}", {"s": i % 2 == 0}) for j in range(8)])
        for i in range(12)
    ]
    clustered = audit_metrics(audits, n_boot=500).statement_support
    flat = audit_metrics(audits, n_boot=500, cluster=False).statement_support
    assert clustered.value == flat.value == 0.5
    assert clustered.ci is not None and flat.ci is not None
    assert clustered.ci[1] - clustered.ci[0] > flat.ci[1] - flat.ci[0]


# --- breakdowns ----------------------------------------------------------------------


def test_breakdown_fields_pick_small_string_fields() -> None:
    audits = example_audits()
    audits[0].answer.meta.update(score=0.5, tags=["x"], flag=True, rank=3)
    audits[1].answer.meta.update(flag=False, rank=1)
    many = [audit(f"m{i}", [], [], ident=f"q{i}") for i in range(51)]
    fields = breakdown_fields([*audits, *many])
    assert fields == ["field", "flag", "rank", "system"]


def test_breakdown_groups_and_missing() -> None:
    result = breakdowns(example_audits(), n_boot=100)
    assert set(result) == {"field", "system"}
    system = result["system"]
    assert list(system) == [MISSING, "claude", "gpt"]
    assert system["gpt"].n_answers == 2 and system[MISSING].n_answers == 1
    assert system["gpt"].statement_support.value == pytest.approx(1 / 3)
    assert system["claude"].response_support.value == 1.0
    assert result["field"]["Medicine"].n_answers == 2
    assert result["field"][MISSING].n_answers == 1


def test_breakdown_explicit_field_and_bool_values() -> None:
    audits = [
        audit("a", [], [], reviewed=True),
        audit("b", [], [], reviewed=False),
        audit("c", [], []),
    ]
    result = breakdowns(audits, ["reviewed", "absent"], n_boot=50)
    assert list(result["reviewed"]) == [MISSING, "false", "true"]
    assert list(result["absent"]) == [MISSING]
    assert result["absent"][MISSING].n_answers == 3


# --- nothing to measure is never a measured 0 (issue 13) -------------------------------


def test_answers_without_any_source_are_not_measured_not_zero() -> None:
    audits = [audit("a1", [], [claim("c1"), claim("c2")]), audit("a2", [], [claim("c1")])]
    metrics = audit_metrics(audits, n_boot=50)
    assert metrics.n_claims == 3
    for estimate in (metrics.statement_support, metrics.response_support):
        assert estimate.value is None and estimate.ci is None
        assert estimate.reason is not None and "no answer cites a source" in estimate.reason
    assert metrics.url_validity.reason == "no cited URL"
    assert metrics.unused_sources.reason == "no valid source"


def test_unchecked_urls_only_are_not_measured() -> None:
    offline = invalid_source("s1", failure=FetchFailure.OFFLINE, http_status=None)
    metrics = audit_metrics([audit("a1", [offline], [claim("c1")])], n_boot=50)
    assert metrics.statement_support.value is None
    assert "could be checked (offline 1)" in (metrics.statement_support.reason or "")
    assert metrics.url_validity.value == 0.0  # the URL itself was counted, as invalid


def test_valid_sources_no_pair_is_not_measured() -> None:
    """pairing 'cited' with markers that name no source: nothing was judged."""
    metrics = audit_metrics([audit("a1", [valid_source("s1")], [claim("c1")])], n_boot=50)
    assert metrics.statement_support.value is None
    assert "no statement could be paired" in (metrics.statement_support.reason or "")


def test_dead_cited_urls_are_a_real_zero() -> None:
    """URLs that were checked and are dead (404): the paper's unsupported, a measured 0."""
    metrics = audit_metrics([audit("a1", [invalid_source("s1")], [claim("c1")])], n_boot=50)
    assert metrics.statement_support.value == 0.0
    assert metrics.statement_support.reason is None


def test_breakdown_group_without_sources_is_not_measured() -> None:
    audits = [audit("a1", [valid_source("s1")], [claim("c1", {"s1": True})], system="x"),
              audit("a2", [], [claim("c1")], system="y")]
    groups = breakdowns(audits, ["system"], n_boot=50)["system"]
    assert groups["x"].statement_support.value == 1.0
    assert groups["y"].statement_support.value is None
    overall = audit_metrics(audits, n_boot=50)
    assert overall.statement_support.value == 0.5  # measured overall: a2 counts unsupported
