"""``medverify eval``: evaluations of retrieval and of judges on data with known answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from medverify.cli import main
from medverify.cli._common import (
    config_option,
    console,
    counting_bar,
    json_out_option,
    load_config,
)
from medverify.cli._names import EMBEDDERS, JUDGES, NamesHelpOption, RegistryChoice
from medverify.config import Config, KBSettings
from medverify.errors import InputError
from medverify.evals.calibrate import card_note
from medverify.evals.confidence import confidence_table
from medverify.evals.confidence import curve_svg as confidence_svg
from medverify.evals.pairs import (
    PairScores,
    PairsEval,
    aevaluate_pairs,
    evaluate_pairs_on,
    load_pairs,
    pairs_judge,
    pairs_model,
)
from medverify.evals.retrieval import evaluate_retrieval
from medverify.executor import LocalExecutor, executor_from_spec
from medverify.files import atomic_write_text
from medverify.judge import Judge
from medverify.llm.facade import Model
from medverify.retrieve import MODES


@main.group("eval")
def eval_group() -> None:
    """Evaluate medverify components on data with known answers."""


def _parse_ks(value: str) -> list[int]:
    try:
        ks = sorted({int(part) for part in value.split(",") if part.strip()})
    except ValueError as exc:
        raise InputError(f"-k expects comma-separated integers like 1,5,10, not {value!r}") from exc
    if not ks or ks[0] < 1:
        raise InputError("-k values must be positive integers")
    return ks


@eval_group.command("retrieval")
@click.option(
    "--corpus", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--queries", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("-k", "ks", default="1,5,10", show_default=True, help="Cut-offs, e.g. 1,5,10.")
@click.option("--mode", type=click.Choice(("all", *MODES)), default="all", show_default=True)
@click.option(
    "--kb",
    "kb_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="KB directory to build or reuse (default: a cache keyed by corpus hash).",
)
@click.option("--embedder", cls=NamesHelpOption, names_from=EMBEDDERS,
              help="Embedder name ({names}) or model directory (default all-MiniLM-L6-v2).")
@click.option("--chunk-tokens", type=click.IntRange(16))
@click.option("--chunk-overlap", type=click.IntRange(0))
@json_out_option("Write the full result as JSON here.")
def retrieval(
    corpus: Path,
    queries: Path,
    ks: str,
    mode: str,
    kb_dir: Path | None,
    embedder: str | None,
    chunk_tokens: int | None,
    chunk_overlap: int | None,
    json_out: Path | None,
) -> None:
    """recall@k and MRR of lexical, dense and hybrid retrieval."""
    overrides = {"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap, "embedder": embedder}
    settings = KBSettings(**{k: v for k, v in overrides.items() if v is not None})
    modes = MODES if mode == "all" else (mode,)
    result = evaluate_retrieval(
        corpus,
        queries,
        ks=_parse_ks(ks),
        modes=modes,  # type: ignore[arg-type]
        kb_dir=kb_dir,
        settings=settings,
    )
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(result.model_dump_json(indent=2), "utf-8")
    header = "mode     " + " ".join(f"R@{k:<5}" for k in result.ks) + f" MRR@{max(result.ks)}"
    click.echo(header)
    for row in result.results:
        cells = " ".join(f"{row.recall[k]:<7.3f}" for k in result.ks)
        click.echo(f"{row.mode:8} {cells} {row.mrr:.3f}")


@eval_group.command("pairs")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--judge",
    "judge_name",
    type=RegistryChoice(JUDGES),
    default="builtin",
    show_default=True,
)
@click.option("--model", "-m", help="Model spec (needed by --judge llm and cascade).")
@click.option("--limit", type=click.IntRange(1), help="Only the first N pairs of each file.")
@click.option(
    "--executor",
    "executor_spec",
    default="local",
    show_default=True,
    help="Where the pairs are judged: local (this process), ray (a local Ray) or "
    "ray:HOST:6379 (a Ray cluster; needs `pip install 'medverify[ray]'`).",
)
@click.option("--calibration-family", "family", default="auto", show_default=True,
              help="The built-in judge's calibration: auto (each file's own family when it "
              "has one, else general), general, checkcovid, citint or scifact.")
@click.option("--svg", "svg_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the coverage-vs-precision curves of FACT here (one line per file).")
@json_out_option("Write the full result (confusion matrices included) as JSON here.")
@config_option
def pairs(
    files: tuple[Path, ...],
    judge_name: str,
    model: str | None,
    limit: int | None,
    executor_spec: str,
    family: str,
    svg_out: Path | None,
    json_out: Path | None,
    config_path: Path | None,
) -> None:
    """Accuracy, macro-F1 and balanced accuracy of a judge on claim/evidence pairs (JSONL),
    and the precision and coverage of its confident verdicts."""
    config = load_config(config_path, model=model, judge=judge_name)
    config = config.model_copy(update={"judge_settings": config.judge_settings.model_copy(
        update={"calibration_family": family})})
    executor = executor_from_spec(executor_spec)
    if isinstance(executor, LocalExecutor):
        result = asyncio.run(_eval_pairs(config, list(files), limit))
    else:
        try:
            total = sum(len(load_pairs(f, limit)) for f in files)
            with counting_bar(f"judging pairs ({executor.name})", total) as advance:
                result = evaluate_pairs_on(executor, list(files), config, limit=limit,
                                           progress=advance)
        finally:
            executor.close()
    if json_out is not None:
        atomic_write_text(json_out, result.model_dump_json(indent=2) + "\n")
    out = Console()
    out.print(pairs_table(result))
    for scores in result.files + ([result.overall] if result.overall else []):
        out.print(confusion_table(scores))
    _print_confidence(out, result, svg_out)
    note = card_note(config)
    if note:
        out.print(note)
    if json_out is not None:
        console.print(f"JSON result: {json_out}")


def _print_confidence(out: Console, result: PairsEval, svg_out: Path | None) -> None:
    """The confident verdicts' table (and FACT curves as SVG), when the judge gives them."""
    assessed = [(s.name, s.confidence) for s in result.files if s.confidence is not None]
    if assessed:
        out.print(confidence_table(assessed))
    if assessed and svg_out is not None:
        curves = [(name, c.curves.get("FACT", [])) for name, c in assessed]
        title = f"FACT: precision vs coverage ({result.judge})"
        atomic_write_text(svg_out, confidence_svg(curves, title, target=0.70) + "\n")
        console.print(f"curves: {svg_out}")


