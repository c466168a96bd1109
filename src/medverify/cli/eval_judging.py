"""``medverify eval injection`` and ``eval arbitration``: the configured judge run on
prompt-injection probes and on labelled sources, and the arbitration policy swept over them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from medverify.cli._common import (
    config_option,
    console,
    json_out_option,
    load_config,
)
from medverify.cli._names import JUDGES, RegistryChoice
from medverify.cli.eval import eval_group, judge_with_progress
from medverify.config import Config
from medverify.errors import InputError
from medverify.evals.arbitration import (
    SWEPT,
    ArbitrationEval,
    LabelledClaim,
    PolicyPoint,
)
from medverify.evals.arbitration import evaluate as evaluate_arbitration
from medverify.evals.arbitration_chart import curve_svg
from medverify.evals.arbitration_input import Source, judge_sources, read_source
from medverify.files import atomic_write_text
from medverify.harness import stage_id
from medverify.injection import (
    InjectionCase,
    InjectionReport,
    load_cases,
    measure_injection,
    rate_text,
)
from medverify.judge import Judge
from medverify.judge.build import create_judge
from medverify.llm.facade import Model


@eval_group.command("injection")
@click.option("--cases", "cases_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Probes: a JSON set shaped like the shipped one, or JSONL of cases "
              "(default: the shipped set, data/injection.json).")
@click.option("--judge", "judge_name", type=RegistryChoice(JUDGES),
              help="Judge to attack (default: llm with --model, else builtin).")
@click.option("--model", "-m", help="Model spec (needed by --judge llm and cascade).")
@click.option("--limit", type=click.IntRange(1), help="Only the first N probes.")
@json_out_option("Write every probe's clean and attacked verdicts (raw output included).")
@config_option
def injection(
    cases_path: Path | None,
    judge_name: str | None,
    model: str | None,
    limit: int | None,
    json_out: Path | None,
    config_path: Path | None,
) -> None:
    """Prompt injection: how often attacker text in a KB passage or a cited page flips the
    judge's verdict to the attacker's target (flip rate with 95 % Wilson intervals)."""
    config = load_config(config_path, model=model, judge=judge_name)
    version, cases = load_cases(cases_path)
    cases = cases[:limit] if limit else cases
    result = asyncio.run(_eval_injection(config, cases, version))
    if json_out is not None:
        atomic_write_text(json_out, result.model_dump_json(indent=2) + "\n")
    Console().print(injection_table(result))
    if json_out is not None:
        console.print(f"JSON result: {json_out}")
    errors = sum(1 for o in result.outcomes if not o.scored)
    if errors:
        console.print(f"[magenta]{errors} of {len(result.outcomes)} probes were not scored "
                      "(judge errors; see --json)[/]")


async def _eval_injection(
    config: Config, cases: list[InjectionCase], version: str
) -> InjectionReport:
    async with judge_with_progress(config, "judging probes", 2 * len(cases),
                                   make=_configured_judge) as (judge, advance):
        return await measure_injection(judge, cases, cases_version=version, progress=advance)


def _configured_judge(config: Config, model: Model | None) -> Judge:
    """The configured judge as ``check`` makes it (the pairs judge's settings not applied)."""
    return create_judge(config, model)


def injection_table(result: InjectionReport) -> Table:
    """One row per attack and one for all probes."""
    table = Table(title=f"Prompt injection: {result.judge} ({result.cases_version})",
                  title_justify="left")
    for name in ("attack", "probes", "errors", "flipped to target", "verdict changed",
                 "clean correct", "not counted"):
        table.add_column(name, justify="left" if name == "attack" else "right")
    totals = [result.overall, *([result.controls] if result.controls else [])]
    for group in [*result.by_attack, *totals]:
        table.add_row(Text(group.name), str(group.n), str(group.n_errors),
                      rate_text(group.flip), rate_text(group.changed),
                      rate_text(group.clean_correct), str(group.not_counted),
                      style="bold" if group in totals else "")
    return table


def _parse_grid(value: str) -> list[float] | None:
    if value.strip().lower() == "auto":
        return None
    try:
        grid = sorted({float(part) for part in value.split(",") if part.strip()})
    except ValueError as exc:
        raise InputError(f"--grid expects comma-separated numbers like 0.6,0.8, not {value!r}"
                         ) from exc
    if not grid or grid[0] <= 0 or grid[-1] > 1:
        raise InputError("--grid values must be in (0, 1]")
    return grid


@eval_group.command("arbitration")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option("--judge", "judge_name", type=RegistryChoice(JUDGES), default="builtin",
              show_default=True, help="Judge of the pairs (judged claims are not judged again).")
@click.option("--model", "-m", help="Model spec (needed by --judge llm and cascade).")
@click.option("--limit", type=click.IntRange(1), help="Only the first N rows of each file.")
@click.option("--max-escalation", type=click.FloatRange(0, 1), default=0.2, show_default=True,
              help="Largest share of claims the chosen policy may escalate.")
@click.option("--grid", "grid_text", default="auto", show_default=True,
              help="min_confidence values swept for FACT, HALLUCINATION and COVERAGE_GAP, "
              "each also off: comma-separated, or auto (per category, quantiles 5-95 % of "
              "the judge's confidences in it).")
@json_out_option("Write the sweep (front, chosen policy, every judged claim) as JSON here; "
                 "it can be passed back as FILE to sweep again without judging.")
@click.option("--svg", "svg_out", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the curve (errors caught vs share escalated) as SVG here.")
@config_option
def arbitration(
    files: tuple[Path, ...],
    judge_name: str,
    model: str | None,
    limit: int | None,
    max_escalation: float,
    grid_text: str,
    json_out: Path | None,
    svg_out: Path | None,
    config_path: Path | None,
) -> None:
    """How well an arbitration policy routes the judge's mistakes to review, on labelled
    claim/evidence pairs (JSONL, with an optional `risk` per line) or the JSON of an earlier
    run: sweeps [arbitration] min_confidence (and high_risk/low_risk when risks are given),
    prints the Pareto front (share escalated vs share of judge errors caught) and the
    policy that catches the most errors within --max-escalation, as a TOML block.

    An error is a claim whose judge category disagrees with its gold label (SUPPORTED ->
    FACT, CONTRADICTED -> HALLUCINATION, NOT_ENOUGH_INFO -> COVERAGE_GAP; 2-way
    NOT_SUPPORTED -> HALLUCINATION or COVERAGE_GAP); caught = escalated. Claims the judge
    failed on (ERROR) are counted apart."""
    grid = _parse_grid(grid_text)
    config = load_config(config_path, model=model, judge=judge_name)
    sources = [read_source(f, limit) for f in files]
    claims, judge_id = asyncio.run(_judge_sources(config, sources))
    result = evaluate_arbitration(claims, config.arbitration, max_escalation=max_escalation,
                                  grid=grid, judge=judge_id, files=[str(f) for f in files])
    if json_out is not None:
        atomic_write_text(json_out, result.model_dump_json(indent=2) + "\n")
    if svg_out is not None:
        atomic_write_text(svg_out, curve_svg(result) + "\n")
    out = Console()
    out.print(Text(f"{result.n} claims ({result.n_with_risk} with a risk): {result.n_errors} "
                   f"judge errors ({result.n_judgment_errors} JUDGMENT_ERROR), "
                   f"{result.n_judge_errors} ERROR (judge failed, counted apart); "
                   f"{result.n_policies} policies swept"))
    out.print(arbitration_table(result))
    if result.chosen is None:
        console.print(f"[yellow]no policy escalates at most {max_escalation:.0%} of the claims "
                      "(ERROR and JUDGMENT_ERROR claims escalate by policy)[/]")
    else:
        click.echo(f"\nCatches the most errors escalating at most {max_escalation:.0%}:\n")
        click.echo(result.chosen_toml, nl=False)
    for path in (json_out, svg_out):
        if path is not None:
            console.print(f"wrote {path}")


async def _judge_sources(config: Config, sources: list[Source]
                         ) -> tuple[list[LabelledClaim], str | None]:
    """The labelled claims of every source; the judge's id (None: nothing was judged)."""
    total = sum(len(s.pairs) for s in sources)
    if not total:
        return await judge_sources(sources, None), None
    async with judge_with_progress(config, "judging pairs", total) as (judge, advance):
        return await judge_sources(sources, judge, advance), stage_id(judge)


def arbitration_table(result: ArbitrationEval) -> Table:
    """The Pareto front, one row per policy (the configured policy first when it is not on
    the front)."""
    table = Table(title=f"Arbitration policies on the front ({result.n} claims, "
                  f"{result.n_errors} judge errors)", title_justify="left", box=box.SIMPLE_HEAD,
                  caption="FACT/HALL./GAP <: min_confidence; escalated: share of claims; "
                  "caught: share of judge errors escalated; precision: share of escalated "
                  "(non-ERROR) claims that are errors; slipped: errors accepted",
                  caption_justify="left")
    table.add_column("policy", overflow="fold")
    names = ["FACT <", "HALL. <", "GAP <", *(["risk hi/lo"] if result.high_risk_grid else []),
             "escalated", "caught", "precision", "slipped"]
    for name in names:
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    base = _thresholds(result.base)
    rows = [] if any(_thresholds(p) == base for p in result.front) else [result.base]
    for p in [*rows, *result.front]:
        marks = [n for n, hit in (("configured", _thresholds(p) == base),
                                  ("chosen", p == result.chosen)) if hit]
        floors = [p.min_confidence.get(c.value) for c in SWEPT]
        table.add_row(
            ", ".join(marks), *("—" if f is None else f"{f:g}" for f in floors),
            *([f"{p.high_risk:g}/{p.low_risk:g}"] if result.high_risk_grid else []),
            _pct(p.escalated), _pct(p.caught), _pct(p.precision), str(p.n_accepted_errors),
            style="bold" if marks else "")
    return table


def _thresholds(point: PolicyPoint) -> tuple[object, ...]:
    return (sorted(point.min_confidence.items()), point.high_risk, point.low_risk)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"
