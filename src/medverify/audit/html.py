"""A self-contained HTML page for a citation audit (inline CSS, a few lines of inline JS,
works offline): provenance, the SourceCheckup metrics with 95 % CIs, breakdowns, the URL
analysis, SourceCleanup counts and, per answer, the claim-by-source matrix.

Answers, source pages, judge and model output are untrusted text: the template is
rendered with autoescaping on, only http(s) URLs become links (``rel="noopener
noreferrer nofollow"``), and no data ever reaches the inline script.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2
from markupsafe import Markup

from medverify.audit.records import (
    AnswerAudit,
    AuditSummary,
    ClaimAudit,
    CleanupOutcome,
    CleanupResult,
    Estimate,
    PairJudgement,
    SupportLabel,
)
from medverify.files import atomic_write_text
from medverify.records import Analysis, Source
from medverify.report.nodes import is_scalar, scalar_text, to_node
from medverify.report.view import percent, safe_url, shorten, total_usage

TITLE_CHARS = 300
OPEN_UP_TO = 5  # answers shown expanded when the audit has at most this many


@dataclass(frozen=True)
class CellStyle:
    """How a matrix cell or a support state is shown: word, symbol, CSS class."""

    label: str
    symbol: str
    css: str
    description: str


SUPPORTED = CellStyle("supported", "✓", "sup", "The source supports the claim.")
NOT_SUPPORTED = CellStyle("not supported", "✗", "nosup", "The source does not support the claim.")
ERROR = CellStyle("error", "!", "err", "The judge failed on this pair; it is not scored.")
NOT_CHECKED = CellStyle("not checked", "–", "skip",
                        "Not judged: the source is invalid, or the claim was not paired with it.")
CELL_STYLES = (SUPPORTED, NOT_SUPPORTED, ERROR, NOT_CHECKED)

CLEANUP_LABELS: dict[CleanupOutcome, tuple[str, str]] = {
    CleanupOutcome.FIXED: ("fixed", "sup"),
    CleanupOutcome.REMOVED: ("removed", "skip"),
    CleanupOutcome.STILL_UNSUPPORTED: ("still unsupported", "nosup"),
    CleanupOutcome.ERROR: ("error", "err"),
}


def support_style(value: bool | None) -> CellStyle:
    if value is None:
        return ERROR
    return SUPPORTED if value else NOT_SUPPORTED


# -- the per-answer views -----------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    style: CellStyle
    title: str
    cited: bool


@dataclass(frozen=True)
class SourceView:
    label: str
    source: Source
    link: str | None

    @property
    def state(self) -> str:
        if self.source.valid:
            return "valid"
        status = self.source.status
        return "invalid" if status in ("given", "fetched") else status.replace("_", " ")

    @property
    def why(self) -> str:
        src = self.source
        parts = [src.failure.value if src.failure else "", src.reason or ""]
        if src.http_status and src.http_status != 200:
            parts.insert(0, f"HTTP {src.http_status}")
        if not src.valid and src.status in ("given", "fetched"):
            parts.append("no text")
        return " · ".join(dict.fromkeys(p for p in parts if p))


@dataclass(frozen=True)
class CleanupView:
    result: CleanupResult
    label: str
    css: str
    reason: str | None


@dataclass(frozen=True)
class RowView:
    number: int
    claim: ClaimAudit
    style: CellStyle
    cells: list[Cell]
    agrees: bool | None
    cleanup: CleanupView | None


@dataclass(frozen=True)
class AnswerView:
    number: int
    audit: AnswerAudit
    sources: list[SourceView]
    rows: list[RowView]
    has_gold: bool
    has_cleanup: bool
    meta: list[tuple[str, str]]

    @property
    def support(self) -> CellStyle:
        return support_style(self.audit.metrics.response_support)


def _analysis_text(analysis: Analysis | None) -> str:
    if analysis is None:
        return ""
    if analysis.shown_quote:
        return f"“{analysis.shown_quote}”"
    return analysis.reason or ""


def pair_cell(pair: PairJudgement | None, source: Source, cited: bool) -> Cell:
    """One matrix cell: the pair's state, with the deciding quote or error as its title."""
    prefix = "cited · " if cited else ""
    if pair is None:
        why = "source invalid" if not source.valid else "not paired with this source"
        detail = f": {source.reason or source.failure or source.status}" if not source.valid else ""
        return Cell(NOT_CHECKED, shorten(f"{prefix}{why}{detail}", TITLE_CHARS), cited)
    verdict = pair.verdict
    style = support_style(pair.supported)
    if style is ERROR:
        detail = verdict.error or "no verdict"
    elif style is SUPPORTED:
        detail = _analysis_text(verdict.factual)
    elif verdict.counterfactual is not None and verdict.counterfactual.counts:
        detail = "contradicted: " + _analysis_text(verdict.counterfactual)
    else:
        detail = _analysis_text(verdict.factual)
    text = f"{prefix}{style.label}" + (f": {detail}" if detail else "")
    return Cell(style, shorten(text, TITLE_CHARS), cited)


def gold_agrees(claim: ClaimAudit) -> bool | None:
    """Whether the audit agrees with the claim's gold label (None: no gold or unscored)."""
    if claim.gold is None or claim.supported is None:
        return None
    return claim.supported == (claim.gold == SupportLabel.SUPPORTED)


