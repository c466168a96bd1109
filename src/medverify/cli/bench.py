"""``medverify bench``: a SourceCheckup study of many models on many medical questions.

    medverify bench questions import FILE... --out questions.jsonl
    medverify bench questions generate DOCS... --model SPEC --source NAME --out questions.jsonl
    medverify bench run --models SPEC[,SPEC...] --questions questions.jsonl --out RUN
    medverify bench report RUN
    medverify bench labels export RUN --n 200
    medverify bench labels import RUN labels.csv
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from medverify.bench.layout import RunLayout
from medverify.bench.records import BenchManifest, BenchSummary, ImportReport, Question
from medverify.cli import main
from medverify.cli._common import (
    config_option,
    console,
    executor_option,
    load_config,
    store_option,
)
from medverify.cli._names import JUDGES, RegistryChoice
from medverify.cli.audit import connected_executor
from medverify.cli.bench_tables import print_agreement, print_bench_summary
from medverify.config import Config
from medverify.errors import InputError
from medverify.executor import Executor, executor_from_spec
from medverify.kit import FlowKit


@main.group()
def bench() -> None:
    """Benchmark models: ask them medical questions and score their citations."""


# -- questions ------------------------------------------------------------------------


@bench.group()
def questions() -> None:
    """Build question sets: import them, or generate them from reference documents."""


@questions.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Question set to write (JSONL, one question per line).")
@click.option("--source", help="Question source name (default: the file's `source` field, "
              "else the data set or file name).")
@click.option("--format", "fmt", default="auto", show_default=True,
              type=click.Choice(["auto", "jsonl", "csv", "medquad", "medicationqa", "kqa",
                                 "medlfqa", "liveqa"]),
              help="Input format.")
@click.option("--per-source", type=click.IntRange(min=1),
              help="Keep a random sample of N questions per source.")
@click.option("--limit", type=click.IntRange(min=1), help="Keep at most N questions.")
@click.option("--seed", default=0, show_default=True, help="Seed of the sample.")
def import_questions(files: tuple[Path, ...], out: Path, source: str | None, fmt: str,
                     per_source: int | None, limit: int | None, seed: int) -> None:
    """Import questions from JSONL/CSV files or the public question sets (MedQuAD, LiveQA,
    MedicationQA, K-QA, MedLFQA). Duplicates, rows without text and unreadable lines are
    counted and reported, never dropped silently."""
    from medverify.bench.questions import (
        merge_question_sets,
        read_questions,
        select_questions,
        write_questions,
    )

    sets, reports = [], []
    for path in files:
        if not path.exists():
            raise InputError(f"no such file or directory: {path}")
        found, report = read_questions(path, source=source, format=fmt)
        sets.append(found)
        reports.append(report)
    merged, duplicates = merge_question_sets(sets)
    chosen = select_questions(merged, per_source=per_source, limit=limit, seed=seed)
    if not chosen:
        raise InputError("no question found in " + ", ".join(map(str, files)))
    write_questions(out, chosen)
    _print_imports(reports, duplicates, Console())
    _print_sources(chosen, Console())
    console.print(f"wrote {len(chosen):,} questions to {out}")


def _print_imports(reports: Sequence[ImportReport], cross_duplicates: int, out: Console) -> None:
    table = Table(title="Imported question files", title_justify="left")
    for column in ("file", "format", "encoding", "read", "kept", "duplicates", "no text",
                   "unreadable"):
        table.add_column(column, justify="left" if column in ("file", "format") else "right")
    for r in reports:
        table.add_row(r.path, r.format, r.encoding, f"{r.read:,}", f"{r.kept:,}",
                      f"{r.duplicates:,}", f"{r.missing_text:,}", f"{r.unreadable:,}")
    out.print(table)
    if cross_duplicates:
        out.print(f"duplicates across files removed: {cross_duplicates:,}")
    problems = [p for r in reports for p in r.problems]
    for problem in problems[:10]:
        console.print(Text(f"warning: {problem}", style="yellow"))
    if len(problems) > 10:
        console.print(Text(f"... and {len(problems) - 10:,} more problems", style="yellow"))


def _print_sources(chosen: Sequence[Question], out: Console) -> None:
    counts: dict[str, int] = {}
    for question in chosen:
        counts[question.source] = counts.get(question.source, 0) + 1
    out.print("questions per source: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))


@questions.command("generate")
@click.argument("documents", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--model", "-m", "model_spec", required=True, help="Model spec of the generator.")
@click.option("--source", required=True, help="Question source name, e.g. mayoclinic.")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="Question set to write; the generation log goes to OUT.generation.jsonl.")
@click.option("--limit", type=click.IntRange(min=1), help="Use only the first N documents.")
@config_option
def generate_questions(documents: tuple[Path, ...], model_spec: str, source: str, out: Path,
                       limit: int | None, config_path: Path | None) -> None:
    """Write one answerable question per reference document with an LLM (the document is
    kept as the question's reference). Resumable: rerun to retry failed documents only."""
    from medverify.bench.generate import generated_questions, read_documents
    from medverify.bench.questions import write_questions

    config = load_config(config_path)
    docs, load_report = read_documents(list(documents))
    docs = docs[:limit] if limit else docs
    if not docs:
        raise InputError("no readable document in " + ", ".join(map(str, documents)))
    log_path = out.with_name(out.name + ".generation.jsonl")
    results = asyncio.run(_generate(config, model_spec, docs, source, log_path))
    made = generated_questions(results)
    write_questions(out, made)
    statuses: dict[str, int] = {}
    for result in results:
        statuses[result.status.value] = statuses.get(result.status.value, 0) + 1
    skipped = len(getattr(load_report, "skipped", []) or [])
    console.print(f"documents: {len(docs):,} read ({skipped:,} files skipped); generation: "
                  + ", ".join(f"{k} {v:,}" for k, v in sorted(statuses.items())))
    console.print(f"wrote {len(made):,} questions to {out} (log: {log_path})")


async def _generate(config: Config, spec: str, docs: list[Any], source: str,
                    log_path: Path) -> list[Any]:
    from medverify.bench.generate import QuestionGenerator
    from medverify.llm.facade import model_from_config

    async with model_from_config(config, spec) as model:
        generator = QuestionGenerator(model)
        return await generator.generate_to_file(docs, source=source, out=log_path)


# -- run ------------------------------------------------------------------------------


def _split_models(values: tuple[str, ...]) -> list[str]:
    """``--models a,b --models c`` -> [a, b, c]. A piece without ``:`` cannot be a spec, so
    it is the rest of the previous one (a comma inside a spec's ``?options``)."""
    out: list[str] = []
    for value in values:
        for part in value.split(","):
            if out and ":" not in part and part.strip():
                out[-1] += "," + part
            elif part.strip():
                out.append(part.strip())
    if not out:
        raise click.UsageError("--models needs at least one model spec")
    return out


@bench.command("run")
@click.option("--models", "-m", "models", multiple=True, required=True,
              metavar="[LABEL=]SPEC,...",
              help="Models under test (comma-separated or repeated); LABEL names it in reports.")
@click.option("--questions", "questions_path", required=True,
              type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Question set (from `bench questions import|generate`, or any JSONL/CSV "
              "with a question and a source field).")
@click.option("--out", "run_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Run directory (created; an existing one is resumed).")
@click.option("--judge", type=RegistryChoice(JUDGES),
              help="Source verification judge [default: llm with --judge-model, else builtin].")
@click.option("--judge-model", help="Model spec of the judge and statement parser.")
@click.option("--offline", is_flag=True, help="Fetch nothing: use only the fetch cache.")
@click.option("--allow", multiple=True, metavar="HOST[:PORT]",
              help="Let the fetcher reach this otherwise blocked host (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), help="Ask only the first N questions.")
@click.option("--fresh", is_flag=True, help="Start over instead of resuming RUN.")
@click.option("--no-record", is_flag=True, help="Do not record the run in the run store.")
@executor_option("the replies are audited (fetched and judged; the models are asked here)")
@config_option
@store_option
def run_bench(models: tuple[str, ...], questions_path: Path, run_dir: Path, judge: str | None,
              judge_model: str | None, offline: bool, allow: tuple[str, ...],
              limit: int | None, fresh: bool, no_record: bool, executor_spec: str,
              config_path: Path | None, store: Path | None) -> None:
    """Ask every model every question (a short answer plus a JSON list of URL sources),
    audit the citations and report the metrics per model and per question source.

    Resumable: rerun the same command after a crash or Ctrl-C; finished replies and audits
    are kept and no paid call is repeated. Exit status 1 when no model's statement support
    could be measured (e.g. no reply cites a source), 2 when it cannot start."""
    from medverify.bench.questions import read_questions

    config = _bench_config(config_path, judge, judge_model, offline, allow, store)
    found, report = read_questions(questions_path)
    if report.problems:
        _print_imports([report], 0, console)
    if not found:
        raise InputError(f"no question in {questions_path}")
    specs = _split_models(models)
    executor = executor_from_spec(executor_spec)
    try:
        remote = connected_executor(executor)
        summary = asyncio.run(_run(config, specs, found, report, run_dir, questions_path,
                                   limit, fresh, not no_record, remote))
    finally:
        executor.close()
    print_bench_summary(summary, Console())
    console.print(f"report: {RunLayout(run_dir).report}")
    _exit_if_nothing_measured(summary)


def _exit_if_nothing_measured(summary: BenchSummary) -> None:
    """Exit 1 when no model's statement support could be measured (never a 0 % study)."""
    if any(m.statement_support.measured for m in summary.overall.values()):
        return
    console.print(Text("error: no model's statement-level support could be measured (see "
                       "the warnings above): nothing was checked", style="bold red"))
    raise SystemExit(1)


def _bench_config(config_path: Path | None, judge: str | None, judge_model: str | None,
                  offline: bool, allow: tuple[str, ...], store: Path | None) -> Config:
    fetch: dict[str, Any] = {"offline": True} if offline else {}
    config = load_config(config_path, model=judge_model, judge=judge, store=store, fetch=fetch)
    if allow:
        merged = config.fetch.model_copy(update={"allow": [*config.fetch.allow, *allow]})
        config = config.model_copy(update={"fetch": merged})
    return config


async def _run(config: Config, specs: list[str], found: list[Question], report: ImportReport,
               run_dir: Path, questions_path: Path, limit: int | None, fresh: bool,
               record: bool, executor: Executor | None = None) -> BenchSummary:
    from medverify.bench.runner import BenchRunner

    runner = BenchRunner.from_config(
        config, models=specs, run_dir=run_dir, fresh=fresh, limit=limit,
        kit=FlowKit(executor=executor, record=record))
    with _bars() as bar:
        runner.on_ask = bar("asking")
        runner.auditor.progress = bar("auditing answers")
        try:
            return await runner.run(found, questions_path=str(questions_path),
                                    import_report=report)
        finally:
            await runner.aclose()


@contextmanager
def _bars() -> Iterator[Callable[[str], Callable[..., None]]]:
    """Progress bars on stderr (one per model while asking, one for the audit)."""
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, transient=True,
                        disable=not console.is_terminal)
    tasks: dict[str, Any] = {}

    def phase(name: str) -> Callable[..., None]:
        def update(*args: Any) -> None:
            label, done, total = args if len(args) == 3 else ("", *args)
            key = f"{name} {label}".rstrip()
            if key not in tasks:
                tasks[key] = progress.add_task(key, total=total)
            progress.update(tasks[key], completed=done, total=total)

        return update

    with progress:
        yield phase


# -- report ---------------------------------------------------------------------------


@bench.command("report")
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path, file_okay=False))
@config_option
def report_bench(run_dir: Path, config_path: Path | None) -> None:
    """Recompute every metric, table, plot and export of RUN from its stored records
    (no model is called) and print the headline numbers. The statistics settings (bootstrap,
    permutations, seed, prices) are the ones RUN was made with, unless --config is given."""
    from medverify.bench.summary import finish_run

    layout = _existing(run_dir)
    summary = finish_run(layout, _run_config(layout, config_path))
    print_bench_summary(summary, Console())
    console.print(f"report: {layout.report}; summary: {layout.summary}; "
                  f"tables: {layout.exports}")
    _exit_if_nothing_measured(summary)


