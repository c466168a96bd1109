"""How well arbitration routes the built-in judge's mistakes to a clinician, on real labelled
claim/evidence pairs (``medverify eval arbitration`` on the shared data).

The built-in judge judges every pair once; then the ``[arbitration]`` thresholds
(``min_confidence`` per category) are swept. A policy is chosen on the dev-only sets
(Check-COVID dev, Citation-Integrity dev): the one that catches the most judge errors while
escalating at most ``--max-escalation`` of the claims. HealthVer dev (evaluation only) and
ExpertQA val (kept for measuring) never take part in the choice: the chosen policy and the
configured default are measured on them as they stand, next to their own fronts (what a
choice made on them would have reached, for reference only).

No risk classifier is available for these pairs (it needs the answering model's token
probabilities), so the risk rules (``fact_high_risk``, ``hallucination_low_risk``,
``coverage_gap_high_risk``) are untested here.

    .venv/bin/python benchmarks/bench_arbitration.py [--limit N] [--max-escalation 0.2]

Writes benchmarks/results/arbitration.json, arbitration.md and arbitration.svg.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from medverify.arbitration import policy_id
from medverify.config import ArbitrationPolicy
from medverify.evals.arbitration import (
    AUTO_QUANTILES,
    ERROR_DEFINITION,
    ArbitrationEval,
    LabelledClaim,
    PolicyPoint,
    describe,
    evaluate,
    evaluate_policy,
    sweep,
)
from medverify.evals.arbitration_chart import curve_svg
from medverify.evals.arbitration_input import judge_sources, read_source
from medverify.files import data_dir
from medverify.judge.builtin import BuiltinJudge

ROOT = Path(__file__).resolve().parents[1]
PAIRS = data_dir() / "pairs"
RESULTS = ROOT / "benchmarks" / "results"
CHOOSE_ON = ("checkcovid_dev", "citint_dev")
HELD_OUT = ("healthver_dev", "expertqa_val")


def judge_file(name: str, judge: BuiltinJudge, limit: int | None) -> tuple[list[LabelledClaim],
                                                                           float]:
    source = read_source(PAIRS / f"{name}.jsonl", limit)
    started = time.perf_counter()
    claims = asyncio.run(judge_sources([source], judge))
    return claims, time.perf_counter() - started


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def point_row(label: str, p: PolicyPoint) -> str:
    return (f"| {label} | {describe(p)} | {p.n} | {p.n_errors} | {pct(p.escalated)} | "
            f"{pct(p.caught)} | {pct(p.precision)} | {p.n_accepted_errors} | "
            f"{pct(p.accepted_error_rate)} |")


POINT_HEAD = ("| data | policy (min_confidence) | n | errors | escalated | caught | precision "
              "| errors accepted | error rate among accepted |\n"
              "|---|---|---|---|---|---|---|---|---|")


def markdown(payload: dict[str, object], choice: ArbitrationEval,
             held: dict[str, ArbitrationEval]) -> str:
    files = payload["files"]
    chosen, base = choice.chosen, choice.base
    lines = [
        f"# Arbitration on labelled pairs ({payload['judge']})", "",
        f"Policy chosen on {' + '.join(CHOOSE_ON)} (dev only): the one catching the most judge "
        f"errors while escalating at most {pct(choice.max_escalation)} of the claims; "
        f"{', '.join(HELD_OUT)} never took part in the choice. Rows per file: "
        f"{payload['limit'] or 'all'}. {choice.n_policies} policies swept: min_confidence for "
        "FACT, HALLUCINATION and COVERAGE_GAP each off or one of the quantiles 5-95 % of the "
        "judge's confidences in that category on the choice sets: "
        + "; ".join(f"{k} {v}" for k, v in choice.grid.items()) + ".", "",
        f"Definitions: {ERROR_DEFINITION}. escalated = share of claims; caught = share of "
        "errors escalated; precision = share of escalated non-ERROR claims that are errors.",
        "",
        "**No risk classifier is available for these pairs: the risk-based rules "
        "(fact_high_risk, hallucination_low_risk, coverage_gap_high_risk) are untested on "
        "real data.**", "",
        "## Data and the judge's errors", "",
        "| file | role | n | judge errors | of which JUDGMENT_ERROR | ERROR (apart) | "
        "FACT but gold not SUPPORTED | pairs/s |", "|---|---|---|---|---|---|---|---|",
    ]
    for f in files:  # type: ignore[attr-defined]
        lines.append(f"| {f['file']} | {f['role']} | {f['n']} | {f['n_errors']} "
                     f"({pct(f['n_errors'] / f['n'])}) | {f['n_judgment_errors']} | "
                     f"{f['n_judge_errors']} | {f['n_false_facts']} | "
                     f"{f['pairs_per_second']:.1f} |")
    lines += ["", "## The chosen policy and the default, per data set", "",
              f"Chosen: `{payload['chosen_policy_id']}`; default: "
              f"`{payload['default_policy_id']}` (no confidence floor: it escalates only "
              "ERROR and JUDGMENT_ERROR claims).", "", POINT_HEAD]
    for name, rows in payload["per_file"].items():  # type: ignore[attr-defined]
        for label, point in rows.items():
            lines.append(point_row(f"{name} ({label})", PolicyPoint.model_validate(point)))
    lines += ["", "```toml", (choice.chosen_toml or "# no policy within the budget").rstrip(),
              "```", "", "## Fewest accepted errors instead", "",
              "The costly errors are FACTs whose gold label is not SUPPORTED: accepted, they "
              "reach the reader as checked. The policy within the same budget that leaves the "
              "fewest errors accepted (rather than catching the most errors of any kind), chosen "
              "on the choice sets:", "", POINT_HEAD]
    for name, rows in payload["fewest_accepted"].items():  # type: ignore[attr-defined]
        lines.append(point_row(name, PolicyPoint.model_validate(rows)))
    lines += ["", f"## The front on the choice sets ({len(choice.front)} policies; every "
              "fifth shown, all in arbitration.json)", "", POINT_HEAD]
    for n, p in enumerate(choice.front):
        if n % 5 and p != chosen and p != base and n != len(choice.front) - 1:
            continue
        mark = " **chosen**" if p == chosen else (" (default)" if p == base else "")
        lines.append(point_row(f"choice{mark}", p))
    lines += ["", "## Held-out fronts (reference: a choice made on them)", "", POINT_HEAD]
    for name, result in held.items():
        best = result.chosen
        if best is not None:
            lines.append(point_row(f"{name}, best within budget", best))
    lines += ["", "Chart: arbitration.svg (fronts; rings: the chosen policy on each set).", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--limit", type=int, help="only the first N rows of each file")
    parser.add_argument("--max-escalation", type=float, default=0.2)
    args = parser.parse_args()
    judge = BuiltinJudge(quotes=False)  # as `eval pairs` / `eval arbitration` run it
    base = ArbitrationPolicy()
    judged: dict[str, list[LabelledClaim]] = {}
    files = []
    for name in (*CHOOSE_ON, *HELD_OUT):
        claims, seconds = judge_file(name, judge, args.limit)
        judged[name] = claims
        result = evaluate(claims, base, max_escalation=args.max_escalation, keep_claims=False)
        files.append({
            "file": name, "role": "choice" if name in CHOOSE_ON else "held out",
            "n": result.n, "n_errors": result.n_errors,
            "n_judgment_errors": result.n_judgment_errors,
            "n_judge_errors": result.n_judge_errors,
            "n_false_facts": sum(result.errors_by.get("FACT", {}).values()),
            "errors_by": result.errors_by, "seconds": round(seconds, 2),
            "pairs_per_second": len(claims) / seconds if seconds else 0.0})
        print(f"{name}: {len(claims)} pairs in {seconds:.1f} s, {result.n_errors} errors")
    choice_claims = [c for name in CHOOSE_ON for c in judged[name]]
    choice = evaluate(choice_claims, base, max_escalation=args.max_escalation,
                      judge=judge.judge_id, files=list(CHOOSE_ON), keep_claims=False)
    chosen_policy = choice.chosen.policy(base) if choice.chosen else base
    held = {name: evaluate(judged[name], base, max_escalation=args.max_escalation,
                           keep_claims=False) for name in HELD_OUT}
    within = [p for p in sweep(choice_claims, base)
              if p.escalated <= args.max_escalation + 1e-12]
    safest = min(within, key=lambda p: (p.n_accepted_errors, p.n_escalated, -p.n_caught))
    safest_policy = safest.policy(base)
    fewest_accepted = {
        "choice sets": evaluate_policy(choice_claims, safest_policy).model_dump(mode="json"),
        **{name: evaluate_policy(judged[name], safest_policy).model_dump(mode="json")
           for name in HELD_OUT}}
    per_file: dict[str, dict[str, object]] = {}
    sets = {"choice sets": choice_claims, **{name: judged[name] for name in judged},
            "held out, pooled": [c for name in HELD_OUT for c in judged[name]]}
    for name, claims in sets.items():
        per_file[name] = {
            "chosen": evaluate_policy(claims, chosen_policy).model_dump(mode="json"),
            "default": evaluate_policy(claims, base).model_dump(mode="json")}
    payload = {
        "judge": judge.judge_id, "limit": args.limit, "max_escalation": args.max_escalation,
        "grid": f"per category, quantiles {list(AUTO_QUANTILES)} of its confidences",
        "error_definition": ERROR_DEFINITION,
        "risk_rules": "untested: no risk classifier is available for these pairs",
        "choose_on": list(CHOOSE_ON), "held_out": list(HELD_OUT), "files": files,
        "chosen_policy_id": policy_id(chosen_policy), "default_policy_id": policy_id(base),
        "chosen_toml": choice.chosen_toml, "per_file": per_file,
        "fewest_accepted": fewest_accepted,
        "choice": choice.model_dump(mode="json", exclude={"claims"}),
        "held_out_fronts": {name: r.model_dump(mode="json", include={"front", "chosen", "n",
                                                                     "n_errors"})
                            for name, r in held.items()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "arbitration.json").write_text(json.dumps(payload, indent=2) + "\n")
    text = markdown(payload, choice, held)
    (RESULTS / "arbitration.md").write_text(text)
    marks = [(f"chosen on {name}", evaluate_policy(judged[name], chosen_policy))
             for name in HELD_OUT]
    svg = curve_svg(choice, "Arbitration, built-in judge: errors caught vs escalated",
                    name="choice sets", fronts=[(name, r.front) for name, r in held.items()],
                    marks=marks)
    (RESULTS / "arbitration.svg").write_text(svg + "\n")
    print(text)


if __name__ == "__main__":
    main()