@asynccontextmanager
async def judge_with_progress(
    config: Config, what: str, total: int,
    make: Callable[[Config, Model | None], Judge] = pairs_judge,
) -> AsyncIterator[tuple[Judge, Callable[[int], None]]]:
    """The configured judge, made by ``make`` (default: the one for labelled pairs) with
    the model it calls (closed after), and a progress bar over ``total`` items of ``what``
    (the callback takes how many more are done)."""
    model = pairs_model(config)
    try:
        judge = make(config, model)
        with counting_bar(what, total) as advance:
            yield judge, advance
    finally:
        if model is not None:
            await model.aclose()


async def _eval_pairs(config: Config, files: list[Path], limit: int | None) -> PairsEval:
    total = sum(len(load_pairs(f, limit)) for f in files)
    async with judge_with_progress(config, "judging pairs", total) as (judge, advance):
        return await aevaluate_pairs(files, judge, limit=limit, progress=advance)


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


_LEFT = ("file", "labels", "decided by")


def pairs_table(result: PairsEval) -> Table:
    """One row per file (and one for all files pooled)."""
    table = Table(title=f"Pairs evaluation: {result.judge}", title_justify="left")
    for name in (
        "file",
        "labels",
        "n",
        "errors",
        "JE",
        "accuracy",
        "macro-F1",
        "bal. acc",
        "S-vs-rest bal. acc",
        "pairs/s",
        "decided by",
    ):
        table.add_column(name, justify="right" if name not in _LEFT else "left")
    for s in result.files + ([result.overall] if result.overall else []):
        table.add_row(
            Text(s.name),
            s.labels,
            str(s.n),
            str(s.n_errors),
            str(s.n_judgment_errors),
            _num(s.accuracy),
            _num(s.macro_f1),
            _num(s.balanced_accuracy),
            _num(s.supported_vs_rest_balanced_accuracy),
            f"{s.pairs_per_second:.1f}",
            ", ".join(f"{k} {v}" for k, v in sorted(s.decided_by.items())),
            style="bold" if s.name == "all" else "",
        )
    return table


def confusion_table(scores: PairScores) -> Table:
    """Gold labels in rows, predictions in columns."""
    columns = list(next(iter(scores.confusion.values()), {}))
    table = Table(title=f"{scores.name}: gold (rows) x predicted (columns)", title_justify="left")
    table.add_column("gold")
    for column in columns:
        table.add_column(column, justify="right")
    for gold, row in scores.confusion.items():
        table.add_row(gold, *(str(row.get(c, 0)) for c in columns))
    return table
