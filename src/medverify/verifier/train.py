"""Training loop for the built-in verifier.

Recipe (see card.md): MiniLM-L6 cut to its first ``n_layers`` layers; embeddings and the first
``frozen_layers`` layers stay frozen, so their outputs are computed once per training window and
cached (float16); each epoch then runs only the trainable top layer(s) and the head. Class-weighted
cross-entropy, AdamW with linear warmup/decay, length-bucketed batches, fixed seeds. The epoch with
the best held-out macro-F1 is kept, and the support/contradict thresholds are calibrated on the
same held-out split (never on dev or evaluation sets).
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, Field

from medverify.verifier import data as vdata
from medverify.verifier.infer import aggregate, label_pairs
from medverify.verifier.metrics import classification_metrics
from medverify.verifier.model import (
    LABELS,
    CrossEncoder,
    build_model,
    load_tokenizer,
    read_metadata,
    save_verifier,
    write_metadata,
)
from medverify.verifier.windows import make_windows

log = logging.getLogger(__name__)
_LABEL_INDEX = {label: i for i, label in enumerate(LABELS)}


class TrainConfig(BaseModel):
    """Everything that determines a training run (recorded in the weights metadata)."""

    data_dir: Path
    medquad_dir: Path | None = None
    out: Path
    seed: int = 13
    n_layers: int = 4
    frozen_layers: int = 3
    max_tokens: int = 256
    epochs: int = 6
    batch_size: int = 32
    lr_layers: float = 4e-4
    lr_head: float = 2e-3
    warmup: float = 0.1
    weight_decay: float = 0.01
    val_frac: float = 0.15
    swap_nei: dict[str, int] = Field(
        default_factory=lambda: {"check-covid": 150, "citation-integrity": 500, "scifact": 0}
    )
    medquad_docs: int = 1500
    nei_extra_windows: int = 0
    threads: int = 2
    limit: int | None = None


class Cached(BaseModel, arbitrary_types_allowed=True):
    """Frozen-layer outputs of one window (float16, unpadded) with its label and owner pair."""

    hidden: torch.Tensor
    label: int
    owner: int = -1


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def assemble(config: TrainConfig) -> tuple[list[vdata.Pair], list[vdata.Pair]]:
    """(train pairs incl. synthetic, held-out real validation pairs)."""
    real = [
        p for name in vdata.TRAIN_FILES for p in vdata.load_pairs(config.data_dir / f"{name}.jsonl")
    ]
    if config.limit:
        real = random.Random(config.seed).sample(real, min(config.limit, len(real)))
    train, val = vdata.split_holdout(real, config.val_frac, config.seed)
    extra: list[vdata.Pair] = []
    for dataset, count in sorted(config.swap_nei.items()):
        rows = [p for p in train if p.dataset == dataset]
        extra += vdata.swap_nei(rows, count if not config.limit else count // 20, config.seed)
    if config.medquad_dir and config.medquad_dir.is_dir():
        extra += vdata.medquad_pairs(config.medquad_dir, config.medquad_docs, config.seed)
    return train + extra, val


def cache_windows(
    model: CrossEncoder, tokenizer: Any, items: list[tuple[str, str, int, int]], config: TrainConfig
) -> list[Cached]:
    """Run the frozen layers once over (claim, window, label, owner) items."""
    from medverify.verifier.infer import encode_pairs

    order = sorted(range(len(items)), key=lambda i: len(items[i][0]) + len(items[i][1]))
    out: list[Cached | None] = [None] * len(items)
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), 64):
            idx = order[start : start + 64]
            enc = encode_pairs(tokenizer, [items[i][:2] for i in idx], config.max_tokens)
            hidden = model.hidden_at(
                enc["input_ids"], enc["attention_mask"], enc["token_type_ids"], config.frozen_layers
            )
            if start % 1280 == 0:
                log.warning("caching %d/%d windows", start, len(order))
            for row, i in enumerate(idx):
                length = int(enc["attention_mask"][row].sum())
                out[i] = Cached(
                    hidden=hidden[row, :length].to(torch.float16).clone(),
                    label=items[i][2],
                    owner=items[i][3],
                )
    return [c for c in out if c is not None]


def collate(batch: list[Cached]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad cached hidden states to the batch's longest window."""
    width = max(c.hidden.shape[0] for c in batch)
    hidden = torch.zeros(len(batch), width, batch[0].hidden.shape[1])
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for row, c in enumerate(batch):
        hidden[row, : c.hidden.shape[0]] = c.hidden.float()
        mask[row, : c.hidden.shape[0]] = 1
    return hidden, mask, torch.tensor([c.label for c in batch])


