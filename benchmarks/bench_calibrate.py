"""Confidence cards measured (issue 42): does a card's "sure" hold on claims it never saw?

    .venv/bin/python benchmarks/bench_calibrate.py [--pairs 2000] [--out benchmarks/results]

1. **A judge of known quality** (``medverify.testing.known_judge``: right on 85 % of the
   claims, log-prob signals that are informative but noisy), on each dev set with 3-way
   labels (checkcovid_dev, citint_dev): the card is fitted on one half (split by evidence
   text), with the default targets and with FACT's raised to 0.90, and measured on the
   other half: confident
   precision per category with its Wilson 95 % interval and coverage (target: precision at
   or above the target inside its interval, coverage >= 40 %).
2. **The built-in judge**: ``calibrate`` on ``--pairs`` pairs drawn (seed 0) from the
   training-allowed sets, timed (target: under 2 minutes on 2 cores), then the card applied
   on the held-out dev and evaluation sets (checkcovid_dev, citint_dev, healthver_dev,
   covidfact_dev, expertqa_val): per set and category, the precision of the sure verdicts
   against that of the not-sure ones, each with its interval (target: sure >= not sure).
   The card is fitted on the judge *without* its shipped calibration (family None), so the
   card alone decides; the judge with its shipped calibration is measured beside it.

Writes ``calibrate.{json,md}`` under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

from medverify.config import Config
from medverify.evals import calibrate as flow
from medverify.files import atomic_write_text, data_dir
from medverify.judge.confidence.card import RIGHT, ConfidenceCard
from medverify.judge.confidence.wrap import CardJudge
from medverify.records import Category, Verdict
from medverify.stats import wilson
from medverify.testing.known_judge import KnownQualityJudge

PAIRS = data_dir() / "pairs"
HALVES = ("checkcovid_dev", "citint_dev")
HELD_OUT = ("checkcovid_dev", "citint_dev", "healthver_dev", "covidfact_dev", "expertqa_val")
CATEGORIES = (Category.FACT, Category.HALLUCINATION, Category.COVERAGE_GAP)


def split(examples: list[flow.Labelled], seed: int = 0) -> tuple[list, list]:
    """Two halves with no evidence text on both sides."""
    groups = sorted({e.group for e in examples})
    random.Random(seed).shuffle(groups)
    first = set(groups[: len(groups) // 2])
    return ([e for e in examples if e.group in first],
            [e for e in examples if e.group not in first])


def measure(examples: list[flow.Labelled], verdicts: list[Verdict]) -> dict[str, Any]:
    """Per category: sure and not-sure precision (Wilson 95 %) and the sure coverage."""
    out: dict[str, Any] = {}
    for category in CATEGORIES:
        right = RIGHT[category]
        mine = [(v, e) for v, e in zip(verdicts, examples, strict=True)
                if v.category == category]
        sure = [e.gold in right for v, e in mine if v.confident]
        unsure = [e.gold in right for v, e in mine if not v.confident]
        truly = sum(e.gold in right for e in examples)
        out[category.value] = {
            "sure": len(sure), "sure_precision": _share(sure), "sure_ci": wilson(sum(sure),
                                                                                  len(sure)),
            "not_sure": len(unsure), "not_sure_precision": _share(unsure),
            "not_sure_ci": wilson(sum(unsure), len(unsure)),
            "coverage": round(sum(sure) / truly, 4) if truly else None}
    return out


def _share(values: list[bool]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def known_quality(targets: dict[str, float], seed: int = 0) -> dict[str, Any]:
    """Part 1: fit on one half of each dev set, measure on the other."""
    results = {}
    for name in HALVES:
        examples = flow.from_pairs(PAIRS / f"{name}.jsonl")
        judge = KnownQualityJudge({e.item.claim.id: e.gold for e in examples}, 0.85, seed)
        fit_on, test_on = split(examples, seed)
        verdicts = asyncio.run(flow.judge_all(judge, fit_on))
        card = flow.fit_card(judge, fit_on, verdicts, sources=[f"{name} half 1"],
                             targets=targets, by="bench")
        held = asyncio.run(flow.judge_all(CardJudge(judge, card), test_on))
        results[name] = {"fit_rows": len(fit_on), "test_rows": len(test_on),
                         "thresholds": {c: f.threshold for c, f in card.categories.items()},
                         "targets": {c: f.target for c, f in card.categories.items()},
                         "held_out": measure(test_on, held)}
    return results


def builtin(n_pairs: int, seed: int = 0) -> dict[str, Any]:
    """Part 2: a card for the built-in judge without its shipped calibration (the card
    alone decides; timed), beside the judge with its shipped calibration, held out."""
    pool = [e for name in flow.TRAINING_ALLOWED
            for e in flow.from_pairs(flow.training_set(name))]
    chosen = random.Random(seed).sample(pool, min(n_pairs, len(pool)))
    plain = Config.model_validate({"judge_settings": {"calibration_family": None}})
    started = time.perf_counter()
    judge = flow.plain_judge(plain, None)
    verdicts = asyncio.run(flow.judge_all(judge, chosen))
    card = flow.fit_card(judge, chosen, verdicts, sources=list(flow.TRAINING_ALLOWED),
                         by="bench")
    seconds = time.perf_counter() - started
    shipped_judge = flow.plain_judge(Config(), None)
    held: dict[str, Any] = {}
    for name in HELD_OUT:
        examples = flow.from_pairs(PAIRS / f"{name}.jsonl")
        shipped = asyncio.run(flow.judge_all(shipped_judge, examples))
        carded = asyncio.run(flow.judge_all(CardJudge(judge, card), examples))
        held[name] = {"rows": len(examples), "shipped": measure(examples, shipped),
                      "card": measure(examples, carded)}
    return {"pairs": len(chosen), "calibrate_seconds": round(seconds, 1),
            "card": _card_summary(card), "held_out": held}


def _card_summary(card: ConfidenceCard) -> dict[str, Any]:
    return {c: {"threshold": f.threshold, "why_none": f.why_none, "rows": f.rows,
                "cv_precision": f.cv_precision, "cv_precision_ci": f.cv_precision_ci,
                "cv_precision_not_sure": f.cv_precision_not_sure,
                "cv_coverage": f.cv_coverage} for c, f in card.categories.items()}


def markdown(result: dict[str, Any]) -> str:
    lines = ["# Confidence cards (`benchmarks/bench_calibrate.py`)", "",
             "## 1. A judge of known quality (85 % right), card fitted on one half, "
             "measured on the other", "",
             "| targets | set | category | target | sure | precision [95 % CI] | coverage |",
             "|---|---|---|---|---|---|---|"]
    for targets, sets in result["known_quality"].items():
        for name, r in sets.items():
            for category, m in r["held_out"].items():
                lines.append(f"| {targets} | {name} | {category} | "
                             f"{r['targets'][category]:.2f} | {m['sure']} | "
                             f"{_fmt(m['sure_precision'], m['sure_ci'])} | {m['coverage']} |")
    b = result["builtin"]
    lines += ["", f"## 2. The built-in judge: calibrate on {b['pairs']} training pairs took "
              f"{b['calibrate_seconds']} s", "",
              "| set | category | shipped: sure | shipped: not sure | card alone: sure | "
              "card alone: not sure |", "|---|---|---|---|---|---|"]
    for name, r in b["held_out"].items():
        for category in r["card"]:
            s, c = r["shipped"][category], r["card"][category]
            lines.append(f"| {name} | {category} | {_cell(s, 'sure')} | "
                         f"{_cell(s, 'not_sure')} | {_cell(c, 'sure')} | "
                         f"{_cell(c, 'not_sure')} |")
    return "\n".join(lines) + "\n"


def _cell(m: dict[str, Any], side: str) -> str:
    return f"{_fmt(m[f'{side}_precision'], m[f'{side}_ci'])} (n={m[side]})"


def _fmt(p: float | None, ci: Any) -> str:
    if p is None:
        return "-"
    return f"{p:.3f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{p:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = parser.parse_args()
    result = {"known_quality": {"default targets": known_quality({}),
                                "FACT 0.90": known_quality({"FACT": 0.9})},
              "builtin": builtin(args.pairs)}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "calibrate.json", json.dumps(result, indent=1) + "\n")
    atomic_write_text(args.out / "calibrate.md", markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
