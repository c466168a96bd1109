"""float32 against bfloat16 for the packaged risk scorers on this CPU (``[risk] dtype``):
the speed ratio, measured in one process with the two dtypes alternating block by block
(the machine is shared: a ratio within one run is what holds), and how far bfloat16 moves
what the classifier reads (each answer's mean token log-prob: correlation, mean absolute
difference).

Data: the first ``--examples`` K-QA examples of ``bench_risk_ensemble.py kqa`` (gold
statements and their rule-made counterfactuals). Models: the catalogue's, prepared with
``medverify models prepare NAME --dtype float32``.

    .venv/bin/python benchmarks/bench_risk_dtype.py [--examples 64] [--models NAME ...]

Writes benchmarks/results/risk_dtype.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MODELS = ("smollm2-135m", "gemma3-270m", "qwen2.5-0.5b", "qwen2.5-1.5b")
DTYPES = ("float32", "bfloat16")
BLOCK = 8


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text("utf-8")
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), [])
    return sorted(f for f in flags if f in {"amx_bf16", "avx512_bf16", "avx512f", "avx2"})


def measure(name: str, items: list[Any]) -> dict[str, Any]:
    """Both dtypes of one model over the same blocks, alternating; seconds and means."""
    from medverify.llm.local_models import resolve_model_dir
    from medverify.risk import scorers as S

    path = resolve_model_dir(name)
    lms = {d: S.load_local_lm(path, "cpu", d) for d in DTYPES}
    encoded = {d: [lms[d].encode(i) for i in items] for d in DTYPES}
    seconds = dict.fromkeys(DTYPES, 0.0)
    means: dict[str, list[float]] = {d: [] for d in DTYPES}
    for dtype in DTYPES:  # warm-up (first-call kernel set-up), untimed
        S._forward(lms[dtype], encoded[dtype][:BLOCK], 5)
    for start in range(0, len(items), BLOCK):
        for dtype in DTYPES if (start // BLOCK) % 2 == 0 else DTYPES[::-1]:
            began = time.perf_counter()
            steps = S._forward(lms[dtype], encoded[dtype][start:start + BLOCK], 5)
            seconds[dtype] += time.perf_counter() - began
            means[dtype] += [sum(s.logprob for s in row) / len(row) for row in steps]
    a, b = np.array(means["float32"]), np.array(means["bfloat16"])
    S._MODELS.clear()
    return {"model": name, "s_per_answer": {d: round(seconds[d] / len(items), 4)
                                            for d in DTYPES},
            "speedup": round(seconds["float32"] / seconds["bfloat16"], 2),
            "corr_mean_logprob": round(float(np.corrcoef(a, b)[0, 1]), 5),
            "mean_abs_diff_nat": round(float(np.abs(a - b).mean()), 4),
            "mean_logprob_float32": round(float(a.mean()), 3)}


def main() -> None:
    import bench_risk_ensemble as E

    from medverify.risk.scorers import ScoreItem

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=64)
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    args = parser.parse_args()
    examples = E.examples_for("kqa", 0, 0)[: args.examples]
    items = [ScoreItem(question=e["question"], answer=e["text"]) for e in examples]
    rows = []
    for name in args.models:
        rows.append(measure(name, items))
        print(rows[-1], flush=True)
    result = {"examples": len(items), "block": BLOCK, "cpu_flags": cpu_flags(),
              "machine": platform.machine(), "rows": rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "risk_dtype.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    (RESULTS / "risk_dtype.md").write_text(markdown(result), "utf-8")
    print(markdown(result))


def markdown(r: dict[str, Any]) -> str:
    lines = ["# Risk scorers: float32 against bfloat16 on this CPU", "",
             f"`python benchmarks/bench_risk_dtype.py`: {r['examples']} K-QA examples, "
             f"blocks of {r['block']}, the two dtypes alternating in one process (model load "
             "and a warm-up block excluded). CPU flags: "
             f"{', '.join(r['cpu_flags']) or 'unknown'}. How far bfloat16 moves what the "
             "classifier reads: each answer's mean token log-prob under both dtypes.", "",
             "| model | s/answer float32 | s/answer bfloat16 | speed-up | correlation | "
             "mean abs diff (nat) | mean log-prob |", "|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        s = row["s_per_answer"]
        lines.append(f"| {row['model']} | {s['float32']} | {s['bfloat16']} | "
                     f"{row['speedup']}x | {row['corr_mean_logprob']} | "
                     f"{row['mean_abs_diff_nat']} | {row['mean_logprob_float32']} |")
    lines += ["", "A CPU without AMX or AVX512-BF16 emulates bfloat16 and is usually slower "
              "in it: measure before setting `[risk] dtype = \"bfloat16\"` elsewhere.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
