"""``medverify train finetune``: the v3 verifier recipe (docs/verifier_corpus.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from medverify.cli.train import _data, train


@train.command("finetune")
@click.option("--corpus", type=click.Path(path_type=Path, dir_okay=False),
              help="Synthetic corpus from `medverify train corpus` (stage 1); omit for "
              "stage 2 alone.")
@click.option("--data-dir", type=click.Path(path_type=Path, file_okay=False),
              default=_data("pairs"), show_default="../shared/data/pairs beside the project",
              help="Folder with checkcovid_train/citint_train/scifact_train.jsonl.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="Output weights folder (holds checkpoint.pt while training; rerun the "
              "same command to resume).")
@click.option("--corpus-limit", type=click.IntRange(1), help="Use N corpus pairs (seeded).")
@click.option("--exclude-edit", "exclude", multiple=True, metavar="GENERATOR[/EDIT]",
              help="Leave an edit type or a generator out of stage 1 (ablation; repeatable).")
@click.option("--no-stage2", is_flag=True, help="Skip stage 2 (the real train pairs).")
@click.option("--stage1-epochs", type=click.IntRange(0), default=1, show_default=True)
@click.option("--stage2-epochs", type=click.IntRange(0), default=4, show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=64, show_default=True)
@click.option("--lr", type=float, default=4e-5, show_default=True)
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--seed", type=int, default=13, show_default=True)
@click.option("--eval", "eval_files", multiple=True,
              type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Pairs files measured after training (never used for a choice).")
def finetune_command(corpus: Path | None, data_dir: Path, out: Path, corpus_limit: int | None,
                     exclude: tuple[str, ...], no_stage2: bool, stage1_epochs: int,
                     stage2_epochs: int, batch_size: int, lr: float, device: str, seed: int,
                     eval_files: tuple[Path, ...]) -> None:
    """Fine-tune every layer of the verifier but its word embeddings: stage 1 on the
    synthetic corpus, stage 2 on the real train pairs; thresholds calibrated on held-out
    real train pairs. Runs on CUDA when there is a GPU, else on the CPU (same code)."""
    from medverify.verifier.finetune import FinetuneConfig, finetune

    meta = finetune(FinetuneConfig(
        corpus=corpus, data_dir=data_dir, out=out, corpus_limit=corpus_limit,
        exclude_edits=list(exclude), stage2=not no_stage2, stage1_epochs=stage1_epochs,
        stage2_epochs=stage2_epochs, batch_size=batch_size, lr=lr, device=device, seed=seed,
        eval_files=list(eval_files)))
    click.echo(json.dumps({k: meta[k] for k in ("held_out_macro_f1", "thresholds", "dev",
                                                "timing") if k in meta}, indent=2))
