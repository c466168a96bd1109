"""A self-contained HTML page for one report (inline CSS and JS, works offline).

Answers, evidence and judge output are untrusted text: the template is rendered with
autoescaping on, and only http(s) URLs become links.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import jinja2

from medverify.files import atomic_write_text
from medverify.records import (
    Analysis,
    Category,
    CheckFinding,
    ClaimResult,
    Decision,
    Passage,
    Report,
    Span,
)
from medverify.report.metrics import not_sure_counts
from medverify.report.view import (
    CATEGORY_STYLES,
    SEVERITY,
    CategoryStyle,
    confidence_note,
    deciding_passage,
    finding_effect,
    findings,
    not_sure_reason,
    other_warnings,
    percent,
    safe_url,
    score_text,
    support_word,
    total_usage,
)


@dataclass(frozen=True)
class Segment:
    """A run of answer text covered by the same set of claims (numbers are 1-based)."""

    text: str
    claims: tuple[int, ...] = ()
    category: Category | None = None
    ends: tuple[int, ...] = ()
    unsure: bool = False  # some claim covering it is shown as not sure

    @property
    def style(self) -> CategoryStyle | None:
        return CATEGORY_STYLES[self.category] if self.category is not None else None


@dataclass(frozen=True)
class PassageView:
    passage: Passage
    url: str | None
    deciding: bool


@dataclass(frozen=True)
class ClaimView:
    """One claim result, prepared for the template."""

    number: int
    result: ClaimResult
    style: CategoryStyle
    score: str
    located: bool
    evidence: Passage | None
    evidence_url: str | None
    passages: list[PassageView] = field(default_factory=list)

    @property
    def dom_id(self) -> str:
        return f"claim-{self.number}"

    @property
    def factual(self) -> Analysis | None:
        return self.result.verdict.factual if self.result.verdict else None

    @property
    def counterfactual(self) -> Analysis | None:
        return self.result.verdict.counterfactual if self.result.verdict else None

    @property
    def decision(self) -> Decision | None:
        return self.result.arbitration.decision if self.result.arbitration else None

    @property
    def not_sure(self) -> str | None:
        """Why the verdict is shown as not sure (None: confident or not assessed)."""
        return not_sure_reason(self.result)

    @property
    def confidence(self) -> str | None:
        """``confident, 93%`` for a confident verdict."""
        return confidence_note(self.result)

    @property
    def label(self) -> str:
        """The category's word, with ``(not sure)`` when it is."""
        return self.style.label + (" (not sure)" if self.not_sure is not None else "")

    @property
    def findings(self) -> list[tuple[CheckFinding, str]]:
        """Each exact-check finding with what it did (``support not counted``, ``not sure``)."""
        return [(f, finding_effect(f)) for f in findings(self.result)]

    @property
    def warnings(self) -> list[str]:
        """The warnings that are not findings (those are listed on their own)."""
        return other_warnings(self.result)

    @property
    def decision_style(self) -> DecisionStyle:
        return DECISION_STYLES[self.decision]


@dataclass(frozen=True)
class DecisionStyle:
    """How an arbitration decision is shown: a word, a symbol, a CSS class, a heading."""

    decision: Decision | None
    label: str
    symbol: str
    css: str
    heading: str
    description: str


DECISION_STYLES: dict[Decision | None, DecisionStyle] = {
    style.decision: style
    for style in (
        DecisionStyle(Decision.ESCALATE, "Escalate", "⇧", "escalate",
                      "Escalated for clinician review",
                      "Held for a clinician: the judge failed or was unsure, or the judge and "
                      "the risk classifier disagree."),
        DecisionStyle(Decision.FLAG, "Flag", "⚠", "flag", "Flagged",
                      "Shown with a warning: a hallucination, a coverage gap or a verdict "
                      "that is not sure."),
        DecisionStyle(Decision.ACCEPT, "Accept", "✓", "accept", "Accepted",
                      "Shown as checked: the evidence supports it."),
        DecisionStyle(None, "No decision", "·", "undecided", "No decision",
                      "Arbitration did not run for these claims."),
    )
}
"""Display order of the claim groups: escalated first."""


