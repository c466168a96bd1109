"""A v3 candidate as it would ship: its GPU-trained weights loaded here with int8 dynamic
quantisation (``Verifier.load``), thresholds recalibrated on the held-out real train pairs
(``calibrate_shipped``, as v2's were), then the dev/evaluation pairs files scored the way
``medverify eval pairs`` scores them. Comparable with v2's numbers in docs/benchmarks.md.

    python benchmarks/verifier_v3/eval_int8.py RUN [--weights FILE.safetensors]

RUN names ``benchmarks/results/verifier_v3/RUN.json`` (its verifier.json); the weights are
the ones the GPU run returned. Writes benchmarks/results/verifier_v3_int8_RUN.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[2]
PAIRS = data_dir() / "pairs"
RESULTS = ROOT / "benchmarks" / "results"


def main(argv: list[str] | None = None) -> int:
    from medverify.verifier import data as vdata
    from medverify.verifier.evaluate import EVAL_FILES, evaluate_files
    from medverify.verifier.infer import Verifier
    from medverify.verifier.model import _file_sha256, base_sha256
    from medverify.verifier.train import calibrate_shipped

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run")
    parser.add_argument("--weights", type=Path, required=True)
    args = parser.parse_args(argv)
    meta = json.loads((RESULTS / "verifier_v3" / f"{args.run}.json").read_text("utf-8"))
    work = Path(tempfile.mkdtemp(prefix="v3-int8-"))
    try:
        shutil.copy(args.weights, work / "verifier.safetensors")
        # trained against the packaged base rounded to float16 for the transfer (the only
        # tensor taken from the base at load, the frozen word embeddings, differs by that
        # rounding): tie the weights to the installed base, and record it
        meta.update(base_sha256=base_sha256(), base_transfer="float16 (GPU machine)",
                    n_layers=meta["recipe"]["n_layers"],
                    labels=["SUPPORTED", "CONTRADICTED", "NOT_ENOUGH_INFO"],
                    weights_sha256=_file_sha256(work / "verifier.safetensors"))
        (work / "verifier.json").write_text(json.dumps(meta, indent=2) + "\n")
        recipe = meta["recipe"]
        real = [p for n in vdata.TRAIN_FILES for p in vdata.load_pairs(PAIRS / f"{n}.jsonl")]
        _, held = vdata.split_holdout(real, recipe["val_frac"], recipe["seed"])
        calibrated = calibrate_shipped(work, held)
        verifier = Verifier.load(work, quantize=True)
        scores = evaluate_files(verifier, PAIRS, EVAL_FILES)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"run": args.run, "thresholds_int8": calibrated["thresholds"],
           "held_out_macro_f1_int8": calibrated["val_macro_f1_int8_calibrated"],
           "dev": {name: {"macro_f1": (s.get("three_way") or {}).get("macro_f1"),
                          "supported_vs_rest_balanced_accuracy":
                              s["supported_vs_rest"]["balanced_accuracy"],
                          "n": s["n"], "pairs_per_s": s["pairs_per_s"]}
                   for name, s in scores.items()}}
    path = RESULTS / f"verifier_v3_int8_{args.run}.json"
    path.write_text(json.dumps(out, indent=2) + "\n", "utf-8")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
