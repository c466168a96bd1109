"""``medverify eval audit`` and ``eval factcheck``: a flow's saved outputs scored against
labels (agreement with annotators, fact-level confusion and scores)."""

from __future__ import annotations

from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from medverify.audit.evaluate import AgreementScores, AuditEvaluation, evaluate_audit
from medverify.audit.records import Estimate
from medverify.cli._common import (
    config_option,
    console,
    json_out_option,
    load_config,
)
from medverify.cli.eval import _num, eval_group
from medverify.factcheck.evaluate import evaluate as evaluate_factcheck
from medverify.factcheck.evaluate import read_fact_labels, read_ratings, read_reports
from medverify.factcheck.records import FactCheckScores
from medverify.files import atomic_write_text


@eval_group.command("audit")
@click.argument("out_dir", metavar="DIR", type=click.Path(path_type=Path))
@click.option(
    "--by",
    default="system",
    show_default=True,
    help="Answer field to break the scores down by (an input field such as system).",
)
@json_out_option("Write the full result (confusion matrices included) as JSON here.")
@config_option
def audit(out_dir: Path, by: str, json_out: Path | None, config_path: Path | None) -> None:
    """Agreement of a citation audit (DIR of `medverify audit --out DIR`) with the gold
    claim labels: balanced accuracy, agreement and Cohen's kappa with bootstrap CIs."""
    config = load_config(config_path)
    result = evaluate_audit(
        out_dir, by=by or None, n_boot=config.audit.bootstrap, seed=config.audit.seed
    )
    if json_out is not None:
        atomic_write_text(json_out, result.model_dump_json(indent=2) + "\n")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    out = Console()
    out.print(audit_table(result))
    out.print(audit_confusion_table(result.overall))
    if json_out is not None:
        console.print(f"JSON result: {json_out}")


def _estimate(estimate: Estimate) -> str:
    if estimate.value is None:
        return "—"
    ci = f"\n{estimate.ci[0]:.2f}–{estimate.ci[1]:.2f}" if estimate.ci else ""
    return f"{estimate.value:.3f}{ci}"


def audit_table(result: AuditEvaluation) -> Table:
    """One row for all claims, then one per value of the breakdown field."""
    title = f"Audit vs gold labels: {result.n_gold} labelled claims in {result.n_answers} answers"
    caption = (
        "unsc.: unscored (judge failed); S: share SUPPORTED by gold labels / by the audit; "
        "under each score its 95 % bootstrap CI (resampling claims)"
    )
    table = Table(
        title=title,
        title_justify="left",
        caption=caption,
        caption_justify="left",
        box=box.SIMPLE_HEAD,
    )
    table.add_column(result.by or "claims", overflow="fold")
    for name in ("n", "unsc.", "S gold/pred", "bal. acc", "agreement", "kappa"):
        table.add_column(name, justify="right", no_wrap=True)
    rows = [("all", result.overall), ("with a valid source", result.with_source),
            *result.breakdown.items()]
    for name, scores in rows:
        table.add_row(Text(name), *_audit_cells(scores), style="bold" if name == "all" else "")
    return table


def _audit_cells(scores: AgreementScores) -> list[str]:
    return [
        str(scores.n),
        str(scores.n_unscored),
        f"{_rate(scores.gold_supported_rate)}/{_rate(scores.predicted_supported_rate)}",
        _estimate(scores.balanced_accuracy),
        _estimate(scores.agreement),
        _estimate(scores.kappa),
    ]


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def audit_confusion_table(scores: AgreementScores) -> Table:
    """Gold labels in rows, the audit's prediction in columns."""
    table = Table(title="all claims: gold (rows) x audit (columns)", title_justify="left")
    table.add_column("gold")
    columns = list(next(iter(scores.confusion.values()), {}))
    for column in columns:
        table.add_column(column, justify="right")
    for gold, row in scores.confusion.items():
        table.add_row(gold, *(str(row.get(c, 0)) for c in columns))
    return table


@eval_group.command("factcheck")
@click.argument("reports_path", metavar="REPORTS.json|DIR",
                type=click.Path(exists=True, path_type=Path))
@click.option("--labels", "labels_path", required=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Human fact labels (JSONL, JSON or CSV): answer_id or question, fact, "
              "label (true/false).")
@click.option("--ratings", "ratings_path",
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Answer ratings (JSONL, JSON or CSV): answer_id and rating "
              "(improved/equal/worse), or initial and final scores.")
@json_out_option("Write the full result as JSON here.")
@config_option
def factcheck(reports_path: Path, labels_path: Path, ratings_path: Path | None,
              json_out: Path | None, config_path: Path | None) -> None:
    """Hallucination detection of `medverify factcheck` reports against human fact labels:
    confusion matrix with FALSE as the positive class (FALSE and UNVERIFIABLE verdicts
    count as predicted false, ERROR is unscored), sensitivity, specificity, PPV, F1 and
    balanced accuracy with 95 % bootstrap CIs; with --ratings, improved/equal/worse."""
    config = load_config(config_path)
    ratings = read_ratings(ratings_path) if ratings_path is not None else None
    result = evaluate_factcheck(read_reports(reports_path), read_fact_labels(labels_path), ratings,
                      n_boot=config.audit.bootstrap, seed=config.audit.seed)
    if json_out is not None:
        atomic_write_text(json_out, result.model_dump_json(indent=2) + "\n")
    for line in result.unmatched:
        console.print(Text(f"warning: unmatched label, {line}", style="yellow"))
    out = Console()
    out.print(Text(f"{result.n_matched} of {result.n_labels} labels matched facts of "
                   f"{result.n_reports} reports ({result.n_facts} facts)"))
    out.print(factcheck_confusion_table(result.scores))
    out.print(factcheck_scores_table(result.scores, result.intervals))
    if result.ratings is not None:
        r = result.ratings
        out.print(Text(f"Answer ratings (n={r.n}): improved {r.improved}, equal {r.equal}, "
                       f"worse {r.worse}"))
    if json_out is not None:
        console.print(f"JSON result: {json_out}")


def factcheck_confusion_table(scores: FactCheckScores) -> Table:
    """Human labels in rows, the initial verdicts in columns (FALSE is positive)."""
    table = Table(title=f"human (rows) x initial verdict (columns); {scores.n_unscored} "
                  "unscored (ERROR)", title_justify="left")
    table.add_column("human")
    table.add_column("predicted FALSE", justify="right")
    table.add_column("predicted TRUE", justify="right")
    table.add_row("false", f"TP {scores.tp}", f"FN {scores.fn}")
    table.add_row("true", f"FP {scores.fp}", f"TN {scores.tn}")
    return table


def factcheck_scores_table(scores: FactCheckScores,
                           intervals: dict[str, tuple[float, float]]) -> Table:
    """Each score with its 95 % bootstrap interval (— when undefined)."""
    table = Table(title=f"Detection scores (n={scores.n})", title_justify="left",
                  box=box.SIMPLE_HEAD)
    table.add_column("score")
    table.add_column("value", justify="right")
    table.add_column("95 % CI", justify="right")
    for name in ("sensitivity", "specificity", "ppv", "f1", "balanced_accuracy"):
        ci = intervals.get(name)
        table.add_row(name.replace("_", " "), _num(getattr(scores, name)),
                      f"{ci[0]:.3f}–{ci[1]:.3f}" if ci else "—")
    return table
