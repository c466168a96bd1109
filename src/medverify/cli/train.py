"""``medverify train verifier``: reproducible training of the built-in verifier."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import click

from medverify.cli import main
from medverify.files import data_dir


def _data(*parts: str) -> Callable[[], Path]:
    """A click default read when the command runs: ``parts`` under the data folder
    (``$MEDVERIFY_DATA``, else ``../shared/data`` beside the project)."""
    return lambda: data_dir().joinpath(*parts)


PAIRS_DIR = click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=_data("pairs"),
    show_default="../shared/data/pairs beside the project",
    help="Folder with checkcovid_train/citint_train/scifact_train.jsonl.",
)
"""The training pairs' folder, as ``train verifier`` and ``train thresholds`` read it."""

SMOKE = {"limit": 120, "epochs": 1, "medquad_docs": 40, "n_layers": 2, "frozen_layers": 1,
         "max_tokens": 128}
"""What ``--smoke`` changes in the training config: a run of a minute or two that checks the
pipeline end to end; its weights are for tests, not for use."""


@main.group()
def train() -> None:
    """Train built-in models from public data."""


@train.command("verifier")
@PAIRS_DIR
@click.option(
    "--medquad-dir",
    type=click.Path(path_type=Path),
    default=_data("raw", "medquad"),
    show_default="../shared/data/raw/medquad beside the project",
    help="MedQuAD XML folder for synthetic pairs (skipped if absent).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Output weights folder (default: the package's shipped weights folder).",
)
@click.option("--epochs", type=int, default=6, show_default=True)
@click.option("--seed", type=int, default=13, show_default=True)
@click.option("--threads", type=int, default=2, show_default=True)
@click.option("--n-layers", type=int, default=4, show_default=True, help="Encoder layers kept.")
@click.option(
    "--frozen-layers",
    type=int,
    default=3,
    show_default=True,
    help="Lower layers kept frozen (their outputs are cached once).",
)
@click.option("--lr-layers", type=float, default=4e-4, show_default=True)
@click.option("--lr-head", type=float, default=2e-3, show_default=True)
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option(
    "--nei-extra-windows",
    type=int,
    default=0,
    show_default=True,
    help="Extra windows per long NOT_ENOUGH_INFO evidence used as training windows.",
)
@click.option(
    "--medquad-docs", type=int, default=1500, show_default=True, help="MedQuAD documents sampled."
)
@click.option(
    "--swap-nei",
    default="check-covid=150,citation-integrity=500,scifact=0",
    show_default=True,
    help="Evidence-swap NOT_ENOUGH_INFO pairs per train set (dataset=count,...).",
)
@click.option("--smoke", is_flag=True, help="Tiny run (few rows, 1 epoch, 1 layer) for testing.")
def verifier(
    data_dir: Path,
    medquad_dir: Path,
    out: Path | None,
    epochs: int,
    seed: int,
    threads: int,
    n_layers: int,
    frozen_layers: int,
    lr_layers: float,
    lr_head: float,
    batch_size: int,
    nei_extra_windows: int,
    medquad_docs: int,
    swap_nei: str,
    smoke: bool,
) -> None:
    """Fine-tune the 3-way claim verifier on the allowed train splits."""
    from medverify.errors import InputError
    from medverify.verifier.infer import DEFAULT_WEIGHTS
    from medverify.verifier.train import TrainConfig
    from medverify.verifier.train import train as run_training

    if not data_dir.is_dir():
        raise InputError(f"training data folder not found: {data_dir}")
    config = TrainConfig(
        data_dir=data_dir, medquad_dir=medquad_dir, out=out or DEFAULT_WEIGHTS,
        epochs=epochs, seed=seed, threads=threads, n_layers=n_layers,
        frozen_layers=frozen_layers, lr_layers=lr_layers, lr_head=lr_head,
        batch_size=batch_size, nei_extra_windows=nei_extra_windows,
        medquad_docs=medquad_docs, swap_nei=_parse_counts(swap_nei),
    )
    if smoke:
        config = config.model_copy(update=SMOKE)
    report = run_training(config)
    keys = ("val_macro_f1_argmax", "val_macro_f1_calibrated", "thresholds", "train_seconds")
    click.echo(json.dumps({k: report[k] for k in keys}, indent=2))


def _parse_counts(text: str) -> dict[str, int]:
    """``"a=1,b=2"`` -> ``{"a": 1, "b": 2}`` (clear error on a malformed entry)."""
    from medverify.errors import InputError

    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, count = item.partition("=")
        if not count.strip().isdigit():
            raise InputError(f"--swap-nei expects dataset=count entries, got {item!r}")
        out[name.strip()] = int(count)
    return out


@train.command("thresholds")
@PAIRS_DIR
@click.option(
    "--weights",
    type=click.Path(path_type=Path),
    default=None,
    help="Weights folder whose metadata gets the thresholds (default: the shipped weights).",
)
@click.option(
    "--scoring",
    type=click.Choice(["onnx_int8", "window_scales", "bf16", "per_window", "batched"]),
    default="onnx_int8",
    show_default=True,
    help="The verifier arithmetic to fit the support/contradict thresholds for.",
)
@click.option("--seed", type=int, default=13, show_default=True,
              help="The training run's seed: it picks the same held-out split.")
def thresholds(data_dir: Path, weights: Path | None, scoring: str, seed: int) -> None:
    """Fit the verifier's thresholds for one scoring arithmetic on the held-out split.

    The split is the training run's own (same seed and fraction, never dev sets); the result
    is written to the weights' metadata under ``thresholds_by_scoring``."""
    from medverify.errors import InputError
    from medverify.verifier.infer import DEFAULT_WEIGHTS
    from medverify.verifier.train import TrainConfig, assemble, calibrate_scoring

    if not data_dir.is_dir():
        raise InputError(f"training data folder not found: {data_dir}")
    folder = weights or DEFAULT_WEIGHTS
    _, val = assemble(TrainConfig(data_dir=data_dir, medquad_dir=None, out=folder, seed=seed))
    meta = calibrate_scoring(folder, val, scoring)
    click.echo(json.dumps({"scoring": scoring, "held_out_pairs": len(val),
                           "thresholds": meta["thresholds_by_scoring"][scoring],
                           "held_out_macro_f1": meta["val_macro_f1_by_scoring"][scoring]},
                          indent=2))
