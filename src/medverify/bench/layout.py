"""Where a benchmark run keeps its records, and how JSONL record files are read back.

A run directory holds everything the study's report is computed from::

    RUN/run.json              BenchManifest (models, question set hash, config, prompts)
    RUN/questions.jsonl       the questions asked (one Question per line)
    RUN/replies.jsonl         one ModelReply per (model, question), appended as they come
    RUN/audit/                the citation audit of the replies (answers.jsonl, ...)
    RUN/question_import.json  how the question file was read (ImportReport)
    RUN/timing.json           wall seconds per phase of the last invocation
    RUN/summary.json          BenchSummary
    RUN/report.html           the study's report
    RUN/exports/              CSV (and Parquet) tables for pandas users
    RUN/labels/               blinded pair samples, their keys and imported human labels

Append-only JSONL files survive a crash: a truncated last line is dropped on reading (and
the file rewritten without it), so appending stays safe and a rerun resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

R = TypeVar("R", bound=BaseModel)


@dataclass(frozen=True)
class RunLayout:
    """The paths of one run directory."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / "run.json"

    @property
    def questions(self) -> Path:
        return self.root / "questions.jsonl"

    @property
    def replies(self) -> Path:
        return self.root / "replies.jsonl"

    @property
    def audit_dir(self) -> Path:
        return self.root / "audit"

    @property
    def audit_answers(self) -> Path:
        return self.audit_dir / "answers.jsonl"

    @property
    def summary(self) -> Path:
        return self.root / "summary.json"

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    @property
    def timing(self) -> Path:
        return self.root / "timing.json"

    @property
    def question_import(self) -> Path:
        """How the question file was read (ImportReport), when the CLI read it."""
        return self.root / "question_import.json"

    @property
    def exports(self) -> Path:
        return self.root / "exports"

    @property
    def labels(self) -> Path:
        return self.root / "labels"

    def exists(self) -> bool:
        return self.manifest.is_file()
