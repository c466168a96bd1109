"""``medverify factcheck``: atomic fact-checking and correction of an answer against a
knowledge base (Vladika et al. 2025)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.console import Console
from rich.text import Text

from medverify.cli import main
from medverify.cli._common import (
    config_option,
    console,
    json_out_option,
    load_config,
    progress_bar,
    store_option,
)
from medverify.cli._names import JUDGES, RegistryChoice
from medverify.config import Config
from medverify.errors import ConfigError, InputError
from medverify.factcheck.records import FactCheckReport, FactVerdict, RagAnswer, SelfRefineResult
from medverify.factcheck.report import print_factcheck, write_factcheck_html
from medverify.files import atomic_write_text
from medverify.harness import open_kb
from medverify.inputs import read_answers
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.llm.facade import Model, model_from_config
from medverify.records import Answer
from medverify.store.runs import RunStore

BASELINE_SUFFIX = ".selfrefine.json"  # also skipped by `medverify eval factcheck DIR`
OFFLINE_NOTE = ("offline: no model given, so the built-in judge checks the facts and a false "
                "fact is replaced by the evidence sentence that contradicts it (an extractive "
                "correction, labelled as such); nothing is rewritten by a model")


@dataclass
class Outcome:
    """What one invocation produced."""

    reports: list[FactCheckReport] = field(default_factory=list)
    baselines: list[SelfRefineResult] = field(default_factory=list)
    rag_error: str | None = None


@main.command()
@click.argument("input_file", metavar="[FILE|-]", required=False)
@click.option("--kb", type=click.Path(path_type=Path, file_okay=False),
              help="Knowledge base directory.")
@click.option("--question", "-q", help="The question the answer responds to. Without FILE and "
              "with a model, the answer is generated from the KB first (RAG).")
@click.option("--model", "-m", help="Model spec for every LLM stage (see docs/models.md); "
              "without one the run is offline (built-in judge, extractive corrections).")
@click.option("--judge", type=RegistryChoice(JUDGES),
              help="Judge of the facts (default: llm with --model, else builtin).")
@click.option("--trace", type=click.Choice(("similarity", "llm")),
              help="How final facts are traced to chunks (default similarity).")
@click.option("--rounds", type=click.IntRange(1, 10),
              help="Most verdict-and-rewrite rounds (default 3).")
@click.option("--evidence", type=click.Choice(("passages", "chunks")),
              help="Judge facts on trimmed passages (default) or whole chunks.")
@click.option("--baseline", type=click.Choice(("selfrefine",)),
              help="Also run the Self-Refine baseline with the same model.")
@json_out_option("Write the fact-check report here (a list for several answers); the "
                 f"baseline goes next to it as <name>{BASELINE_SUFFIX}.")
@click.option("--html", "html_out", type=click.Path(path_type=Path),
              help="Write the HTML report here (a directory for several answers).")
@click.option("--no-record", is_flag=True, help="Do not record the run in the run store.")
@config_option
@store_option
def factcheck(input_file: str | None, kb: Path | None, question: str | None,
              model: str | None, judge: str | None, trace: str | None, rounds: int | None,
              evidence: str | None, baseline: str | None, json_out: Path | None,
              html_out: Path | None, no_record: bool, config_path: Path | None,
              store: Path | None) -> None:
    """Split an answer into atomic facts, check each against freshly retrieved chunks,
    rewrite the false ones from their evidence (up to --rounds rounds), rewrite the answer,
    and trace every final fact to its chunk.

    The answer is FILE, or stdin (plain text, a JSON object or JSON Lines as for `check`).
    With --question, a model and no FILE, the answer is generated first from the top chunks
    for the question (as `medverify answer` does), so the token ratio has its baseline.

    Exit status: 0 when every fact was judged, 1 when an answer, fact or baseline ended in
    an error, 2 when the check could not run."""
    factcheck_settings = {k: v for k, v in
                          {"trace": trace, "max_rounds": rounds, "evidence": evidence}.items()
                          if v is not None}
    config = load_config(config_path, kb=kb, model=model, judge=judge, store=store,
                         factcheck=factcheck_settings or None)
    _require_model(config, baseline)
    generate = input_file is None and bool(question) and bool(config.model)
    if input_file is None and not generate and sys.stdin.isatty():
        raise click.UsageError("give the answer as FILE or on stdin, or --question with "
                               "--model to generate it from the KB")
    answers = [] if generate else _read_input(input_file or "-", question)
    if not config.model:
        console.print(Text(OFFLINE_NOTE, style="yellow"))
    outcome = asyncio.run(_run(config, answers, question if generate else None,
                               baseline=baseline is not None, record=not no_record))
    _show(outcome)
    _write(outcome, json_out, html_out)
    sys.exit(1 if _failed(outcome) else 0)


def _require_model(config: Config, baseline: str | None) -> None:
    if config.model:
        return
    if baseline:
        raise ConfigError("--baseline selfrefine needs a model: pass --model SPEC")
    if config.factcheck.trace == "llm":
        raise ConfigError("--trace llm needs a model: pass --model SPEC or --trace similarity")
    from medverify.judge import declares  # the judge package, only when needed

    if declares(config.judge_name, "needs_model"):
        raise ConfigError(f"--judge {config.judge_name} needs a model: pass --model SPEC")


def _read_input(input_file: str, question: str | None) -> list[Answer]:
    if input_file == "-":
        data = sys.stdin.buffer.read()
        if not data.strip():
            raise InputError("no answer to check: give FILE, pipe the answer on stdin, or give "
                             "--question with --model to generate one from the KB")
    else:
        path = Path(input_file)
        if not path.is_file():
            raise click.UsageError(f"no such file: {path}")
        data = path.read_bytes()
    parsed = read_answers(data, question=question)
    for warning in parsed.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
    return parsed.answers


def _model(config: Config) -> Model | None:
    if not config.model:
        return None
    from medverify.factcheck.loop import ScopedLedger

    # a scoped ledger: each answer's report counts its own tokens when answers run at once
    return model_from_config(config, ledger=ScopedLedger())


async def _run(config: Config, answers: list[Answer], question: str | None, *,
               baseline: bool, record: bool) -> Outcome:
    with open_kb(config) as kb:
        model = _model(config)
        try:
            return await _run_with(config, kb, model, answers, question, baseline=baseline,
                                   record=record)
        finally:
            if model is not None:
                await model.aclose()


async def _generate(kb: KnowledgeBase, model: Model, config: Config,
                    question: str) -> RagAnswer:
    from medverify.answerer import RagAnswerer

    answerer = RagAnswerer(kb, model, top_k=config.answer.top_k,
                           max_tokens=config.answer.max_tokens)
    with progress_bar("answering the question", 1):
        return await answerer.answer(question)


async def _run_with(config: Config, kb: KnowledgeBase, model: Model | None,
                    answers: list[Answer], question: str | None, *, baseline: bool,
                    record: bool) -> Outcome:
    rags: list[RagAnswer | None] | None = None
    if question is not None and model is not None:
        rag = await _generate(kb, model, config, question)
        if rag.error:
            return Outcome(rag_error=rag.error)
        answers, rags = [Answer(text=rag.text, question=rag.question)], [rag]
    reports = await _check(config, kb, model, answers, rags, record=record)
    baselines = await _baselines(model, answers) if baseline and model is not None else []
    return Outcome(reports=reports, baselines=baselines)


async def _check(config: Config, kb: KnowledgeBase, model: Model | None,
                 answers: list[Answer], rags: Sequence[RagAnswer | None] | None, *,
                 record: bool) -> list[FactCheckReport]:
    from medverify.factcheck.loop import FactChecker

    checker = FactChecker.from_config(config, kit=FlowKit(kb=kb, model=model))
    try:
        with progress_bar("fact-checking answers", len(answers)) as progress:
            if not record:
                return await checker.run(answers, rags=rags, progress=progress)
            with RunStore(config.store_location) as store:
                return await checker.run(answers, rags=rags, store=store, progress=progress)
    finally:
        await checker.aclose()


async def _baselines(model: Model, answers: Sequence[Answer]) -> list[SelfRefineResult]:
    from medverify.factcheck.selfrefine import SelfRefine

    refiner = SelfRefine(model)
    with progress_bar("Self-Refine baseline", len(answers)):
        return list(await asyncio.gather(*(refiner.refine(a.question, a.text)
                                           for a in answers)))


# -- output ---------------------------------------------------------------------------------


def _show(outcome: Outcome) -> None:
    out = Console(highlight=False)
    if outcome.rag_error:
        console.print(Text(f"error: the answer could not be generated: {outcome.rag_error}",
                           style="red"))
    for report in outcome.reports:
        print_factcheck(report, out)
    for result in outcome.baselines:
        print_baseline(result, out)


def print_baseline(result: SelfRefineResult, out: Console) -> None:
    """The Self-Refine baseline's refined answer and its tokens (plain text)."""
    tokens = sum(u.prompt_tokens + u.completion_tokens for u in result.usage.values())
    out.print(Text.assemble(("Self-Refine baseline", "bold"), f" ({result.model}, "
                            f"{tokens:,} tokens):"))
    if result.error:
        out.print(Text(f"error: {result.error}", style="magenta"))
    out.print(Text(result.refined or "(no refined answer)"))


