"""Importing the public question sets in ../shared/data/raw: what is read, kept and skipped.

    .venv/bin/python benchmarks/bench_question_sets.py

Writes benchmarks/results/question_sets.json and .md (counts per set, sources, seconds).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from medverify.bench.questions import read_questions
from medverify.files import data_dir

ROOT = Path(__file__).resolve().parents[1]
RAW = data_dir() / "raw"
RESULTS = ROOT / "benchmarks" / "results"
SETS = {
    "MedicationQA": ("medicationqa/MedInfo2019-QA-Medications.csv", "medicationqa"),
    "K-QA": ("k-qa/questions.jsonl", "kqa"),
    "LiveQA-Med 2017 test": ("liveqa-med-trec2017/TestDataset/"
                             "TREC-2017-LiveQA-Medical-Test.xml", "liveqa"),
    "MedLFQA (incl. HealthSearchQA)": ("medlfqa/MedLFQA", "medlfqa"),
    "MedQuAD": ("medquad", "medquad"),
}


def measure(name: str, relative: str, fmt: str) -> dict[str, Any]:
    started = time.perf_counter()
    questions, report = read_questions(RAW / relative, format=fmt)
    return {
        "set": name, "path": relative, "format": report.format, "read": report.read,
        "kept": report.kept, "duplicates": report.duplicates,
        "missing_text": report.missing_text, "unreadable": report.unreadable,
        "repaired_encoding": report.repaired_encoding, "problems": len(report.problems),
        "sources": dict(Counter(q.source for q in questions).most_common()),
        "with_reference_text": sum(1 for q in questions if q.reference and q.reference.text),
        "seconds": round(time.perf_counter() - started, 2),
    }


def main() -> None:
    if not RAW.exists():
        raise SystemExit(f"{RAW} not found: this benchmark needs ../shared/data")
    rows = [measure(name, *spec) for name, spec in SETS.items()]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "question_sets.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = ["# Question sets imported by `medverify bench questions import`", "",
             "`python benchmarks/bench_question_sets.py`", "",
             "| set | read | kept | duplicates | no text | unreadable | with reference text "
             "| seconds |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['set']} | {r['read']:,} | {r['kept']:,} | {r['duplicates']:,} | "
              f"{r['missing_text']:,} | {r['unreadable']:,} | {r['with_reference_text']:,} | "
              f"{r['seconds']} |" for r in rows]
    lines += ["", "Sources of the MedLFQA questions: " + ", ".join(
        f"{k} {v:,}" for k, v in rows[3]["sources"].items()), ""]
    (RESULTS / "question_sets.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
