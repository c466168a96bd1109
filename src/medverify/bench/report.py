"""The benchmark study as one self-contained HTML page (inline CSS and SVG, no script, no
network), written like the results section of the paper: a paragraph of findings computed
from the numbers, the Fig. 1b chart, tables per model and per question source, pairwise
tests, top cited domains, reply outcomes, cost, judge agreement and provenance.

Model labels, questions and URLs are user input: the template autoescapes everything and
the charts escape their text (:mod:`medverify.bench.plots`). The page's CSP forbids every
script.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2
from markupsafe import Markup

from medverify.audit.records import AuditMetrics, Estimate
from medverify.bench.plots import metric_chart, source_chart
from medverify.bench.records import BenchSummary, Comparison, ModelCost, ReplyStats
from medverify.bench.stats import ALPHA, significant
from medverify.bench.summary import MISSING_STATUS, RunRecords
from medverify.report.audit_html import METRICS, ci_text, estimate_text, scalar_text, to_node
from medverify.report.render_json import atomic_write_text
from medverify.report.view import percent, shorten, total_usage

AUDIT_REPORT = "audit/report.html"
SOURCE_METRIC = "response_support"
MAX_ERRORS = 200
LABELS = {key: label for key, label, _, _ in METRICS}


# -- formatting -----------------------------------------------------------------------------


def points(value: float | None) -> str:
    """A difference of shares in percentage points: ``+4.2 pp``."""
    return "n/a" if value is None else f"{100 * value:+.1f} pp"


def diff_text(item: Comparison) -> str:
    """``'+4.2 pp [0.8 to 7.5]'``."""
    if item.difference is None:
        return "n/a"
    if item.ci is None:
        return points(item.difference)
    low, high = item.ci
    return f"{points(item.difference)} [{100 * low:+.1f} to {100 * high:+.1f}]"


def p_text(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def number_estimate(estimate: Estimate) -> str:
    """A score that is not a share (Cohen's kappa): ``'0.42 [0.30–0.55]'``."""
    if estimate.value is None:
        return "n/a"
    if estimate.ci is None:
        return f"{estimate.value:.2f}"
    return f"{estimate.value:.2f} [{estimate.ci[0]:.2f}–{estimate.ci[1]:.2f}]"


def usd(value: float | None) -> str:
    if value is None:
        return "—"
    return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def count(value: int) -> str:
    return f"{value:,}"


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """The audit page's environment pattern: same templates folder, autoescape, strict."""
    loader = jinja2.FileSystemLoader(Path(__file__).parents[1] / "report" / "templates")
    env = jinja2.Environment(loader=loader, autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(percent=percent, ci_text=ci_text, estimate=estimate_text,
                       scalar=scalar_text, shorten=shorten, points=points, diff=diff_text,
                       p=p_text, number=number_estimate, usd=usd, count=count)
    return env


# -- findings -------------------------------------------------------------------------------


def _names(names: Sequence[str]) -> str:
    if len(names) <= 2:
        return " and ".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _extremes(overall: Mapping[str, AuditMetrics], metric: str) -> str | None:
    found = {m: getattr(a, metric) for m, a in overall.items()}
    valued = {m: e for m, e in found.items() if e.value is not None}
    if not valued:
        return None
    label = LABELS[metric][0].lower() + LABELS[metric][1:]
    top, bottom = max(e.value for e in valued.values()), min(e.value for e in valued.values())
    best = [m for m, e in valued.items() if e.value == top]
    text = f"{_names(best)} had the highest {label} ({estimate_text(valued[best[0]])})"
    if top != bottom:
        worst = [m for m, e in valued.items() if e.value == bottom]
        text += f", {_names(worst)} the lowest ({estimate_text(valued[worst[0]])})"
    return text + "."


def _overview(summary: BenchSummary, records: RunRecords) -> str:
    n_questions = len(records.questions) or records.manifest.n_questions
    n_sources = len(summary.sources)
    source_word = "source" if n_sources == 1 else "sources"
    audited = sum(m.n_answers for m in summary.overall.values())
    return (f"Across {n_questions:,} questions from {n_sources} {source_word}, "
            f"{len(summary.models)} model{'s' if len(summary.models) != 1 else ''} gave "
            f"{len(records.replies):,} replies, of which {audited:,} were audited.")


def _tests(comparisons: Sequence[Comparison]) -> list[str]:
    lines = []
    for key, label, _, _ in METRICS:
        tested = [c for c in comparisons if c.metric == key and c.p_holm is not None]
        if tested:
            k = len(significant(tested, ALPHA))
            lines.append(f"{k} of {len(tested)} pairwise difference"
                         f"{'s' if len(tested) != 1 else ''} in {label[0].lower() + label[1:]} "
                         f"{'is' if k == 1 else 'are'} significant at {ALPHA:g} after "
                         "Holm adjustment.")
    return lines


OUTCOME_WORDS = {
    "fallback": "gave no usable JSON source list (URLs taken from the text)",
    "no_sources": "cited no source",
    "refusal": "refused to answer",
    "empty": "came back empty after the retry",
    "error": "failed with a provider error",
}


def _bad_input(replies: Mapping[str, ReplyStats]) -> str | None:
    statuses: dict[str, int] = {}
    for stats in replies.values():
        for status, n in stats.statuses.items():
            statuses[status] = statuses.get(status, 0) + n
    n_replies = sum(n for status, n in statuses.items() if status != MISSING_STATUS)
    parts = [f"{statuses[s]:,} {w}" for s, w in OUTCOME_WORDS.items() if statuses.get(s)]
    sentences = [f"Of {n_replies:,} replies, {_names(parts)}."] if parts else []
    duplicates = sum(s.duplicate_urls for s in replies.values())
    dropped = sum(s.dropped_urls for s in replies.values())
    if duplicates or dropped:
        sentences.append(f"{duplicates:,} repeated and {dropped:,} unusable URL entries were "
                         "counted and removed.")
    if statuses.get(MISSING_STATUS):
        sentences.append(f"{statuses[MISSING_STATUS]:,} model-question pairs have no reply "
                         "yet.")
    return " ".join(sentences) or None


def findings(summary: BenchSummary, records: RunRecords) -> list[str]:
    """The results paragraph, computed from the summary's numbers."""
    lines = [_overview(summary, records)]
    lines += [x for key, _, _, _ in METRICS if (x := _extremes(summary.overall, key))]
    lines += _tests(summary.comparisons)
    bad = _bad_input(summary.replies)
    if bad:
        lines.append(bad)
    if summary.agreement is not None and summary.agreement.kappa.value is not None:
        lines.append(f"The judge agreed with human labels on {summary.agreement.n:,} claims "
                     f"with Cohen's kappa {number_estimate(summary.agreement.kappa)}.")
    return lines


# -- tables ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceRow:
    model: str
    source: str
    metrics: AuditMetrics


def source_rows(summary: BenchSummary) -> list[SourceRow]:
    return [SourceRow(model, source, groups[source])
            for source in summary.sources
            for model, groups in summary.by_source.items() if source in groups]


def status_columns(replies: Mapping[str, ReplyStats]) -> list[str]:
    return list(dict.fromkeys(s for stats in replies.values() for s in stats.statuses))


def cost_total(costs: Mapping[str, ModelCost]) -> ModelCost:
    priced = [c.cost_usd for c in costs.values() if c.cost_usd is not None]
    return ModelCost(
        calls=sum(c.calls for c in costs.values()),
        cached_calls=sum(c.cached_calls for c in costs.values()),
        prompt_tokens=sum(c.prompt_tokens for c in costs.values()),
        completion_tokens=sum(c.completion_tokens for c in costs.values()),
        estimated=any(c.estimated for c in costs.values()),
        cost_usd=sum(priced) if priced else None,
    )


def _audit_link(records: RunRecords) -> str | None:
    layout = records.layout
    if layout is None or not (layout.root / AUDIT_REPORT).is_file():
        return None
    return AUDIT_REPORT


def _charts(summary: BenchSummary, models: list[str], source_metric: str) -> dict[str, Markup]:
    metrics = [(key, label) for key, label, _, _ in METRICS]
    overall = metric_chart(summary.overall, models, metrics,
                           title="SourceCheckup metrics per model (95 % CI)")
    by_source = source_chart(summary.by_source, models, summary.sources, source_metric,
                             title=f"{LABELS[source_metric]} per question source (95 % CI)")
    return {"overall": Markup(overall), "by_source": Markup(by_source)}


def render_bench_html(
    summary: BenchSummary, records: RunRecords, *, source_metric: str = SOURCE_METRIC
) -> str:
    """The study as one self-contained HTML page."""
    models = [m.label for m in summary.models]
    return _environment().get_template("bench.html.j2").render(
        summary=summary,
        manifest=records.manifest,
        models=models,
        metrics=METRICS,
        findings=findings(summary, records),
        charts=_charts(summary, models, source_metric),
        source_metric=LABELS[source_metric],
        source_rows=source_rows(summary),
        comparisons={key: [c for c in summary.comparisons if c.metric == key]
                     for key, _, _, _ in METRICS},
        statuses=status_columns(summary.replies),
        cost_total=cost_total(summary.cost),
        usage_total=total_usage(summary.audit_usage),
        audit_link=_audit_link(records),
        config=to_node(summary.config) if summary.config else None,
        notes=to_node(summary.notes) if summary.notes else None,
        errors=summary.errors[:MAX_ERRORS],
        more_errors=max(len(summary.errors) - MAX_ERRORS, 0),
        alpha=ALPHA,
    )


def write_bench_html(path: str | os.PathLike[str], summary: BenchSummary,
                     records: RunRecords) -> Path:
    """Write the study's HTML page to ``path`` atomically; returns the path."""
    return atomic_write_text(path, render_bench_html(summary, records))
