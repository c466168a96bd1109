"""Training speed of the verifier on this machine's CPU (issue 18: "measure steps/s on an
idle machine before deciding the budget").

Times optimiser steps of the v3 recipe (every layer but the word embeddings trainable) and of
the v2 recipe (top layer and head only) on the same batches of real train pairs (batch 64,
windows of up to 256 tokens), alternating the two so machine load hits both alike. The load
average is recorded before and after: a number taken on a loaded machine says so.

    python benchmarks/bench_finetune_speed.py [--steps 4] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from medverify.files import data_dir
from medverify.verifier import finetune as ft
from medverify.verifier.model import FROZEN_PREFIX, build_model, load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
PAIRS = data_dir() / "pairs"
OUT = ROOT / "benchmarks" / "results"


def set_trainable(model: torch.nn.Module, recipe: str) -> int:
    top = "encoder.encoder.layer.3."
    n = 0
    for name, param in model.named_parameters():
        if recipe == "v3":
            param.requires_grad = not name.startswith(FROZEN_PREFIX)
        else:
            param.requires_grad = name.startswith(top) or name.startswith("head.")
        n += param.numel() if param.requires_grad else 0
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--out", type=Path, default=OUT / "finetune_speed.json")
    args = parser.parse_args(argv)
    if not PAIRS.is_dir():
        print(f"no real pairs at {PAIRS}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_before = os.getloadavg()
    config = ft.FinetuneConfig(data_dir=PAIRS, out=Path("/tmp/finetune_speed"), real_limit=3000,
                               device="cpu", batch_size=args.batch_size)
    tokenizer = load_tokenizer()
    train, _ = ft.real_pairs(config)
    items = ft.examples(tokenizer, train, config.max_tokens)
    plan = ft.batches(items, args.batch_size, 0, 13)[: args.steps + 1]
    models = {}
    trainable = {}
    for recipe in ("v3", "v2"):
        model = build_model(4)
        trainable[recipe] = set_trainable(model, recipe)
        params = [p for p in model.parameters() if p.requires_grad]
        models[recipe] = (model, torch.optim.AdamW(params, lr=1e-5))
    loss_fn = torch.nn.CrossEntropyLoss()
    times: dict[str, list[float]] = {"v3": [], "v2": []}
    tokens = []
    for i, idx in enumerate(plan):
        pairs = [(items[j][0], items[j][1]) for j in idx]
        gold = torch.tensor([items[j][2] for j in idx])
        enc = ft.encode_pairs(tokenizer, pairs, config.max_tokens)
        tokens.append(int(enc["attention_mask"].sum()))
        for recipe in (("v3", "v2") if i % 2 == 0 else ("v2", "v3")):
            model, optimizer = models[recipe]
            model.train()
            start = time.perf_counter()
            logits = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"])
            loss_fn(logits, gold).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if i > 0:  # the first step warms up allocations
                times[recipe].append(time.perf_counter() - start)
    load_after = os.getloadavg()
    result = {
        "benchmark": "finetune_speed", "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "threads": args.threads, "batch_size": args.batch_size,
        "max_tokens": config.max_tokens, "steps_timed": args.steps,
        "mean_real_tokens_per_batch": statistics.mean(tokens[1:]),
        "load_average_before": load_before, "load_average_after": load_after,
        "recipes": {
            r: {"trainable_params": trainable[r], "s_per_step_median": statistics.median(t),
                "steps_per_s": 1 / statistics.median(t),
                "pairs_per_s": args.batch_size / statistics.median(t),
                "hours_per_200k_pairs_epoch": 200_000 / args.batch_size * statistics.median(t)
                / 3600}
            for r, t in times.items()},
    }
    result["v3_over_v2_time"] = (result["recipes"]["v3"]["s_per_step_median"]
                                 / result["recipes"]["v2"]["s_per_step_median"])
    args.out.write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
