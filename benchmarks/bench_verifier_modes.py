"""Ways to score the built-in verifier's windows in batches without a window's scores
depending on its batch (issue 45 item 1), measured side by side in one run.

    .venv/bin/python benchmarks/bench_verifier_modes.py [--n 300] [--rounds 3] [--sets ...]

Modes (all over the same windows of the first --n HealthVer and Check-COVID dev pairs):

- ``int8_per_window``: today's shipped mode (dynamic int8, one window per forward pass).
- ``int8_batched``: dynamic int8, 32 windows a batch padded to the batch's longest (before
  issue 27; batch-dependent, for reference).
- ``int8_fixed_shape``: dynamic int8, every window padded to a fixed length bucket (a multiple
  of 16 tokens) whatever its companions, batches of one bucket.
- ``int8_window_scales``: fixed-shape batches, but every quantised Linear layer quantises
  each window's real tokens with that window's own activation scale (one call per window),
  which is per-window int8's arithmetic inside a batched pass.
- ``fp32_fixed_shape``: the float32 model, fixed-shape batches of one bucket.

Each mode is timed at 2 and 1 intra-op threads (``torch.set_num_threads``) in alternating
rounds (median); it reports windows/s, the ratio to ``int8_per_window`` at 2 threads (today),
the largest probability change of a window scored alone vs in its batches and vs batches in
reverse order (other companions), label changes (the judge's one-passage rule, the
verifier's thresholds), and the largest change against today's scores. The load average is
recorded. Writes benchmarks/results/verifier_modes.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from bench_judge_speed import pairs as load
from bench_queue import write_results

from medverify.verdict_rules import passage_label
from medverify.verifier.infer import (
    DEFAULT_WEIGHTS,
    one_malloc_arena,
    quantize_model,
    score_windows,
)
from medverify.verifier.model import load_model, load_tokenizer
from medverify.verifier.windows import MAX_CLAIM_TOKENS, make_windows

_LOCAL = threading.local()  # the real lengths of the batch's windows, for WindowScaledLinear


class WindowScaledLinear(torch.nn.Module):
    """A dynamic int8 Linear that quantises each window's real tokens on their own."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lengths = getattr(_LOCAL, "lengths", None)
        if lengths is None:
            return self.inner(x)
        if x.dim() == 2:  # the head: one pooled row per window
            return torch.cat([self.inner(x[i : i + 1]) for i in range(x.shape[0])])
        out = x.new_zeros(x.shape[0], x.shape[1], self.inner.out_features)
        for i, n in enumerate(lengths):
            out[i, :n] = self.inner(x[i, :n])
        return out


