"""The rules that turn a judge's analyses into a claim's category, in one place.

It holds the closed vocabularies of a claim's outcome (:class:`EvidenceLabel`,
:class:`Category`, the arbitration :class:`Decision` and what an exact check found,
:class:`CheckKind`) and the pure rules over them: a passage's label from the verifier's
probabilities (:func:`passage_label`), the category from the two analyses
(:func:`categorize`), which analysis decided a category (:func:`deciding_side`), a
category's score (:data:`CATEGORY_SCORE`), the warnings for what was not counted
(:func:`verdict_warnings`) and the upgrade of arbitration inputs stored by
older runs (:func:`upgrade_inputs`). A base-layer module: it imports nothing from
medverify, so the records (:mod:`medverify.records`), the judge, the verifier, arbitration
and the reports all apply the same rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Literal, Protocol


class EvidenceLabel(StrEnum):
    """Verdict of one claim against evidence."""

    SUPPORTED = "SUPPORTED"
    CONTRADICTED = "CONTRADICTED"
    NOT_ENOUGH_INFO = "NOT_ENOUGH_INFO"


class Category(StrEnum):
    """Per-claim outcome of factual + counterfactual analysis (CHECK)."""

    FACT = "FACT"
    HALLUCINATION = "HALLUCINATION"
    JUDGMENT_ERROR = "JUDGMENT_ERROR"
    COVERAGE_GAP = "COVERAGE_GAP"
    ERROR = "ERROR"


class Decision(StrEnum):
    """What arbitration does with a claim (:mod:`medverify.arbitration`)."""

    ACCEPT = "ACCEPT"  # shown as checked
    FLAG = "FLAG"  # shown with a warning
    ESCALATE = "ESCALATE"  # held for a clinician (the review queue)


class CheckKind(StrEnum):
    """What an exact check (:mod:`medverify.judge.checks`) found to differ between a claim
    and the passage that is said to support it."""

    NUMBER = "number"  # a number, dose, interval or unit the passage states otherwise
    NEGATION = "negation"  # one side negates what the other affirms
    DIRECTION = "direction"  # increase vs decrease, speeds up vs slows down, ...
    POPULATION = "population"  # children vs adults, pregnant women vs ..., type 1 vs type 2
    DRUG = "drug"  # another drug or substance in the same place
    FREQUENCY = "frequency"  # rarely vs often, never vs usually, ...
    ENTITY = "entity"  # another disease, organism or vaccine in the same place


CATEGORY_SCORE: dict[Category, float] = {
    Category.FACT: 1.0,
    Category.HALLUCINATION: 0.0,
    Category.JUDGMENT_ERROR: 0.5,
    Category.COVERAGE_GAP: 0.5,
}


def categorize(supported: bool, contradicted: bool) -> Category:
    """Map the two analyses to a category.

    supported and not contradicted -> FACT; contradicted and not supported ->
    HALLUCINATION; both -> JUDGMENT_ERROR (the evidence disagrees with itself);
    neither -> COVERAGE_GAP.
    """
    if supported and not contradicted:
        return Category.FACT
    if contradicted and not supported:
        return Category.HALLUCINATION
    if supported and contradicted:
        return Category.JUDGMENT_ERROR
    return Category.COVERAGE_GAP


def evidence_label(supported: bool, contradicted: bool) -> EvidenceLabel | None:
    """The single evidence label implied by the two analyses (None when both hold)."""
    if supported and contradicted:
        return None
    if supported:
        return EvidenceLabel.SUPPORTED
    if contradicted:
        return EvidenceLabel.CONTRADICTED
    return EvidenceLabel.NOT_ENOUGH_INFO


def deciding_side(category: Category) -> Literal["factual", "counterfactual"] | None:
    """Which analysis holds the evidence that decided a category: the factual one for FACT
    and JUDGMENT_ERROR, the counterfactual one for HALLUCINATION, none otherwise."""
    if category in (Category.FACT, Category.JUDGMENT_ERROR):
        return "factual"
    if category == Category.HALLUCINATION:
        return "counterfactual"
    return None


def passage_label(probs: Sequence[float], thresholds: tuple[float, float]) -> int | None:
    """One passage's decision from its 3-way probabilities (SUPPORTED, CONTRADICTED,
    NOT_ENOUGH_INFO order) and the (support, contradict) thresholds: 0 (SUPPORTED) if only
    P(S) passes its threshold, 1 (CONTRADICTED) if only P(C) does, the larger if both (ties
    go to SUPPORTED), None (not enough information) if neither. The rule the built-in
    judge applies per passage and :func:`medverify.verifier.label_pairs` labels with."""
    supported, contradicted = 0, 1
    p_s, p_c = float(probs[supported]), float(probs[contradicted])
    support, contradict = p_s >= thresholds[supported], p_c >= thresholds[contradicted]
    if support and contradict:
        return supported if p_s >= p_c else contradicted
    if support or contradict:
        return supported if support else contradicted
    return None


class _Analysis(Protocol):
    holds: bool
    verified: bool | None
    passage_id: str | None
    quote: str | None
    quote_problem: str | None


class _Finding(Protocol):
    reason: str
    veto: bool


def verdict_warnings(factual: _Analysis | None, counterfactual: _Analysis | None,
                     findings: Sequence[_Finding]) -> list[str]:
    """One line per holding analysis that was not counted because its evidence is
    unverified, then one per exact-check finding (a veto or a reason not to be sure)."""
    warnings = []
    for analysis, key in ((factual, "supported"), (counterfactual, "contradicted")):
        if analysis is None or not analysis.holds or analysis.verified is not False:
            continue
        where = f"passage {analysis.passage_id}" if analysis.passage_id else "no passage"
        why = "quoted nothing from it" if not analysis.quote else "its quote is not in it"
        warnings.append(f"judge said {key} citing {where}, but {analysis.quote_problem or why}"
                        ": not counted")
    warnings += [f"{f.reason} ({'support not counted' if f.veto else 'not sure'})"
                 for f in findings]
    return warnings


def upgrade_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    """Arbitration inputs stored before issue 43 (raw ``confidence`` -> ``judge_probability``,
    ``confident`` 1.0/0.0 -> True/False); current inputs come back unchanged."""
    out = dict(inputs)
    if "confidence" in out and "judge_probability" not in out:
        out["judge_probability"] = out.pop("confidence")
    if isinstance(flag := out.get("confident"), int | float) and not isinstance(flag, bool):
        out["confident"] = bool(flag)
    return out
