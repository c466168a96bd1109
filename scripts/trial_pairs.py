"""Claim/evidence pairs from the offline trial-study example, for `eval judges`.

    .venv/bin/python scripts/trial_pairs.py [--out benchmarks/results/trial_pairs.jsonl]

For each of the 7 real ClinicalTrials.gov records in ../shared/data/raw/clinicaltrials and
each of CHECK's 15 questions, the curated summary's section is the evidence and the claims
are what the example's scripted models write from it (medverify.testing.trial_models):

- SUPPORTED: the `grounded` model's answer under the summary context (its first sentences,
  copied);
- CONTRADICTED: the `confabulating` model's answer (the same sentences with every number
  changed; years and the trial's NCT id stay), kept only when a number did change.

The labels hold by construction. The title-only answers (invented specifics) are left out:
whether an invented enrolment contradicts a section or is merely absent from it is not
decided by construction. Deterministic; sections without a sentence are skipped.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from medverify.files import data_dir
from medverify.study.selection import study_trials
from medverify.testing.trial_models import _first_sentences, change_numbers
from medverify.trials.reader import iter_studies

ROOT = Path(__file__).resolve().parents[1]
RECORDS = data_dir() / "raw" / "clinicaltrials"


def pairs(records: Path = RECORDS) -> list[dict]:
    out = []
    for trial in study_trials(list(iter_studies([records]))):
        summary = trial.summary
        for number, section in enumerate(summary.sections, 1):
            evidence = " ".join(s.text for s in section.sentences).strip()
            if not evidence:
                continue
            copy = _first_sentences(evidence)
            base = {"dataset": "trialstudy", "evidence": evidence, "labels": "3-way",
                    "meta": {"nct_id": summary.nct_id, "section": section.name}}
            out.append({"id": f"{summary.nct_id}-{number}-copy", "claim": copy,
                        "label": "SUPPORTED", **base})
            masked = copy.replace(summary.nct_id, "\x00")  # the trial's id is not a number
            changed = change_numbers(masked, f"confabulating:{number}:{summary.nct_id}")
            changed = changed.replace("\x00", summary.nct_id)
            if changed != copy:
                out.append({"id": f"{summary.nct_id}-{number}-changed", "claim": changed,
                            "label": "CONTRADICTED", **base})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks" / "results" / "trial_pairs.jsonl")
    args = parser.parse_args()
    rows = pairs()
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                        "utf-8")
    counts = {label: sum(r["label"] == label for r in rows)
              for label in ("SUPPORTED", "CONTRADICTED")}
    print(f"wrote {len(rows)} pairs to {args.out}: {counts}")


if __name__ == "__main__":
    main()