def _cleanup_view(result: CleanupResult) -> CleanupView:
    label, css = CLEANUP_LABELS[result.outcome]
    return CleanupView(result, label, css, result.reason)


def _row(number: int, claim: ClaimAudit, sources: list[Source],
         cleanup: Mapping[str, CleanupResult]) -> RowView:
    pairs = {p.source_id: p for p in claim.pairs}
    cited = set(claim.cited_source_ids)
    cells = [pair_cell(pairs.get(s.id), s, s.id in cited) for s in sources]
    result = cleanup.get(claim.claim.id)
    return RowView(number, claim, support_style(claim.supported), cells, gold_agrees(claim),
                   _cleanup_view(result) if result else None)


def _meta(audit: AnswerAudit) -> list[tuple[str, str]]:
    return [(str(k), shorten(scalar_text(v), 80)) for k, v in audit.answer.meta.items()
            if is_scalar(v) and v not in (None, "")]


def source_labels(sources: Sequence[Source]) -> list[str]:
    """Column labels: the sources' own ids as ``[id]`` when short and unique (they are the
    answer's citation markers), else ``S1``, ``S2``, ..."""
    ids = [s.id for s in sources]
    if all(ids) and len(set(ids)) == len(ids) and all(len(i) <= 6 for i in ids):
        return [f"[{i}]" for i in ids]
    return [f"S{n}" for n in range(1, len(sources) + 1)]


def answer_view(number: int, audit: AnswerAudit) -> AnswerView:
    sources = list(audit.answer.sources)
    cleanup = {r.claim_id: r for r in audit.cleanup}
    rows = [_row(n, c, sources, cleanup) for n, c in enumerate(audit.claims, 1)]
    labels = source_labels(sources)
    views = [SourceView(n, s, safe_url(s.url)) for n, s in zip(labels, sources, strict=True)]
    return AnswerView(number, audit, views, rows,
                      has_gold=any(c.gold is not None for c in audit.claims),
                      has_cleanup=bool(audit.cleanup), meta=_meta(audit))


# -- summary helpers ----------------------------------------------------------------------


def ci_text(estimate: Estimate) -> str:
    """``'95% CI 80.1–86.2%'``, or ``''`` without an interval."""
    if estimate.ci is None:
        return ""
    low, high = estimate.ci
    return f"95% CI {100 * low:.1f}–{100 * high:.1f}%"


def estimate_text(estimate: Estimate) -> str:
    """``'83.3% [80.1–86.2]'``: value and interval in one short cell; ``'not measured'``
    for a share with nothing to measure (its ``reason`` says why)."""
    if estimate.value is None and estimate.reason:
        return "not measured"
    value = percent(estimate.value)
    if estimate.ci is None:
        return value
    low, high = estimate.ci
    return f"{value} [{100 * low:.1f}–{100 * high:.1f}]"


METRICS = (
    ("url_validity", "Source URL validity", "URLs", "Cited URLs that return a valid page."),
    ("statement_support", "Statement-level support", "claims",
     "Statements supported by at least one source of the same answer."),
    ("response_support", "Response-level support", "answers",
     "Answers whose every statement is supported."),
    ("unused_sources", "Unused sources", "sources", "Sources that support no statement."),
)

CLEANUP_ORDER = ("total", "fixed", "removed", "still_unsupported", "error")


def cleanup_rows(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    """The SourceCleanup counts, known outcomes first, then any others."""
    known = [(k, counts[k]) for k in CLEANUP_ORDER if k in counts]
    return known + [(k, v) for k, v in counts.items() if k not in CLEANUP_ORDER]


def _reasons(counts: Mapping[str, int]) -> list[tuple[str, int, str]]:
    total = sum(counts.values())
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [(k, v, percent(v / total) if total else "n/a") for k, v in ordered]


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    loader = jinja2.FileSystemLoader(Path(__file__).parents[1] / "report" / "templates")
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(percent=percent, ci_text=ci_text, estimate=estimate_text,
                       scalar=scalar_text, shorten=shorten)
    return env


@lru_cache(maxsize=1)
def _script() -> tuple[Markup, str]:
    """The page's only script (static, no data in it) and its CSP hash."""
    text = _environment().get_template("audit_script.html.j2").render()
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return Markup(text), f"sha256-{digest}"


def render_audit_html(summary: AuditSummary, audits: Sequence[AnswerAudit]) -> str:
    """The audit as one self-contained HTML page."""
    template = _environment().get_template("audit.html.j2")
    script, script_hash = _script()
    return template.render(
        script=script,
        script_hash=script_hash,
        summary=summary,
        overall=summary.overall,
        metrics=METRICS,
        reasons=_reasons(summary.overall.invalid_reasons),
        url_analysis=to_node(summary.url_analysis) if summary.url_analysis else None,
        notes=to_node(summary.notes) if summary.notes else None,
        config=to_node(summary.config) if summary.config else None,
        cleanup=cleanup_rows(summary.cleanup),
        total=total_usage(summary.usage),
        answers=[answer_view(n, a) for n, a in enumerate(audits, 1)],
        cell_styles=CELL_STYLES,
        open_up_to=OPEN_UP_TO,
    )


def write_audit_html(path: str | os.PathLike[str], summary: AuditSummary,
                     audits: Sequence[AnswerAudit]) -> Path:
    """Write the audit's HTML page to ``path`` atomically; returns the path."""
    return atomic_write_text(path, render_audit_html(summary, audits))