def window_scaled(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every dynamic int8 Linear wrapped in :class:`WindowScaledLinear`."""
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.ao.nn.quantized.dynamic.Linear):
                setattr(module, name, WindowScaledLinear(child))
    return model


def score_fixed(model: torch.nn.Module, tok, windows: Sequence[tuple[str, str]],
                batch_size: int, *, step: int = 16, scales: bool = False) -> np.ndarray:
    """Probabilities with every window padded to ceil(length / step) * step tokens."""
    claims = [tok.convert_tokens_to_string(tok.tokenize(c)[:MAX_CLAIM_TOKENS]) for c, _ in windows]
    enc = tok(claims, [w for _, w in windows], truncation="only_second", max_length=256)
    lengths = [len(ids) for ids in enc["input_ids"]]
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(min(256, -(-n // step) * step), []).append(i)
    out = np.zeros((len(windows), 3), dtype=np.float32)
    with torch.inference_mode():
        for size, members in sorted(groups.items()):
            for start in range(0, len(members), batch_size):
                idx = members[start : start + batch_size]
                ids = torch.zeros(len(idx), size, dtype=torch.long)
                mask, types = torch.zeros_like(ids), torch.zeros_like(ids)
                for row, i in enumerate(idx):
                    n = lengths[i]
                    ids[row, :n] = torch.tensor(enc["input_ids"][i])
                    types[row, :n] = torch.tensor(enc["token_type_ids"][i])
                    mask[row, :n] = 1
                _LOCAL.lengths = [lengths[i] for i in idx] if scales else None
                try:
                    logits = model(ids, mask, types)
                finally:
                    _LOCAL.lengths = None
                out[idx] = torch.softmax(logits.float(), dim=-1).numpy()
    return out


def modes(int8: torch.nn.Module, fp32: torch.nn.Module, tok) -> dict[str, Callable]:
    """Mode name -> fn(windows, batch_size) -> probabilities."""
    return {
        "int8_per_window": lambda w, b: score_windows(int8, tok, w, 256, 1),
        "int8_batched": lambda w, b: score_windows(int8, tok, w, 256, b),
        "int8_fixed_shape": lambda w, b: score_fixed(int8, tok, w, b),
        "int8_window_scales": lambda w, b: score_fixed(int8, tok, w, b, scales=True),
        "fp32_fixed_shape": lambda w, b: score_fixed(fp32, tok, w, b),
    }


def independence(fn: Callable, windows: list, today: np.ndarray, thresholds: tuple) -> dict:
    """Alone vs batched vs other companions, and the change against today's scores."""
    batched = fn(windows, 32)
    alone = fn(windows, 1)
    others = fn(windows[::-1], 32)[::-1]

    def flips(a: np.ndarray, b: np.ndarray) -> int:
        return sum(passage_label(x, thresholds) != passage_label(y, thresholds)
                   for x, y in zip(a, b, strict=True))

    return {"alone_vs_batched": float(np.abs(alone - batched).max()),
            "alone_vs_batched_label_changes": flips(alone, batched),
            "batched_vs_others": float(np.abs(batched - others).max()),
            "batched_vs_others_label_changes": flips(batched, others),
            "vs_today": float(np.abs(batched - today).max()),
            "vs_today_label_changes": flips(batched, today)}


def timings(table: dict[str, Callable], windows: list, rounds: int) -> dict[str, dict]:
    """Median windows/s per mode and thread count over alternating rounds."""
    seconds: dict[str, list[float]] = {}
    for _ in range(rounds):
        for threads in (2, 1):
            torch.set_num_threads(threads)
            for name, fn in table.items():
                started = time.perf_counter()
                fn(windows, 32)
                seconds.setdefault(f"{name}@{threads}", []).append(time.perf_counter() - started)
    torch.set_num_threads(2)
    return {key: {"seconds": v, "windows_per_s": len(windows) / statistics.median(v)}
            for key, v in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sets", default="healthver_dev,checkcovid_dev",
                        help="comma-separated sets to measure")
    args = parser.parse_args()
    one_malloc_arena()
    tok = load_tokenizer()
    fp32, meta = load_model(DEFAULT_WEIGHTS)
    int8 = window_scaled(quantize_model(load_model(DEFAULT_WEIGHTS)[0]).eval())
    thresholds = (meta["thresholds"]["support"], meta["thresholds"]["contradict"])
    table = modes(int8, fp32.eval(), tok)
    result: dict = {"cpus": os.cpu_count(), "load_before": os.getloadavg(), "sets": {}}
    lines = ["# Verifier scoring modes: speed and batch independence", "",
             "| set | windows | mode | windows/s, 2 threads | windows/s, 1 thread | "
             "x today (per window, 2 threads) | max change alone vs batched | label changes | "
             "max change vs other companions | label changes | max change vs today | "
             "label changes vs today |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, pairs in load(args.n).items():
        if name not in args.sets.split(",") and name != "made_up":
            continue
        windows = [(c, w) for c, e in pairs for w in make_windows(tok, c, e, 256)]
        today = table["int8_per_window"](windows, 1)
        speed = timings(table, windows, args.rounds)
        base = speed["int8_per_window@2"]["windows_per_s"]
        rows = {}
        for mode, fn in table.items():
            row = {**independence(fn, windows, today, thresholds),
                   "windows_per_s_2": speed[f"{mode}@2"]["windows_per_s"],
                   "windows_per_s_1": speed[f"{mode}@1"]["windows_per_s"]}
            rows[mode] = row
            lines.append(
                f"| {name} | {len(windows)} | {mode} | {row['windows_per_s_2']:.1f} | "
                f"{row['windows_per_s_1']:.1f} | {row['windows_per_s_2'] / base:.2f} / "
                f"{row['windows_per_s_1'] / base:.2f} | {row['alone_vs_batched']:.2e} | "
                f"{row['alone_vs_batched_label_changes']} | {row['batched_vs_others']:.2e} | "
                f"{row['batched_vs_others_label_changes']} | {row['vs_today']:.2e} | "
                f"{row['vs_today_label_changes']} |")
        result["sets"][name] = {"windows": len(windows), "modes": rows, "timings": speed}
        print("\n".join(lines[-len(table):]), flush=True)
    result["load_after"] = os.getloadavg()
    lines += ["", f"Median of {args.rounds} alternating rounds (modes and thread counts "
              f"interleaved); load average before {result['load_before'][0]:.2f}, after "
              f"{result['load_after'][0]:.2f}, on {result['cpus']} CPUs. 'x today' is "
              "windows/s at 2 / 1 threads over int8_per_window at 2 threads.", ""]
    write_results("verifier_modes", result, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
