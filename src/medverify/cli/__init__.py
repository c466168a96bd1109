"""The ``medverify`` command line: a thin layer over the library.

One module per command group; each registers itself on :data:`main`.
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from medverify.errors import MedverifyError

_COMMAND_MODULES = (
    "check", "answer", "factcheck", "audit", "bench", "kb", "runs", "eval", "demo", "train",
    "risk", "keys", "serve", "review", "trials", "train_corpus", "train_finetune", "risk_models",
    "eval_judges", "eval_outputs", "eval_judging", "models", "ops", "calibrate",
)


class _Main(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except MedverifyError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except BaseExceptionGroup as group:  # raised inside an asyncio.TaskGroup
            user_errors, other = group.split(MedverifyError)
            if user_errors is None or other is not None:
                raise
            click.echo(f"error: {_first_leaf(user_errors)}", err=True)
            sys.exit(2)


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


@click.group(cls=_Main)
@click.version_option(package_name="medverify")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Check what medical LLM answers claim."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


for _name in _COMMAND_MODULES:
    importlib.import_module(f"medverify.cli.{_name}")
