"""``medverify trials``: CHECK's clinical-trial study over ClinicalTrials.gov records.

    medverify trials summary RECORD.json                 # the curated 15-section summary
    medverify trials study DATA... --models A=SPEC,B=SPEC --sample 100 --out RUN
    medverify trials report RUN                          # recompute, no model called
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from medverify.cli import main
from medverify.cli._common import config_option, console, load_config, store_option
from medverify.cli._names import JUDGES, RegistryChoice
from medverify.errors import InputError
from medverify.kit import FlowKit


@main.group("trials")
def trials_group() -> None:
    """Clinical-trial registry records: curated summaries and CHECK's 15-question study."""


def _split(values: tuple[str, ...]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _numbers(text: str | None) -> list[int] | None:
    """``1-3,9`` -> [1, 2, 3, 9]."""
    if not text:
        return None
    out: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.strip().partition("-")
            out += list(range(int(low), int(high or low) + 1))
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected numbers and ranges such as 1-3,9") \
            from None
    return out


@trials_group.command("summary")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--nct", "nct_ids", multiple=True, help="Only these NCT ids (repeatable).")
@click.option("--pointers", is_flag=True, help="Show each sentence's registry field pointers.")
@click.option("--json", "as_json", is_flag=True, help="Print the summaries as JSON lines.")
def summary_command(paths: tuple[Path, ...], nct_ids: tuple[str, ...], pointers: bool,
                    as_json: bool) -> None:
    """Print the curated 15-section summary of each registry record in PATHS (API v2 JSON
    files, JSONL, directories, bulk zips); records the reader cannot use are reported."""
    from medverify.trials.curate import curate
    from medverify.trials.reader import ReadReport, iter_studies

    report = ReadReport()
    shown = 0
    for study in iter_studies(list(paths), report=report):
        if nct_ids and study.nct_id not in nct_ids:
            continue
        summary = curate(study.data)
        shown += 1
        if as_json:
            click.echo(summary.model_dump_json())
            continue
        click.echo(f"# {summary.nct_id}: {summary.title}")
        for number, section in enumerate(summary.sections, 1):
            click.echo(f"\n{number}. {section.name}")
            for sentence in section.sentences:
                click.echo(f"   {sentence.text}")
                if pointers and sentence.pointers:
                    click.echo("      <- " + ", ".join(sentence.pointers))
        click.echo("")
    _print_read_problems(report)
    if not shown:
        raise InputError("no registry record found" + (" with those NCT ids" if nct_ids else ""))


def _print_read_problems(report: Any) -> None:
    if report is None:
        return
    for kind, count in sorted(report.problems.items()):
        console.print(f"[yellow]{count} record(s) skipped or repaired: {kind}[/]")
        for example in report.examples.get(kind, [])[:3]:
            console.print(f"  {example}")
    if report.duplicates:
        console.print(f"[yellow]{report.duplicates} duplicated NCT id(s): the first record "
                      "of each was kept[/]")


@trials_group.command("study")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--models", "-m", "models", multiple=True, required=True,
              metavar="[LABEL=]SPEC,...", help="Models under test (comma-separated or repeated).")
@click.option("--out", "run_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Run directory (created; an existing one is resumed).")
@click.option("--contexts", default="title,json,summary", show_default=True,
              help="Contexts the models are shown: title, json (the registry record), "
              "summary (the curated summary).")
@click.option("--levels", default="paragraph,sentence,claim", show_default=True,
              help="Granularities the answers are judged at.")
@click.option("--questions", "question_numbers", metavar="1-15",
              help="Ask only these of the 15 questions, e.g. 1-3,9.")
@click.option("--condition", help="Keep trials whose conditions, keywords or title contain "
              "this text (case-insensitive), e.g. cancer.")
@click.option("--results-only/--any-results", default=True, show_default=True,
              help="Keep only trials with posted results (as the paper did).")
@click.option("--sample", type=click.IntRange(1), help="A seeded sample of N trials.")
@click.option("--seed", default=0, show_default=True, help="Seed of the sample.")
@click.option("--judge", type=RegistryChoice(JUDGES),
              help="Judge [default: llm with --judge-model, else builtin].")
