"""A report summary for the terminal (rich)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from medverify.records import Category, ClaimResult, Decision, Report
from medverify.report.metrics import not_sure_counts
from medverify.report.view import (
    CATEGORY_STYLES,
    category_count_text,
    confidence_note,
    counted_lines,
    deciding_passage,
    evidence_not_counted,
    finding_effect,
    findings,
    not_sure_reason,
    other_warnings,
    percent,
    score_text,
    shorten,
    support_word,
    total_usage,
)
from medverify.text import printable

CLAIM_WIDTH = 100
EVIDENCE_WIDTH = 40
REASON_WIDTH = 160
NOT_SURE_STYLE = "bold yellow"

DECISION_STYLES: dict[Decision, tuple[str, str]] = {
    # decision: (symbol, rich style); the word is always printed too, never colour alone
    Decision.ACCEPT: ("✓", "green"),
    Decision.FLAG: ("⚠", "bold yellow"),
    Decision.ESCALATE: ("⇧", "bold red"),
}


def _category_cell(result: ClaimResult) -> Text:
    """The category and, under it, ``? NOT SURE`` or the confidence of a confident verdict."""
    style = CATEGORY_STYLES[result.category]
    cell = Text(f"{style.symbol} {result.category.value}", style=style.rich)
    if not_sure_reason(result) is not None:
        cell.append("\n? NOT SURE", style=NOT_SURE_STYLE)
    elif (note := confidence_note(result)) is not None:
        cell.append(f"\n{note}", style="dim")
    return cell


def _claim_cell(result: ClaimResult) -> Text:
    """The claim's text, then why it is not sure and each exact-check finding."""
    cell = Text(shorten(printable(result.claim.text), CLAIM_WIDTH))
    reason = not_sure_reason(result)
    if reason is not None:
        cell.append(f"\nnot sure: {shorten(reason, REASON_WIDTH)}", style="yellow")
    for finding in findings(result):
        cell.append(f"\n⚑ {finding.kind.value} ({finding_effect(finding)}): "
                    f"{shorten(finding.reason, REASON_WIDTH)}", style="yellow")
    return cell


def _evidence_cell(result: ClaimResult) -> Text:
    if result.category == Category.ERROR:
        return Text(shorten(printable(result.error or "no cause recorded"), EVIDENCE_WIDTH),
                    style="magenta")
    passage = deciding_passage(result)
    if passage is not None:
        name = printable(f"{passage.doc_id} · {passage.title or passage.id}")
        cell = Text(shorten(name, EVIDENCE_WIDTH))
    else:
        cell = Text(printable(result.evidence_passage_id or "—"), style="dim")
    if evidence_not_counted(result):
        cell.append(" (judge evidence not counted)", style="yellow")
    return cell


def _decision_cell(result: ClaimResult) -> Text:
    """The arbitration decision and the rule that fired (— when arbitration did not run)."""
    if result.arbitration is None:
        return Text("—", style="dim")
    symbol, style = DECISION_STYLES[result.arbitration.decision]
    cell = Text(f"{symbol} {result.arbitration.decision.value}", style=style)
    cell.append(f"\n{result.arbitration.rule}", style="dim")
    reviewed = result.arbitration.reviewed
    if reviewed is not None:  # a clinician's label settled it
        cell.append(f" by {reviewed.reviewer}, {reviewed.reviewed_at:%Y-%m-%d}", style="dim")
    return cell


def claims_table(report: Report) -> Table:
    """One row per claim: id, category, score, the arbitration decision (when any claim has
    one), claim text, deciding evidence."""
    decided = any(r.arbitration is not None for r in report.results)
    table = Table(title="Claims", title_justify="left", show_lines=False, expand=False)
    table.add_column("id", style="bold", no_wrap=True)
    table.add_column("category", no_wrap=True)
    table.add_column("score", justify="right", no_wrap=True)
    if decided:
        table.add_column("decision", no_wrap=True)
    table.add_column("claim", overflow="fold", ratio=3)
    table.add_column("evidence / error", overflow="fold", ratio=2)
    for result in report.results:  # untrusted text: Text cells, never console markup
        table.add_row(
            Text(result.claim.id),
            _category_cell(result),
            Text("—" if result.category == Category.ERROR else score_text(result)),
            *([_decision_cell(result)] if decided else []),
            _claim_cell(result),
            _evidence_cell(result),
        )
    return table


def summary_lines(report: Report) -> list[Text]:
    """The summary under the table: support, counts, errors, tokens per stage."""
    m = report.metrics
    support = support_word(m.response_support)
    support_style = {"supported": "bold green", "not supported": "bold red"}.get(support, "bold")
    lines = [
        Text.assemble(
            "Statement-level support: ",
            (percent(m.statement_support), "bold"),
            f" ({m.counts.get(Category.FACT.value, 0)} of {m.n_scored} scored claims are FACT)",
        ),
        Text.assemble("Response-level support: ", (support, support_style)),
        Text.assemble(
            "Mean score: ", ("n/a" if m.mean_score is None else f"{m.mean_score:.2f}", "bold")
        ),
        _counts_line(report),
        *_confidence_legend(report),
        *_decisions_line(report),
        Text.assemble(
            "Errors: ",
            (str(m.n_errors), "bold magenta" if m.n_errors else "bold"),
            f" of {m.n_claims} claims not scored"
            + (f"; {len(report.errors)} run errors" if report.errors else ""),
        ),
    ]
    lines.extend(_usage_lines(report))
    lines.extend(_note_lines(report))
    return lines


