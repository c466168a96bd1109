"""``[arbitration]``: how the KB judge and the risk classifier decide together, and the
rules that can escalate a claim."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from medverify.config.base import Section

ARBITRATION_RULES = frozenset({
    "error", "judgment_error", "fact_high_risk", "hallucination_low_risk",
    "coverage_gap_high_risk", "not_sure", "not_sure_clinical", "vetoed", "low_confidence",
    "coverage_gap", "hallucination", "audit"})
"""The arbitration rules that can escalate a claim (``medverify.arbitration``)."""


class ArbitrationPolicy(Section):
    """How the KB judge and the risk classifier decide together (docs/arbitration.md).
    ``version`` names the policy; its id (version + a hash of every setting) is recorded on
    every decision."""

    # v2: vetoed, not_sure_clinical and the escalation budget; v3: spot checks (audit)
    version: str = "v3"
    high_risk: float = Field(0.7, ge=0, le=1)  # a risk at or above this is high
    low_risk: float = Field(0.3, ge=0, le=1)  # a risk at or below this is low
    disagreement: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"  # FACT+high, HALL.+low
    coverage_gap_high_risk: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"
    judgment_error: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"
    error: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"
    coverage_gap: Literal["ACCEPT", "FLAG", "ESCALATE"] = "FLAG"
    hallucination: Literal["ACCEPT", "FLAG", "ESCALATE"] = "FLAG"
    # a verdict presented as NOT SURE (its ``confident`` is False: the category's calibrated
    # precision misses the target, or an exact check found a difference); FLAG shows it with
    # a warning, ESCALATE would send every unsure claim to the clinicians' queue
    not_sure: Literal["ACCEPT", "FLAG", "ESCALATE"] = "FLAG"
    # a NOT SURE verdict on a claim that states a dose, names a drug, a group of people or a
    # number (medverify.judge.severity): ESCALATE sends it to a clinician, within the budget
    not_sure_clinical: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"
    # an exact check vetoed a passage's support (another dose, direction, negation, group):
    # a likely error, ESCALATEd within the budget
    vetoed: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"
    # the most an answer's claims may be escalated: ceil(budget x claims), the most urgent
    # first (severity x uncertainty); the rest are FLAGged (rule over_budget). 1.0: no cap;
    # lower: fewer claims for the clinicians, the least severe doubts shown only as flags
    escalation_budget: float = Field(0.25, ge=0, le=1)
    # spot checks of SURE verdicts: this share of the claims that would be ACCEPTed with a
    # confident verdict is escalated anyway (rule audit, outside the budget; chosen by a hash
    # of the claim text, so reruns pick the same claims). Their labels measure how often
    # sure verdicts are overturned (ops report, review progress, a Prometheus gauge); 0: no
    # spot checks and that precision is measured only on claims escalated for other reasons
    audit_share: float = Field(0.02, ge=0, le=1)
    # per category (FACT, HALLUCINATION, COVERAGE_GAP): escalate when the judge's probability
    # for the category it gave is below this
    min_confidence: dict[str, float] = Field(default_factory=dict)
    # Re-check before escalating (risk-guided compute): a claim that would go to a clinician
    # is first judged again by this registered judge over more passages, the riskiest first,
    # and decided again on that verdict. None: off (and the recheck_* settings below are
    # then left out of the policy id).
    recheck_judge: str | None = None
    recheck_top_k: int | None = Field(None, ge=1)  # None: twice [retrieval] top_k
    recheck_budget: float = Field(1.0, ge=0, le=1)  # share of an answer's escalations
    # the rules whose escalations are re-checked (default: every rule that can escalate)
    recheck_rules: list[str] = Field(default_factory=lambda: sorted(ARBITRATION_RULES))

    @field_validator("recheck_rules")
    @classmethod
    def _known_rules(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - ARBITRATION_RULES)
        if unknown:
            raise ValueError(f"unknown arbitration rule(s) {unknown}; rules that can escalate: "
                             f"{sorted(ARBITRATION_RULES)}")
        return value
