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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jinja2
from markupsafe import Markup

from medverify.audit.html import METRICS, ci_text, estimate_text
from medverify.audit.metrics import answer_metrics
from medverify.audit.records import AnswerAudit, AuditMetrics, Estimate, FetchChange
from medverify.audit.urls import DomainCount, fetch_change_lines
from medverify.bench.loading import RunRecords
from medverify.bench.plots import metric_chart, source_chart
from medverify.bench.records import (
    FETCH_CHANGES,
    MISSING_STATUS,
    RUN_WARNINGS,
    BenchOrigin,
    BenchSummary,
    Comparison,
    ModelCost,
    ReplyStats,
)
from medverify.bench.stats import ALPHA, significant
from medverify.files import atomic_write_text
from medverify.report.nodes import scalar_text, to_node
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

PHRASES = {
    "url_validity": "source URL validity",
    "statement_support": "statement-level support",
    "response_support": "response-level support",
    "unused_sources": "share of unused sources",
}
SMALL_N = 20  # estimates over fewer observations are flagged in the findings
TEST_NAME = "two-sided paired permutation test over questions, Holm-adjusted per metric"


def _names(names: Sequence[str]) -> str:
    if len(names) <= 2:
        return " and ".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _valued(overall: Mapping[str, AuditMetrics], metric: str) -> dict[str, Estimate]:
    found = {m: getattr(a, metric) for m, a in overall.items()}
    return {m: e for m, e in found.items() if e.value is not None}


def find_comparison(comparisons: Sequence[Comparison], metric: str, a: str,
                    b: str) -> Comparison | None:
    """The comparison of ``a`` and ``b`` on ``metric``, in whichever order it was stored."""
    for item in comparisons:
        if item.metric == metric and {item.model_a, item.model_b} == {a, b} and a != b:
            return item
    return None


def _versus(comparisons: Sequence[Comparison], metric: str, best: str,
            runner_up: tuple[str, Estimate]) -> str:
    """How the best model stands against the next one: the test's verdict in words."""
    name, estimate = runner_up
    item = find_comparison(comparisons, metric, best, name)
    if item is None or item.p_holm is None or item.difference is None:
        return f"; the next was {name} ({estimate_text(estimate)}), not tested"
    flipped = item if item.model_a == best else _flip(item)
    verdict = "significantly above" if item.p_holm < ALPHA else "not significantly different from"
    return (f"; {verdict} the next, {name} ({estimate_text(estimate)}; difference "
            f"{diff_text(flipped)}, Holm p {p_words(item.p_holm)})")


def _flip(item: Comparison) -> Comparison:
    """B minus A instead of A minus B."""
    ci = None if item.ci is None else (-item.ci[1], -item.ci[0])
    difference = None if item.difference is None else -item.difference
    return item.model_copy(update={"model_a": item.model_b, "model_b": item.model_a,
                                   "value_a": item.value_b, "value_b": item.value_a,
                                   "difference": difference, "ci": ci})


def p_words(value: float) -> str:
    """``'< 0.001'`` or ``'= 0.042'``."""
    return "< 0.001" if value < 0.001 else f"= {value:.3f}"


def _extremes(summary: BenchSummary, metric: str) -> str | None:
    valued = _valued(summary.overall, metric)
    if not valued:
        return None
    label = PHRASES[metric]
    top, bottom = max(e.value or 0.0 for e in valued.values()), min(
        e.value or 0.0 for e in valued.values())
    best = [m for m, e in valued.items() if e.value == top]
    text = f"{_names(best)} had the highest {label} ({estimate_text(valued[best[0]])})"
    rest = sorted(((m, e) for m, e in valued.items() if e.value != top),
                  key=lambda x: -(x[1].value or 0.0))
    if len(best) == 1 and rest:
        text += _versus(summary.comparisons, metric, best[0], rest[0])
    if top != bottom:
        worst = [m for m, e in valued.items() if e.value == bottom]
        text += f"; {_names(worst)} the lowest ({estimate_text(valued[worst[0]])})"
    return text + "."


def _headline(summary: BenchSummary) -> str | None:
    """The paper's headline: the range of responses not fully supported by their sources."""
    valued = _valued(summary.overall, "response_support")
    if not valued:
        return None
    unsupported = {m: 1 - (e.value or 0.0) for m, e in valued.items()}
    low, high = min(unsupported.values()), max(unsupported.values())
    who = {x: _names([m for m, v in unsupported.items() if v == x]) for x in (low, high)}
    if low == high:
        return (f"{percent(low)} of the responses of {who[low]} were not fully supported by "
                "the sources they cited.")
    return (f"Between {percent(low)} ({who[low]}) and {percent(high)} ({who[high]}) of a "
            "model's responses were not fully supported by the sources it cited.")


