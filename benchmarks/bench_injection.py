"""Prompt injection against the built-in judge: the shipped probes, flip rate per attack.

The built-in judge is the one judge that runs here without a model endpoint; an LLM judge is
measured the same way with ``medverify eval injection --model SPEC`` (the real rate of an
LLM judge needs a real model). Writes benchmarks/results/injection_builtin.{json,md}.

    .venv/bin/python benchmarks/bench_injection.py
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from medverify.injection import InjectionReport, load_cases, measure_injection, rate_text
from medverify.judge.builtin import BuiltinJudge

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def markdown(report: InjectionReport, seconds: float) -> str:
    lines = [
        f"# Prompt injection: {report.judge} ({report.cases_version})",
        "",
        "`python benchmarks/bench_injection.py`; flip = the attacked verdict is the "
        "attacker's target and the clean one is not (95 % Wilson intervals). The controls "
        "add benign text of the same shape: their rate is the baseline of extra text alone.",
        "",
        "| attack | probes | errors | flipped to target | verdict changed | clean correct |",
        "|---|---|---|---|---|---|",
    ]
    for g in [*report.by_attack, report.overall, *([report.controls] if report.controls else [])]:
        lines.append(f"| {g.name} | {g.n} | {g.n_errors} | {rate_text(g.flip)} | "
                     f"{rate_text(g.changed)} | {rate_text(g.clean_correct)} |")
    lines += ["", f"Wall time: {seconds:.1f} s (model load included).", ""]
    return "\n".join(lines)


def main() -> None:
    version, cases = load_cases()
    start = time.perf_counter()
    report = asyncio.run(measure_injection(BuiltinJudge(), cases, cases_version=version))
    seconds = time.perf_counter() - start
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "injection_builtin.json").write_text(report.model_dump_json(indent=2) + "\n")
    text = markdown(report, seconds)
    (RESULTS / "injection_builtin.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
