"""``medverify check``: check answers against a knowledge base."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from medverify.checker import Checker
from medverify.cli import main
from medverify.cli._common import (
    config_option,
    console,
    load_config,
    progress_bar,
    store_option,
    write_outputs,
)
from medverify.cli._names import DECOMPOSERS, JUDGES, RegistryChoice
from medverify.config import Config
from medverify.inputs import read_answers
from medverify.records import Answer, Category, Report
from medverify.report.terminal import print_causes, print_summary
from medverify.store.runs import RunStore


@main.command()
@click.argument("input_file", metavar="[FILE|-]", required=False, default="-")
@click.option(
    "--kb", type=click.Path(path_type=Path, file_okay=False), help="Knowledge base directory."
)
@click.option("--question", "-q", help="The question the answer responds to.")
@click.option(
    "--model", "-m", help="Model spec for decomposition and judging (see docs/models.md)."
)
@click.option("--judge", type=RegistryChoice(JUDGES),
              help="Judge name (default: llm with --model).")
@click.option("--decomposer", type=RegistryChoice(DECOMPOSERS), help="Claim decomposer.")
@click.option("--top-k", type=int, help="Passages retrieved per claim (default 7).")
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the JSON report here (a list when the input has several answers).",
)
@click.option(
    "--html",
    "html_out",
    type=click.Path(path_type=Path),
    help="Write the HTML report here (a directory when the input has several answers).",
)
@click.option("--max-answer-chars", type=int, help="Refuse longer answers (default 200,000).")
@click.option("--no-record", is_flag=True, help="Do not record the run in the run store.")
@config_option
@store_option
def check(
    input_file: str,
    kb: Path | None,
    question: str | None,
    model: str | None,
    judge: str | None,
    decomposer: str | None,
    top_k: int | None,
    json_out: Path | None,
    html_out: Path | None,
    max_answer_chars: int | None,
    no_record: bool,
    config_path: Path | None,
    store: Path | None,
) -> None:
    """Check an answer (text, JSON object or JSONL of answers) against a knowledge base.

    Exit status: 0 when every claim was judged, 1 when some answer or claim ended in ERROR,
    2 when the check could not run at all."""
    retrieval = {"top_k": top_k} if top_k else None
    config = load_config(
        config_path,
        kb=kb,
        model=model,
        judge=judge,
        decomposer=decomposer,
        max_answer_chars=max_answer_chars,
        store=store,
        retrieval=retrieval,
    )
    data = sys.stdin.buffer.read() if input_file == "-" else _read(Path(input_file))
    parsed = read_answers(data, question=question)
    for warning in parsed.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    reports = asyncio.run(_run(config, parsed.answers, record=not no_record))
    for report in reports:
        print_summary(report, causes=len(reports) == 1)
    if len(reports) > 1:
        print_causes(reports)
    write_outputs(reports, json_out, html_out)
    failed = any(r.errors or r.metrics.counts.get(Category.ERROR.value) for r in reports)
    sys.exit(1 if failed else 0)


def _read(path: Path) -> bytes:
    if not path.is_file():
        raise click.UsageError(f"no such file: {path}")
    return path.read_bytes()


async def _run(config: Config, answers: list[Answer], *, record: bool) -> list[Report]:
    checker = Checker.from_config(config)
    try:
        with progress_bar("checking answers", len(answers)) as progress:
            if not record:
                return await checker.run(answers, progress=progress)
            with RunStore(config.store_location) as store:
                return await checker.run(answers, store=store, progress=progress)
    finally:
        await checker.aclose()