def buckets(items: list[Cached], batch_size: int, rng: random.Random) -> list[list[Cached]]:
    """Length-bucketed batches in random order (shuffle, sort within chunks, split)."""
    shuffled = items[:]
    rng.shuffle(shuffled)
    chunk = batch_size * 20
    batches = []
    for start in range(0, len(shuffled), chunk):
        part = sorted(shuffled[start : start + chunk], key=lambda c: c.hidden.shape[0])
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def class_weights(items: list[Cached]) -> torch.Tensor:
    """Inverse-frequency class weights, mean 1."""
    counts = Counter(c.label for c in items)
    raw = torch.tensor([len(items) / (len(LABELS) * max(counts[i], 1)) for i in range(len(LABELS))])
    return raw / raw.mean()


def make_optimizer(model: CrossEncoder, config: TrainConfig, steps: int) -> tuple[Any, Any]:
    layers = [
        p
        for layer in model.encoder.encoder.layer[config.frozen_layers :]
        for p in layer.parameters()
    ]
    optimizer = torch.optim.AdamW(
        [
            {"params": layers, "lr": config.lr_layers},
            {"params": model.head.parameters(), "lr": config.lr_head},
        ],
        weight_decay=config.weight_decay,
    )
    warm = max(1, int(config.warmup * steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / max(1, steps - warm)))
    )
    return optimizer, schedule


def freeze_lower(model: CrossEncoder, frozen_layers: int) -> None:
    for param in model.encoder.embeddings.parameters():
        param.requires_grad_(False)
    for layer in model.encoder.encoder.layer[:frozen_layers]:
        for param in layer.parameters():
            param.requires_grad_(False)


def window_probs(model: CrossEncoder, items: list[Cached], frozen_layers: int) -> np.ndarray:
    """Softmax probabilities of cached windows (eval mode)."""
    model.eval()
    out = []
    with torch.inference_mode():
        for start in range(0, len(items), 64):
            hidden, mask, _ = collate(items[start : start + 64])
            out.append(torch.softmax(model.forward_from(hidden, mask, frozen_layers), -1).numpy())
    return np.concatenate(out) if out else np.zeros((0, len(LABELS)), dtype=np.float32)


def pair_probs(window_p: np.ndarray, owners: np.ndarray, n_pairs: int) -> np.ndarray:
    """Aggregate window probabilities to pairs with the deciding-window rule."""
    return np.stack([aggregate(window_p[owners == i]) for i in range(n_pairs)])


def calibrate(probs: np.ndarray, gold: list[str]) -> tuple[dict[str, float], float]:
    """Thresholds maximising macro-F1 of the 3-way decision on held-out validation."""
    best = ({"support": 0.5, "contradict": 0.5}, -1.0)
    grid = np.round(np.arange(0.15, 0.86, 0.025), 3)
    for t_s in grid:
        for t_c in grid:
            th = {"support": float(t_s), "contradict": float(t_c)}
            score = classification_metrics(gold, label_pairs(probs, th), LABELS)["macro_f1"]
            if score > best[1] + 1e-9:
                best = (th, score)
    return best


