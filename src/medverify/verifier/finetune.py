"""Full fine-tuning of the built-in verifier (the v3 recipe, issue 18): every layer but the
word embeddings trainable, stage 1 on the synthetic corpus of ``medverify train corpus``,
stage 2 on the real train pairs, on CUDA or CPU with the same code.

- Examples are (claim, window) pairs made exactly as the v2 recipe makes them
  (:func:`medverify.verifier.data.to_examples`: the best-overlap window of the evidence,
  ``max_tokens`` word pieces, the claim capped), so inference's windowing is unchanged.
- The real train pairs are split by group into train and held-out (``val_frac``) as in v2;
  the held-out pairs choose the stage-2 epoch and calibrate the decision thresholds. Dev and
  evaluation sets are only measured, after training, never used for a choice.
- Class-weighted cross-entropy, AdamW (encoder and head learning rates), linear warmup and
  decay per stage, gradient clipping, bf16 autocast on CUDA, fixed seeds.
- A checkpoint (trainable weights, optimizer, scheduler, stage, step) is written atomically
  every ``checkpoint_every`` steps and at each stage's end; a rerun with the same config
  resumes from it, so an interrupted run loses at most ``checkpoint_every`` steps (a
  stage 2 resumed mid-way chooses its best epoch among those after the resume).
- The result is saved in the shipped format (:func:`medverify.verifier.model.save_verifier`)
  with the recipe, counts, history and thresholds in ``verifier.json``.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, Field

from medverify.errors import ConfigError, InputError
from medverify.verifier import data as vdata
from medverify.verifier.infer import aggregate, encode_pairs, label_pairs
from medverify.verifier.metrics import classification_metrics, supported_vs_rest
from medverify.verifier.model import (
    FROZEN_PREFIX,
    LABELS,
    CrossEncoder,
    build_model,
    load_tokenizer,
    save_verifier,
)
from medverify.verifier.train import TrainConfig as V2Config
from medverify.verifier.train import assemble, calibrate, per_dataset
from medverify.verifier.windows import make_windows

log = logging.getLogger(__name__)
_INDEX = {label: i for i, label in enumerate(LABELS)}
CHECKPOINT = "checkpoint.pt"


class FinetuneConfig(BaseModel):
    """Everything that determines a fine-tuning run (recorded in ``verifier.json``)."""

    data_dir: Path  # the real train pairs (checkcovid_train, citint_train, scifact_train)
    out: Path
    corpus: Path | None = None  # the synthetic corpus (jsonl.gz); None: no stage 1
    corpus_limit: int | None = None  # the first N pairs of a seeded shuffle (size ablation)
    exclude_edits: list[str] = Field(default_factory=list)  # "contradicted/number", ...
    stage2: bool = True
    real_limit: int | None = None  # a seeded sample of the real pairs (tests, quick looks)
    n_layers: int = 4
    max_tokens: int = 256
    batch_size: int = 64
    stage1_epochs: int = 1
    stage2_epochs: int = 4
    lr: float = 4e-5
    lr_head: float = 1e-3
    lr_stage2: float = 2e-5
    warmup: float = 0.06
    weight_decay: float = 0.01
    val_frac: float = 0.15
    swap_nei: dict[str, int] = Field(
        default_factory=lambda: {"check-covid": 150, "citation-integrity": 500, "scifact": 0})
    seed: int = 13
    device: str = "auto"
    amp: bool = True
    checkpoint_every: int = 200
    threads: int | None = None
    eval_files: list[Path] = Field(default_factory=list)


# -- data ------------------------------------------------------------------------------------


def read_corpus(path: Path, *, limit: int | None = None, exclude: Sequence[str] = (),
                seed: int = 13) -> list[vdata.Pair]:
    """Corpus pairs as training pairs: all of them, or ``limit`` of a seeded shuffle, leaving
    out the ``exclude``d edit types (``generator/edit_type``, or a whole generator)."""
    if not path.is_file():
        raise InputError(f"no corpus at {path}: build one with `medverify train corpus`")
    pairs = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            row = json.loads(line)
            kind = f"{row['generator']}/{row['edit_type']}"
            if kind in exclude or row["generator"] in exclude:
                continue
            pairs.append(vdata.Pair(id=row["id"], dataset=f"corpus-{row['source']}",
                                    claim=row["claim"], evidence=row["evidence"],
                                    label=row["label"], group=row["group"], source=kind))
    random.Random(seed).shuffle(pairs)
    return pairs[:limit] if limit is not None else pairs


def real_pairs(config: FinetuneConfig) -> tuple[list[vdata.Pair], list[vdata.Pair]]:
    """(real train pairs with the v2 recipe's swapped-evidence NEI, held-out real pairs)."""
    v2 = V2Config(data_dir=config.data_dir, out=config.out, seed=config.seed,
                  val_frac=config.val_frac, swap_nei=config.swap_nei, medquad_dir=None,
                  limit=config.real_limit)
    return assemble(v2)


def examples(tokenizer: Any, pairs: Sequence[vdata.Pair], max_tokens: int) \
        -> list[tuple[str, str, int]]:
    return [(e.claim, e.window, _INDEX[e.label])
            for e in vdata.to_examples(tokenizer, pairs, max_tokens)]


def batches(items: Sequence[tuple[str, str, int]], size: int, epoch: int,
            seed: int) -> list[list[int]]:
    """Seeded batches of indices: shuffled, then sorted by length within blocks of 50
    batches (less padding), the batches themselves shuffled again."""
    rng = random.Random(seed * 1000 + epoch)
    order = list(range(len(items)))
    rng.shuffle(order)
    block = size * 50
    out: list[list[int]] = []
    for start in range(0, len(order), block):
        part = sorted(order[start:start + block], key=lambda i: len(items[i][0]) +
                      len(items[i][1]))
        out += [part[j:j + size] for j in range(0, len(part), size)]
    rng.shuffle(out)
    return out


# -- the device and checkpoints ----------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device cuda asked for, but torch sees no GPU")
    return torch.device(name)


def _trainable(model: CrossEncoder) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.state_dict().items()
            if not k.startswith(FROZEN_PREFIX)}


