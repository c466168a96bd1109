"""benchmarks/results/verifier_v3/*.json (verifier.json of each fine-tuning run on the GPU
machine) -> benchmarks/results/verifier_v3.md, with the shipped v2 verifier for reference."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
V2 = {"checkcovid_dev": 0.352, "citint_dev": 0.427, "healthver_dev": 0.456,
      "expertqa_val": 0.536, "held_out": 0.510}  # docs/benchmarks.md, eval pairs (int8, CPU)


def main() -> None:
    lines = ["# Verifier v3 candidates: full fine-tuning, stage 1 synthetic corpus, stage 2 real "
             "pairs (one H200)", "",
             "Selection by held-out macro-F1 (real train pairs, calibrated thresholds); the dev "
             "columns were measured once per run, float model on the GPU (bf16 autocast), "
             "never used for a choice. v2 (shipped): int8 on CPU, `eval pairs`.", "",
             "| run | corpus pairs | recipe change | held-out F1 | Check-COVID dev F1 | "
             "CitInt dev F1 | HealthVer dev F1 | ExpertQA S-vs-rest bal. acc. | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for path in sorted((RESULTS / "verifier_v3").glob("*.json")):
        meta = json.loads(path.read_text("utf-8"))
        recipe, dev = meta["recipe"], meta["dev"]
        change = ", ".join(f"{k}={v}" for k, v in sorted(recipe.items())
                           if k in ("stage1_epochs", "stage2_epochs", "lr", "lr_stage2",
                                    "batch_size", "stage2", "exclude_edits")
                           and v != {"stage1_epochs": 1, "stage2_epochs": 4, "lr": 4e-5,
                                     "lr_stage2": 2e-5, "batch_size": 64, "stage2": True,
                                     "exclude_edits": []}[k])
        lines.append(
            f"| {path.stem} | {meta['counts'].get('corpus_pairs', 0):,} | {change or '-'} | "
            f"{meta['held_out_macro_f1']:.3f} | {dev['checkcovid_dev']['macro_f1']:.3f} | "
            f"{dev['citint_dev']['macro_f1']:.3f} | {dev['healthver_dev']['macro_f1']:.3f} | "
            f"{dev['expertqa_val']['supported_vs_rest_balanced_accuracy']:.3f} | "
            f"{meta['timing']['total_s']:.0f} |")
    lines.append(f"| v2 (shipped) | - | top layer only, ~6k pairs | {V2['held_out']:.3f} | "
                 f"{V2['checkcovid_dev']:.3f} | {V2['citint_dev']:.3f} | "
                 f"{V2['healthver_dev']:.3f} | {V2['expertqa_val']:.3f} | - |")
    lines += ["", "Targets (issue 18): Check-COVID 0.60, CitInt 0.50, HealthVer 0.55, ExpertQA "
              "0.62. Runs 6 at a time on one GPU; `wall s` includes data preparation."]
    (RESULTS / "verifier_v3.md").write_text("\n".join(lines) + "\n", "utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
