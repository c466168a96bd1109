"""Records of a clinical-trial study (CHECK, Garcia-Fernandez et al. 2025, section 3.1).

A run directory holds everything a report needs (``medverify trials report RUN`` recomputes
it without calling a model): the manifest, the trials with their records and curated
summaries, every answer, and every judged unit. :func:`read_run` reads them back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field

from medverify.errors import InputError
from medverify.files import read_json_record, read_records
from medverify.records import Category, Record, Verdict, utcnow
from medverify.trials.curate import TrialSummary

MANIFEST, TRIALS, ANSWERS, JUDGMENTS = "run.json", "trials.jsonl", "answers.jsonl", \
    "judgments.jsonl"  # the files of a run directory


class Context(StrEnum):
    """What the model under test is shown besides the question (the paper's three)."""

    TITLE = "title"  # the trial's title only
    JSON = "json"  # the registry record as JSON (cut to a budget when longer)
    SUMMARY = "summary"  # the curated 15-section summary


class Granularity(StrEnum):
    """The unit an answer is judged in (the paper: paragraph, sentence, atomic claim)."""

    PARAGRAPH = "paragraph"  # the whole answer, one unit
    SENTENCE = "sentence"  # each sentence (and each bullet line)
    CLAIM = "claim"  # each atomic claim of the configured decomposer


class AnswerStatus(StrEnum):
    OK = "ok"
    EMPTY = "empty"  # the model replied with nothing: no unit to judge
    ERROR = "error"  # the model call failed for good: asked again on the next run


class TrialQuestion(Record):
    """One of the 15 clinician questions; ``section`` is the summary section it is about."""

    number: int = Field(ge=1)
    name: str
    section: str
    text: str


class StudyTrial(Record):
    """A trial of the study: its record as read, and its curated summary."""

    nct_id: str
    title: str
    source: str = ""
    record_sha256: str
    record: dict[str, Any]
    summary: TrialSummary


class StudyModel(Record):
    label: str
    spec: str


class StudyManifest(Record):
    """``run.json``: what the study is; a rerun with anything else is refused."""

    run_id: str
    created: datetime = Field(default_factory=utcnow)
    models: list[StudyModel]
    contexts: list[Context]
    granularities: list[Granularity]
    questions: list[TrialQuestion]
    trials: list[str]  # NCT ids, in order
    trials_sha256: str
    json_chars: int
    judge: str
    # the judge declared ``fails_trial_study`` (medverify.judge.declares): every report of
    # the study warns that its labels do not measure hallucination
    judge_fails_study: bool = False
    decomposer: str
    prompt_versions: dict[str, str]
    config: dict[str, Any] = Field(default_factory=dict)
    selection: dict[str, Any] = Field(default_factory=dict)
    medverify_version: str = "unknown"


class TrialAnswer(Record):
    """One model's answer to one question about one trial under one context."""

    model: str
    spec: str
    nct_id: str
    question: int
    context: Context
    status: AnswerStatus
    answer: str = ""
    error: str | None = None
    context_chars: int = 0
    context_truncated: bool = False
    prompt_version: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    cached: bool = False
    latency_s: float | None = None

    @property
    def key(self) -> tuple[str, str, int, str]:
        return (self.model, self.nct_id, self.question, self.context.value)

    @property
    def id(self) -> str:
        return answer_id(*self.key)


def answer_id(model: str, nct_id: str, question: int, context: str) -> str:
    return f"{model}|{nct_id}|q{question:02d}|{context}"


class UnitResult(Record):
    """One judged unit: its text, category and what decided it. ``category`` ERROR means
    unscored (the judge failed or its output was unusable), never a verdict."""

    text: str
    category: Category
    sections: list[str] = Field(default_factory=list)  # the summary sections shown
    evidence_section: str | None = None  # the section the deciding quote is from
    evidence_quote: str | None = None
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    verdict: Verdict | None = None


class AnswerJudgment(Record):
    """An answer judged at one granularity. ``error`` is set when the answer could not be
    cut into units (e.g. the decomposer failed): then it has no units and is redone on
    the next run. ``answer_sha256`` ties it to the answer text it judged."""

    answer_id: str
    granularity: Granularity
    answer_sha256: str
    judge: str
    units: list[UnitResult] = Field(default_factory=list)
    error: str | None = None
    notes: list[str] = Field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return (self.answer_id, self.granularity.value)


# -- the run directory: content hashes, reading it back ------------------------------------


def trials_sha256(trials: Sequence[StudyTrial]) -> str:
    digest = hashlib.sha256()
    for trial in trials:
        digest.update(f"{trial.nct_id}:{trial.record_sha256}\n".encode())
    return digest.hexdigest()


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def read_manifest(root: Path) -> StudyManifest | None:
    return read_json_record(root / MANIFEST, StudyManifest, "study manifest")


def read_run(root: Path, warnings: list[str] | None = None) -> tuple[
        StudyManifest, list[StudyTrial], list[TrialAnswer], list[AnswerJudgment]]:
    """Everything a report needs from a run directory (InputError when it is not one)."""
    manifest = read_manifest(root)
    if manifest is None:
        raise InputError(f"{root} is not a trial study run directory (no {MANIFEST})")
    trials = read_records(root / TRIALS, StudyTrial, warnings, key=lambda t: t.nct_id,
                          repair=False)
    answers = read_records(root / ANSWERS, TrialAnswer, warnings, key=lambda a: a.key,
                           repair=False)
    judgments = read_records(root / JUDGMENTS, AnswerJudgment, warnings, key=lambda j: j.key,
                             repair=False)
    return manifest, trials, answers, judgments

