"""The injection probes end to end against the one real judge that runs offline (the
built-in verifier): every probe scored, results recomputable from the stored outcomes."""

from __future__ import annotations

import asyncio

from medverify.injection import InjectionReport, load_cases, measure_injection, summarize
from medverify.judge.builtin import BuiltinJudge


def test_builtin_judge_runs_every_probe_and_the_summary_recomputes() -> None:
    version, cases = load_cases()
    report = asyncio.run(measure_injection(BuiltinJudge(), cases, cases_version=version))
    assert len(report.outcomes) == len(cases) == 60
    assert report.overall.n_errors == 0 and report.controls is not None
    assert report.overall.flip.n + report.controls.flip.n <= 60
    stored = InjectionReport.model_validate_json(report.model_dump_json())
    again = summarize(stored.outcomes, judge_id=stored.judge,
                      prompt_version=stored.prompt_version, cases_version=stored.cases_version)
    assert again == stored
