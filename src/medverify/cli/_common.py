"""Shared pieces of the command modules."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from medverify.config import Config
from medverify.files import atomic_write_text
from medverify.records import Report
from medverify.report.html import write_html
from medverify.report.render_json import write_json

F = TypeVar("F", bound=Callable[..., Any])

console = Console(stderr=True)


def config_option(func: F) -> F:
    return click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path, dir_okay=False),
        help="TOML config file (default: $MEDVERIFY_HOME/config.toml).",
    )(func)


def json_out_option(help_text: str) -> Callable[[F], F]:
    """``--json FILE``: where to write a command's full result as JSON."""
    return click.option("--json", "json_out", type=click.Path(path_type=Path, dir_okay=False),
                        help=help_text)


def _store_location(ctx: click.Context, param: click.Parameter,
                    value: str | None) -> Path | str | None:
    """A file path stays a path; a URL (sqlite:///PATH, postgresql://...) stays text."""
    if value is None or "://" in value:
        return value
    return Path(value)


def store_option(func: F) -> F:
    return click.option(
        "--store",
        callback=_store_location,
        metavar="PATH|URL",
        help="Run store: a SQLite file (default: $MEDVERIFY_HOME/runs.db) or a database URL, "
             "postgresql://USER:PASSWORD@HOST:PORT/DB (docs/scale.md).",
    )(func)


def executor_option(what: str) -> Callable[[F], F]:
    """``--executor local|ray|ray:ADDRESS`` (``medverify.executor``): where ``what`` runs."""
    return click.option(
        "--executor",
        "executor_spec",
        default="local",
        show_default=True,
        metavar="local|ray|ray:HOST:PORT",
        help=f"Where {what}: local (this process), ray (a local Ray) or ray:HOST:6379 "
        "(a Ray cluster; needs `pip install 'medverify[ray]'`; docs/scale.md).",
    )


def load_config(config_path: Path | None, **overrides: Any) -> Config:
    return Config.load(config_path, **overrides)


@contextmanager
def progress_bar(description: str, total: int) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr, shown only for work that may take a while."""
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda done, n: bar.update(task, completed=done, total=n)


@contextmanager
def counting_bar(description: str, total: int) -> Iterator[Callable[[int], None]]:
    """:func:`progress_bar` driven by increments: yields ``advance(n)`` (n more done)."""
    with progress_bar(description, total) as bar:
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            bar(done, total)

        yield advance


def write_outputs(reports: list[Report], json_out: Path | None, html_out: Path | None) -> None:
    if json_out:
        if len(reports) == 1:
            write_json(reports[0], json_out)
        else:
            body = ",\n".join(r.model_dump_json(indent=2) for r in reports)
            atomic_write_text(json_out, f"[\n{body}\n]\n")
        console.print(f"JSON report: {json_out}")
    if html_out:
        if len(reports) == 1:
            write_html(reports[0], html_out)
        else:
            html_out.mkdir(parents=True, exist_ok=True)
            for report in reports:
                write_html(report, html_out / f"{report.answer.id}.html")
        console.print(f"HTML report: {html_out}")