@click.option("--judge-model", help="Model spec of the judge and the claim decomposer.")
@click.option("--fresh", is_flag=True, help="Start over instead of resuming RUN.")
@click.option("--no-record", is_flag=True, help="Do not record the run in the run store.")
@config_option
@store_option
def study_command(paths: tuple[Path, ...], models: tuple[str, ...], run_dir: Path,
                  contexts: str, levels: str, question_numbers: str | None,
                  condition: str | None, results_only: bool, sample: int | None, seed: int,
                  judge: str | None, judge_model: str | None, fresh: bool, no_record: bool,
                  config_path: Path | None, store: Path | None) -> None:
    """Ask every model CHECK's 15 questions about every selected trial under each context,
    judge the answers against the trials' curated summaries at each level, and write the
    report (RUN/report.md, RUN/summary.json, charts).

    Resumable: rerun the same command after a crash or Ctrl-C; finished answers and
    judgments are kept, failed model calls are asked again. Exit status 1 when no unit
    could be scored, 2 when the study cannot start."""
    from medverify.study.questions import questions_by_number
    from medverify.study.runner import TrialStudy
    from medverify.study.selection import select_trials

    config = load_config(config_path, model=judge_model, judge=judge, store=store)
    try:
        questions = questions_by_number(_numbers(question_numbers))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--questions") from None
    trials, selection, report = select_trials(
        list(paths), condition=condition, results_only=results_only, sample=sample,
        seed=seed, run_dir=None if fresh else run_dir)
    _print_read_problems(report)
    console.print(f"{len(trials)} trials" + (" (from the run directory)" if report is None
                                              else ""))

    async def go() -> dict[str, Any]:
        study = TrialStudy.from_config(
            config, models=_split(models), run_dir=run_dir, contexts=_split((contexts,)),
            granularities=_split((levels,)), questions=questions, fresh=fresh,
            kit=FlowKit(record=not no_record))
        for warning in study.judge_warnings:
            console.print(f"[bold yellow]warning: {escape(warning)}[/]")
        with _progress() as update:
            study.progress = update
            async with study:
                return await study.run(trials, selection=selection)

    try:
        summary = asyncio.run(go())
    except ValueError as exc:  # an unknown context or level name
        raise click.BadParameter(str(exc)) from None
    print_study(summary, Console())
    console.print(f"report: {run_dir / 'report.md'}; summary: {run_dir / 'summary.json'}")
    _exit_if_nothing_scored(summary)


@contextmanager
def _progress() -> Iterator[Callable[[str, int, int], None]]:
    """Progress bars on stderr: one for asking, one for judging."""
    from medverify.cli.bench import _bars

    with _bars() as bar:
        made: dict[str, Callable[..., None]] = {}

        def update(name: str, done: int, total: int) -> None:
            if name not in made:
                made[name] = bar("asking" if name == "ask" else "judging")
            made[name](done, total)

        yield update


@trials_group.command("report")
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path, file_okay=False))
@config_option
def report_command(run_dir: Path, config_path: Path | None) -> None:
    """Recompute RUN's tables, CIs and charts from its stored answers and judgments (no
    model is called) and print the headline table."""
    from medverify.study.report import finish

    if not (run_dir / "run.json").is_file():
        raise InputError(f"{run_dir} is not a trial study run directory (no run.json)")
    summary = finish(run_dir, load_config(config_path))
    print_study(summary, Console())
    console.print(f"report: {run_dir / 'report.md'}")
    _exit_if_nothing_scored(summary)


def print_study(summary: dict[str, Any], out: Console) -> None:
    """The label distribution per model, context and level (the paper's Table 1)."""
    from medverify.study.report import LABELS, SCORED, pct

    table = Table(title=f"{summary['n_trials']} trials x {summary['n_questions']} questions, "
                  f"judge {summary['judge']}", title_justify="left")
    for column in ("model", "context", "level", *LABELS.values(), "scored", "unscored"):
        table.add_column(column, justify="left" if column in ("model", "context", "level")
                         else "right")
    for row in summary["rates"]:
        table.add_row(row["model"], row["context"], row["granularity"],
                      *(pct(row["categories"][c.value], ci=False) for c in SCORED),
                      str(row["units_scored"]), str(row["units_unscored"]))
    out.print(table)
    for warning in summary.get("warnings", [])[:5]:
        console.print(f"[yellow]warning: {escape(warning)}[/]")


def _exit_if_nothing_scored(summary: dict[str, Any]) -> None:
    if any(row["units_scored"] for row in summary["rates"]):
        return
    console.print("[bold red]error: no answer unit could be scored (see the answers table "
                  "in the report): nothing was measured[/]")
    raise SystemExit(1)

