"""How often the cascade judge could skip the LLM, and how right the built-in judge is then.

For each pairs file the built-in judge scores every pair once; then, for each (high, low)
margin, a pair counts as *settled* when the cascade would keep the built-in verdict
(``CascadeJudge.settled``). Reported: the share settled (= LLM calls saved, one pair being
one claim) and the built-in judge's accuracy on the settled pairs against its accuracy on
all pairs (3-way accuracy for 3-way files, SUPPORTED-versus-rest accuracy for 2-way files).

Margins are chosen on the dev-only sets (Check-COVID dev, Citation-Integrity dev); HealthVer
dev and ExpertQA val are reported as data the choice never looked at.

    .venv/bin/python benchmarks/bench_cascade_margins.py [--limit N]

Writes benchmarks/results/cascade_margins.json and cascade_margins.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from medverify.evals.pairs import Pair, load_pairs, pair_item, predicted_label
from medverify.files import data_dir
from medverify.judge.builtin import BuiltinJudge
from medverify.judge.cascade import CascadeJudge
from medverify.llm.facade import Model
from medverify.testing import ScriptedProvider

ROOT = Path(__file__).resolve().parents[1]
PAIRS = data_dir() / "pairs"
RESULTS = ROOT / "benchmarks" / "results"
CHOOSE_ON = ("checkcovid_dev", "citint_dev")
HELD_OUT = ("healthver_dev", "expertqa_val")
MARGINS = [(0.95, 0.05), (0.9, 0.1), (0.85, 0.15), (0.8, 0.2), (0.7, 0.3)]


def _correct(pair: Pair, label: str) -> bool:
    if pair.labels == "2-way":
        return (label == "SUPPORTED") == (pair.label == "SUPPORTED")
    return label == pair.label


def measure(name: str, judge: BuiltinJudge, limit: int | None) -> dict[str, object]:
    pairs = load_pairs(PAIRS / f"{name}.jsonl", limit)
    started = time.perf_counter()
    scored = asyncio.run(judge.judge_scored([pair_item(p) for p in pairs]))
    seconds = time.perf_counter() - started
    correct = [_correct(p, predicted_label(v)) for p, (_, v) in zip(pairs, scored, strict=True)]
    rows = []
    for high, low in MARGINS:
        cascade = CascadeJudge(Model(ScriptedProvider([])), builtin=judge, high=high, low=low)
        settled = [cascade.settled(s, v) for s, v in scored]
        kept = [c for c, s in zip(correct, settled, strict=True) if s]
        rows.append({"high": high, "low": low, "settled": sum(settled) / len(pairs),
                     "accuracy_settled": sum(kept) / len(kept) if kept else None})
    return {"file": name, "n": len(pairs), "labels": pairs[0].labels,
            "accuracy_all": sum(correct) / len(pairs), "pairs_per_second": len(pairs) / seconds,
            "margins": rows}


def markdown(results: list[dict[str, object]], judge_id: str) -> str:
    lines = [f"# Cascade margins ({judge_id})", "",
             "settled = share of pairs the cascade keeps from the built-in judge (LLM calls "
             "saved); acc = built-in accuracy (3-way, or S-vs-rest for 2-way files).", "",
             "| file | n | acc all | " + " | ".join(f"{h}/{lo}: settled, acc" for h, lo in MARGINS)
             + " |", "|---|---|---|" + "---|" * len(MARGINS)]
    for r in results:
        cells = []
        for m in r["margins"]:  # type: ignore[attr-defined]
            acc = "—" if m["accuracy_settled"] is None else f"{m['accuracy_settled']:.3f}"
            cells.append(f"{m['settled']:.1%}, {acc}")
        role = "held out" if r["file"] in HELD_OUT else "choice"
        lines.append(f"| {r['file']} ({role}) | {r['n']} | {r['accuracy_all']:.3f} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    judge = BuiltinJudge(quotes=False)
    results = [measure(name, judge, args.limit) for name in (*CHOOSE_ON, *HELD_OUT)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {"judge": judge.judge_id, "limit": args.limit, "results": results}
    (RESULTS / "cascade_margins.json").write_text(json.dumps(payload, indent=2) + "\n")
    (RESULTS / "cascade_margins.md").write_text(markdown(results, judge.judge_id))
    print(markdown(results, judge.judge_id))


if __name__ == "__main__":
    main()
