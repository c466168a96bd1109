"""How far each scoring mode of the shipped verifier is from its own float32 model, and how
fast it scores, in one run (issue 45).

    .venv/bin/python benchmarks/bench_verifier_fidelity.py [--n 150] [--rounds 3]
        [--modes window_scales onnx_int8 bf16]

Scores the windows of the first --n pairs of healthver_dev (short passages) and of
checkcovid_dev (abstracts) with the float32 model (``Verifier.load(quantize=False)``, batches
of 32: the reference) and with each mode (``Verifier.load(scoring=MODE)``, as the judge runs
it: its workers and threads), and writes per set and mode: the share of windows whose label
under the verifier's thresholds (the judge's one-passage rule) equals float32's, the largest
probability change against float32, and windows/s (median of --rounds alternating rounds,
the reference included). Modes this machine cannot run (bf16 without AMX, onnx_int8 without
ONNX Runtime) are listed as skipped. The load average is recorded. Writes
benchmarks/results/verifier_fidelity.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
from bench_judge_speed import pairs as load_sets
from bench_queue import write_results

from medverify.errors import ConfigError
from medverify.verifier.infer import Verifier
from medverify.verifier.windows import make_windows

SETS = ("healthver_dev", "checkcovid_dev")


def verifiers(modes: list[str]) -> tuple[dict[str, Verifier], dict[str, str]]:
    """float32 and each mode that loads here; skipped modes with the reason."""
    loaded = {"float32": Verifier.load(quantize=False)}
    skipped = {}
    for mode in modes:
        try:
            loaded[mode] = Verifier.load(scoring=mode)
        except ConfigError as exc:
            skipped[mode] = str(exc)
    return loaded, skipped


def measure(table: dict[str, Verifier], windows: list, rounds: int) -> dict[str, dict]:
    """Probabilities and median windows/s per verifier, rounds alternating."""
    seconds: dict[str, list[float]] = {name: [] for name in table}
    probs: dict[str, np.ndarray] = {}
    for _ in range(rounds):
        for name, verifier in table.items():
            started = time.perf_counter()
            probs[name] = verifier._score(windows, 32)
            seconds[name].append(time.perf_counter() - started)
    reference = probs["float32"]
    thresholds = table["float32"].thresholds
    labels = table["float32"].label_pairs(reference)
    out = {}
    for name, verifier in table.items():
        agree = np.mean([a == b for a, b in zip(verifier.label_pairs(probs[name]), labels,
                                                 strict=True)])
        out[name] = {"windows_per_s": len(windows) / statistics.median(seconds[name]),
                     "seconds": seconds[name], "label_agreement": float(agree),
                     "max_change": float(np.abs(probs[name] - reference).max()),
                     "scoring": verifier.scoring, "thresholds": thresholds}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["window_scales", "onnx_int8", "bf16"])
    args = parser.parse_args()
    table, skipped = verifiers(args.modes)
    tokenizer = table["float32"].tokenizer
    result: dict = {"machine": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), "load_before": os.getloadavg(), "n": args.n,
                    "skipped": skipped, "sets": {}}
    lines = ["# Verifier scoring modes against the float32 model", "",
             "| set | windows | mode | labels equal to float32's | largest change | "
             "windows/s | x window_scales |", "|---|---|---|---|---|---|---|"]
    for name, pairs in load_sets(args.n).items():
        if name not in SETS:
            continue
        windows = [(c, w) for c, e in pairs for w in make_windows(tokenizer, c, e, 256)]
        rows = measure(table, windows, args.rounds)
        result["sets"][name] = {"windows": len(windows), "modes": rows}
        base = rows.get("window_scales", rows["float32"])["windows_per_s"]
        for mode, row in rows.items():
            lines.append(f"| {name} | {len(windows)} | {mode} | {row['label_agreement']:.3f} | "
                         f"{row['max_change']:.3f} | {row['windows_per_s']:.1f} | "
                         f"{row['windows_per_s'] / base:.2f} |")
        print("\n".join(lines[-len(rows):]), flush=True)
    result["load_after"] = os.getloadavg()
    lines += ["", f"First {args.n} pairs of each set; median of {args.rounds} alternating "
              f"rounds; load average before {result['load_before'][0]:.2f}, after "
              f"{result['load_after'][0]:.2f}, on {result['cpus']} CPUs. Labels: the "
              "verifier's thresholds, one passage. Skipped: "
              + (", ".join(f"{k} ({v})" for k, v in skipped.items()) or "none") + ".", ""]
    write_results("verifier_fidelity", result, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