def save_checkpoint(path: Path, model: CrossEncoder, optimizer: Any, scheduler: Any,
                    stage: str, step: int, extra: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": _trainable(model), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "stage": stage, "step": step,
                **extra}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)  # type: ignore[no-any-return]
    except (RuntimeError, EOFError, OSError) as exc:
        log.warning("ignoring an unreadable checkpoint %s (%s)", path, exc)
        return None


# -- training --------------------------------------------------------------------------------


def _optimizer(model: CrossEncoder, lr: float, lr_head: float, decay: float, steps: int,
               warmup: float) -> tuple[Any, Any]:
    head = [p for n, p in model.named_parameters() if n.startswith("head.") and p.requires_grad]
    body = [p for n, p in model.named_parameters() if not n.startswith("head.")
            and p.requires_grad]
    optimizer = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head, "lr": lr_head}],
                                  weight_decay=decay)
    warm = max(1, int(steps * warmup))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (steps - step) / max(1, steps - warm))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _weights(items: Sequence[tuple[str, str, int]], device: torch.device) -> torch.Tensor:
    counts = Counter(label for _, _, label in items)
    total = sum(counts.values())
    return torch.tensor([total / (len(LABELS) * max(counts.get(i, 0), 1))
                         for i in range(len(LABELS))], dtype=torch.float32, device=device)


def _forward(model: CrossEncoder, tokenizer: Any, pairs: list[tuple[str, str]],
             max_tokens: int, device: torch.device, amp: bool) -> torch.Tensor:
    batch = {k: v.to(device) for k, v in encode_pairs(tokenizer, pairs, max_tokens).items()}
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp and device.type == "cuda"):
        return model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])


