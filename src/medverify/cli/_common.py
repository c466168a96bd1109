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

F = TypeVar("F", bound=Callable[..., Any])

console = Console(stderr=True)


def config_option(func: F) -> F:
    return click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path, dir_okay=False),
        help="TOML config file (default: $MEDVERIFY_HOME/config.toml).",
    )(func)


def store_option(func: F) -> F:
    return click.option(
        "--store",
        type=click.Path(path_type=Path, dir_okay=False),
        help="Run store database (default: $MEDVERIFY_HOME/runs.db).",
    )(func)


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
