"""Issue 28's comparison: the built-in judge, the cascade and the packaged Qwen models as
judges, side by side on seeded samples of the dev sets (CPU).

    .venv/bin/python benchmarks/bench_judges.py [--sample 150] [--seed 0]
        [--judges builtin,llm-scored=local:qwen2.5-0.5b,...] [--work DIR]

Runs `medverify eval judges` (resumable: verdicts stay in --work, default
$MEDVERIFY_HOME/bench-judges, so a killed run continues) on checkcovid_dev, citint_dev,
healthver_dev and expertqa_val (none used to fit any calibration) and the trial-study pairs
(`scripts/trial_pairs.py`; `--sets` picks), then checks the targets:

- Qwen-1.5B as judge: macro-F1 above the built-in judge's on at least 3 of the 4 dev sets
  (point estimates; the bootstrap intervals are reported beside them);
- the cascade at <= 30 % of pairs sent to the model keeps >= 80 % of the model's gain.

Needs `medverify models prepare qwen2.5-0.5b` and `... qwen2.5-1.5b` (see docs/judges.md).
Writes benchmarks/results/NAME.{md,json,svg} (`--name`, default judges).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "pairs"
RESULTS = ROOT / "benchmarks" / "results"
SETS = ("checkcovid_dev", "citint_dev", "healthver_dev", "expertqa_val")
TRIAL_PAIRS = RESULTS / "trial_pairs.jsonl"
BIG = "llm-scored=local:qwen2.5-1.5b"
JUDGES = ("builtin", "llm-scored=local:qwen2.5-0.5b", BIG, "cascade=local:qwen2.5-1.5b")


def targets(report: dict) -> list[str]:
    """The target lines: 1.5B vs built-in per dev set, cascade gain kept."""
    by = {(r["set"], r["judge"]): r for r in report["results"]}
    lines, above = [], 0
    for name in SETS:
        base, big = by.get((name, "builtin")), by.get((name, BIG))
        if not base or not big:
            continue
        b, q = base["macro_f1"], big["macro_f1"]
        win = (q["value"] or 0) > (b["value"] or 0)
        above += win
        lines.append(f"- {name}: Qwen-1.5B macro-F1 {q['value']} [{q['low']}, {q['high']}] vs "
                     f"built-in {b['value']} [{b['low']}, {b['high']}]: "
                     f"{'above' if win else 'not above'}")
    if lines:
        lines.append(f"- Qwen-1.5B above the built-in judge on {above} of {len(lines)} dev sets "
                     f"measured (target: >= 3 of {len(SETS)}): "
                     f"{'met' if above >= 3 else 'missed'}")
    for curve in report.get("cascades", []):
        if curve["second"] == BIG:
            kept = curve["gain_kept_at_30"]
            first, full = curve["points"][0]["macro_f1"], curve["points"][-1]["macro_f1"]
            gain = round(full - first, 4) if first is not None and full is not None else None
            nominal = (f"; nominal: the model's own gain is {gain}, inside the intervals"
                       if kept is not None and gain is not None and gain < 0.02 else "")
            lines.append(f"- cascade on {curve['set']}: gain kept at <= 30 % sent: "
                         f"{'no gain to keep (the model alone is worse)' if kept is None else kept}"
                         f" ({'met' if kept is not None and kept >= 0.8 else 'missed'}{nominal})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--judges", default=",".join(JUDGES))
    parser.add_argument("--sets", default=",".join((*SETS, "trial_pairs")),
                        help="pairs sets to judge (trial_pairs: scripts/trial_pairs.py's)")
    parser.add_argument("--name", default="judges", help="results file name")
    home = Path(os.environ.get("MEDVERIFY_HOME") or Path.home() / ".medverify")
    parser.add_argument("--work", type=Path, default=home / "bench-judges")
    args = parser.parse_args()
    files = [str(TRIAL_PAIRS if name == "trial_pairs" else DATA / f"{name}.jsonl")
             for name in args.sets.split(",")]
    command = [sys.executable, "-m", "medverify", "eval", "judges", *files,
               "--sample", str(args.sample), "--seed", str(args.seed), "--out", str(args.work)]
    for judge in args.judges.split(","):
        command += ["--judge", judge]
    subprocess.run(command, check=True, env={**os.environ, "COLUMNS": "200"})
    report = json.loads((args.work / "judges.json").read_text("utf-8"))
    RESULTS.mkdir(parents=True, exist_ok=True)
    for suffix in ("json", "svg"):
        shutil.copy(args.work / f"judges.{suffix}", RESULTS / f"{args.name}.{suffix}")
    table = (args.work / "judges.md").read_text("utf-8")
    text = (f"# Judges side by side (`{' '.join(Path(c).name for c in command[1:])}`)\n\n"
            f"{table}\n## Targets\n\n" + "\n".join(targets(report)) + "\n")
    (RESULTS / f"{args.name}.md").write_text(text, "utf-8")
    print(text)


if __name__ == "__main__":
    main()
