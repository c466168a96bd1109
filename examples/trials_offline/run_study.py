"""CHECK's clinical-trial study, fully offline: no API key, no network.

Scripted models (medverify.testing.trial_models: ``grounded``, ``confabulating``,
``unreliable``) answer CHECK's 15 questions about each trial under the three contexts
(title only, the raw registry record as JSON, the curated summary); medverify judges every
answer against the trial's curated summary at paragraph, sentence and claim level and
writes the study report. The trials are the 7 real ClinicalTrials.gov records in
``../shared/data/raw/clinicaltrials`` when they are there, else three made-up records.

    python examples/trials_offline/run_study.py --out trials-example
    cat trials-example/report.md
    medverify trials report trials-example        # recompute everything, no model called

The models are scripts: the report shows what the study measures and how it reads, not
how any real language model behaves. The default judge is the built-in verifier (what a
user without an API key gets; see docs/verifier.md for how far to trust it); ``--judge
numbers`` is a rule-based test judge (a changed number is a contradiction). With the
built-in judge the 945 answers take about 16 minutes of judging on 2 busy cores
(benchmarks/results/trials_study_builtin.md), with ``--judge numbers`` a few seconds.
Interrupted? Run the same command again: the study resumes.

A real study is the same with real model specs and the registry's files:

    medverify trials study ctg-studies.json.zip --condition cancer --sample 100 \
        --models llama=ollama:llama3.3:70b --judge-model openai:gpt-4o --out my-study
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from medverify.cli.trials import print_study
from medverify.config import Config
from medverify.files import data_dir
from medverify.kit import FlowKit
from medverify.study.runner import TrialStudy
from medverify.study.selection import study_trials
from medverify.testing.trial_models import (
    HABITS,
    NumberJudge,
    make_record,
    register_trial_models,
)
from medverify.trials.reader import iter_studies

SAMPLES = data_dir() / "raw" / \
    "clinicaltrials"


def records(path: Path | None) -> list[Any]:
    folder = path or SAMPLES
    if folder.exists():
        found = list(iter_studies([folder]))
        if found:
            return found
    if path is not None:
        raise SystemExit(f"no registry record in {path}")
    return [make_record("NCT90000001", "Examplimab Versus Placebo in Lung Cancer"),
            make_record("NCT90000002", "Sampletinib in Metastatic Melanoma",
                        condition="Melanoma", drug="Sampletinib", enrolled=84,
                        responders=(7, 19), at_risk=(42, 42), serious=(3, 6)),
            make_record("NCT90000003", "Trialomab in Colorectal Cancer",
                        condition="Colorectal Cancer", drug="Trialomab", enrolled=200,
                        responders=(20, 44), at_risk=(100, 100), serious=(11, 15))]


async def study(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    specs = register_trial_models(args.models.split(","))
    config = Config.load(store=out / "runs.db", cache_path=out / "cache.db",
                         retrieval={"mode": "lexical"})
    trials = study_trials(records(args.records))
    runner = TrialStudy.from_config(
        config, models=[f"{label}={spec}" for label, spec in specs.items()], run_dir=out,
        granularities=args.levels.split(","), fresh=args.fresh,
        kit=FlowKit(judge=NumberJudge() if args.judge == "numbers" else None))
    async with runner:
        return await runner.run(trials, selection={"example": str(args.records or SAMPLES)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("trials-example"))
    parser.add_argument("--records", type=Path, help="registry records to use instead of "
                        "the 7 samples (files, directories, JSONL or a bulk zip)")
    parser.add_argument("--models", default=",".join(HABITS),
                        help=f"scripted habits, comma-separated (of {', '.join(HABITS)})")
    parser.add_argument("--levels", default="paragraph,sentence,claim")
    parser.add_argument("--judge", choices=["builtin", "numbers"], default="builtin")
    parser.add_argument("--fresh", action="store_true", help="start over")
    args = parser.parse_args(argv)
    summary = asyncio.run(study(args))
    print_study(summary, Console())
    print(f"\nreport: {args.out / 'report.md'}\nrecompute: medverify trials report {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