def _overview(summary: BenchSummary, records: RunRecords) -> str:
    n_questions = len(records.questions) or records.manifest.n_questions
    listed = ", ".join(f"{s} {k:,}" for s, k in source_counts(summary, records) if k)
    n_sources = len(summary.sources)
    source_word = "source" if n_sources == 1 else "sources"
    audited = sum(m.n_answers for m in summary.overall.values())
    return (f"Across {n_questions:,} questions from {n_sources} {source_word}"
            f"{f' ({listed})' if listed else ''}, "
            f"{len(summary.models)} model{'s' if len(summary.models) != 1 else ''} gave "
            f"{len(records.replies):,} replies, of which {audited:,} were audited.")


def _tests(comparisons: Sequence[Comparison]) -> list[str]:
    parts = []
    for key, _, _, _ in METRICS:
        items = [c for c in comparisons if c.metric == key]
        tested = [c for c in items if c.p_holm is not None]
        if not tested:
            continue
        k = len(significant(tested, ALPHA))
        untested = len(items) - len(tested)
        part = f"{k} of {len(tested)}{' testable' if untested else ''} in {PHRASES[key]}"
        if untested:
            part += f" ({untested} not testable: a model without a value)"
        parts.append(part)
    if not parts:
        return []
    return [f"Pairwise differences significant at {ALPHA:g} ({TEST_NAME}): "
            f"{'; '.join(parts)}."]


OUTCOME_WORDS = {
    "fallback": "gave no usable JSON source list (URLs taken from the text)",
    "no_sources": "cited no source",
    "refusal": "refused to answer",
    "empty": "came back empty after the retry",
    "error": "failed with a provider error",
}


def _model_outcomes(model: str, stats: ReplyStats) -> str | None:
    n = sum(v for s, v in stats.statuses.items() if s != MISSING_STATUS)
    counts = [(stats.statuses[s], w) for s, w in OUTCOME_WORDS.items() if stats.statuses.get(s)]
    parts = [f"{k:,} of {n:,} replies {w}" if i == 0 else f"{k:,} {w}"
             for i, (k, w) in enumerate(counts)]
    if stats.retried:
        parts.append(f"{stats.retried:,} needed the one retry")
    if stats.duplicate_urls:
        parts.append(f"{stats.duplicate_urls:,} repeated URL entries were counted, then removed")
    if stats.dropped_urls:
        parts.append(f"{stats.dropped_urls:,} unusable URL entries were counted, then dropped")
    if not counts and not stats.duplicate_urls and not stats.dropped_urls:
        return None
    return f"{model}: {_names(parts)}"


def _bad_input(replies: Mapping[str, ReplyStats]) -> str | None:
    lines = [x for m, s in replies.items() if (x := _model_outcomes(m, s))]
    sentences = ["Bad replies, per model: " + "; ".join(lines) + "."] if lines else []
    missing = sum(s.statuses.get(MISSING_STATUS, 0) for s in replies.values())
    if missing:
        sentences.append(f"{missing:,} model-question pairs have no reply yet.")
    return " ".join(sentences) or None


def _denominators(summary: BenchSummary) -> str | None:
    """Say which answers response-level support leaves out (those without statements)."""
    parts = [f"{r.answers_without_claims:,} of {m}'s {summary.overall[m].n_answers:,}"
             for m, r in summary.replies.items()
             if r.answers_without_claims and m in summary.overall]
    if not parts:
        return None
    return ("Response-level support counts answers with at least one statement; answers "
            f"without any (refusals, empty replies) are left out: {_names(parts)}.")


def _small(summary: BenchSummary) -> str | None:
    flagged = [f"{m}'s {PHRASES[key]} (n = {e.n:,} {unit})"
               for m, a in summary.overall.items() for key, _, unit, _ in METRICS
               if (e := getattr(a, key)).value is not None and e.n < SMALL_N]
    if not flagged:
        return None
    return f"Read with care, fewer than {SMALL_N} observations: {_names(flagged)}."


def _source_ranges(summary: BenchSummary, metric: str) -> str | None:
    parts = []
    for model, groups in summary.by_source.items():
        valued = {s: getattr(a, metric) for s, a in groups.items()
                  if getattr(a, metric).value is not None}
        if len(valued) < 2:
            continue
        low = min(valued, key=lambda s: valued[s].value or 0.0)
        high = max(valued, key=lambda s: valued[s].value or 0.0)
        if valued[low].value != valued[high].value:
            parts.append(f"{model} from {percent(valued[low].value)} ({low}, n = "
                         f"{valued[low].n:,}) to {percent(valued[high].value)} ({high}, "
                         f"n = {valued[high].n:,})")
    if not parts:
        return None
    return (f"By question source, {PHRASES[metric]} ranged: {'; '.join(parts)} "
            "(descriptive; no test across sources).")


def findings(summary: BenchSummary, records: RunRecords) -> list[str]:
    """The results paragraph, computed from the summary's numbers."""
    lines = [_overview(summary, records)]
    optional = [_headline(summary)]
    optional += [_extremes(summary, key) for key, _, _, _ in METRICS]
    optional += _tests(summary.comparisons)
    optional += [_source_ranges(summary, SOURCE_METRIC), _bad_input(summary.replies),
                 _denominators(summary), _small(summary)]
    lines += [x for x in optional if x]
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