def _note_lines(report: Report) -> list[Text]:
    """One line per stage note that carries a human summary (e.g. the cascade's savings)."""
    return [
        Text(f"{stage}: {note['summary']}")
        for stage, note in report.notes.items()
        if isinstance(note, dict) and isinstance(note.get("summary"), str)
    ]


def _counts_line(report: Report) -> Text:
    """``Counts: FACT 3 (1 confident, 2 not sure), ...``: confident and not-sure verdicts per
    category once the verdicts were assessed."""
    m, unsure = report.metrics, not_sure_counts(report.results)
    text = Text("Counts: ")
    for index, (category, style) in enumerate(CATEGORY_STYLES.items()):
        if index:
            text.append(", ")
        text.append(category_count_text(category, m.counts, m.confident, unsure),
                    style=style.rich)
    return text


def _confidence_legend(report: Report) -> list[Text]:
    """What the percentage beside ``confident`` is, once, when a claim shows one."""
    if not any(r.confident is True and r.confidence is not None for r in report.results):
        return []
    return [Text("confident, N%: the verdict's calibrated confidence, the probability that "
                 "its category is right", style="dim")]


def _decisions_line(report: Report) -> list[Text]:
    """``Decisions: ACCEPT n, FLAG n, ESCALATE n (policy id)``; nothing without decisions."""
    decisions = report.metrics.decisions
    if not decisions:
        return []
    text = Text("Decisions: ")
    for index, (decision, (symbol, style)) in enumerate(DECISION_STYLES.items()):
        if index:
            text.append(", ")
        text.append(f"{symbol} {decision.value} {decisions.get(decision.value, 0)}", style=style)
    policies = sorted({r.arbitration.policy for r in report.results if r.arbitration})
    if policies:
        text.append(f" (policy {', '.join(policies)})", style="dim")
    return [text]


def _usage_lines(report: Report) -> list[Text]:
    if not report.usage:
        return [Text("Tokens: no model calls recorded", style="dim")]
    lines = [Text("Tokens per stage:")]
    rows = [*report.usage.items(), ("all stages", total_usage(report.usage))]
    for stage, usage in rows:
        lines.append(
            Text(
                f"  {stage}: {usage.prompt_tokens:,} prompt"
                f" + {usage.completion_tokens:,} completion tokens"
                f" in {usage.calls} calls ({usage.cached_calls} cached)",
                style="bold" if stage == "all stages" else "",
            )
        )
    return lines


def print_summary(report: Report, console: Console | None = None, *, causes: bool = True) -> None:
    """Print the claims table and the summary lines to ``console`` (stdout by default),
    then (with ``causes``) each distinct error cause once; a batch prints its causes once
    at the end instead (:func:`print_causes`).

    All text from the report is printed as plain text, never parsed as rich markup.
    """
    console = console or Console()
    if report.answer.question:
        console.print(Text.assemble(("Question: ", "bold"), report.answer.question))
    if report.results:
        console.print(claims_table(report))
    elif report.errors:
        console.print(Text("No claims were checked: the run failed (causes below).",
                           style="bold magenta"))
    else:
        console.print(Text("No claims were extracted from this answer.", style="dim"))
    for line in summary_lines(report):
        console.print(line)
    if causes:
        for line in cause_lines([report]):
            console.print(line)


def print_causes(reports: Sequence[Report], console: Console | None = None) -> None:
    """Each distinct error cause of a batch of reports, once, with its count."""
    lines = cause_lines(reports)
    if not lines:
        return
    console = console or Console()
    failed = sum(1 for r in reports if r.errors or r.metrics.n_errors)
    console.print(Text(f"Across {len(reports)} answers ({failed} with errors):", style="bold"))
    for line in lines:
        console.print(line)


def error_causes(reports: Sequence[Report]) -> tuple[Counter[str], Counter[str]]:
    """How often each distinct cause of a run error and of an ERROR claim occurred."""
    run = Counter(cause for report in reports for cause in report.errors)
    claims = Counter(
        result.error or (result.verdict.error if result.verdict else None) or "no cause recorded"
        for report in reports
        for result in report.results
        if result.category == Category.ERROR
    )
    return run, claims


def cause_lines(reports: Sequence[Report]) -> list[Text]:
    """One line per distinct error cause (run errors, then claim errors, then warnings about
    judge evidence that was not counted), each printed once with its count."""
    run, claims = error_causes(reports)
    warnings = Counter(w for report in reports for r in report.results for w in _uncounted(r))
    lines: list[Text] = []
    for title, causes, style in (
        ("Run errors", run, "bold magenta"),
        ("Claim errors", claims, "bold magenta"),
        ("Not counted", warnings, "bold yellow"),
    ):
        found = counted_lines(title, causes)
        lines += [Text(line, style=style if n == 0 else "") for n, line in enumerate(found)]
    return lines


def _uncounted(result: ClaimResult) -> list[str]:
    """The claim's judge evidence that was not counted: unverified quotes, and supports an
    exact check vetoed (a finding without veto only makes the verdict not sure)."""
    vetoes = [f"{f.reason} ({finding_effect(f)})" for f in findings(result) if f.veto]
    return other_warnings(result) + vetoes