@dataclass(frozen=True)
class ClaimGroup:
    """The claims that got one decision (all claims, unheaded, when none has a decision)."""

    style: DecisionStyle | None
    claims: list[ClaimView]


def group_claims(claims: list[ClaimView]) -> list[ClaimGroup]:
    """Claims grouped by decision, escalated first, then flagged, accepted and undecided
    (empty groups left out); one unheaded group when no claim carries a decision."""
    if not any(c.result.arbitration is not None for c in claims):
        return [ClaimGroup(None, claims)] if claims else []
    groups = []
    for decision, style in DECISION_STYLES.items():
        members = [c for c in claims if c.decision == decision]
        if members:
            groups.append(ClaimGroup(style, members))
    return groups


def highlight_span(result: ClaimResult, text: str) -> Span | None:
    """The claim's span when it can be highlighted in ``text`` (non-empty, in range)."""
    span = result.claim.span
    if span is None or span.start >= span.end or span.end > len(text):
        return None
    return span


def _covering(spans: dict[int, Span], start: int, end: int) -> tuple[int, ...]:
    return tuple(n for n, s in spans.items() if s.start <= start and end <= s.end)


def _worst(numbers: tuple[int, ...], results: list[ClaimResult]) -> Category | None:
    if not numbers:
        return None
    return max((results[n - 1].category for n in numbers), key=SEVERITY.__getitem__)


def segment_answer(text: str, results: list[ClaimResult]) -> list[Segment]:
    """Cut ``text`` at every claim boundary; each piece knows the claims covering it.

    Overlapping and nested spans are fine: a piece covered by several claims lists them
    all and takes the colour of the most severe category, and is marked ``unsure`` when
    one of them is shown as not sure. The text of the pieces that list claim ``n`` joins
    to exactly ``text[span.start:span.end]``.
    """
    spans = {n: s for n, r in enumerate(results, 1) if (s := highlight_span(r, text))}
    edges = {0, len(text)} | {s.start for s in spans.values()} | {s.end for s in spans.values()}
    segments = []
    for start, end in itertools.pairwise(sorted(edges)):
        covering = _covering(spans, start, end)
        ends = tuple(n for n, s in spans.items() if s.end == end)
        unsure = any(results[n - 1].confident is False for n in covering)
        segments.append(Segment(text[start:end], covering, _worst(covering, results), ends,
                                unsure))
    return segments


def _claim_view(number: int, result: ClaimResult, answer_text: str) -> ClaimView:
    evidence = deciding_passage(result)
    passages = [
        PassageView(p, safe_url(p.url), evidence is not None and p.id == evidence.id)
        for p in result.passages
    ]
    return ClaimView(
        number=number,
        result=result,
        style=CATEGORY_STYLES[result.category],
        score=score_text(result),
        located=highlight_span(result, answer_text) is not None,
        evidence=evidence,
        evidence_url=safe_url(evidence.url) if evidence else None,
        passages=passages,
    )


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(Path(__file__).parent / "templates")
    env = jinja2.Environment(
        loader=loader,
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["percent"] = percent
    env.filters["safe_url"] = safe_url
    return env


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page."""
    text = report.answer.text
    claims = [_claim_view(n, r, text) for n, r in enumerate(report.results, 1)]
    template = _environment().get_template("report.html.j2")
    return template.render(
        report=report,
        metrics=report.metrics,
        segments=segment_answer(text, report.results),
        claims=claims,
        groups=group_claims(claims),
        decision_styles=[s for d, s in DECISION_STYLES.items() if d is not None],
        unlocated=[c for c in claims if not c.located],
        styles=list(CATEGORY_STYLES.values()),
        support=support_word(report.metrics.response_support),
        not_sure=not_sure_counts(report.results),
        total=total_usage(report.usage),
    )


def write_html(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write the report's HTML page to ``path`` atomically; returns the path."""
    return atomic_write_text(path, render_html(report))