def run_stage(model: CrossEncoder, tokenizer: Any, items: Sequence[tuple[str, str, int]], *,
              stage: str, epochs: int, lr: float, config: FinetuneConfig,
              device: torch.device, resume: dict[str, Any] | None,
              on_epoch: Callable[[int], None] | None = None) -> None:
    """Train on ``items`` for ``epochs``, checkpointing; resumes ``resume`` when it is a
    checkpoint of this stage."""
    plan = [b for epoch in range(epochs)
            for b in batches(items, config.batch_size, epoch, config.seed)]
    per_epoch = len(plan) // max(epochs, 1) if epochs else 0
    optimizer, scheduler = _optimizer(model, lr, config.lr_head, config.weight_decay,
                                      len(plan), config.warmup)
    start = 0
    if resume is not None and resume.get("stage") == stage:
        optimizer.load_state_dict(resume["optimizer"])
        scheduler.load_state_dict(resume["scheduler"])
        start = int(resume["step"])
        log.info("resuming %s at step %d of %d", stage, start, len(plan))
    loss_fn = torch.nn.CrossEntropyLoss(weight=_weights(items, device))
    checkpoint = config.out / CHECKPOINT
    model.train()
    started, seen = time.perf_counter(), 0
    for step in range(start, len(plan)):
        idx = plan[step]
        logits = _forward(model, tokenizer, [(items[i][0], items[i][1]) for i in idx],
                          config.max_tokens, device, config.amp)
        gold = torch.tensor([items[i][2] for i in idx], device=device)
        loss = loss_fn(logits.float(), gold)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        seen += len(idx)
        done = step + 1
        if done % config.checkpoint_every == 0 or done == len(plan):
            save_checkpoint(checkpoint, model, optimizer, scheduler, stage, done, {})
        if done % 100 == 0:
            rate = seen / max(time.perf_counter() - started, 1e-9)
            log.info("%s step %d/%d loss %.4f (%.0f examples/s)", stage, done, len(plan),
                     float(loss), rate)
        if on_epoch is not None and per_epoch and done % per_epoch == 0:
            on_epoch(done // per_epoch)
            model.train()


# -- evaluation ------------------------------------------------------------------------------


def pair_probs(model: CrossEncoder, tokenizer: Any, pairs: Sequence[tuple[str, str]],
               max_tokens: int, device: torch.device, batch_size: int = 128) -> np.ndarray:
    """(n, 3) probabilities per (claim, evidence) pair: every window scored, the deciding
    window's probabilities kept (as :class:`medverify.verifier.infer.Verifier` does)."""
    flat: list[tuple[str, str]] = []
    owners: list[int] = []
    for n, (claim, evidence) in enumerate(pairs):
        for window in make_windows(tokenizer, claim, evidence, max_tokens):
            flat.append((claim, window))
            owners.append(n)
    probs = np.zeros((len(flat), len(LABELS)), dtype=np.float32)
    order = np.argsort([len(c) + len(w) for c, w in flat], kind="stable")
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            logits = _forward(model, tokenizer, [flat[i] for i in idx], max_tokens, device,
                              amp=device.type == "cuda")
            probs[idx] = torch.softmax(logits.float(), dim=-1).cpu().numpy()
    out = np.zeros((len(pairs), len(LABELS)), dtype=np.float32)
    by_owner: dict[int, list[int]] = {}
    for row, owner in enumerate(owners):
        by_owner.setdefault(owner, []).append(row)
    for owner, rows in by_owner.items():
        out[owner] = aggregate(probs[rows])
    return out


def measure_file(model: CrossEncoder, tokenizer: Any, path: Path, thresholds: dict[str, float],
                 max_tokens: int, device: torch.device) -> dict[str, Any]:
    """3-way macro-F1 (3-way files) and SUPPORTED-vs-rest balanced accuracy of a pairs file,
    with the calibrated decision rule."""
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]
    probs = pair_probs(model, tokenizer, [(r["claim"], r["evidence"]) for r in rows],
                       max_tokens, device)
    pred = label_pairs(probs, thresholds)
    gold = [r["label"] for r in rows]
    out: dict[str, Any] = {"n": len(rows),
                           "supported_vs_rest_balanced_accuracy": round(
                               supported_vs_rest(gold, pred)["balanced_accuracy"], 4)}
    if rows and rows[0].get("labels") == "3-way":
        out["macro_f1"] = round(classification_metrics(gold, pred, LABELS)["macro_f1"], 4)
    return out


