"""``medverify ops``: operating the service: the drift of the recorded verdicts, and how often
clinicians overturn sure verdicts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table

from medverify.cli import main
from medverify.cli._common import config_option, load_config, store_option
from medverify.config import DRIFT_RATES
from medverify.ops.drift import DriftReport, Period, RateNow, drift_report, parse_since
from medverify.ops.overturns import SureCount, SureReport, sure_report
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
    baseline (the [ops] baseline_days before it) by more than [ops] margins. Then the sure
    verdicts clinicians labelled and overturned, per ISO week and judge, and per judge over
    the last 28 days against [ops] sure_precision_target."""
    config = load_config(config_path, store=store)
    first = parse_since(since)
    with RunStore(config.store_location) as db:
        found = drift_report(db, config.ops, first)
        sure = sure_report(db, config.ops, first)
    if as_json:
        click.echo(json.dumps({**found.model_dump(mode="json"),
                               "sure_verdicts": sure.model_dump(mode="json")}, indent=2))
    else:
        console = Console()
        _print(found, rates or DRIFT_RATES, console)
        _print_sure(sure, console)
    if fail_on_drift and found.days and found.days[-1].drifted:
        sys.exit(1)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _interval(low: float | None, high: float | None) -> str:
    return "–" if low is None else f"{_pct(low)}–{_pct(high)}"


def _verdict(rate: RateNow, claims: int, min_claims: int) -> str:
    """What the drifted column says: DRIFTED, or why not (never blank)."""
    if rate.drifted:
        return "[bold red]DRIFTED[/]"
    if rate.margin is None:
        return "[dim]not watched[/]"
    if rate.baseline_n == 0:
        return "[dim]no baseline[/]"
    if rate.baseline_n < min_claims or claims < min_claims:
        return "[dim]few claims[/]"
    return "no"


def _quiet_runs(days: list[Period]) -> list[Period | tuple[Period, Period]]:
    """The days, with each run of consecutive days without claims as one (first, last)."""
    out: list[Period | tuple[Period, Period]] = []
    for day in days:
        last = out[-1] if out else None
        if day.claims == 0 and isinstance(last, tuple):
            out[-1] = (last[0], day)
        elif day.claims == 0:
            out.append((day, day))
        else:
            out.append(day)
    return out


_COMPACT: dict[str, Any] = {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False}
"""Tables without side borders: the report's rows fit 80 columns whole."""


def _print(found: DriftReport, rates: tuple[str, ...], console: Console) -> None:
    table = Table(title="Shares of the claims checked, per day (UTC)", **_COMPACT)
    for name in ("day", "claims", "rate", "%", "95 % CI", "base %", "drifted"):
        table.add_column(name, no_wrap=True)  # 78 columns at most: nothing is cut at 80
    for entry in _quiet_runs(found.days):
        if isinstance(entry, tuple):
            first, last = entry
            span = first.label if first is last else f"{first.label} –\n{last.label}"
            table.add_row(span, "0", "[dim]no claims[/]", "", "", "", "", end_section=True)
            continue
        for i, name in enumerate(rates):
            rate = entry.rates[name]
            table.add_row(entry.label if i == 0 else "", str(entry.claims) if i == 0 else "",
                          name, _pct(rate.share), _interval(rate.low, rate.high),
                          _pct(rate.baseline), _verdict(rate, entry.claims, found.min_claims),
                          end_section=i == len(rates) - 1)
    console.print(table)
    watched = ", ".join(f"{name} {margin:+.0%}" for name, margin in found.margins.items())
    console.print(f"Baseline: the {found.baseline_days} days before each day. Watched (margin "
                  f"over the baseline, \\[ops] margins): {watched or 'nothing'}. A day is judged "
                  f"when it and its baseline hold {found.min_claims} claims or more.")


def _sure_row(table: Table, found: SureCount) -> None:
    table.add_row(found.period, found.judge, str(found.labelled), str(found.overturned),
                  _pct(found.precision), _interval(found.low, found.high),
                  f"{found.audited_overturned}/{found.audited}")


def _print_sure(found: SureReport, console: Console) -> None:
    """Sure verdicts clinicians labelled and overturned, per week and judge, then per judge
    over the recent window."""
    if not found.weeks and not found.recent:
        console.print("Sure verdicts overturned: none labelled since the first day (nor in "
                      "the last 28 days).")
        return
    table = Table(title="Sure verdicts labelled by clinicians (CANNOT_TELL left out)",
                  **_COMPACT)
    for name in ("week", "judge", "labelled", "overturned", "kept %", "95 % CI",
                 "spot checks\noverturned"):
        table.add_column(name, no_wrap=name != "judge", overflow="fold")
    for row in found.weeks:
        _sure_row(table, row)
    if found.weeks:
        table.add_section()
    for row in found.recent:
        _sure_row(table, row)
    console.print(table)
    below = ", ".join(found.below_target) or "none"
    console.print(f"Below the target ({found.target:.0%} kept, \\[ops] sure_precision_target, "
                  f"on {found.min_labelled} labels or more) over the last 28 days: {below}.")
