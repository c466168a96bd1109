"""``medverify eval judges``: several judges side by side on the same seeded pairs.

    medverify eval judges ../shared/data/pairs/healthver_dev.jsonl --sample 150 \
        --judge builtin --judge llm-scored=local:qwen2.5-0.5b \
        --judge cascade=local:qwen2.5-0.5b --out runs/judges
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
from rich.table import Table

from medverify.cli._common import config_option, console, load_config
from medverify.cli._names import JUDGES, SECOND_STAGES, RegistryChoice, RegistryEntry
from medverify.cli.eval import eval_group
from medverify.files import atomic_write_text


@eval_group.command("judges")
@click.argument("pairs_files", nargs=-1, required=True, metavar="PAIRS.jsonl...",
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--judge", "judges", multiple=True, required=True, metavar="NAME[=MODEL]",
              type=RegistryEntry(JUDGES),
              help="A judge to compare (repeat): builtin, llm=SPEC, llm-scored=SPEC, "
              "cascade=SPEC, or a plugin's name.")
@click.option("--sample", type=int, default=150, show_default=True,
              help="Pairs per file, drawn with --seed (0: every pair).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for verdicts (resumable), judges.json, judges.md and judges.svg.")
@click.option("--cascade-route", type=click.Choice(["not_sure", "margins"]),
              default="not_sure", show_default=True,
              help="Which pairs a cascade judge sends on (its [judge_settings] cascade_route).")
@click.option("--cascade-second", type=RegistryChoice(SECOND_STAGES),
              default="llm-scored", show_default=True,
              help="A cascade judge's second stage: a judge that can be one.")
@click.option("--calibration-family", default="auto", show_default=True,
              help="The built-in judge's calibration family (auto: per data set).")
@config_option
def judges_command(pairs_files: tuple[Path, ...], judges: tuple[str, ...], sample: int,
                   seed: int, out: Path, cascade_route: str, cascade_second: str,
                   calibration_family: str, config_path: Path | None) -> None:
    """Judge a seeded sample of each PAIRS file with each --judge and compare them:
    macro-F1 and FACT precision with bootstrap intervals, per-class F1, confident FACT
    precision and coverage, seconds and tokens per pair, and the cascade's
    cost-vs-quality curve (docs/judges.md). A killed run resumes from --out."""
    from medverify.evals.calibrate import card_note
    from medverify.evals.judges import evaluate_judges, parse_judge
    from medverify.evals.judges_report import COLUMNS, markdown, row, svg

    config = load_config(config_path)
    settings = config.judge_settings.model_copy(
        update={"cascade_route": cascade_route, "cascade_second": cascade_second,
                "calibration_family": calibration_family})
    config = config.model_copy(update={"judge_settings": settings})
    entries = [parse_judge(text) for text in judges]
    note = card_note(config)
    if note:
        console.print(note)
    out.mkdir(parents=True, exist_ok=True)
    report = asyncio.run(evaluate_judges(entries, list(pairs_files), out, config,
                                         sample=sample or None, seed=seed,
                                         progress=lambda s: console.print(s)))
    atomic_write_text(out / "judges.md", markdown(report))
    atomic_write_text(out / "judges.svg", svg(report))
    table = Table(title="Judges side by side", title_justify="left")
    for name in COLUMNS:
        table.add_column(name)
    for result in report.results:
        table.add_row(*row(result))
    console.print(table)
    console.print(f"wrote {out / 'judges.md'}, {out / 'judges.svg'}, {out / 'judges.json'}")
