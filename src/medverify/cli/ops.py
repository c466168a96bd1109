"""``medverify ops``: operating the service: the drift of the recorded verdicts."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from medverify.cli import main
from medverify.cli._common import config_option, load_config, store_option
from medverify.config import DRIFT_RATES
from medverify.ops.drift import DriftReport, drift_report, parse_since
from medverify.store.runs import RunStore


@main.group()
def ops() -> None:
    """Operating the service: how the verdicts move over time (docs/operations.md)."""


@ops.command("report")
@click.option("--since", default="7d", show_default=True,
              help="First day: a span back from now (7d, 36h, 2w) or a date (2025-05-01).")
@click.option("--rate", "rates", multiple=True, type=click.Choice(DRIFT_RATES),
              help="Show only this rate (repeatable; default: all).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--fail-on-drift", is_flag=True,
              help="Exit with 1 when the last day drifted (for a cron job).")
@config_option
@store_option
def report(since: str, rates: tuple[str, ...], as_json: bool, fail_on_drift: bool,
           config_path: Path | None, store: Path | None) -> None:
    """Daily rates of each category, decision and NOT_SURE with 95 % Wilson intervals,
    from the run store's check runs; a day is drifted on a rate that moved from its
    baseline (the [ops] baseline_days before it) by more than [ops] margins."""
    config = load_config(config_path, store=store)
    with RunStore(config.store_location) as db:
        found = drift_report(db, config.ops, parse_since(since))
    if as_json:
        click.echo(found.model_dump_json(indent=2))
    else:
        _print(found, rates or DRIFT_RATES)
    if fail_on_drift and found.days and found.days[-1].drifted:
        sys.exit(1)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _print(found: DriftReport, rates: tuple[str, ...]) -> None:
    table = Table("day", "claims", "rate", "%", "95 % CI", "baseline %", "drifted",
                  title="Shares of the claims checked, per day (UTC)")
    for day in found.days:
        for i, name in enumerate(rates):
            rate = day.rates[name]
            interval = "–" if rate.low is None else f"{_pct(rate.low)}–{_pct(rate.high)}"
            mark = "[bold red]DRIFTED[/]" if rate.drifted else (
                "" if rate.margin is not None else "[dim]not watched[/]")
            table.add_row(day.label if i == 0 else "", str(day.claims) if i == 0 else "",
                          name, _pct(rate.share), interval, _pct(rate.baseline), mark,
                          end_section=i == len(rates) - 1)
    console = Console()
    console.print(table)
    watched = ", ".join(f"{name} {margin:+.0%}" for name, margin in found.margins.items())
    console.print(f"Baseline: the {found.baseline_days} days before each day. Watched (margin "
                  f"over the baseline, \\[ops] margins): {watched or 'nothing'}. A day is judged "
                  f"when it and its baseline hold {found.min_claims} claims or more.")
