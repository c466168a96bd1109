"""``medverify eval``: evaluations of retrieval and of judges on data with known answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from medverify.audit.evaluate import AgreementScores, AuditEvaluation, evaluate_audit
from medverify.audit.records import Estimate
from medverify.cli import main
from medverify.cli._common import (
    config_option,
    console,
    json_out_option,
    load_config,
    progress_bar,
)
from medverify.cli._names import EMBEDDERS, JUDGES, NamesHelpOption, RegistryChoice
from medverify.config import Config, KBSettings
from medverify.errors import InputError
from medverify.evals.arbitration import (
    SWEPT,
    ArbitrationEval,
    LabelledClaim,
    PolicyPoint,
    Source,
    curve_svg,
    judge_sources,
    read_source,
)
from medverify.evals.arbitration import evaluate as evaluate_arbitration
from medverify.evals.confidence import confidence_table
from medverify.evals.confidence import curve_svg as confidence_svg
from medverify.evals.pairs import (
    PairScores,
    PairsEval,
    aevaluate_pairs,
    evaluate_pairs_on,
    evaluate_retrieval,
    load_pairs,
    pairs_judge,
    pairs_model,
)
from medverify.executor import LocalExecutor, executor_from_spec
from medverify.factcheck.evaluate import evaluate as evaluate_factcheck
from medverify.factcheck.evaluate import read_fact_labels, read_ratings, read_reports
from medverify.factcheck.records import FactCheckScores
from medverify.files import atomic_write_text
from medverify.harness import stage_id
from medverify.injection import (
    InjectionCase,
    InjectionReport,
    load_cases,
    measure_injection,
    rate_text,
)
from medverify.judge import judge_from_config
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
            with progress_bar(f"judging pairs ({executor.name})", total) as bar:
                done = 0

                def advance(n: int) -> None:
                    nonlocal done
                    done += n
                    bar(done, total)

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


_judge_model = pairs_model
_labelling_judge = pairs_judge


async def _eval_pairs(config: Config, files: list[Path], limit: int | None) -> PairsEval:
    model = _judge_model(config)
    try:
        judge = _labelling_judge(config, model)
        total = sum(len(load_pairs(f, limit)) for f in files)
        with progress_bar("judging pairs", total) as bar:
            done = 0

            def advance(n: int) -> None:
                nonlocal done
                done += n
                bar(done, total)

            return await aevaluate_pairs(files, judge, limit=limit, progress=advance)
    finally:
        if model is not None:
            await model.aclose()


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
    model = _judge_model(config)
    try:
        judge = judge_from_config(config, model)
        with progress_bar("judging probes", 2 * len(cases)) as bar:
            done = 0

            def advance(n: int) -> None:
                nonlocal done
                done += n
                bar(done, 2 * len(cases))

            return await measure_injection(judge, cases, cases_version=version, progress=advance)
    finally:
        if model is not None:
            await model.aclose()


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
    model = _judge_model(config)
    try:
        judge = _labelling_judge(config, model)
        with progress_bar("judging pairs", total) as bar:
            done = 0

            def advance(n: int) -> None:
                nonlocal done
                done += n
                bar(done, total)

            return await judge_sources(sources, judge, advance), stage_id(judge)
    finally:
        if model is not None:
            await model.aclose()


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
