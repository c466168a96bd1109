"""Speed and memory of the built-in verifier on CPU.

    .venv/bin/python benchmarks/bench_verifier_speed.py [--weights DIR] [--threads 2] [--n 256]
    .venv/bin/python benchmarks/bench_verifier_speed.py --layers 1,2,3,4,6 --onnx \
        --tag verifier_speed_layers

Measures pairs/s (a) on real claim/evidence pairs truncated to one window of at most 256 tokens
and (b) on pairs padded to exactly 256 tokens, for float32 and dynamic-int8 models, plus peak RSS.
Writes benchmarks/results/<tag>.{json,md}. The machine's load average is recorded, since
other processes sharing the cores slow every number down.

``--layers`` times untrained cross-encoders with that many MiniLM layers instead of the shipped
weights (speed does not depend on the weights): what the 100 pairs/s target would cost in depth.
``--onnx`` also times the model exported to ONNX and quantised with ONNX Runtime's dynamic int8
(skipped when onnx/onnxruntime are not installed; they are not medverify dependencies).
The achieved arithmetic rate is reported as GOP/s: 2 x (4 h^2 + 2 h x 4h) per token per layer
for the dense layers plus 4 x t x h for attention, h = 384, t = padded width.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import tempfile
import time
from pathlib import Path

import torch

from medverify.files import data_dir
from medverify.verifier.infer import DEFAULT_WEIGHTS, quantize_model
from medverify.verifier.model import build_model, load_model, load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "pairs"
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


def onnx_session(model, encoded: list[dict], threads: int, folder: Path):
    """The model exported to ONNX, dynamic-int8 quantised by ONNX Runtime (None if unavailable)."""
    try:
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError:
        return None
    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = tuple(encoded[0][k] for k in names)
    axes = {k: {0: "batch", 1: "tokens"} for k in names} | {"logits": {0: "batch"}}
    plain, quantised = folder / "verifier.onnx", folder / "verifier.int8.onnx"
    torch.onnx.export(
        model, sample, str(plain), input_names=names, output_names=["logits"],
        dynamic_axes=axes, opset_version=17, dynamo=False,
    )  # fmt: skip
    quantize_dynamic(str(plain), str(quantised), weight_type=QuantType.QInt8)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(str(quantised), options, providers=["CPUExecutionProvider"])

    def run(input_ids, attention_mask, token_type_ids):
        feed = {"input_ids": input_ids, "attention_mask": attention_mask}
        feed["token_type_ids"] = token_type_ids
        return session.run(None, {k: v.numpy() for k, v in feed.items()})[0]

    return run


def gops(rate: float, width: float, layers: int, hidden: int = 384) -> float:
    """Achieved arithmetic rate (10^9 multiply-adds x 2 per second) of the encoder layers."""
    per_token = 2 * (4 * hidden * hidden + 2 * hidden * 4 * hidden) + 4 * width * hidden
    return round(rate * width * layers * per_token / 1e9, 1)


def measure(nets: dict, sets: dict, layers: int) -> dict:
    out = {}
    for mode, net in nets.items():
        for name, encoded in sets.items():
            rate, tokens, width = throughput(net, encoded)
            out[f"{mode}_{name}"] = {
                "layers": layers,
                "pairs_per_s": round(rate, 1),
                "mean_tokens": round(tokens, 1),
                "mean_padded_width": round(width, 1),
                "gops": gops(rate, width, layers),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--tag", default="verifier_speed")
    parser.add_argument("--layers", default="", help="time untrained models: e.g. 1,2,4")
    parser.add_argument("--onnx", action="store_true", help="also time ONNX Runtime int8")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer()
    pairs = real_pairs(args.n)
    sets = {
        "real_le256": batches(tokenizer, pairs, False),
        "padded_256": batches(tokenizer, pairs, True),
    }
    if args.layers:
        models = {int(n): build_model(int(n)).eval() for n in args.layers.split(",")}
    else:
        model, meta = load_model(args.weights)
        models = {int(meta["n_layers"]): model}
    results: dict = {
        "threads": args.threads,
        "n_pairs": len(pairs),
        "weights": "untrained (speed only)" if args.layers else str(args.weights),
        "cpu": platform.processor() or platform.machine(),
        "loadavg_before": os.getloadavg(),
        "runs": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for layers, model in models.items():
            nets = {"float32": model, "int8": quantize_model(model).eval()}
            if args.onnx:
                session = onnx_session(model, sets["real_le256"], args.threads, Path(tmp))
                if session is not None:
                    nets["onnx-int8"] = session
            results["runs"][str(layers)] = measure(nets, sets, layers)
    results["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    results["loadavg_after"] = os.getloadavg()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.tag}.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        f"# Verifier speed ({args.threads} threads; weights: {results['weights']})",
        "",
        "| layers | model | input | pairs/s | mean real tokens | mean padded width | GOP/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for layers, runs in results["runs"].items():
        for key, val in runs.items():
            mode, name = key.split("_", 1)
            lines.append(
                f"| {layers} | {mode} | {name} | {val['pairs_per_s']} | {val['mean_tokens']} | "
                f"{val['mean_padded_width']} | {val['gops']} |"
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