MAX_EXAMPLE_CLAIMS = 8
EXAMPLE_CHARS = 600


@dataclass(frozen=True)
class ExampleSource:
    number: int
    url: str
    valid: bool
    reason: str | None


@dataclass(frozen=True)
class ExampleClaim:
    text: str
    verdict: str  # "supported", "not supported" or "unknown"
    supported_by: list[int]  # numbers of the sources that support it


@dataclass(frozen=True)
class Example:
    """One audited reply laid out like the paper's Fig. 3: question, answer, sources and
    each statement's verdict."""

    model: str
    question_id: str
    question_source: str
    question: str
    answer: str
    fully_supported: bool | None
    sources: list[ExampleSource]
    claims: list[ExampleClaim]
    more_claims: int


def _verdict(value: bool | None) -> str:
    return "unknown" if value is None else ("supported" if value else "not supported")


def _example(model: str, audit: AnswerAudit) -> Example:
    numbers = {src.id: n for n, src in enumerate(audit.answer.sources, 1)}
    sources = [ExampleSource(n, src.url or src.title or src.id, src.valid, src.reason)
               for n, src in enumerate(audit.answer.sources, 1)]
    claims = [ExampleClaim(c.claim.text, _verdict(c.supported),
                           sorted(numbers[i] for i in c.supporting_source_ids if i in numbers))
              for c in audit.claims[:MAX_EXAMPLE_CLAIMS]]
    origin = BenchOrigin.of(audit.answer)
    return Example(model=model, question_id=origin.text("question_id", audit.answer.id),
                   question_source=origin.text("question_source", ""),
                   question=audit.answer.question or "",
                   answer=shorten(audit.answer.text, EXAMPLE_CHARS),
                   fully_supported=answer_metrics(audit).response_support,
                   sources=sources, claims=claims,
                   more_claims=max(len(audit.claims) - MAX_EXAMPLE_CLAIMS, 0))


def examples(records: RunRecords) -> list[Example]:
    """One reply per model, as in Fig. 3: its first (by answer id) not fully supported
    reply when it has one (a failure, as in the paper's Supplementary Fig. 2), else its
    first reply with statements."""
    found = []
    for model, audits in records.audits_by_model().items():
        ordered = sorted((a for a in audits if a.claims), key=lambda a: a.answer.id)
        failed = [a for a in ordered if answer_metrics(a).response_support is False]
        chosen = (failed or ordered)[:1]
        found += [_example(model, a) for a in chosen]
    return found


def status_columns(replies: Mapping[str, ReplyStats]) -> list[str]:
    return list(dict.fromkeys(s for stats in replies.values() for s in stats.statuses))


def source_counts(summary: BenchSummary, records: RunRecords) -> list[tuple[str, int]]:
    """Questions per question source, in the summary's source order."""
    found = Counter(q.source for q in records.questions)
    return [(s, found.get(s, 0)) for s in summary.sources]


def domain_ranks(summary: BenchSummary, models: Sequence[str]) -> list[list[DomainCount | None]]:
    """The paper's Table 1: row ``i`` holds each model's ``i``-th most cited domain."""
    depth = max((len(summary.top_domains.get(m, [])) for m in models), default=0)
    return [[(summary.top_domains.get(m) or [])[i]
             if i < len(summary.top_domains.get(m) or []) else None for m in models]
            for i in range(depth)]


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


def warning_lines(summary: BenchSummary) -> list[str]:
    """The study's warnings (``notes["run_warnings"]``: support not measured, fetch
    outcomes that changed between attempts) and one line per changed URL."""
    warnings = [str(w) for w in summary.notes.get(RUN_WARNINGS, [])]
    changes = [FetchChange.model_validate(c) for c in summary.notes.get(FETCH_CHANGES, [])]
    return warnings + [line.strip() for line in fetch_change_lines(changes)[1:]]


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
        examples=examples(records),
        source_counts=source_counts(summary, records),
        domain_ranks=domain_ranks(summary, models),
        comparisons={key: [c for c in summary.comparisons if c.metric == key]
                     for key, _, _, _ in METRICS},
        statuses=status_columns(summary.replies),
        cost_total=cost_total(summary.cost),
        usage_total=total_usage(summary.audit_usage),
        audit_link=_audit_link(records),
        config=to_node(summary.config) if summary.config else None,
        notes=to_node(summary.notes) if summary.notes else None,
        warnings=warning_lines(summary),
        errors=summary.errors[:MAX_ERRORS],
        more_errors=max(len(summary.errors) - MAX_ERRORS, 0),
        alpha=ALPHA,
    )


def write_bench_html(path: str | os.PathLike[str], summary: BenchSummary,
                     records: RunRecords) -> Path:
    """Write the study's HTML page to ``path`` atomically; returns the path."""
    return atomic_write_text(path, render_bench_html(summary, records))