def run_epoch(
    model: CrossEncoder,
    batches: list[list[Cached]],
    weights: torch.Tensor,
    optimizer: Any,
    schedule: Any,
    frozen_layers: int,
) -> float:
    """One pass over the batches; returns the mean loss."""
    model.train()
    loss_fn = torch.nn.CrossEntropyLoss(weight=weights)
    total = 0.0
    start = time.perf_counter()
    for step, batch in enumerate(batches):
        if step and step % 25 == 0:
            log.warning("step %d/%d, %.0fs", step, len(batches), time.perf_counter() - start)
        hidden, mask, labels = collate(batch)
        loss = loss_fn(model.forward_from(hidden, mask, frozen_layers), labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        total += float(loss.detach())
    return total / max(1, len(batches))


def val_windows(tokenizer: Any, val: list[vdata.Pair], max_tokens: int) -> list[tuple]:
    """Every window of every validation pair (scored like inference, then aggregated)."""
    return [
        (p.claim, w, _LABEL_INDEX[p.label], i)
        for i, p in enumerate(val)
        for w in make_windows(tokenizer, p.claim, p.evidence, max_tokens)
    ]


def per_dataset(val: list[vdata.Pair], pred: list[str]) -> dict[str, float]:
    """Held-out macro-F1 per source dataset."""
    out = {}
    for dataset in sorted({p.dataset for p in val}):
        idx = [i for i, p in enumerate(val) if p.dataset == dataset]
        gold = [val[i].label for i in idx]
        out[dataset] = classification_metrics(gold, [pred[i] for i in idx], LABELS)["macro_f1"]
    return out


def _trainable_state(model: CrossEncoder) -> dict[str, torch.Tensor]:
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    return {n: t.detach().clone() for n, t in model.state_dict().items() if n in names}


def _score_epoch(model: CrossEncoder, val_c: list[Cached], owners: np.ndarray,
                 gold: list[str], frozen_layers: int
                 ) -> tuple[np.ndarray, float, dict[str, float]]:
    """The held-out pairs after an epoch: their probabilities, the macro-F1 and the recall
    of each class (rounded to 3 decimals)."""
    probs = pair_probs(window_probs(model, val_c, frozen_layers), owners, len(gold))
    pred = [LABELS[i] for i in probs.argmax(1)]
    metrics = classification_metrics(gold, pred, LABELS)
    recall = {k: round(v["recall"], 3) for k, v in metrics["per_class"].items()}
    return probs, metrics["macro_f1"], recall


def fit(
    model: CrossEncoder,
    train_c: list[Cached],
    val_c: list[Cached],
    val: list[vdata.Pair],
    config: TrainConfig,
    on_best: Callable[[np.ndarray, list[dict[str, Any]]], Any] | None = None,
) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Train for ``config.epochs`` epochs, keep the best epoch by held-out macro-F1.

    ``on_best(probs, history)`` is called whenever an epoch beats the previous best (the
    training run uses it to write the best-so-far weights, so an interrupted run leaves them).
    """
    rng = random.Random(config.seed)
    weights = class_weights(train_c)
    steps = config.epochs * -(-len(train_c) // config.batch_size)
    optimizer, schedule = make_optimizer(model, config, steps)
    owners = np.array([c.owner for c in val_c])
    gold = [p.label for p in val]
    history: list[dict[str, Any]] = []
    best: tuple[float, dict[str, torch.Tensor], np.ndarray] | None = None
    for epoch in range(config.epochs):
        loss = run_epoch(
            model,
            buckets(train_c, config.batch_size, rng),
            weights,
            optimizer,
            schedule,
            config.frozen_layers,
        )
        probs, f1, recall = _score_epoch(model, val_c, owners, gold, config.frozen_layers)
        history.append({"epoch": epoch + 1, "loss": round(loss, 4),
                        "val_macro_f1": round(f1, 4), "val_recall": recall})
        log.warning("epoch %d loss %.4f val macro-F1 %.4f recall %s", epoch + 1, loss, f1,
                    recall)
        if best is None or f1 > best[0]:
            best = (f1, _trainable_state(model), probs)
            if on_best is not None:
                on_best(probs, history)
    assert best is not None
    model.load_state_dict(best[1], strict=False)
    return best[2], history


def train(config: TrainConfig) -> dict[str, Any]:
    """Assemble data, train, calibrate, save weights + metadata; returns the run report.
    Runs on ``config.threads`` torch threads and restores the caller's count after."""
    from medverify.verifier.infer import torch_threads

    with torch_threads(config.threads):
        return _train(config)


def _train(config: TrainConfig) -> dict[str, Any]:
    start = time.perf_counter()
    seed_everything(config.seed)
    pairs, val = assemble(config)
    tokenizer = load_tokenizer()
    model = build_model(config.n_layers)
    freeze_lower(model, config.frozen_layers)
    examples = vdata.to_examples(tokenizer, pairs, config.max_tokens, config.nei_extra_windows)
    items = [(e.claim, e.window, _LABEL_INDEX[e.label], -1) for e in examples]
    train_c = cache_windows(model, tokenizer, items, config)
    val_c = cache_windows(model, tokenizer, val_windows(tokenizer, val, config.max_tokens), config)
    cached_s = time.perf_counter() - start
    log.warning("cached %d train / %d val windows in %.0fs", len(train_c), len(val_c), cached_s)

    def write(probs: np.ndarray, history: list[dict[str, Any]]) -> dict[str, Any]:
        report = run_report(config, pairs, val, probs, history)
        report.update(
            cache_seconds=round(cached_s, 1),
            train_seconds=round(time.perf_counter() - start, 1),
            epochs_done=len(history),
        )
        save_verifier(model, config.out, metadata=report)
        return report

    probs, history = fit(model, train_c, val_c, val, config, on_best=write)
    write(probs, history)
    return calibrate_shipped(config.out, val)


def calibrate_shipped(weights: Path, val: list[vdata.Pair]) -> dict[str, Any]:
    """Recalibrate the thresholds on the model as it is used: the saved (float16) weights,
    loaded int8-quantized by ``Verifier.load`` with torch's int8 (``window_scales``),
    predicting each held-out pair with its windows; every other arithmetic decides with
    them unless :func:`calibrate_scoring` fits its own (not done here: for ``onnx_int8`` a
    refit on this split lowered two dev sets, docs/verifier.md). The float32 thresholds of
    the training loop are kept as ``thresholds_float32``."""
    probs, thresholds, f1 = _fit_held_out(weights, val, "window_scales")
    meta = read_metadata(weights)
    meta.update(
        thresholds_float32=meta["thresholds"],
        thresholds=thresholds,
        thresholds_calibrated_on="held-out pairs, int8 Verifier.predict (windows aggregated)",
        val_macro_f1_int8_calibrated=round(f1, 4),
        val_macro_f1_by_dataset_int8=per_dataset(val, label_pairs(probs, thresholds)),
    )
    for stale in ("thresholds_by_scoring", "val_macro_f1_by_scoring"):
        meta.pop(stale, None)  # fitted on the previous weights' scores
    write_metadata(weights, meta)
    return meta


def calibrate_scoring(weights: Path, val: list[vdata.Pair], scoring: str) -> dict[str, Any]:
    """Fit the thresholds for one scoring arithmetic (``Verifier.scoring``) on the held-out
    pairs, as :func:`calibrate_shipped` does for torch's int8, and record them under
    ``thresholds_by_scoring[scoring]``: ``Verifier`` uses them when it scores that way.
    Returns the updated metadata."""
    probs, thresholds, f1 = _fit_held_out(weights, val, scoring)
    meta = read_metadata(weights)
    meta.setdefault("thresholds_by_scoring", {})[scoring] = thresholds
    meta.setdefault("val_macro_f1_by_scoring", {})[scoring] = {
        "overall": round(f1, 4),
        **{k: round(v, 4) for k, v in per_dataset(val, label_pairs(probs, thresholds)).items()},
    }
    write_metadata(weights, meta)
    return meta


def _fit_held_out(weights: Path, val: list[vdata.Pair], scoring: str
                  ) -> tuple[np.ndarray, dict[str, float], float]:
    """The held-out pairs' probabilities under ``scoring`` (the int8 model, windows
    aggregated) and the thresholds that maximise their macro-F1, with that F1."""
    from medverify.verifier.infer import Verifier

    verifier = Verifier.load(weights, quantize=True, scoring=scoring)
    probs = verifier.predict([(p.claim, p.evidence) for p in val])
    thresholds, f1 = calibrate(probs, [p.label for p in val])
    return probs, thresholds, f1


def run_report(
    config: TrainConfig,
    pairs: list[vdata.Pair],
    val: list[vdata.Pair],
    probs: np.ndarray,
    history: list[dict[str, Any]],
) -> dict[str, Any]:
    """Metadata of a run: config, data counts, history, calibrated thresholds and scores."""
    thresholds, cal_f1 = calibrate(probs, [p.label for p in val])
    return {
        "name": "medverify-verifier-v1",
        "max_tokens": config.max_tokens,
        "thresholds": thresholds,
        "config": config.model_dump(mode="json", exclude={"data_dir", "medquad_dir", "out"}),
        "train_counts": _counts(pairs),
        "val_counts": _counts(val),
        "history": history,
        "val_macro_f1_argmax": max(h["val_macro_f1"] for h in history),
        "val_macro_f1_calibrated": round(cal_f1, 4),
        "val_macro_f1_by_dataset": per_dataset(val, label_pairs(probs, thresholds)),
        "torch": torch.__version__,
    }


def _counts(pairs: list[vdata.Pair]) -> dict[str, int]:
    return dict(sorted(Counter(f"{p.dataset}/{p.source}/{p.label}" for p in pairs).items()))
