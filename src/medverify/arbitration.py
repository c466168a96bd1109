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
4. ``vetoed``: an exact check vetoed a passage on the claim's point (another dose, number,
   direction, negation, group: a likely error), unless the verdict is a confident FACT ->
   ``policy.vetoed`` (escalate); ``not_sure_clinical``:
   a NOT SURE verdict on a claim that states a dose, names a drug, a group of people or a
   number (:mod:`medverify.judge.severity`) -> ``policy.not_sure_clinical`` (escalate);
   ``not_sure``: the verdict is presented as NOT SURE (``confident`` False: its calibrated
   precision misses the target, or an exact check found a difference) -> ``policy.not_sure``
   (flag), unless a later rule would decide more strictly (an unsure verdict is never
   treated more leniently than a sure one); ``confident`` None (not assessed) changes
   nothing;
5. ``low_confidence``: the judge's raw probability for its own category
   (``inputs["judge_probability"]``) is under
   ``min_confidence[category]`` -> escalate;
6. ``coverage_gap`` -> ``policy.coverage_gap``; ``hallucination`` -> ``policy.hallucination``;
   ``fact`` -> accept;
7. ``audit`` (spot checks of sure verdicts): a claim that would be ACCEPTed on a confident
   verdict (``confident`` True) is escalated anyway when :func:`spot_checked` picks it: a
   stable hash of its normalised claim text falls below ``policy.audit_share``. The text
   alone is hashed (not the answer's id: the flow that arbitrates does not carry it), so
   every run picks the same claims, and a sentence picked in one answer is picked in
   every answer; once a clinician settles it the ``reviewed`` rule decides it and it is
   not queued again. Spot checks are outside the escalation budget and are not re-checked
   (the point is to test the first verdict). Their labels measure how often sure verdicts
   are overturned (:mod:`medverify.ops.overturns`).

The escalation budget (``[arbitration] escalation_budget``, :func:`within_budget`): of an
answer's n claims at most ceil(budget x n) are escalated, the most urgent first
(:func:`urgency`: clinical severity x uncertainty); the others are FLAGged by rule
``over_budget``, which records the rule that would have escalated them. Spot checks (rule
``audit``) neither count against the budget nor are demoted by it.

Re-check before escalating (``[arbitration] recheck_judge``; CHECK's risk-guided compute,
:mod:`medverify.risk.compute`): a claim a rule in ``recheck_rules`` would escalate is first
judged again by a second judge over more passages, the riskiest of an answer's escalations
first up to ``recheck_budget`` of them (:func:`recheck_candidates`); the rules above then
decide again on that verdict, and the decision records what the first check had decided
(:class:`~medverify.records.Recheck`). The flow that has the judges runs it
(``medverify.checker.Checker``).

The order, in one call (:func:`arbitrate_claims`, what the checker runs on an answer's
judged claims): arbitrate every claim (:func:`arbitrate_all`, with the budget), re-check the
chosen escalations (:func:`recheck_candidates`, :func:`after_recheck`), then settle the claims
a clinician already decided (:func:`settled_by_review`, through
:mod:`medverify.review.settled`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from medverify.config import ArbitrationPolicy
from medverify.judge.severity import clinical_kinds, severity
from medverify.records import (
    Arbitration,
    Category,
    Claim,
    ClaimResult,
    Decision,
    Recheck,
    Reviewed,
)
from medverify.risk.compute import escalate

CONFIDENCE_OF = {Category.FACT: "SUPPORTED", Category.HALLUCINATION: "CONTRADICTED",
                 Category.COVERAGE_GAP: "NOT_ENOUGH_INFO"}
"""The judge probability that stands for its confidence in each category."""


def policy_id(policy: ArbitrationPolicy) -> str:
    """``arbitration/<version>+<hash of every setting>``: two policies that decide
    differently never share an id."""
    settings = policy.model_dump(mode="json")
    if policy.recheck_judge is None:  # off: its settings decide nothing (ids stay as before)
        settings = {k: v for k, v in settings.items() if not k.startswith("recheck_")}
    body = json.dumps(settings, sort_keys=True)
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
    result's own ``hallucination_risk``). ``inputs`` records what the rules saw: the
    category, the risk, ``judge_probability`` (the judge's raw probability for its category,
    not the calibrated ``confidence``), and ``confident`` (True, False: not sure, None: not
    assessed) with the reason when it is not."""
    risk = result.hallucination_risk if risk is None else risk
    conf = confidence(result)
    kinds = clinical_kinds(result.claim.text)
    decision, rule = _rule(result.category, risk, conf, policy, result.confident,
                           vetoed=vetoed(result), clinical=bool(kinds),
                           audited=spot_checked(result.claim.text, policy.audit_share))
    inputs: dict[str, bool | float | str | None] = {
        "category": result.category.value, "risk": risk, "judge_probability": conf,
        "confident": result.confident,
        "not_sure": result.not_sure if result.confident is False else None,
        "clinical": ", ".join(kinds) or None}
    return Arbitration(decision=decision, rule=rule, policy=policy_id(policy), inputs=inputs)


AUDIT_RULE = "audit"
"""The rule of a spot check of a sure verdict (outside the budget, never re-checked)."""


def spot_checked(text: str, share: float) -> bool:
    """Whether the claim ``text`` is among the ``share`` of claims spot-checked: the first 8
    bytes of the SHA-256 of its normalised text (lower case, single spaces) as a number in
    [0, 1) fall below ``share`` (0: never; the same text always gets the same answer)."""
    if share <= 0:
        return False
    key = " ".join(text.lower().split()).encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") / 2.0 ** 64 < share


def vetoed(result: ClaimResult) -> bool:
    """Whether an exact check vetoed a passage's support of the claim (a likely error)."""
    verdict = result.verdict
    return verdict is not None and any(f.veto for f in verdict.findings)


def arbitration_decision(category: Category, risk: float | None, conf: float | None,
                         policy: ArbitrationPolicy, *, confident: bool | None = None,
                         vetoed: bool = False, clinical: bool = False,
                         audited: bool = False) -> tuple[Decision, str]:
    """The decision and the rule that fired for plain inputs: what :func:`arbitrate` records,
    without building records (``medverify eval arbitration`` sweeps many policies with it).
    ``confident``: the verdict's assessment (None: not assessed, the ``not_sure`` rule does
    not apply); ``vetoed``: an exact check vetoed support; ``clinical``: the claim states a
    dose, drug, group or number; ``audited``: :func:`spot_checked` picked the claim (the
    ``audit`` rule applies if it would be accepted on a sure verdict). The escalation
    budget is not applied here."""
    return _rule(category, risk, conf, policy, confident, vetoed=vetoed, clinical=clinical,
                 audited=audited)


STRICTNESS = {Decision.ACCEPT: 0, Decision.FLAG: 1, Decision.ESCALATE: 2}
"""How strict each decision is: the ``not_sure`` rule never lowers a decision."""


def _rule(category: Category, risk: float | None, conf: float | None,
          policy: ArbitrationPolicy, confident: bool | None = None, *, vetoed: bool = False,
          clinical: bool = False, audited: bool = False) -> tuple[Decision, str]:
    decided = _first_rule(category, risk, conf, policy, confident, vetoed=vetoed,
                          clinical=clinical)
    if audited and confident is True and decided[0] is Decision.ACCEPT:
        return Decision.ESCALATE, AUDIT_RULE
    return decided


def _first_rule(category: Category, risk: float | None, conf: float | None,
                policy: ArbitrationPolicy, confident: bool | None, *, vetoed: bool,
                clinical: bool) -> tuple[Decision, str]:
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
    later = _confidence_rules(category, conf, policy)
    if confident is False:
        rule = "not_sure_clinical" if clinical else "not_sure"
        later = _stricter((Decision(getattr(policy, rule)), rule), later)
    if vetoed and (category is not Category.FACT or confident is not True):
        later = _stricter((Decision(policy.vetoed), "vetoed"), later)
    return later


def _stricter(first: tuple[Decision, str], then: tuple[Decision, str]) -> tuple[Decision, str]:
    """``first`` unless ``then`` decides more strictly: an unsure or vetoed verdict is never
    treated more leniently than a sure one."""
    return first if STRICTNESS[first[0]] >= STRICTNESS[then[0]] else then


def _confidence_rules(category: Category, conf: float | None,
                      policy: ArbitrationPolicy) -> tuple[Decision, str]:
    """The rules after ``not_sure``: the confidence floor, then the category's own."""
    floor = policy.min_confidence.get(category.value)
    if floor is not None and conf is not None and conf < floor:
        return Decision.ESCALATE, "low_confidence"
    if category is Category.COVERAGE_GAP:
        return Decision(policy.coverage_gap), "coverage_gap"
    if category is Category.HALLUCINATION:
        return Decision(policy.hallucination), "hallucination"
    return Decision.ACCEPT, "fact"


def arbitrate_all(results: Sequence[ClaimResult], policy: ArbitrationPolicy) -> list[ClaimResult]:
    """Each result (the claims of one answer) with its decision attached, within the
    escalation budget (:func:`within_budget`)."""
    return within_budget(
        [r.model_copy(update={"arbitration": arbitrate(r, policy)}) for r in results], policy)


_EVIDENCE_RULES = frozenset({"vetoed", "judgment_error", "hallucination", "error",
                             "fact_high_risk", "hallucination_low_risk"})
"""Rules that fire on evidence that the claim is wrong (or could not be checked), not only
on doubt: their escalations rank first within a severity."""


DOUBT = {Category.HALLUCINATION: (1.0, 0.6), Category.JUDGMENT_ERROR: (1.0, 1.0),
         Category.ERROR: (1.0, 1.0), Category.COVERAGE_GAP: (0.9, 0.5),
         Category.FACT: (0.7, 0.1)}
"""(not sure, sure): how likely a claim of each category is wrong or unsettled, the
uncertainty factor of :func:`urgency`. A sure COVERAGE_GAP keeps 0.5: on a dose claim it
stays high."""


def urgency(result: ClaimResult) -> float:
    """How urgently a clinician should see the claim, in [0, 1.25]: its clinical severity
    (:func:`~medverify.judge.severity.severity`: doses 1.0, drugs 0.95, groups 0.7, numbers
    0.65, the rest 0.4, + 0.01 per further kind) x its uncertainty (:data:`DOUBT`), + 0.1
    on evidence of an error (a veto, a contradiction, a judgment error, a failed check,
    the detectors disagreeing), + 0.1 x the risk classifier's probability when there is
    one."""
    unsure, sure = DOUBT[result.category]
    score = severity(result.claim.text) * (sure if result.confident is True else unsure)
    decided = result.arbitration
    rule = "" if decided is None else str(decided.inputs.get("escalation_rule") or decided.rule)
    evidence = (rule in _EVIDENCE_RULES or vetoed(result)
                or result.category in (Category.HALLUCINATION, Category.JUDGMENT_ERROR))
    score += 0.1 if evidence else 0.0
    if result.hallucination_risk is not None:
        score += 0.1 * float(result.hallucination_risk)
    return round(score, 6)


_WHY = {
    "error": "the judge could not check it",
    "judgment_error": "strong evidence both supports and contradicts it",
    "vetoed": "an exact check found the evidence states something else ({clinical})",
    "not_sure_clinical": "the verdict is not sure and the claim states a {clinical}",
    "not_sure": "the verdict is not sure",
    "fact_high_risk": "the judge found support but the risk classifier says likely wrong",
    "hallucination_low_risk": "the judge found a contradiction but the risk classifier "
                              "says likely right",
    "coverage_gap_high_risk": "the knowledge base does not cover it and the risk is high",
    "low_confidence": "the judge's probability is under the policy's floor",
    "coverage_gap": "the knowledge base does not cover it",
    "hallucination": "the evidence contradicts it",
    "over_budget": "over the answer's escalation budget (would be: {before})",
    "reviewed": "a clinician already settled it",
    "fact": "the evidence supports it",
    "audit": "spot check of a sure verdict",
}


def why(rule: str, inputs: dict[str, object]) -> str:
    """One line saying why a decision was made (the queue and item pages show it)."""
    clinical = str(inputs.get("clinical") or "claim").replace(", ", " / ")
    before = str(inputs.get("escalation_rule") or "–")
    text = _WHY.get(rule, f"rule {rule}")
    return text.format(clinical=clinical, before=_WHY.get(before, before).format(
        clinical=clinical, before="–"))


def budget_for(claims: int, policy: ArbitrationPolicy) -> int:
    """How many of an answer's ``claims`` may be escalated: ceil(budget x claims)."""
    return math.ceil(policy.escalation_budget * claims - 1e-9)


def within_budget(results: list[ClaimResult], policy: ArbitrationPolicy) -> list[ClaimResult]:
    """The arbitrated ``results`` of one answer with at most :func:`budget_for` escalations:
    the most urgent first (:func:`urgency`, ties in answer order); the others are FLAGged
    by rule ``over_budget``, which keeps the rule that wanted to escalate in
    ``inputs["escalation_rule"]``."""
    wanted = [i for i, r in enumerate(results) if r.arbitration is not None
              and r.arbitration.decision is Decision.ESCALATE
              and r.arbitration.rule != AUDIT_RULE]  # spot checks: outside the budget
    allowed = budget_for(len(results), policy)
    if len(wanted) <= allowed:
        return results
    ranked = sorted(wanted, key=lambda i: (-urgency(results[i]), i))
    out = list(results)
    for i in ranked[allowed:]:
        before = results[i].arbitration
        assert before is not None
        inputs = {**before.inputs, "escalation_rule": before.rule}
        out[i] = results[i].model_copy(update={"arbitration": before.model_copy(update={
            "decision": Decision.FLAG, "rule": "over_budget", "inputs": inputs})})
    return out


def recheck_candidates(results: Sequence[ClaimResult], policy: ArbitrationPolicy) -> list[int]:
    """Indices of the arbitrated ``results`` to re-check before escalating: escalations by a
    rule in ``recheck_rules``, the riskiest ``recheck_budget`` share of them (no risk counts
    as the riskiest), in input order. Empty when ``recheck_judge`` is off."""
    if policy.recheck_judge is None:
        return []
    pool = [i for i, r in enumerate(results)
            if r.arbitration is not None and r.arbitration.decision is Decision.ESCALATE
            and r.arbitration.rule in policy.recheck_rules
            and r.arbitration.rule != AUDIT_RULE]  # a spot check tests the first verdict
    chosen = escalate([results[i].hallucination_risk for i in pool], policy.recheck_budget)
    return [pool[j] for j in chosen]


def after_recheck(before: ClaimResult, rechecked: ClaimResult, policy: ArbitrationPolicy,
                  judge: str) -> ClaimResult:
    """The claim's result once re-checked: the re-check's verdict decided again by the rules
    (same risk), with what the first check decided recorded; a failed re-check (``ERROR``)
    keeps the first result and decision."""
    assert before.arbitration is not None
    note = Recheck(judge=judge, passages=len(rechecked.passages),
                   category_before=before.category, decision_before=before.arbitration.decision,
                   rule_before=before.arbitration.rule,
                   error=(rechecked.error or "the re-check judge failed")
                   if rechecked.category is Category.ERROR else None)
    if note.error is not None:
        return before.model_copy(update={"arbitration": before.arbitration.model_copy(
            update={"recheck": note})})
    result = rechecked.model_copy(update={"hallucination_risk": before.hallucination_risk})
    decided = arbitrate(result, policy)
    return result.model_copy(update={"arbitration": decided.model_copy(
        update={"recheck": note})})



Rechecker = Callable[[list[Claim]], Awaitable[list[ClaimResult]]]
"""Judges claims again (more passages, the second judge): one result per claim, in order; a
claim whose re-check failed comes back as ``ERROR`` with its cause."""


class Settler(Protocol):
    """The closed review items a run's claims are matched against
    (:class:`medverify.review.settled.SettledClaims`)."""

    def __len__(self) -> int: ...

    def settle_all(self, results: Sequence[ClaimResult],
                   policy: ArbitrationPolicy) -> list[ClaimResult]: ...


async def arbitrate_claims(results: Sequence[ClaimResult], policy: ArbitrationPolicy, *,
                           recheck: Rechecker | None = None, recheck_judge: str = "",
                           settled: Settler | None = None) -> list[ClaimResult]:
    """An answer's judged claims, decided: arbitrated (:func:`arbitrate_all`), the chosen
    escalations re-checked by ``recheck`` and decided again (:func:`after_recheck`, naming
    ``recheck_judge``), then settled by a clinician's label where one matches
    (``settled``). ``recheck`` None: no re-check; ``settled`` None or empty: none settled."""
    out = arbitrate_all(results, policy)
    chosen = recheck_candidates(out, policy)
    if recheck is not None and chosen:
        rechecked = await recheck([out[i].claim for i in chosen])
        first = list(out)
        for i, again in zip(chosen, rechecked, strict=True):
            out[i] = after_recheck(first[i], again, policy, recheck_judge)
    if settled is not None and len(settled):
        out = settled.settle_all(out, policy)
    return out


REVIEWED_DECISION = {Category.FACT: Decision.ACCEPT, Category.HALLUCINATION: Decision.FLAG,
                     Category.JUDGMENT_ERROR: Decision.FLAG, Category.COVERAGE_GAP: Decision.FLAG}
"""The decision on a claim a clinician settled (rule ``reviewed``): FACT is accepted, every
other label is shown with a warning (the reviewer's correction). Never ESCALATE: a
reviewed claim is not queued again."""


def settled_by_review(result: ClaimResult, reviewed: Reviewed,
                      policy: ArbitrationPolicy) -> ClaimResult:
    """The claim's result once a clinician's label settles it
    (:mod:`medverify.review.settled` finds the label): the reviewer's label as its category
    and :data:`REVIEWED_DECISION`, the judge's verdict and passages kept, what the judge
    and the rules had decided in ``reviewed``."""
    before = result.arbitration
    decided = Arbitration(
        decision=REVIEWED_DECISION[reviewed.label], rule="reviewed", policy=policy_id(policy),
        inputs={"category": reviewed.label.value, "judge_category": result.category.value,
                "review_item": reviewed.item_id, "risk": result.hallucination_risk},
        recheck=before.recheck if before is not None else None, reviewed=reviewed)
    return result.decided(decided)
