"""``medverify runs``: list recorded runs and rebuild their reports without calling models."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from medverify.cli import main
from medverify.cli._common import config_option, load_config, store_option, write_outputs
from medverify.report.terminal import print_summary
from medverify.store.runs import RunStore


@main.group()
def runs() -> None:
    """Recorded runs (config, models, prompts, records, tokens)."""


@runs.command("list")
@click.option("--limit", type=int, default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@config_option
@store_option
def list_runs(limit: int, as_json: bool, config_path: Path | None, store: Path | None) -> None:
    """List the most recent runs."""
    config = load_config(config_path, store=store)
    with RunStore(config.store_location) as db:
        infos = db.list_runs(limit)
    if as_json:
        click.echo(json.dumps([i.model_dump(mode="json") for i in infos], indent=2))
        return
    table = Table("run", "kind", "status", "created", "answers", "claims", "models")
    for info in infos:
        table.add_row(
            info.id,
            info.kind,
            info.status + (" (process gone)" if info.process_gone else ""),
            info.created_at,
            str(info.n_answers),
            str(info.n_claims),
            ", ".join(sorted(set(info.models.values()))),
        )
    Console().print(table)


@runs.command("show")
@click.argument("run_id")
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the rebuilt JSON report(s) here.",
)
@click.option(
    "--html",
    "html_out",
    type=click.Path(path_type=Path),
    help="Write the rebuilt HTML report(s) here.",
)
@config_option
@store_option
def show(
    run_id: str,
    json_out: Path | None,
    html_out: Path | None,
    config_path: Path | None,
    store: Path | None,
) -> None:
    """Rebuild a run's reports and metrics from the store (no model is called)."""
    config = load_config(config_path, store=store)
    with RunStore(config.store_location) as db:
        info = db.get_run(run_id)
        reports = db.reports(info.id)
    click.echo(
        f"run {info.id}: {info.status}, {info.n_answers} answer(s), created {info.created_at}"
    )
    if info.error:
        click.echo(f"error: {info.error}")
    for report in reports:
        print_summary(report)
    write_outputs(reports, json_out, html_out)
