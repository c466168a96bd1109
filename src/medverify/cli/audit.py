"""``medverify audit``: does each cited source support each statement (SourceCheckup)?"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from medverify.audit.inputs import read_audit
from medverify.audit.records import AnswerAudit, AuditInput, AuditSummary, Estimate
from medverify.audit.runner import ANSWERS_FILE, REPORT_FILE, SUMMARY_FILE, Auditor
from medverify.audit.urls import fetch_change_lines
from medverify.cli import main
from medverify.cli._common import (
    config_option,
    console,
    executor_option,
    load_config,
    progress_bar,
    store_option,
)
from medverify.cli._names import JUDGES, RegistryChoice
from medverify.config import Config
from medverify.errors import InputError
from medverify.executor import Executor, LocalExecutor, executor_from_spec
from medverify.kit import FlowKit
from medverify.report.view import counted_lines, percent


@main.command()
@click.argument("input_file", metavar="FILE.jsonl", type=click.Path(path_type=Path))
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
    help="Output directory: answers.jsonl, summary.json, report.html "
    "[default: ./audit-<FILE name without .jsonl>].",
)
@click.option("--offline", is_flag=True, help="Use only given texts and the fetch cache.")
@click.option(
    "--pairing", type=click.Choice(["all", "cited"]),
    help="Judge each claim against every valid source (all, default) or its cited ones.",
)
@click.option("--judge", type=RegistryChoice(JUDGES), help="Judge.")
@click.option("--model", "-m", help="Model spec for the llm/cascade judge, decomposition, cleanup.")
@click.option(
    "--allow", multiple=True, metavar="HOST[:PORT]",
    help="Let the fetcher reach this otherwise blocked host (repeatable; intranets, tests).",
)
@click.option("--cleanup", is_flag=True, help="SourceCleanup of unsupported statements (model).")
@click.option("--limit", type=click.IntRange(min=1), help="Audit only the first N answers.")
@click.option("--fresh", is_flag=True, help="Start over instead of resuming DIR/answers.jsonl.")
@click.option("--no-record", is_flag=True, help="Do not record the run in the run store.")
@executor_option("the answers are audited (fetched and judged) in chunks of 8")
@config_option
@store_option
def audit(
    input_file: Path,
    out_dir: Path | None,
    offline: bool,
    pairing: str | None,
    judge: str | None,
    model: str | None,
    allow: tuple[str, ...],
    cleanup: bool,
    limit: int | None,
    fresh: bool,
    no_record: bool,
    executor_spec: str,
    config_path: Path | None,
    store: Path | None,
) -> None:
    """Audit the citations of answers in FILE.jsonl: is each statement supported by the
    sources the answer cites? One JSON object per line: {"id", "question", "answer",
    "sources": [{"url", "text"?}], "claims"?: [{"text", "label"?}]} (see docs/audit.md).

    Exit status: 0 when the audit ran (per-answer problems are recorded in the outputs),
    1 when it ran but measured nothing (no answer has a source that statements could be
    checked against: support is "not measured", never 0 %), 2 when it could not run (bad
    input or config)."""
    fetch: dict[str, Any] = {"offline": True} if offline else {}
    config = load_config(
        config_path, model=model, judge=judge, store=store,
        fetch=fetch, audit={"pairing": pairing} if pairing else None,
    )
    if allow:
        config = _with_allowed(config, allow)
    inputs = _read(input_file)
    out_dir = out_dir or default_out_dir(input_file)
    executor = executor_from_spec(executor_spec)
    try:
        remote = connected_executor(executor)
        auditor = Auditor.from_config(
            config, out_dir=out_dir, fresh=fresh, cleanup=cleanup, limit=limit,
            kit=FlowKit(executor=remote, record=not no_record))
        auditor.input_path = str(input_file)
        audits, summary = asyncio.run(_run(auditor, inputs))
    finally:
        executor.close()
    _print_outcome(summary, audits, out_dir)


def _print_outcome(summary: AuditSummary, audits: list[AnswerAudit], out_dir: Path) -> None:
    """The summary, where the outputs are, and exit status 1 when nothing was measured."""
    print_audit_summary(summary, audits, Console())
    console.print(
        f"outputs: {out_dir / ANSWERS_FILE}, {out_dir / SUMMARY_FILE}, {out_dir / REPORT_FILE}"
    )
    if not summary.measured:
        console.print(Text(
            f"error: nothing was measured: {summary.overall.statement_support.reason}. "
            "Check that the input gives each answer its sources ('sources' or "
            "'attribution', see docs/audit.md) and that they can be read (online, or "
            "given texts / the fetch cache with --offline).", style="bold red"))
        raise SystemExit(EXIT_NOT_MEASURED)


def connected_executor(executor: Executor) -> Executor | None:
    """None for the local executor (the audit runs here, as without --executor); another
    executor connected now, so that a missing Ray or an unreachable cluster fails before
    anything is opened or audited."""
    if isinstance(executor, LocalExecutor):
        return None
    console.print(f"auditing on {executor.name} ({executor.slots} CPUs)")
    return executor


def default_out_dir(input_file: Path) -> Path:
    """``./audit-<name>`` for ``<name>.jsonl`` (``-`` and odd names fall back to ``audit``)."""
    stem = input_file.name.removesuffix(".jsonl").removesuffix(".json")
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in stem).strip("._")
    return Path(f"audit-{safe}" if safe else "audit")


def _with_allowed(config: Config, allow: tuple[str, ...]) -> Config:
    fetch = config.fetch.model_copy(update={"allow": [*config.fetch.allow, *allow]})
    return config.model_copy(update={"fetch": fetch})


def _read(path: Path) -> list[AuditInput]:
    if not path.is_file():
        raise InputError(f"no such file: {path}")
    inputs, warnings = read_audit(path.read_bytes(), source_name=str(path))
    for warning in warnings[:20]:
        console.print(Text(f"warning: {warning}", style="yellow"))
    if len(warnings) > 20:
        console.print(Text(f"... and {len(warnings) - 20} more warnings", style="yellow"))
    if not inputs:
        raise InputError(
            f"no answer to audit in {path}: expected JSON Lines with an 'answer' field "
            "on each line (see docs/audit.md)"
        )
    return inputs


async def _run(
    auditor: Auditor, inputs: list[AuditInput]
) -> tuple[list[AnswerAudit], AuditSummary]:
    total = min(len(inputs), auditor.limit or len(inputs))
    try:
        with progress_bar("auditing answers", total) as progress:
            auditor.progress = progress
            return await auditor.run(inputs)
    finally:
        await auditor.aclose()


EXIT_NOT_MEASURED = 1


def _estimate(estimate: Estimate) -> str | Text:
    if estimate.value is None:
        if estimate.reason:
            return Text(f"NOT MEASURED: {estimate.reason}", style="bold red")
        return f"n/a (n={estimate.n})"
    ci = f" [{percent(estimate.ci[0])}, {percent(estimate.ci[1])}]" if estimate.ci else ""
    return f"{percent(estimate.value)}{ci}  (n={estimate.n:,})"


def print_audit_summary(
    summary: AuditSummary, audits: list[AnswerAudit], out: Console
) -> None:
    """The headline numbers of an audit: metrics with 95 % CIs, invalid URL reasons,
    pairs judged, time, what was skipped."""
    overall = summary.overall
    table = Table(
        title=f"Citation audit: {overall.n_answers:,} answers, {overall.n_claims:,} claims, "
        f"{overall.n_urls:,} URLs (pairing: {summary.pairing}, judge: {summary.judge})",
        title_justify="left",
    )
    table.add_column("metric")
    table.add_column("value [95% CI]")
    table.add_row("source URL validity", _estimate(overall.url_validity))
    table.add_row("statement-level support", _estimate(overall.statement_support))
    table.add_row("response-level support", _estimate(overall.response_support))
    table.add_row("sources supporting no statement", _estimate(overall.unused_sources))
    out.print(table)
    for line in _summary_lines(summary, audits):
        out.print(Text(line))
    for line in _warning_lines(summary):
        out.print(Text(line, style="bold yellow"))


def _warning_lines(summary: AuditSummary) -> list[str]:
    """The summary's warnings, and each changed fetch outcome (see ``fetch_changes``)."""
    lines = [f"WARNING: {w}" for w in summary.warnings]
    changes = fetch_change_lines(summary.fetch_changes)
    return lines + changes[1:]


