"""Encoder throughput of the MiniLM-L6 architecture on trial-summary passages, on CPU or a
CUDA GPU: how long embedding the whole registry's summaries takes on each.

Self-contained (torch + transformers only, no medverify import), so it runs on a lent GPU
machine where medverify's dependencies are not installed. The model is a BERT encoder
built from all-MiniLM-L6-v2's ``config.json`` with *random* weights (seeded): the same
shapes and so the same arithmetic as the real model, whose 90 MB of weights do not fit the
GPU machine's transfer limit; throughput does not depend on the weights' values. The
tokenizer is the real one. Passages are curated summary sections of synthetic registry
records (``medverify.trials.synthetic``, recombined from the 7 real samples), truncated to
256 tokens as one embedding window of ``medverify.kb.embed``.

Measured per configuration: tokenisation passages/s (the fast tokenizer, one process),
forward passages/s (length-sorted batches, mean pooling, device synchronised), and the
padding share.

    python benchmarks/bench_encoder_device.py --passages P.jsonl.gz --model-dir DIR \
        --device cuda --dtypes fp32,fp16,bf16 --batches 64,256,1024 --out result.json

Then, here, ``python benchmarks/bench_encoder_device.py --write-md RESULT.json...`` writes
benchmarks/results/encoder_device.md from the result files (one table row per
configuration, with each file's machine).
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import time
from pathlib import Path
from typing import Any


def load_passages(path: Path, n: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:  # type: ignore[operator]
        texts = [json.loads(line) for _, line in zip(range(n), handle, strict=False)]
    return texts


def tokenize(texts: list[str], model_dir: Path, max_length: int) -> tuple[Any, float]:
    """The encoded passages and the tokenisation rate (passages/s)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    started = time.perf_counter()
    encoded = tokenizer(texts, truncation=True, max_length=max_length)
    return encoded, len(texts) / (time.perf_counter() - started)


def measure(texts: list[str], encoded: Any, model_dir: Path, device: str, dtype_name: str,
            batch: int) -> dict[str, Any]:
    import torch
    from transformers import BertConfig, BertModel

    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    torch.manual_seed(0)
    model = BertModel(BertConfig.from_pretrained(str(model_dir)), add_pooling_layer=False)
    model = model.to(device=device, dtype=dtype).eval()
    lengths = [len(ids) for ids in encoded["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])

    def run(indices: list[int]) -> tuple[float, int]:
        padded_tokens = 0
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        sync()
        begin = time.perf_counter()
        with torch.inference_mode():
            for start in range(0, len(indices), batch):
                chunk = indices[start : start + batch]
                width = max(lengths[i] for i in chunk)
                padded_tokens += width * len(chunk)
                ids = torch.zeros((len(chunk), width), dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, i in enumerate(chunk):
                    ids[row, : lengths[i]] = torch.tensor(encoded["input_ids"][i])
                    mask[row, : lengths[i]] = 1
                ids, mask = ids.to(device), mask.to(device)
                hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
                pooled = (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
                torch.nn.functional.normalize(pooled.float(), dim=-1).cpu()
        sync()
        return time.perf_counter() - begin, padded_tokens

    run(order[: min(len(order), 4 * batch)])  # warm-up
    forward_s, padded = run(order)
    return {
        "device": device, "dtype": dtype_name, "batch": batch, "passages": len(texts),
        "mean_tokens": round(sum(lengths) / len(lengths), 1),
        "padding_share": round(1 - sum(lengths) / padded, 4),
        "forward_per_s": round(len(texts) / forward_s, 1),
        "forward_s": round(forward_s, 3),
    }


def write_md(paths: list[Path]) -> str:
    lines = ["# Encoder throughput, MiniLM-L6 architecture, trial-summary passages", "",
             "Random weights of the real shapes, real tokenizer, passages truncated to 256 "
             "tokens (mean shown), length-sorted batches; forward includes building the "
             "padded batch on the host and copying the pooled vectors back "
             "(benchmarks/bench_encoder_device.py).", "",
             "| result file | machine | device | dtype | batch | passages | mean tokens | "
             "forward passages/s | tokenizer passages/s (one call, all threads) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        data = json.loads(path.read_text("utf-8"))
        info = data["info"]
        machine = f"{info.get('gpu') or 'CPU'}, torch {info['torch']}, {info['threads']} threads"
        for row in data["rows"]:
            lines.append(f"| {path.name} | {machine} | {row['device']} | {row['dtype']} | "
                         f"{row['batch']} | {row['passages']:,} | {row['mean_tokens']} | "
                         f"{row['forward_per_s']:,.1f} | {info['tokenize_per_s']:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import sys

    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "--write-md":
        results = Path(__file__).resolve().parent / "results"
        (results / "encoder_device.md").write_text(write_md([Path(p) for p in argv[1:]]),
                                                   "utf-8")
        return 0
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=Path, required=True)
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtypes", default="fp32")
    parser.add_argument("--batches", default="64")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--threads", type=int)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    texts = load_passages(args.passages, args.n)
    encoded, tokenize_rate = tokenize(texts, args.model_dir, args.max_length)
    rows = []
    for dtype in args.dtypes.split(","):
        for batch in map(int, args.batches.split(",")):
            row = measure(texts, encoded, args.model_dir, args.device, dtype, batch)
            print(json.dumps(row), flush=True)
            rows.append(row)
    info = {"tokenize_per_s": round(tokenize_rate, 1), "torch": torch.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(), "threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None}
    args.out.write_text(json.dumps({"info": info, "rows": rows}, indent=2) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
