"""``medverify calibrate``: fit how sure the configured judge's verdicts are (a confidence
card) on labelled pairs or the clinicians' closed review items; ``--apply NAME`` saves it
on the record. The work is in :mod:`medverify.evals.calibrate`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from medverify.cli import main
from medverify.cli._common import config_option, console, counting_bar, load_config
from medverify.cli._names import JUDGES, RegistryChoice
from medverify.config import Config
from medverify.errors import InputError
from medverify.evals import calibrate as flow
from medverify.evals.pairs import pairs_model
from medverify.files import atomic_write_text
from medverify.judge.confidence.card import ConfidenceCard


def _targets(values: tuple[str, ...]) -> dict[str, float]:
    out = {}
    for value in values:
        name, _, number = value.partition("=")
        try:
            out[name.strip().upper()] = float(number)
        except ValueError:
            raise click.BadParameter(f"{value!r}: expected CATEGORY=PRECISION") from None
    return out


@main.command("calibrate")
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--set", "sets", multiple=True, type=click.Choice(flow.TRAINING_ALLOWED),
              help="A shared data set that allows fitting (from MEDVERIFY_DATA).")
@click.option("--from-reviews", is_flag=True,
              help="The closed review items of the run store (the passages the reviewer saw).")
@click.option("--judge", "judge_name", type=RegistryChoice(JUDGES),
              help="The judge to calibrate (default: the configured one).")
@click.option("--model", "-m", help="Model spec of an LLM judge.")
@click.option("--limit", type=click.IntRange(1), help="Only the first N pairs of each file.")
@click.option("--folds", type=click.IntRange(2, 20), default=5, show_default=True)
@click.option("--target", "targets", multiple=True, metavar="CATEGORY=PRECISION",
              help="Raise a category's target precision, e.g. FACT=0.9 (default: FACT 0.70, "
              "HALLUCINATION 0.50, COVERAGE_GAP 0.50).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the card here.")
@click.option("--apply", "apply_name", metavar="NAME",
              help="Save the card as NAME in $MEDVERIFY_HOME/calibrations and record it in "
              "the run store's audit log; then set [judge_settings] calibration = \"NAME\".")
@click.option("--by", help="Who fits or applies the card (default: the login name).")
@config_option
def calibrate(files: tuple[Path, ...], sets: tuple[str, ...], from_reviews: bool,
              judge_name: str | None, model: str | None, limit: int | None, folds: int,
              targets: tuple[str, ...], out: Path | None, apply_name: str | None,
              by: str | None, config_path: Path | None) -> None:
    """Fit a confidence card for a judge on labelled claim/evidence examples: per category,
    the probability that the verdict is right and the smallest threshold at which its
    precision holds (one-sided 95 % Wilson bound, grouped cross-validation)."""
    config = load_config(config_path, model=model, judge=judge_name)
    examples, sources = _examples(config, files, sets, from_reviews, limit)
    card = asyncio.run(_fit(config, examples, sources, folds, _targets(targets), by))
    Console().print(card_table(card))
    if out is not None:
        atomic_write_text(out, card.model_dump_json(indent=1) + "\n")
        console.print(f"card: {out}")
    if apply_name:
        path = flow.apply_card(card, apply_name, config.store_location, by)
        console.print(f"applied: {path} (card {card.card_id}); set [judge_settings] "
                      f"calibration = \"{apply_name}\" to use it")


def _examples(config: Config, files: tuple[Path, ...], sets: tuple[str, ...],
              from_reviews: bool, limit: int | None) -> tuple[list[flow.Labelled], list[str]]:
    examples, sources = [], []
    for path in [*files, *(flow.training_set(s) for s in sets)]:
        examples += flow.from_pairs(path, limit)
        sources.append(path.name)
    if from_reviews:
        reviewed, skipped = flow.reviewed_items(config.store_location)
        examples += reviewed
        sources.append(f"reviews:{len(reviewed)} closed items")
        if skipped:
            console.print("left out: " + ", ".join(f"{n} ({why})" for why, n in
                                                  sorted(skipped.items())))
    if not examples:
        raise InputError("no labelled examples: pass pairs files, --set NAME or --from-reviews")
    return examples, sources


async def _fit(config: Config, examples: list[flow.Labelled], sources: list[str], folds: int,
               targets: dict[str, float], by: str | None) -> ConfidenceCard:
    model = pairs_model(config)
    try:
        judge = flow.plain_judge(config, model)
        with counting_bar("judging examples", len(examples)) as advance:
            verdicts = await flow.judge_all(judge, examples, advance)
        return flow.fit_card(judge, examples, verdicts, sources=sources, folds=folds,
                             targets=targets, by=by)
    finally:
        if model is not None:
            await model.aclose()


def card_table(card: ConfidenceCard) -> Table:
    """Per category: verdicts, threshold, held-out precision (95 % CI) and coverage; why a
    category has no threshold is in the caption."""
    table = Table(title=f"confidence card {card.card_id}: {card.judge} "
                  f"({card.data.rows} examples, sha256 {card.data.sha256[:12]})",
                  caption="\n".join(f"{name}: never sure: {fit.why_none}" for name, fit
                                    in card.categories.items() if fit.threshold is None),
                  caption_justify="left")
    for column in ("category", "verdicts", "right", "target", "threshold", "sure: n",
                   "sure: precision [95 % CI]", "not sure: precision", "coverage"):
        table.add_column(column, overflow="fold")
    for name, fit in card.categories.items():
        ci = (f" [{fit.cv_precision_ci[0]:.2f}, {fit.cv_precision_ci[1]:.2f}]"
              if fit.cv_precision_ci else "")
        table.add_row(
            name, str(fit.rows), str(fit.right), f"{fit.target:.2f}",
            "none" if fit.threshold is None else f"{fit.threshold:.3f}",
            str(fit.cv_confident),
            f"{fit.cv_precision:.3f}{ci}" if fit.cv_precision is not None else "-",
            _num(fit.cv_precision_not_sure), _num(fit.cv_coverage))
    return table


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