def _json_text(items: Sequence[FactCheckReport] | Sequence[SelfRefineResult]) -> str:
    if len(items) == 1:
        return items[0].model_dump_json(indent=2) + "\n"
    return "[\n" + ",\n".join(i.model_dump_json(indent=2) for i in items) + "\n]\n"


def baseline_path(json_out: Path) -> Path:
    """Where the Self-Refine baseline is written: ``r.json`` -> ``r.selfrefine.json``."""
    return json_out.with_name(json_out.stem + BASELINE_SUFFIX)


def _write(outcome: Outcome, json_out: Path | None, html_out: Path | None) -> None:
    reports = outcome.reports
    if json_out and reports:
        atomic_write_text(json_out, _json_text(reports))
        console.print(f"JSON report: {json_out}")
        if outcome.baselines:
            path = atomic_write_text(baseline_path(json_out), _json_text(outcome.baselines))
            console.print(f"Self-Refine baseline: {path}")
    if html_out and reports:
        if len(reports) == 1:
            write_factcheck_html(html_out, reports[0])
        else:
            html_out.mkdir(parents=True, exist_ok=True)
            for n, report in enumerate(reports, 1):
                write_factcheck_html(html_out / f"{n:03d}.html", report)
        console.print(f"HTML report: {html_out}")


def _failed(outcome: Outcome) -> bool:
    if outcome.rag_error or any(b.error for b in outcome.baselines):
        return True
    return any(r.errors or any(f.final_verdict == FactVerdict.ERROR for f in r.facts)
               for r in outcome.reports)
