"""The ``audit`` rule: spot checks of sure verdicts (issue 42, item 3)."""

from __future__ import annotations

from medverify.arbitration import (
    AUDIT_RULE,
    arbitrate,
    arbitrate_all,
    recheck_candidates,
    spot_checked,
    why,
)
from medverify.config import ARBITRATION_RULES, ArbitrationPolicy
from medverify.records import Analysis, Category, Claim, ClaimResult, Decision, Verdict


def _result(text: str, category: Category = Category.FACT,
            confident: bool | None = True, claim_id: str = "c") -> ClaimResult:
    supported = category is Category.FACT
    verdict = Verdict(claim_id=claim_id, factual=Analysis(holds=supported),
                      counterfactual=Analysis(holds=category is Category.HALLUCINATION),
                      judge="fake:table")
    result = ClaimResult.from_verdict(Claim(id=claim_id, text=text), [], verdict)
    return result.model_copy(update={"confident": confident,
                                     "not_sure": "unsure" if confident is False else None})


TEXTS = [f"Drug number {i} is taken once daily." for i in range(5000)]


def test_the_share_spot_checked_is_close_to_audit_share() -> None:
    for share in (0.02, 0.1):
        picked = sum(spot_checked(t, share) for t in TEXTS)
        assert abs(picked / len(TEXTS) - share) < 0.3 * share, (share, picked)


def test_spot_checks_are_deterministic_and_ignore_case_and_spacing() -> None:
    first = [t for t in TEXTS if spot_checked(t, 0.05)]
    assert first == [t for t in TEXTS if spot_checked(t, 0.05)] and first
    assert all(spot_checked("  " + t.upper().replace(" ", "  "), 0.05) for t in first)
    assert not any(spot_checked(t, 0.0) for t in TEXTS)
    assert all(spot_checked(t, 1.0) for t in TEXTS[:50])


def test_a_sure_fact_picked_by_the_hash_is_escalated_by_the_audit_rule() -> None:
    policy = ArbitrationPolicy(audit_share=0.05)
    picked = next(t for t in TEXTS if spot_checked(t, 0.05))
    decided = arbitrate(_result(picked), policy)
    assert (decided.decision, decided.rule) == (Decision.ESCALATE, AUDIT_RULE)
    assert why(decided.rule, decided.inputs) == "spot check of a sure verdict"
    assert decided.inputs["confident"]  # True (1.0 in rows stored before issue 43)
    other = next(t for t in TEXTS if not spot_checked(t, 0.05))
    assert arbitrate(_result(other), policy).rule == "fact"
    off = arbitrate(_result(picked), ArbitrationPolicy(audit_share=0.0))
    assert (off.decision, off.rule) == (Decision.ACCEPT, "fact")
    assert "audit" in ARBITRATION_RULES and ArbitrationPolicy().version == "v3"


def test_the_audit_rule_never_applies_to_not_sure_or_unassessed_verdicts() -> None:
    policy = ArbitrationPolicy(audit_share=1.0)
    for confident in (False, None):
        decided = arbitrate(_result(TEXTS[0], confident=confident), policy)
        assert decided.rule != AUDIT_RULE, confident
    assert arbitrate(_result(TEXTS[0]), policy).rule == AUDIT_RULE


def test_the_audit_rule_only_turns_acceptances_into_escalations() -> None:
    policy = ArbitrationPolicy(audit_share=1.0)
    hallucination = arbitrate(_result(TEXTS[0], Category.HALLUCINATION), policy)
    assert (hallucination.decision, hallucination.rule) == (Decision.FLAG, "hallucination")
    accepting = ArbitrationPolicy(audit_share=1.0, coverage_gap="ACCEPT")
    gap = arbitrate(_result(TEXTS[0], Category.COVERAGE_GAP), accepting)
    assert (gap.decision, gap.rule) == (Decision.ESCALATE, AUDIT_RULE)


def test_spot_checks_are_outside_the_budget_and_not_rechecked() -> None:
    policy = ArbitrationPolicy(audit_share=1.0, escalation_budget=0.0,
                               recheck_judge="builtin")
    results = arbitrate_all([_result(t, claim_id=f"c{i}") for i, t in enumerate(TEXTS[:8])],
                            policy)
    assert all(r.arbitration is not None and r.arbitration.rule == AUDIT_RULE
               and r.arbitration.decision is Decision.ESCALATE for r in results)
    assert recheck_candidates(results, policy) == []
    unsure = _result("Give 5000 mg of metformin daily.", confident=False, claim_id="u")
    mixed = arbitrate_all([*results[:3], unsure], policy)  # budget 0: the unsure one flagged
    assert [r.arbitration.rule for r in mixed if r.arbitration] == [AUDIT_RULE] * 3 + [
        "over_budget"]
