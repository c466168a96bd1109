"""Measure an arbitration policy on labelled claims: how many of the judge's mistakes it
escalates to a clinician, and at what review load (``medverify eval arbitration``).

Input: claim/evidence pairs with gold labels (the shared pairs format of
:mod:`medverify.evals.pairs`, judged here through the normal judge), or the claims of an
earlier ``eval arbitration --json`` output (already judged: only the sweep runs again); read
by :mod:`medverify.evals.arbitration_input`. A pairs line may carry the risk classifier's
hallucination probability as ``risk``; then the risk rules are measured too. The chart of
the result is :mod:`medverify.evals.arbitration_chart`.

Definitions (docs/arbitration.md):

- a claim's *gold category*: SUPPORTED -> FACT, CONTRADICTED -> HALLUCINATION,
  NOT_ENOUGH_INFO -> COVERAGE_GAP; a 2-way NOT_SUPPORTED allows HALLUCINATION or
  COVERAGE_GAP;
- an *error* is a claim whose judge category disagrees with its gold category
  (JUDGMENT_ERROR never matches one: it is always an error). The costly kind is a FACT whose
  gold is not SUPPORTED: accepted, it reaches the reader as checked;
- a claim whose judge failed (category ERROR: an exception, unparseable output, no
  verdict) is counted apart: never an error, but its escalation counts in the review load;
- *caught* = escalated. For a policy: ``escalated`` = escalated claims / all claims (the
  review load, ERROR claims included), ``caught`` = escalated errors / errors (recall),
  ``precision`` = escalated errors / escalated claims that are not ERROR, and
  ``accepted_error_rate`` = errors among the accepted claims (what slips through silently).

The sweep varies ``min_confidence`` for FACT, HALLUCINATION and COVERAGE_GAP over a grid
(each off or one of the grid's values; by default, per category, quantiles of the
confidences the judge gave that category) and, when some claim has a risk, ``high_risk`` and
``low_risk``; every other setting is the base policy's. A claim's decision depends on its
own category's threshold only, so the counts are tallied once per (category, threshold,
risk setting) with :func:`medverify.arbitration.arbitration_decision` (the rule
:func:`arbitrate` records) and summed for every combination. The Pareto front (least review
load for as many caught errors) is the curve; the policy that catches the most errors within
``max_escalation`` is the one to use, printed as an ``[arbitration]`` TOML block.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from medverify.arbitration import CONFIDENCE_OF, arbitration_decision, policy_id
from medverify.config import ArbitrationPolicy
from medverify.errors import InputError
from medverify.evals.pairs import Pair
from medverify.judge.severity import clinical_kinds
from medverify.records import Category, Decision, Verdict

GOLD_CATEGORY: dict[str, Category] = {
    "SUPPORTED": Category.FACT,
    "CONTRADICTED": Category.HALLUCINATION,
    "NOT_ENOUGH_INFO": Category.COVERAGE_GAP,
}
"""The category a gold evidence label stands for."""

NOT_SUPPORTED_OK = (Category.HALLUCINATION, Category.COVERAGE_GAP)
"""The categories a 2-way NOT_SUPPORTED gold label accepts."""

SWEPT = (Category.FACT, Category.HALLUCINATION, Category.COVERAGE_GAP)
"""The categories whose ``min_confidence`` the sweep varies."""

AUTO_QUANTILES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
"""The default grid: per category, these quantiles of its claims' confidences (rounded to
two decimals), so each step escalates a known share of the category whatever the judge's
calibration (the built-in judge's FACT confidences sit between 0.25 and 0.5)."""
DEFAULT_HIGH_RISK = (0.5, 0.6, 0.7, 0.8, 0.9)
DEFAULT_LOW_RISK = (0.1, 0.2, 0.3, 0.4, 0.5)

ERROR_DEFINITION = (
    "error = the judge's category disagrees with the gold label's category (SUPPORTED -> "
    "FACT, CONTRADICTED -> HALLUCINATION, NOT_ENOUGH_INFO -> COVERAGE_GAP; 2-way NOT_SUPPORTED "
    "-> HALLUCINATION or COVERAGE_GAP; JUDGMENT_ERROR is always an error); caught = escalated; "
    "ERROR claims (judge failed) are counted apart, in the review load only"
)


class LabelledClaim(BaseModel):
    """One judged claim with its gold label (and the classifier's risk, when known)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    dataset: str = ""
    labels: Literal["3-way", "2-way"] = "3-way"
    gold: str
    category: Category
    probabilities: dict[str, float] = Field(default_factory=dict)
    risk: float | None = Field(None, ge=0, le=1)
    error: str | None = None  # why the judge failed (category ERROR)
    confident: bool | None = None  # the verdict's assessment (False: the not_sure rule)
    vetoed: bool = False  # an exact check vetoed support (the vetoed rule)
    clinical: bool = False  # the claim states a dose, drug, group or number

    @property
    def confidence(self) -> float | None:
        """The judge's probability for the category it gave (as arbitration reads it)."""
        key = CONFIDENCE_OF.get(self.category)
        if key is None or key not in self.probabilities:
            return None
        return float(self.probabilities[key])

    @property
    def wrong(self) -> bool | None:
        """Whether the judge's category is an error against gold (None: the judge failed)."""
        return is_wrong(self.category, self.gold)


def is_wrong(category: Category, gold: str) -> bool | None:
    """``category`` against the gold label: True when it is an error, None for ERROR."""
    if category is Category.ERROR:
        return None
    if gold == "NOT_SUPPORTED":
        return category not in NOT_SUPPORTED_OK
    if gold not in GOLD_CATEGORY:
        raise InputError(f"unknown gold label {gold!r}")
    return category is not GOLD_CATEGORY[gold]


def labelled_claim(pair: Pair, verdict: Verdict | None, risk: float | None = None
                   ) -> LabelledClaim:
    """A judged pair as a labelled claim (no verdict: category ERROR)."""
    if verdict is None:
        return LabelledClaim(id=pair.id, dataset=pair.dataset, labels=pair.labels,
                             gold=pair.label, category=Category.ERROR, risk=risk,
                             error="judge returned no verdict")
    return LabelledClaim(id=pair.id, dataset=pair.dataset, labels=pair.labels, gold=pair.label,
                         category=verdict.category, probabilities=dict(verdict.probabilities or {}),
                         risk=risk, error=verdict.error,
                         confident=verdict.confident if verdict.ok else None,
                         vetoed=any(f.veto for f in verdict.findings),
                         clinical=bool(clinical_kinds(pair.claim)))


# ---- the sweep -------------------------------------------------------------------------


class PolicyPoint(BaseModel):
    """One policy measured on labelled claims (shares are of the counts beside them)."""

    model_config = ConfigDict(extra="forbid")

    min_confidence: dict[str, float]
    high_risk: float
    low_risk: float
    policy_id: str = ""
    n: int
    n_escalated: int
    n_flagged: int
    n_accepted: int
    n_errors: int
    n_caught: int  # errors escalated
    n_escalated_scored: int  # escalated claims that are not ERROR
    n_accepted_errors: int
    escalated: float  # n_escalated / n: the review load
    caught: float | None  # n_caught / n_errors
    precision: float | None  # n_caught / n_escalated_scored
    accepted_error_rate: float | None  # n_accepted_errors / n_accepted

    def policy(self, base: ArbitrationPolicy) -> ArbitrationPolicy:
        """``base`` with this point's thresholds."""
        return base.model_copy(update={"min_confidence": dict(self.min_confidence),
                                       "high_risk": self.high_risk, "low_risk": self.low_risk})


@dataclass
class _Tally:
    n: int = 0
    escalated: int = 0
    flagged: int = 0
    accepted: int = 0
    errors: int = 0
    caught: int = 0
    escalated_scored: int = 0
    accepted_errors: int = 0

    def add(self, other: _Tally) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def _tally(claims: Iterable[LabelledClaim], policy: ArbitrationPolicy) -> _Tally:
    tally = _Tally()
    for claim in claims:
        decision, _ = arbitration_decision(claim.category, claim.risk, claim.confidence,
                                           policy, confident=claim.confident,
                                           vetoed=claim.vetoed, clinical=claim.clinical)
        wrong = claim.wrong
        tally.n += 1
        tally.errors += bool(wrong)
        if decision is Decision.ESCALATE:
            tally.escalated += 1
            tally.caught += bool(wrong)
            tally.escalated_scored += wrong is not None
        elif decision is Decision.FLAG:
            tally.flagged += 1
        else:
            tally.accepted += 1
            tally.accepted_errors += bool(wrong)
    return tally


def _point(tally: _Tally, min_confidence: dict[str, float], high: float, low: float,
           base: ArbitrationPolicy | None = None) -> PolicyPoint:
    def share(part: int, whole: int) -> float | None:
        return part / whole if whole else None

    point = PolicyPoint(
        min_confidence=min_confidence, high_risk=high, low_risk=low, n=tally.n,
        n_escalated=tally.escalated, n_flagged=tally.flagged, n_accepted=tally.accepted,
        n_errors=tally.errors, n_caught=tally.caught, n_escalated_scored=tally.escalated_scored,
        n_accepted_errors=tally.accepted_errors, escalated=share(tally.escalated, tally.n) or 0.0,
        caught=share(tally.caught, tally.errors),
        precision=share(tally.caught, tally.escalated_scored),
        accepted_error_rate=share(tally.accepted_errors, tally.accepted))
    if base is not None:
        point.policy_id = policy_id(point.policy(base))
    return point


def evaluate_policy(claims: Sequence[LabelledClaim], policy: ArbitrationPolicy) -> PolicyPoint:
    """One policy on the claims, as it stands."""
    return _point(_tally(claims, policy), dict(policy.min_confidence), policy.high_risk,
                  policy.low_risk, policy)


Thresholds = tuple[float | None, ...]  # per SWEPT category: None = off


def _settings(thresholds: Thresholds) -> dict[str, float]:
    return {c.value: t for c, t in zip(SWEPT, thresholds, strict=True) if t is not None}


def _simplicity(point: PolicyPoint) -> tuple[int, float]:
    """Fewer thresholds set, then lower ones: the simpler of two equal policies."""
    return len(point.min_confidence), sum(point.min_confidence.values())


def auto_grid(claims: Sequence[LabelledClaim],
              quantiles: Sequence[float] = AUTO_QUANTILES) -> dict[str, list[float]]:
    """Per swept category, the ``quantiles`` of its claims' confidences, rounded to two
    decimals (empty for a category no claim has a confidence in)."""
    grid = {}
    for category in SWEPT:
        values = sorted(c.confidence for c in claims
                        if c.category is category and c.confidence is not None)
        picks = {round(values[min(int(q * len(values)), len(values) - 1)], 2)
                 for q in quantiles} if values else set()
        grid[category.value] = sorted(v for v in picks if 0 < v <= 1)
    return grid


def _grid(claims: Sequence[LabelledClaim],
          grid: Sequence[float] | dict[str, list[float]] | None) -> dict[str, list[float]]:
    if grid is None:
        return auto_grid(claims)
    if isinstance(grid, dict):
        return {c.value: sorted(set(grid.get(c.value, []))) for c in SWEPT}
    return {c.value: sorted(set(grid)) for c in SWEPT}


def sweep(claims: Sequence[LabelledClaim], base: ArbitrationPolicy,
          grid: Sequence[float] | dict[str, list[float]] | None = None,
          high_risk: Sequence[float] = DEFAULT_HIGH_RISK,
          low_risk: Sequence[float] = DEFAULT_LOW_RISK) -> list[PolicyPoint]:
    """Every policy of the grid measured on ``claims``: ``grid`` is one list of thresholds
    for every swept category, a list per category, or None for :func:`auto_grid`; risk
    settings are swept only when some claim has a risk (else the base policy's)."""
    has_risk = any(c.risk is not None for c in claims)
    risk_grid = (list(itertools.product(high_risk, low_risk)) if has_risk
                 else [(base.high_risk, base.low_risk)])
    per_category = _grid(claims, grid)
    options: dict[Category, list[float | None]] = {
        c: [None, *per_category[c.value]] for c in SWEPT}
    by_category = {c: [x for x in claims if x.category is c] for c in SWEPT}
    rest = [x for x in claims if x.category not in SWEPT]
    points = []
    for high, low in risk_grid:
        at_risk = base.model_copy(update={"high_risk": high, "low_risk": low,
                                          "min_confidence": {}})
        fixed = _tally(rest, at_risk)
        tallies = {
            (c, t): _tally(by_category[c], at_risk.model_copy(
                update={"min_confidence": {} if t is None else {c.value: t}}))
            for c in SWEPT for t in options[c]
        }
        for thresholds in itertools.product(*(options[c] for c in SWEPT)):
            total = _Tally()
            total.add(fixed)
            for category, t in zip(SWEPT, thresholds, strict=True):
                total.add(tallies[(category, t)])
            points.append(_point(total, _settings(thresholds), high, low))
    return points


def pareto_front(points: Sequence[PolicyPoint]) -> list[PolicyPoint]:
    """The policies no other beats: each catches more errors than every policy that
    escalates as few claims or fewer (equal points: the simplest policy stands for them)."""
    ordered = sorted(points, key=lambda p: (p.n_escalated, -p.n_caught, *_simplicity(p)))
    front: list[PolicyPoint] = []
    for point in ordered:
        if not front or point.n_caught > front[-1].n_caught:
            front.append(point)
    return front


def choose(points: Sequence[PolicyPoint], max_escalation: float) -> PolicyPoint | None:
    """The policy that catches the most errors while escalating at most ``max_escalation``
    of the claims (ties: fewer escalated, fewer accepted errors, simpler); None when none
    stays within it."""
    within = [p for p in points if p.escalated <= max_escalation + 1e-12]
    if not within:
        return None
    return min(within, key=lambda p: (-p.n_caught, p.n_escalated, p.n_accepted_errors,
                                      *_simplicity(p)))


# ---- the evaluation ------------------------------------------------------------------


class ArbitrationEval(BaseModel):
    """A policy sweep on labelled claims (``medverify eval arbitration --json``)."""

    model_config = ConfigDict(extra="forbid")

    judge: str | None = None
    files: list[str] = Field(default_factory=list)
    error_definition: str = ERROR_DEFINITION
    n: int
    n_judge_errors: int  # category ERROR: counted apart
    n_judgment_errors: int  # category JUDGMENT_ERROR: always errors
    n_errors: int
    n_with_risk: int
    errors_by: dict[str, dict[str, int]]  # judge category -> gold label -> claims
    grid: dict[str, list[float]]  # min_confidence values swept per category (and off)
    high_risk_grid: list[float] = Field(default_factory=list)  # empty: risks not swept
    low_risk_grid: list[float] = Field(default_factory=list)
    n_policies: int
    max_escalation: float
    base: PolicyPoint  # the configured policy
    front: list[PolicyPoint]
    chosen: PolicyPoint | None
    chosen_toml: str | None
    claims: list[LabelledClaim] = Field(default_factory=list)


def evaluate(claims: Sequence[LabelledClaim], base: ArbitrationPolicy, *,
             max_escalation: float = 0.2,
             grid: Sequence[float] | dict[str, list[float]] | None = None,
             high_risk: Sequence[float] = DEFAULT_HIGH_RISK,
             low_risk: Sequence[float] = DEFAULT_LOW_RISK, judge: str | None = None,
             files: Sequence[str] = (), keep_claims: bool = True) -> ArbitrationEval:
    """Sweep ``base``'s thresholds on ``claims``: the curve and the policy to use."""
    if not claims:
        raise InputError("no labelled claims to evaluate")
    points = sweep(claims, base, grid, high_risk, low_risk)
    front = [p.model_copy(update={"policy_id": policy_id(p.policy(base))})
             for p in pareto_front(points)]
    chosen = choose(front, max_escalation)
    has_risk = any(c.risk is not None for c in claims)
    errors_by: dict[str, Counter[str]] = {}
    for claim in claims:
        if claim.wrong:
            errors_by.setdefault(claim.category.value, Counter())[claim.gold] += 1
    return ArbitrationEval(
        judge=judge, files=list(files), n=len(claims),
        n_judge_errors=sum(c.category is Category.ERROR for c in claims),
        n_judgment_errors=sum(c.category is Category.JUDGMENT_ERROR for c in claims),
        n_errors=sum(bool(c.wrong) for c in claims),
        n_with_risk=sum(c.risk is not None for c in claims),
        errors_by={k: dict(sorted(v.items())) for k, v in sorted(errors_by.items())},
        grid=_grid(claims, grid), high_risk_grid=sorted(set(high_risk)) if has_risk else [],
        low_risk_grid=sorted(set(low_risk)) if has_risk else [], n_policies=len(points),
        max_escalation=max_escalation, base=evaluate_policy(claims, base), front=front,
        chosen=chosen,
        chosen_toml=policy_toml(chosen.policy(base), chosen) if chosen is not None else None,
        claims=list(claims) if keep_claims else [])


def _toml_value(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        inner = ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def policy_toml(policy: ArbitrationPolicy, point: PolicyPoint | None = None) -> str:
    """``policy`` as a ready-to-paste ``[arbitration]`` block (every setting), with what
    ``point`` measured as a comment."""
    lines = []
    if point is not None:
        lines.append(f"# {policy_id(policy)}: escalates {pct(point.escalated)} of claims, "
                     f"catches {pct(point.caught)} of judge errors (n={point.n})")
    lines.append("[arbitration]")
    for name, value in policy.model_dump(mode="json").items():
        if value is not None:  # TOML has no null: an unset optional setting is left out
            lines.append(f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def pct(value: float | None) -> str:
    """A share as a percentage with one decimal (``n/a`` for None)."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def describe(point: PolicyPoint) -> str:
    """A point's thresholds in a few words (``FACT<0.9, COVERAGE_GAP<0.6``; ``none``)."""
    parts = [f"{k}<{v:g}" for k, v in point.min_confidence.items()]
    return ", ".join(parts) or "no confidence floor"
