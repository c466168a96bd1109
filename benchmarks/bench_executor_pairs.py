"""``eval pairs`` on the executors (issue 19, part 3): local (in process) against a local Ray
with 1 and 2 CPUs, on the same pairs, with a judge so cheap (the ``words`` test judge) that
what is measured is the executor's own overhead: reading, shipping chunks, collecting and
scoring. Each configuration runs twice; the second run (warm workers) is the one compared.
The verdicts of every run are checked equal to the local ones.

``--judge builtin`` measures a judge that costs per pair instead: the built-in verifier
(its shipped weights, loaded once per process: the first run includes each worker's
load), where Ray's 1 vs 2 workers show the speed-up a per-pair cost allows.

    python benchmarks/bench_executor_pairs.py [--pairs 100000]
    python benchmarks/bench_executor_pairs.py --judge builtin --pairs 1024

Needs ``pip install 'medverify[ray]'``. Writes benchmarks/results/executor_pairs.{json,md}
(``executor_pairs_builtin.{json,md}`` with ``--judge builtin``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from medverify.config import Config
from medverify.evals.pairs import evaluate_pairs_on
from medverify.executor import Executor, LocalExecutor, RayExecutor
from medverify.files import data_dir
from medverify.judge import JUDGES
from medverify.testing.judge import word_judge

ROOT = Path(__file__).resolve().parents[1]
PAIRS = data_dir() / "pairs" / "checkcovid_dev.jsonl"
OUT = ROOT / "benchmarks" / "results"


def make_file(n: int, folder: Path) -> Path:
    """``n`` pairs: Check-COVID dev repeated, ids made unique."""
    rows = [json.loads(line) for line in PAIRS.read_text("utf-8").splitlines() if line.strip()]
    path = folder / "pairs.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            handle.write(json.dumps({**rows[i % len(rows)], "id": f"p{i}"}) + "\n")
    return path


def timed(executor: Executor, path: Path, config: Config) -> tuple[float, list[Any]]:
    started = time.perf_counter()
    result = evaluate_pairs_on(executor, [path], config)
    return time.perf_counter() - started, [f.model_dump(exclude={"seconds", "pairs_per_second"})
                                           for f in result.files]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--judge", choices=["words", "builtin"], default="words")
    args = parser.parse_args(argv)
    if not PAIRS.is_file():
        print(f"no pairs at {PAIRS}", file=sys.stderr)
        return 2
    JUDGES.register("words", word_judge)
    config = Config(judge=args.judge)
    name_of = "" if args.judge == "words" else f"_{args.judge}"
    judge_text = ("the `words` test judge (no model: the executor's own overhead is what is "
                  "measured)" if args.judge == "words" else
                  "the built-in verifier (shipped weights, CPU; each process loads it once)")
    load_before = os.getloadavg()
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = make_file(args.pairs, Path(tmp))
        configs: list[tuple[str, Any]] = [("local", LocalExecutor),
                                          ("ray, 1 CPU", lambda: RayExecutor(num_cpus=1)),
                                          ("ray, 2 CPUs", lambda: RayExecutor(num_cpus=2))]
        reference = None
        for name, make in configs:
            started = time.perf_counter()
            executor = make()
            try:
                first, scores = timed(executor, path, config)
                second, again = timed(executor, path, config)
            finally:
                executor.close()
            reference = reference or scores
            runs[name] = {"first_s": round(first, 2), "second_s": round(second, 2),
                          "pairs_per_s": round(args.pairs / second),
                          "with_start_s": round(time.perf_counter() - started, 2),
                          "same_scores_as_local": scores == reference == again}
            print(name, runs[name], flush=True)
    result = {"benchmark": f"executor_pairs{name_of}", "pairs": args.pairs,
              "judge": args.judge,
              "cpus": os.cpu_count(), "load_before": load_before,
              "load_after": os.getloadavg(), "runs": runs}
    (OUT / f"executor_pairs{name_of}.json").write_text(json.dumps(result, indent=2) + "\n", "utf-8")
    lines = ["# `eval pairs` on the executors", "",
             f"{args.pairs:,} pairs (Check-COVID dev repeated), {judge_text}, "
             f"{os.cpu_count()} CPUs, load average {load_before[0]:.2f} before, "
             f"{result['load_after'][0]:.2f} after. `python benchmarks/bench_executor_pairs.py "
             f"--judge {args.judge} --pairs {args.pairs}`.",
             "", "| executor | first run s | second run s (warm) | pairs/s (second) "
             "| with start-up and shutdown s | scores equal to local |",
             "|---|---|---|---|---|---|"]
    for name, r in runs.items():
        lines.append(f"| {name} | {r['first_s']} | {r['second_s']} | {r['pairs_per_s']:,} | "
                     f"{r['with_start_s']} | {r['same_scores_as_local']} |")
    (OUT / f"executor_pairs{name_of}.md").write_text("\n".join(lines) + "\n", "utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