def _summary_lines(summary: AuditSummary, audits: list[AnswerAudit]) -> list[str]:
    overall, notes = summary.overall, summary.notes
    reasons = ", ".join(f"{k} {v:,}" for k, v in overall.invalid_reasons.items()) or "none"
    lines = [
        f"invalid URL reasons: {reasons}",
        f"pairs judged: {overall.n_pairs:,} ({overall.n_pair_errors:,} failed); "
        + (f"claims scored: {overall.n_scored_claims:,} of {overall.n_claims:,}"
           if summary.measured else f"claims scored: none of {overall.n_claims:,}"),
    ]
    if notes.get("token_ratio") is not None:
        lines.append(
            f"judge input: {notes['judge_input_tokens']:,} tokens with passage selection vs "
            f"{notes['whole_source_tokens']:,} whole-source ({notes['token_ratio']:.2f}x)"
        )
    if summary.cleanup:
        lines.append("cleanup: " + ", ".join(f"{k} {v}" for k, v in summary.cleanup.items()))
    lines.extend(error_cause_lines(audits))
    lines.append(f"time: {notes.get('wall_s', 0):.1f} s (resumed: {notes.get('resumed', 0)})")
    lines.extend(f"skipped: {item}" for item in summary.skipped)
    return lines


def error_cause_lines(audits: list[AnswerAudit]) -> list[str]:
    """Each distinct cause of answer errors and of claim-source pairs the judge failed on,
    once, with its count (also in answers.jsonl, but a user reads the terminal first)."""
    answers = Counter(cause for audit in audits for cause in audit.errors)
    pairs = Counter(
        " ".join(pair.verdict.error.split())
        for audit in audits for claim in audit.claims for pair in claim.pairs
        if pair.verdict.error
    )
    return counted_lines("answer errors", answers) + counted_lines("pairs not judged", pairs)

