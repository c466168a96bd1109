"""What ``medverify bench run`` and ``bench report`` print: a study's metrics per model with
their 95 % CIs, reply outcomes, tokens and cost, the judge's agreement with human labels,
and each distinct cause of the study's errors once.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from medverify.bench.records import BenchSummary
from medverify.report.view import percent, shorten

if TYPE_CHECKING:
    from medverify.audit.evaluate import AgreementScores
    from medverify.audit.records import Estimate


def _estimate(estimate: Estimate) -> str | Text:
    """``97.5%`` and its 95 % CI below it, so the table fits 80 columns."""
    if estimate.value is None:
        return Text("NOT\nMEASURED", style="bold red") if estimate.reason else "n/a"
    ci = f"\n[{percent(estimate.ci[0])}-{percent(estimate.ci[1])}]" if estimate.ci else ""
    return f"{percent(estimate.value)}{ci}"


def print_bench_summary(summary: BenchSummary, out: Console) -> None:
    """Metrics per model with 95 % CIs, reply outcomes, and tokens/cost per model."""
    table = Table(title=f"Study {summary.run_id}: {len(summary.models)} models, "
                  f"sources: {', '.join(summary.sources) or 'n/a'} (judge: {summary.judge})",
                  title_justify="left")
    table.add_column("model", no_wrap=True, overflow="fold")
    for column in ("answers", "URL validity", "statement support", "response support",
                   "unused sources"):
        table.add_column(column, justify="right")
    for entry in summary.models:
        m = summary.overall.get(entry.label)
        if m is None:
            continue
        table.add_row(entry.label, f"{m.n_answers:,}", _estimate(m.url_validity),
                      _estimate(m.statement_support), _estimate(m.response_support),
                      _estimate(m.unused_sources))
    out.print(table)
    _print_replies(summary, out)
    _print_cost(summary, out)
    testable = [c for c in summary.comparisons if c.p_holm is not None]
    significant = [c for c in testable if c.p_holm is not None and c.p_holm < 0.05]
    out.print(f"pairwise comparisons: {len(significant)} of {len(testable)} testable "
              f"significant at 0.05 (paired permutation test, Holm-adjusted; "
              f"{len(summary.comparisons) - len(testable)} without a value for both)")
    if summary.agreement is not None:
        print_agreement(summary.agreement, summary.agreement_by_model, out)
    from medverify.bench.report import warning_lines

    for line in warning_lines(summary):
        out.print(Text(f"WARNING: {line}", style="bold yellow"))
    for line in error_cause_lines(summary.errors):
        out.print(Text(line, style="red"))


def error_cause_lines(errors: list[str]) -> list[str]:
    """Each distinct cause of the study's errors once ("WHERE: cause" strings grouped by
    cause), with its count and the first place it happened."""
    first: dict[str, str] = {}
    causes: Counter[str] = Counter()
    for error in errors:
        where, _, cause = error.partition(": ")
        cause = " ".join((cause or where).split())
        causes[cause] += 1
        first.setdefault(cause, where if cause != where else "")
    if not causes:
        return []
    lines = [f"errors ({len(errors):,}; all in summary.json):"]
    for cause, n in causes.most_common():
        count = f"{n:,} × " if n > 1 else ""
        where = f" (first: {first[cause]})" if first[cause] else ""
        lines.append(f"  {count}{shorten(cause, 300)}{where}")
    return lines


def _print_replies(summary: BenchSummary, out: Console) -> None:
    table = Table(title="Replies", title_justify="left")
    for column in ("model", "outcomes", "retried", "duplicate URLs", "dropped URLs",
                   "URLs/answer"):
        table.add_column(column)
    for label, stats in summary.replies.items():
        outcomes = ", ".join(f"{k} {v:,}" for k, v in stats.statuses.items() if v)
        per = f"{stats.urls_per_answer:.1f}" if stats.urls_per_answer is not None else "n/a"
        table.add_row(label, outcomes, f"{stats.retried:,}", f"{stats.duplicate_urls:,}",
                      f"{stats.dropped_urls:,}", per)
    out.print(table)


def _print_cost(summary: BenchSummary, out: Console) -> None:
    table = Table(title="Tokens and cost of the models under test", title_justify="left")
    for column in ("model", "calls", "cached", "prompt tokens", "completion tokens", "cost"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for label, cost in summary.cost.items():
        price = f"${cost.cost_usd:,.4f}" if cost.cost_usd is not None else "no price set"
        mark = " (est.)" if cost.estimated else ""
        table.add_row(label, f"{cost.calls:,}", f"{cost.cached_calls:,}",
                      f"{cost.prompt_tokens:,}{mark}", f"{cost.completion_tokens:,}{mark}",
                      price)
    out.print(table)
    judge = sum((u.prompt_tokens + u.completion_tokens) for u in summary.audit_usage.values())
    if judge:
        out.print(f"audit (statement parsing, judging) tokens: {judge:,}")


def print_agreement(overall: AgreementScores | None, by_model: dict[str, AgreementScores],
                    out: Console) -> None:
    if overall is None:
        out.print("judge agreement: no human labels imported yet")
        return
    table = Table(title="Judge vs human labels (claim-source pairs)", title_justify="left")
    for column in ("set", "n", "agreement", "Cohen's kappa", "balanced accuracy"):
        table.add_column(column)
    rows = [("all", overall), *by_model.items()]
    for name, scores in rows:
        table.add_row(name, f"{scores.n:,}", _estimate(scores.agreement),
                      _kappa(scores.kappa), _estimate(scores.balanced_accuracy))
    out.print(table)


def _kappa(estimate: Estimate) -> str:
    if estimate.value is None:
        return "n/a"
    ci = f" [{estimate.ci[0]:.2f}, {estimate.ci[1]:.2f}]" if estimate.ci else ""
    return f"{estimate.value:.2f}{ci}"
