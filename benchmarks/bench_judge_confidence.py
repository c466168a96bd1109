"""How far the built-in judge's confident verdicts can be trusted (issue 27's targets).

    .venv/bin/python benchmarks/bench_judge_confidence.py [--families auto,general] [--limit N]

Judges every pair of the four dev/evaluation sets (checkcovid_dev, citint_dev, healthver_dev,
expertqa_val; none of them was used to fit the calibration, see scripts/calibrate_judge.py)
with the built-in judge exactly as `medverify eval pairs --judge builtin` does, once per
calibration family setting: `auto` (each set with the family fitted on its own training
split, the pooled `general` one for HealthVer and ExpertQA, which have none) and `general`
(what a user's knowledge base gets by default). Reports, per set and category, the
confident verdicts, their precision with a Wilson 95 % interval and their coverage (share of
the truly-labelled pairs confidently given the category), against the targets: FACT
precision >= 0.70 with coverage >= 0.15; HALLUCINATION precision >= 0.50.
Writes benchmarks/results/judge_confidence.{json,md} and one coverage-vs-precision chart
per family setting (judge_confidence_<family>.svg).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from medverify.evals.confidence import CurvePoint, curve_svg
from medverify.evals.pairs import PairsEval, judge_pairs, load_pairs, score_pairs
from medverify.files import data_dir
from medverify.harness import stage_id
from medverify.judge.builtin import BuiltinJudge

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir() / "pairs"
RESULTS = ROOT / "benchmarks" / "results"
SETS = ("checkcovid_dev", "citint_dev", "healthver_dev", "expertqa_val")
TARGETS = {"FACT": (0.70, 0.15), "HALLUCINATION": (0.50, None)}


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _rows(family: str, result: dict) -> list[str]:
    lines = []
    for scores in result["files"]:
        conf = scores.get("confidence") or {}
        for category in ("FACT", "HALLUCINATION", "COVERAGE_GAP"):
            c = (conf.get("categories") or {}).get(category)
            if not c:
                continue
            ci = c["precision_ci"]
            target = TARGETS.get(category)
            verdict = "—"
            if target:
                ok_p = c["precision"] is not None and c["precision"] >= target[0]
                ok_c = target[1] is None or (c["coverage"] or 0) >= target[1]
                verdict = "met" if ok_p and ok_c and c["confident"] else "missed"
            lines.append(
                f"| {family} | {scores['name']} | {category} | {c['given']} | {c['confident']} | "
                f"{_fmt(c['precision'])} | {'—' if not ci else f'{ci[0]:.2f}-{ci[1]:.2f}'} | "
                f"{_fmt(c['precision_all'])} | {_fmt(c['coverage'])} | {verdict} |")
    return lines


async def run(family: str, limit: int | None) -> dict:
    judge = BuiltinJudge(family=family, quotes=False)
    started = time.perf_counter()
    files, aucs = [], {}
    for name in SETS:
        pairs = load_pairs(DATA / f"{name}.jsonl", limit)
        begun = time.perf_counter()
        verdicts = await judge_pairs(judge, pairs)
        files.append(score_pairs(name, pairs, verdicts, time.perf_counter() - begun))
        aucs[name] = supported_auc(pairs, verdicts)
    out = PairsEval(judge=stage_id(judge), files=files, limit=limit).model_dump(mode="json")
    out["family_setting"] = family
    out["supported_auc"] = aucs
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def supported_auc(pairs: list, verdicts: list) -> float | None:
    """AUC of the verifier's raw P(SUPPORTED) for SUPPORTED against the rest: how well the
    verifier ranks at all, before any threshold or calibration."""
    from sklearn.metrics import roc_auc_score

    scored = [(p.label == "SUPPORTED", v.probabilities.get("SUPPORTED", 0.0))
              for p, v in zip(pairs, verdicts, strict=True) if v is not None and v.probabilities]
    labels = {y for y, _ in scored}
    if len(labels) < 2:
        return None
    return round(float(roc_auc_score([y for y, _ in scored], [x for _, x in scored])), 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default="auto,general")
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    results = {f: asyncio.run(run(f, args.limit)) for f in args.families.split(",")}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "judge_confidence.json").write_text(json.dumps(results, indent=1) + "\n")
    lines = ["# Confident verdicts of the built-in judge on the dev/evaluation sets", "",
             "`python benchmarks/bench_judge_confidence.py`; judge "
             f"`{next(iter(results.values()))['judge']}`. Precision of the confident verdicts "
             "with a Wilson 95 % interval; `all` = precision of every verdict of the category; "
             "coverage = share of the truly-labelled pairs confidently given the category. "
             "Targets: FACT precision >= 0.70 at coverage >= 0.15, HALLUCINATION precision "
             ">= 0.50.", "",
             "| family | set | category | given | confident | precision | 95 % CI | all | "
             "coverage | target |", "|---|---|---|---|---|---|---|---|---|---|"]
    for family, result in results.items():
        lines += _rows(family, result)
        for category in ("FACT", "HALLUCINATION"):
            curves = [(s["name"], [_point(p) for p in ((s.get("confidence") or {}).get(
                "curves") or {}).get(category, [])]) for s in result["files"]]
            svg = curve_svg(curves, f"{category}: precision vs coverage ({family})",
                            target=TARGETS[category][0])
            (RESULTS / f"judge_confidence_{family}_{category.lower()}.svg").write_text(svg + "\n")
    lines += ["", "AUC of the verifier's raw P(SUPPORTED), SUPPORTED vs the rest: " + "; ".join(
        f"{name} {auc}" for name, auc in next(iter(results.values()))["supported_auc"].items())]
    lines += ["", "Confident share of all verdicts: " + "; ".join(
        f"{family} {s['name']} {_fmt((s.get('confidence') or {}).get('confident_share'))}"
        for family, result in results.items() for s in result["files"]), ""]
    lines += ["Charts: " + ", ".join(f"judge_confidence_{f}_{c}.svg" for f in results
                                     for c in ("fact", "hallucination")), ""]
    (RESULTS / "judge_confidence.md").write_text("\n".join(lines))
    print("\n".join(lines))


def _point(data: dict) -> CurvePoint:
    return CurvePoint.model_validate(data)


if __name__ == "__main__":
    main()