# -- the whole recipe --------------------------------------------------------------------------


@dataclass
class _Run:
    """One fine-tuning run: the model and what the run records as it goes."""

    config: FinetuneConfig
    device: torch.device
    tokenizer: Any
    model: CrossEncoder
    held: list[vdata.Pair]
    timing: dict[str, float] = field(default_factory=dict)
    counts: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)

    def score_held(self) -> tuple[dict[str, float], float, np.ndarray]:
        """Calibrated thresholds, macro-F1 and probabilities of the held-out pairs."""
        probs = pair_probs(self.model, self.tokenizer,
                           [(p.claim, p.evidence) for p in self.held],
                           self.config.max_tokens, self.device)
        thresholds, f1 = calibrate(probs, [p.label for p in self.held])
        return thresholds, f1, probs


def _seeded_device(config: FinetuneConfig) -> torch.device:
    """Fix the seeds and threads; the device to train on."""
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    if config.threads:
        torch.set_num_threads(config.threads)
    return resolve_device(config.device)


def _resume(config: FinetuneConfig, recipe: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint of an earlier run of this recipe, if any; unless that run is done,
    ``recipe.json`` is (re)written. A checkpoint of another recipe is an error."""
    recipe_file = config.out / "recipe.json"
    resume = load_checkpoint(config.out / CHECKPOINT)
    if resume is not None:
        before = json.loads(recipe_file.read_text("utf-8")) if recipe_file.is_file() else None
        if before != recipe:
            raise ConfigError(f"{config.out} holds a checkpoint of another recipe: use another "
                              "--out or delete it")
        if resume.get("stage") == "done":
            return resume
    recipe_file.write_text(json.dumps(recipe, indent=2, sort_keys=True) + "\n", "utf-8")
    return resume


def _stage1(run: _Run, corpus_path: Path, resume: dict[str, Any] | None) -> None:
    """Stage 1: train on the synthetic corpus, then score the held-out pairs."""
    config = run.config
    t = time.perf_counter()
    corpus = read_corpus(corpus_path, limit=config.corpus_limit,
                         exclude=config.exclude_edits, seed=config.seed)
    items = examples(run.tokenizer, corpus, config.max_tokens)
    run.counts["corpus_pairs"] = len(corpus)
    run.counts["corpus_by_edit"] = dict(sorted(Counter(p.source for p in corpus).items()))
    run.timing["stage1_data_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    run_stage(run.model, run.tokenizer, items, stage="stage1", epochs=config.stage1_epochs,
              lr=config.lr, config=config, device=run.device, resume=resume)
    run.timing["stage1_train_s"] = round(time.perf_counter() - t, 1)
    _, f1, _ = run.score_held()
    run.history.append({"stage": "stage1", "held_out_macro_f1": round(f1, 4)})


def _stage2(run: _Run, train: Sequence[vdata.Pair], resume: dict[str, Any] | None) \
        -> tuple[float, dict[str, torch.Tensor] | None, int]:
    """Stage 2: train on the real train pairs, keeping the epoch best on the held-out pairs
    (loaded into the model); returns (its macro-F1, its weights or None, the epoch)."""
    config = run.config
    best: tuple[float, dict[str, torch.Tensor] | None, int] = (-1.0, None, 0)
    t = time.perf_counter()
    items = examples(run.tokenizer, train, config.max_tokens)

    def on_epoch(epoch: int) -> None:
        nonlocal best
        _, f1, _ = run.score_held()
        run.history.append({"stage": "stage2", "epoch": epoch,
                            "held_out_macro_f1": round(f1, 4)})
        if f1 > best[0]:
            best = (f1, {k: v.detach().clone() for k, v in _trainable(run.model).items()},
                    epoch)

    run_stage(run.model, run.tokenizer, items, stage="stage2", epochs=config.stage2_epochs,
              lr=config.lr_stage2, config=config, device=run.device, resume=resume,
              on_epoch=on_epoch)
    run.timing["stage2_s"] = round(time.perf_counter() - t, 1)
    if best[1] is not None:
        run.model.load_state_dict(best[1], strict=False)
    return best


def _metadata(run: _Run, recipe: dict[str, Any],
              best: tuple[float, dict[str, torch.Tensor] | None, int]) -> dict[str, Any]:
    """``verifier.json``'s content: thresholds calibrated on the held-out pairs, the recipe,
    counts, history, and the dev/evaluation files measured."""
    config, device = run.config, run.device
    thresholds, f1, probs = run.score_held()
    held_pred = label_pairs(probs, thresholds)
    meta: dict[str, Any] = {
        "name": "medverify-verifier-v3",
        "max_tokens": config.max_tokens,
        "thresholds": thresholds,
        "thresholds_calibrated_on": f"held-out real train pairs ({device.type}, float)",
        "recipe": recipe,
        "counts": run.counts,
        "history": run.history,
        "stage2_best_epoch": best[2] if best[1] is not None else None,
        "held_out_macro_f1": round(f1, 4),
        "held_out_macro_f1_by_dataset": per_dataset(run.held, held_pred),
        "device": device.type if device.type != "cuda" else torch.cuda.get_device_name(0),
        "torch": torch.__version__,
    }
    t = time.perf_counter()
    meta["dev"] = {path.stem: measure_file(run.model, run.tokenizer, path, thresholds,
                                           config.max_tokens, device)
                   for path in config.eval_files if path.is_file()}
    run.timing["eval_s"] = round(time.perf_counter() - t, 1)
    return meta


def _save_done(run: _Run, meta: dict[str, Any]) -> None:
    """Save the verifier, then mark the checkpoint done."""
    run.model.to("cpu")
    save_verifier(run.model, run.config.out, metadata=meta)
    tmp = run.config.out / (CHECKPOINT + ".tmp")
    torch.save({"stage": "done"}, tmp)  # a rerun returns the saved result
    os.replace(tmp, run.config.out / CHECKPOINT)


def finetune(config: FinetuneConfig) -> dict[str, Any]:
    """Run the recipe (see the module doc); returns the metadata written to
    ``verifier.json``. Resumes from ``out/checkpoint.pt`` when an earlier run of the same
    config stopped."""
    device = _seeded_device(config)
    config.out.mkdir(parents=True, exist_ok=True)
    recipe = config.model_dump(mode="json", exclude={"out", "eval_files", "threads",
                                                     "device"})
    resume = _resume(config, recipe)
    if resume is not None and resume.get("stage") == "done":
        return json.loads((config.out / "verifier.json").read_text("utf-8"))  # type: ignore[no-any-return]

    started = time.perf_counter()
    tokenizer = load_tokenizer()
    model = build_model(config.n_layers).to(device)
    if resume is not None:
        model.load_state_dict(resume["model"], strict=False)
    train, held = real_pairs(config)
    run = _Run(config, device, tokenizer, model, held,
               counts={"real_train": len(train), "held_out": len(held)})
    done_stage1 = resume is not None and resume.get("stage") in ("stage2", "done")
    if config.corpus is not None and config.stage1_epochs > 0 and not done_stage1:
        _stage1(run, config.corpus, resume)
        resume = None
    best: tuple[float, dict[str, torch.Tensor] | None, int] = (-1.0, None, 0)
    if config.stage2 and config.stage2_epochs > 0:
        best = _stage2(run, train, resume)
    meta = _metadata(run, recipe, best)
    run.timing["total_s"] = round(time.perf_counter() - started, 1)
    meta["timing"] = run.timing
    _save_done(run, meta)
    return meta
