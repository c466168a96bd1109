"""Risk-guided compute (CHECK, section 3.4): spend an expensive path only where the
hallucination classifier is least confident.

Every item gets a cheap answer and its hallucination risk (the classifier's
P(HALLUCINATION) of that answer). With a budget ``b`` (the share of items allowed the
expensive path: a bigger model, chain-of-thought, a k-sample vote, retrieval and a
re-check), the ``floor(b * n)`` riskiest items get the expensive answer instead. An item
whose risk could not be computed counts as the riskiest (an unscored answer is never
trusted by default).

- :func:`escalate` chooses the items for a budget (library use: decide before paying).
- :func:`run_guided` runs it: the cheap path on everything, risk, then the expensive path
  on the chosen items only.
- :func:`budget_curve` measures the policy on items whose cheap *and* expensive answers are
  both known to be right or wrong: accuracy at each budget against two baselines computed
  exactly, *random* allocation (the expected accuracy of escalating a random ``k`` items:
  ``cheap + k/n * (expensive - cheap)``) and the *oracle* (escalating first the items the
  expensive path fixes: an upper bound for any allocation).

``medverify risk compute ITEMS.jsonl`` draws the curve from a file of
:class:`ComputeItem` rows (docs/risk.md).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from medverify.report.svg import BLUE, GRID, INK, MUTED, ORANGE, Box, document, esc

A = TypeVar("A")

DEFAULT_BUDGETS = tuple(round(0.05 * i, 2) for i in range(21))


class ComputeItem(BaseModel):
    """One item of a budget-curve measurement."""

    model_config = ConfigDict(extra="forbid")

    id: str
    risk: float | None = Field(None, ge=0.0, le=1.0)  # P(HALLUCINATION) of the cheap answer
    cheap_correct: bool
    expensive_correct: bool


class CurvePoint(BaseModel):
    budget: float
    escalated: int
    accuracy: float
    random: float
    oracle: float


class BudgetCurve(BaseModel):
    n: int
    cheap_accuracy: float
    expensive_accuracy: float
    unscored: int  # items without a risk (escalated first)
    points: list[CurvePoint]
    gain_over_random: float  # mean of (accuracy - random) over the budgets strictly in (0, 1)


def n_escalated(n: int, budget: float) -> int:
    if not 0.0 <= budget <= 1.0:
        raise ValueError(f"a budget is a share of items in [0, 1], not {budget}")
    return math.floor(budget * n + 1e-9)


def escalate(risks: Sequence[float | None], budget: float) -> list[int]:
    """Indices of the items the expensive path gets at ``budget``: the riskiest first (no
    risk counts as the highest; ties keep the input order), in input order."""
    k = n_escalated(len(risks), budget)
    order = sorted(range(len(risks)),
                   key=lambda i: (0 if risks[i] is None else 1, -(risks[i] or 0.0), i))
    return sorted(order[:k])


def budget_curve(items: Sequence[ComputeItem],
                 budgets: Sequence[float] = DEFAULT_BUDGETS) -> BudgetCurve:
    """Accuracy against the share of items escalated, with the random and oracle
    baselines (see the module doc). ValueError for no items."""
    n = len(items)
    if not n:
        raise ValueError("no items to measure")
    cheap = sum(i.cheap_correct for i in items)
    expensive = sum(i.expensive_correct for i in items)
    fixed = sum(1 for i in items if i.expensive_correct and not i.cheap_correct)
    broken = sum(1 for i in items if i.cheap_correct and not i.expensive_correct)
    risks = [i.risk for i in items]
    points = []
    for budget in sorted(set(budgets)):
        k = n_escalated(n, budget)
        chosen = set(escalate(risks, budget))
        correct = sum(item.expensive_correct if index in chosen else item.cheap_correct
                      for index, item in enumerate(items))
        points.append(CurvePoint(
            budget=budget, escalated=k, accuracy=correct / n,
            random=(cheap + k / n * (expensive - cheap)) / n,
            oracle=(cheap + min(k, fixed) - max(0, k - (n - broken))) / n))
    inner = [p.accuracy - p.random for p in points if 0.0 < p.budget < 1.0]
    return BudgetCurve(n=n, cheap_accuracy=cheap / n, expensive_accuracy=expensive / n,
                       unscored=sum(r is None for r in risks), points=points,
                       gain_over_random=sum(inner) / len(inner) if inner else 0.0)


@dataclass(frozen=True)
class Guided(Generic[A]):
    """What :func:`run_guided` decided for one item."""

    answer: A
    risk: float | None
    escalated: bool


async def run_guided(items: Sequence[str], *, cheap: Callable[[str], Awaitable[A]],
                     risk: Callable[[str, A], Awaitable[float | None]],
                     expensive: Callable[[str], Awaitable[A]],
                     budget: float) -> list[Guided[A]]:
    """The cheap path on every item, its risk, then the expensive path on the riskiest
    ``floor(budget * n)`` items only; the answers in input order. A failed risk (None)
    sends the item to the expensive path first."""
    answers = [await cheap(item) for item in items]
    risks = [await risk(item, answer) for item, answer in zip(items, answers, strict=True)]
    chosen = set(escalate(risks, budget))
    out = []
    for index, (item, answer) in enumerate(zip(items, answers, strict=True)):
        if index in chosen:
            answer = await expensive(item)
        out.append(Guided(answer=answer, risk=risks[index], escalated=index in chosen))
    return out


def curve_svg(curve: BudgetCurve, title: str = "Accuracy vs budget") -> str:
    """The curve with its two baselines; y is accuracy, x the share escalated."""
    values = [v for p in curve.points for v in (p.accuracy, p.random, p.oracle)]
    low = max(0.0, math.floor(min(values) * 10) / 10)
    high = min(1.0, math.ceil(max(values) * 10) / 10) or 1.0
    box = Box(60, 40, 360, 260, (0.0, 1.0), (low, high if high > low else low + 0.1))
    parts = [box.frame()]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = box.x(tick)
        parts.append(f'<path d="M{x:.1f} {box.top}V{box.bottom}" stroke="{GRID}"/>')
        parts.append(f'<text x="{x:.1f}" y="{box.bottom + 14}" font-size="11" '
                     f'text-anchor="middle" fill="{MUTED}">{tick:g}</text>')
    for i in range(5):
        value = box.y_range[0] + (box.y_range[1] - box.y_range[0]) * i / 4
        y = box.y(value)
        parts.append(f'<path d="M{box.left} {y:.1f}H{box.left + box.width}" stroke="{GRID}"/>')
        parts.append(f'<text x="{box.left - 6}" y="{y + 4:.1f}" font-size="11" '
                     f'text-anchor="end" fill="{MUTED}">{value:.2f}</text>')
    series = (("guided by risk", "accuracy", BLUE, ""), ("random allocation", "random",
                                                         MUTED, ' stroke-dasharray="5 4"'),
              ("oracle", "oracle", ORANGE, ' stroke-dasharray="2 3"'))
    for n, (name, field, colour, dash) in enumerate(series):
        points = " ".join(f"{box.x(p.budget):.1f},{box.y(getattr(p, field)):.1f}"
                          for p in curve.points)
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                     f'stroke-width="2"{dash}><title>{esc(name)}</title></polyline>')
        y = box.top + 14 + 16 * n
        parts.append(f'<text x="{box.left + 8}" y="{y}" font-size="11" fill="{colour}">'
                     f"{esc(name)}</text>")
    parts.append(f'<text x="{box.left + box.width / 2}" y="{box.bottom + 32}" font-size="12" '
                 f'text-anchor="middle" fill="{INK}">share of items given the expensive path'
                 "</text>")
    parts.append(f'<text x="14" y="{box.top + box.height / 2}" font-size="12" fill="{INK}" '
                 f'text-anchor="middle" transform="rotate(-90 14 {box.top + box.height / 2})">'
                 "accuracy</text>")
    return document(450, 350, title, parts)
