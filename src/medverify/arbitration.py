"""Arbitration: the knowledge-base judge and the risk classifier decide together.

CHECK (Garcia-Fernandez et al. 2025, section 2.5) runs a database judge and a database-free
classifier on every claim and lets a rule decide what happens: accept it, show it with a
warning, or hold it for a clinician. :func:`arbitrate` is that rule. Its input is a claim's
:class:`~medverify.records.ClaimResult` (the judge's category and probabilities) and, when a
classifier is configured, the claim's hallucination probability; its output is an
:class:`~medverify.records.Arbitration`: the :class:`~medverify.records.Decision`, the rule
that fired and the inputs it saw. The policy is configuration (``[arbitration]``,
:class:`~medverify.config.ArbitrationPolicy`), versioned, and its id is recorded on every
decision, so a decision can always be traced to the exact policy that made it.

Rules, first match wins:

1. ``error``: the judge failed (``ERROR``) -> ``policy.error`` (escalate);
2. ``judgment_error``: the evidence both supports and contradicts -> ``policy.judgment_error``;
3. with a risk: ``fact_high_risk`` (FACT, risk >= ``high_risk``) and ``hallucination_low_risk``
   (HALLUCINATION, risk <= ``low_risk``): the two detectors disagree -> ``policy.disagreement``;
   ``coverage_gap_high_risk`` (COVERAGE_GAP, risk >= ``high_risk``) ->
   ``policy.coverage_gap_high_risk``;
4. ``low_confidence``: the judge's probability for its own category is under
   ``min_confidence[category]`` -> escalate;
5. ``coverage_gap`` -> ``policy.coverage_gap``; ``hallucination`` -> ``policy.hallucination``;
   ``fact`` -> accept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from medverify.config import ArbitrationPolicy
from medverify.records import Arbitration, Category, ClaimResult, Decision

CONFIDENCE_OF = {Category.FACT: "SUPPORTED", Category.HALLUCINATION: "CONTRADICTED",
                 Category.COVERAGE_GAP: "NOT_ENOUGH_INFO"}
"""The judge probability that stands for its confidence in each category."""


def policy_id(policy: ArbitrationPolicy) -> str:
    """``arbitration/<version>+<hash of every setting>``: two policies that decide
    differently never share an id."""
    body = json.dumps(policy.model_dump(mode="json"), sort_keys=True)
    return f"arbitration/{policy.version}+{hashlib.sha256(body.encode()).hexdigest()[:8]}"


def confidence(result: ClaimResult) -> float | None:
    """The judge's probability for the category it gave (None: the judge gives none)."""
    key = CONFIDENCE_OF.get(result.category)
    probabilities = result.verdict.probabilities if result.verdict is not None else None
    if key is None or not probabilities or key not in probabilities:
        return None
    return float(probabilities[key])


def arbitrate(result: ClaimResult, policy: ArbitrationPolicy,
              risk: float | None = None) -> Arbitration:
    """The decision on one claim (``risk``: its hallucination probability, default the
    result's own ``hallucination_risk``)."""
    risk = result.hallucination_risk if risk is None else risk
    conf = confidence(result)
    decision, rule = _rule(result.category, risk, conf, policy)
    inputs: dict[str, float | str | None] = {"category": result.category.value, "risk": risk,
                                             "confidence": conf}
    return Arbitration(decision=decision, rule=rule, policy=policy_id(policy), inputs=inputs)


def decide(category: Category, risk: float | None, conf: float | None,
           policy: ArbitrationPolicy) -> tuple[Decision, str]:
    """The decision and the rule that fired for plain inputs: what :func:`arbitrate` records,
    without building records (``medverify eval arbitration`` sweeps many policies with it)."""
    return _rule(category, risk, conf, policy)


def _rule(category: Category, risk: float | None, conf: float | None,
          policy: ArbitrationPolicy) -> tuple[Decision, str]:
    if category is Category.ERROR:
        return Decision(policy.error), "error"
    if category is Category.JUDGMENT_ERROR:
        return Decision(policy.judgment_error), "judgment_error"
    if risk is not None:
        if category is Category.FACT and risk >= policy.high_risk:
            return Decision(policy.disagreement), "fact_high_risk"
        if category is Category.HALLUCINATION and risk <= policy.low_risk:
            return Decision(policy.disagreement), "hallucination_low_risk"
        if category is Category.COVERAGE_GAP and risk >= policy.high_risk:
            return Decision(policy.coverage_gap_high_risk), "coverage_gap_high_risk"
    floor = policy.min_confidence.get(category.value)
    if floor is not None and conf is not None and conf < floor:
        return Decision.ESCALATE, "low_confidence"
    if category is Category.COVERAGE_GAP:
        return Decision(policy.coverage_gap), "coverage_gap"
    if category is Category.HALLUCINATION:
        return Decision(policy.hallucination), "hallucination"
    return Decision.ACCEPT, "fact"


def arbitrate_all(results: Sequence[ClaimResult], policy: ArbitrationPolicy) -> list[ClaimResult]:
    """Each result with its decision attached."""
    return [r.model_copy(update={"arbitration": arbitrate(r, policy)}) for r in results]
