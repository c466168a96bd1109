"""Speed and memory of the built-in verifier on CPU.

    .venv/bin/python benchmarks/bench_verifier_speed.py [--weights DIR] [--threads 2] [--n 256]

Measures pairs/s (a) on real claim/evidence pairs truncated to one window of at most 256 tokens
and (b) on pairs padded to exactly 256 tokens, for float32 and dynamic-int8 models, plus peak RSS.
Writes benchmarks/results/verifier_speed.{json,md}. The machine's load average is recorded, since
other processes sharing the cores slow every number down.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

import torch

from medverify.verifier.infer import DEFAULT_WEIGHTS, quantize_model
from medverify.verifier.model import load_model, load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "pairs"
RESULTS = ROOT / "benchmarks" / "results"


def real_pairs(n: int) -> list[tuple[str, str]]:
    """Pairs from the dev/eval files (or a fixed synthetic text when the data is absent)."""
    rows = []
    for name in ("checkcovid_dev", "citint_dev", "healthver_dev", "expertqa_val"):
        path = DATA / f"{name}.jsonl"
        if path.is_file():
            rows += [json.loads(line) for line in path.read_text().splitlines()[: n // 4]]
    if not rows:
        text = "Vitamin D supplementation reduced respiratory infections in older adults. " * 30
        return [("Vitamin D prevents infections.", text)] * n
    return [(r["claim"], r["evidence"]) for r in rows][:n]


def batches(tokenizer, pairs, pad_full: bool, batch_size: int = 32) -> list[dict]:
    order = sorted(pairs, key=lambda p: len(p[0]) + len(p[1]))
    padding = "max_length" if pad_full else True
    out = []
    for i in range(0, len(order), batch_size):
        chunk = order[i : i + batch_size]
        out.append(
            tokenizer(
                [c for c, _ in chunk],
                [e for _, e in chunk],
                truncation="only_second",
                max_length=256,
                padding=padding,
                return_tensors="pt",
            )
        )
    return out


def throughput(model, encoded: list[dict]) -> tuple[float, float, float]:
    """(pairs/s, mean real tokens, mean padded width) over the batches, after one warm-up."""
    with torch.inference_mode():
        model(encoded[0]["input_ids"], encoded[0]["attention_mask"], encoded[0]["token_type_ids"])
        start = time.perf_counter()
        for b in encoded:
            model(b["input_ids"], b["attention_mask"], b["token_type_ids"])
        seconds = time.perf_counter() - start
    n = sum(b["input_ids"].shape[0] for b in encoded)
    tokens = sum(int(b["attention_mask"].sum()) for b in encoded) / n
    width = sum(b["input_ids"].numel() for b in encoded) / n
    return n / seconds, tokens, width


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--tag", default="verifier_speed")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, meta = load_model(args.weights)
    tokenizer = load_tokenizer()
    pairs = real_pairs(args.n)
    sets = {
        "real_le256": batches(tokenizer, pairs, False),
        "padded_256": batches(tokenizer, pairs, True),
    }
    results = {
        "threads": args.threads,
        "n_pairs": len(pairs),
        "n_layers": meta["n_layers"],
        "cpu": platform.processor() or platform.machine(),
        "loadavg_before": os.getloadavg(),
    }
    for mode, net in (("float32", model), ("int8", quantize_model(model))):
        for name, encoded in sets.items():
            rate, tokens, width = throughput(net.eval(), encoded)
            results[f"{mode}_{name}"] = {
                "pairs_per_s": round(rate, 1),
                "mean_tokens": round(tokens, 1),
                "mean_padded_width": round(width, 1),
            }
    results["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    results["loadavg_after"] = os.getloadavg()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.tag}.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        f"# Verifier speed ({args.threads} threads, {meta['n_layers']} layers)",
        "",
        "| model | input | pairs/s | mean real tokens | mean padded width |",
        "|---|---|---|---|---|",
    ]
    for key, val in results.items():
        if isinstance(val, dict):
            mode, _, name = key.partition("_")
            lines.append(
                f"| {mode} | {name} | {val['pairs_per_s']} | {val['mean_tokens']} | "
                f"{val['mean_padded_width']} |"
            )
    lines += [
        "",
        f"peak RSS {results['peak_rss_mb']} MB; load average before/after "
        f"{results['loadavg_before']} / {results['loadavg_after']}",
    ]
    (RESULTS / f"{args.tag}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