# -- labels ---------------------------------------------------------------------------


@bench.group()
def labels() -> None:
    """Judge agreement with clinicians: export blinded pairs, import their labels."""


@labels.command("export")
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path, file_okay=False))
@click.option("--n", "n", default=200, show_default=True, type=click.IntRange(min=1),
              help="Number of claim-source pairs to sample.")
@click.option("--seed", default=0, show_default=True)
def export_labels(run_dir: Path, n: int, seed: int) -> None:
    """Write a blinded CSV of N sampled claim-source pairs (no model, no verdict) for
    clinicians to label, and the key that links it back to the run."""
    from medverify.bench.agreement import export_blinded

    layout = _existing(run_dir)
    sheet, key = export_blinded(layout, _audits(layout), n, seed=seed)
    console.print(f"blinded sheet: {sheet}\nkey (keep it from the labellers): {key}")


@labels.command("import")
@click.argument("run_dir", metavar="RUN", type=click.Path(path_type=Path, file_okay=False))
@click.argument("csv_path", metavar="LABELS.csv", type=click.Path(path_type=Path,
                dir_okay=False, exists=True))
@click.option("--annotator", help="Who labelled the sheet (for consensus over several).")
@config_option
def import_labels(run_dir: Path, csv_path: Path, annotator: str | None,
                  config_path: Path | None) -> None:
    """Import a labelled sheet and report the judge's agreement with it (Cohen's kappa,
    bootstrap CIs). Rerun `bench report RUN` to include it in the report.

    LABELS.csv is a sheet from `labels export` (pair_id, label), or any annotation file
    with answer_id (or question), statement, source_url and label columns, matched to the
    run's claim-source pairs."""
    from medverify.bench.agreement import import_annotations, load_agreement, read_table
    from medverify.bench.agreement import import_labels as do_import

    layout = _existing(run_dir)
    header = read_table(csv_path)[0]
    if "pair_id" in header:
        result = do_import(layout, csv_path, annotator=annotator)
    else:
        result = import_annotations(layout, csv_path, _audits(layout), annotator=annotator)
    console.print(result.model_dump_json(indent=2))
    config = _run_config(layout, config_path)
    overall, by_model = load_agreement(layout, _audits(layout), n_boot=config.audit.bootstrap,
                                       seed=config.audit.seed)
    print_agreement(overall, by_model, Console())


def _existing(run_dir: Path) -> RunLayout:
    layout = RunLayout(run_dir)
    if not layout.exists():
        raise InputError(f"{run_dir} is not a benchmark run directory (no run.json)")
    return layout


def _run_config(layout: RunLayout, config_path: Path | None) -> Config:
    """``--config`` when given, else the configuration recorded in RUN's manifest, so that
    recomputing reproduces the run's CIs and p-values."""
    if config_path is not None:
        return load_config(config_path)
    try:
        manifest = BenchManifest.model_validate_json(layout.manifest.read_text("utf-8"))
        return Config.model_validate(manifest.config)
    except (OSError, ValueError) as exc:
        console.print(Text(f"warning: cannot use the settings recorded in {layout.manifest} "
                           f"({exc}); using the current configuration", style="yellow"))
        return load_config(None)


def _audits(layout: RunLayout) -> list[Any]:
    from medverify.audit.records import AnswerAudit
    from medverify.files import read_records

    audits = read_records(layout.audit_answers, AnswerAudit, repair=False)
    if not audits:
        raise InputError(f"{layout.root} has no audited answers yet: run `bench run` first")
    return audits
