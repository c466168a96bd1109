"""Quality of the built-in verifier on the dev/evaluation pairs (final measurements only).

    .venv/bin/python benchmarks/bench_verifier_eval.py [--weights DIR] [--no-quantize]

Also re-scores the training run's held-out validation split with the shipped (int8) model, to
show the cost of quantisation against the float32 number recorded at training time. Writes
benchmarks/results/verifier_eval_predict.{json,md} (verifier_eval.* holds the
`medverify eval pairs` measurement). Nothing here feeds back into training.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from medverify.files import data_dir
from medverify.verifier.evaluate import evaluate_files, evaluate_rows, heldout_rows, summary_table
from medverify.verifier.infer import DEFAULT_WEIGHTS, Verifier

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "pairs"
RESULTS = ROOT / "benchmarks" / "results"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--weights", type=Path, default=DEFAULT_WEIGHTS)
    parser.add_argument("--no-quantize", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tag", default="verifier_eval_predict")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    verifier = Verifier.load(args.weights, quantize=not args.no_quantize)
    config = verifier.metadata.get("config", {})
    val = heldout_rows(DATA, int(config.get("seed", 13)), float(config.get("val_frac", 0.15)))
    results = {"heldout_val": evaluate_rows(verifier, val)}
    results.update(evaluate_files(verifier, DATA))
    out = {
        "verifier": verifier.id,
        "quantized": not args.no_quantize,
        "thresholds": verifier.thresholds,
        "loadavg": os.getloadavg(),
        "results": results,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.tag}.json").write_text(json.dumps(out, indent=2) + "\n")
    table = summary_table(results)
    header = f"# Verifier evaluation: {verifier.id} ({'int8' if out['quantized'] else 'float32'})"
    (RESULTS / f"{args.tag}.md").write_text(f"{header}\n\n{table}\n")
    print(header, table, sep="\n\n")


if __name__ == "__main__":
    main()
