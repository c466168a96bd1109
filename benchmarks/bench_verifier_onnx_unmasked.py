"""The verifier's ONNX int8 export without the attention mask against the export with it,
on the same windows, in one run (issue 45).

    .venv/bin/python benchmarks/bench_verifier_onnx_unmasked.py [--n 150] [--rounds 5]

``onnx_int8`` runs one window's real tokens at a time, so the mask is all ones and the
export leaves it out (:func:`medverify.verifier.onnx_int8.unmasked`). This exports the
shipped weights both ways here (the masked graph as the export was before: the
cross-encoder's own forward with an ``attention_mask`` input of ones), quantises both the
same way, and scores the windows of the first --n pairs of healthver_dev and checkcovid_dev
one run at a time on one thread, the two sessions alternating window by window for --rounds
rounds. Written per set: how many windows' logits are bitwise equal and the largest logit
difference, and each export's mean ms per window with their ratio. The load average is
recorded. Writes benchmarks/results/verifier_onnx_unmasked.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from bench_judge_speed import cpu_model
from bench_judge_speed import pairs as load_sets
from bench_queue import write_results

from medverify.kb.onnx_quant import quantize
from medverify.kb.onnx_runtime import cpu_session
from medverify.verifier import onnx_int8
from medverify.verifier.infer import DEFAULT_WEIGHTS, Verifier
from medverify.verifier.model import load_model
from medverify.verifier.quantized import tokenize_windows
from medverify.verifier.windows import make_windows

SETS = ("healthver_dev", "checkcovid_dev")


def export(module: torch.nn.Module, args: tuple, names: list[str], out: Path) -> Path:
    """``module`` exported as the verifier's export is, then its MatMuls made int8."""
    fp32 = out.with_suffix(".fp32.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, str(fp32), input_names=names, output_names=["logits"],
                          dynamic_axes={n: {0: "batch", 1: "tokens"} for n in names},
                          opset_version=17, dynamo=False)
    quantize(fp32, out, keep_fp32=lambda _name: False)
    return out


def sessions(folder: Path) -> dict[str, object]:
    model, _ = load_model(DEFAULT_WEIGHTS)
    model.eval()
    ids = torch.tensor([[101, 7632, 102, 2088, 102]])
    masked = export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)),
                    ["input_ids", "attention_mask", "token_type_ids"], folder / "masked.onnx")
    plain = export(onnx_int8.unmasked(model), (ids, torch.zeros_like(ids)),
                   list(onnx_int8.INPUTS), folder / "unmasked.onnx")
    return {"masked": cpu_session(masked, 1), "unmasked": cpu_session(plain, 1)}


def run_set(table: dict, windows: list, rounds: int) -> dict:
    feeds = []
    for ids, types in windows:
        row = np.asarray(ids, dtype=np.int64)[None, :]
        kinds = np.asarray(types, dtype=np.int64)[None, :]
        feeds.append({"masked": {"input_ids": row, "attention_mask": np.ones_like(row),
                                 "token_type_ids": kinds},
                      "unmasked": {"input_ids": row, "token_type_ids": kinds}})
    seconds = {name: 0.0 for name in table}
    logits: dict[str, list] = {name: [] for name in table}
    for r in range(rounds):
        for feed in feeds:
            for name in (("masked", "unmasked") if r % 2 == 0 else ("unmasked", "masked")):
                started = time.perf_counter()
                [out] = table[name].run(None, feed[name])
                seconds[name] += time.perf_counter() - started
                if r == 0:
                    logits[name].append(out[0])
    diffs = [float(np.abs(a - b).max()) for a, b in zip(logits["masked"], logits["unmasked"],
                                                         strict=True)]
    ms = {name: 1000 * s / (rounds * len(feeds)) for name, s in seconds.items()}
    return {"windows": len(feeds), "mean_tokens": float(np.mean([len(w[0]) for w in windows])),
            "bitwise_equal": sum(d == 0 for d in diffs), "max_logit_diff": max(diffs),
            "ms_per_window": {k: round(v, 3) for k, v in ms.items()},
            "masked_over_unmasked": round(ms["masked"] / ms["unmasked"], 3)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tokenizer = Verifier.load(scoring="window_scales").tokenizer
    result: dict = {"cpu": cpu_model(), "cpus": os.cpu_count(), "load_before": os.getloadavg(),
                    "n": args.n, "rounds": args.rounds, "sets": {}}
    with tempfile.TemporaryDirectory(prefix="onnx-unmasked-") as tmp:
        table = sessions(Path(tmp))
        for name, pairs in load_sets(args.n).items():
            flat = [(c, w) for c, e in pairs for w in make_windows(tokenizer, c, e, 256)]
            result["sets"][name] = run_set(table, tokenize_windows(tokenizer, flat, 256),
                                           args.rounds)
            print(name, result["sets"][name], flush=True)
    result["load_after"] = os.getloadavg()
    lines = ["# The verifier's ONNX int8 export without the attention mask vs with it", "",
             f"`python benchmarks/bench_verifier_onnx_unmasked.py --n {args.n} --rounds "
             f"{args.rounds}`: the first {args.n} pairs' windows, one run each on one thread, "
             f"the exports alternating window by window; {result['cpus']} CPUs "
             f"({result['cpu']}), load average {result['load_before'][0]:.2f} before, "
             f"{result['load_after'][0]:.2f} after.", "",
             "| set | windows | mean tokens | logits bitwise equal | largest logit difference "
             "| ms per window, masked | unmasked | masked / unmasked |",
             "|---|---|---|---|---|---|---|---|"]
    for name, row in result["sets"].items():
        ms = row["ms_per_window"]
        lines.append(f"| {name} | {row['windows']} | {row['mean_tokens']:.1f} | "
                     f"{row['bitwise_equal']} of {row['windows']} | {row['max_logit_diff']:.3g} | "
                     f"{ms['masked']} | {ms['unmasked']} | {row['masked_over_unmasked']} |")
    write_results("verifier_onnx_unmasked", result, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
