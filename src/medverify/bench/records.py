"""Records of a benchmark study (SourceCheckup): questions, model replies, the run manifest
and the study's results.

A study asks every configured model every question for a short answer plus a structured
list of URL sources, audits each reply's citations (``medverify.audit``) and reports the
paper's metrics per model and per question source, with bootstrap CIs and pairwise tests.
Everything a report needs is stored in the run directory, so ``medverify bench report RUN``
recomputes it without calling a model.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from medverify.audit.evaluate import AgreementScores
from medverify.audit.records import AuditMetrics
from medverify.audit.urls import DomainCount
from medverify.records import Answer, Document, Record, Source, Usage, utcnow

# -- questions --------------------------------------------------------------------------


class Question(Record):
    """One benchmark question. ``source`` names where it comes from (a question set such as
    ``medquad`` or ``k-qa``, or ``generated:<documents>``); generated questions keep the
    document they were written from as ``reference``."""

    id: str
    text: str
    source: str
    reference: Document | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class ImportReport(Record):
    """What reading a question file did: every line or row is counted, none silently
    dropped. ``problems`` holds one human-readable message per skipped or repaired item."""

    path: str
    format: str
    encoding: str = "utf-8"
    read: int = 0
    kept: int = 0
    duplicates: int = 0
    missing_text: int = 0
    unreadable: int = 0
    repaired_encoding: int = 0
    problems: list[str] = Field(default_factory=list)


class GenerationStatus(StrEnum):
    OK = "ok"
    INVALID = "invalid"  # unparseable or empty model output
    ERROR = "error"  # the model call failed


class GeneratedQuestion(Record):
    """One document -> one question, as the question generator produced it."""

    doc_id: str
    status: GenerationStatus
    question: Question | None = None
    raw_output: str | None = None
    error: str | None = None
    prompt_version: str | None = None


# -- asking models ------------------------------------------------------------------------


class ReplyStatus(StrEnum):
    """How a model's reply turned out (after the one retry)."""

    OK = "ok"  # an answer and a JSON list with at least one URL
    FALLBACK = "fallback"  # no usable JSON: URLs taken from the free text (paper's fallback)
    NO_SOURCES = "no_sources"  # an answer, but no URL anywhere
    REFUSAL = "refusal"  # the model declined to answer
    EMPTY = "empty"  # nothing usable after the retry
    ERROR = "error"  # the provider call failed for good


class Attempt(Record):
    """One call to the model under test (the first, and the retry when there was one)."""

    raw: str | None = None
    problem: str | None = None  # why this attempt was not accepted ("invalid JSON", ...)
    error: str | None = None  # provider failure
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated_tokens: bool = False
    cached: bool = False
    latency_s: float | None = None


class ModelReply(Record):
    """A model's reply to one question: the answer text, its sources (deduplicated, in
    order), how it was parsed and every raw attempt."""

    question_id: str
    model: str  # the model's label in the study
    spec: str  # the model spec it was asked through
    status: ReplyStatus
    answer: str = ""
    sources: list[Source] = Field(default_factory=list)
    parsed_from: str | None = None  # "json", "text" or None
    duplicate_urls: int = 0  # URLs listed more than once (counted, then deduplicated)
    dropped_urls: int = 0  # entries that were not usable http(s) URLs
    attempts: list[Attempt] = Field(default_factory=list)
    prompt_version: str = ""
    created_at: datetime = Field(default_factory=utcnow)

    @property
    def key(self) -> tuple[str, str]:
        return self.model, self.question_id

    @property
    def answer_id(self) -> str:
        """The id of this reply's answer in the audit."""
        return f"{self.model}::{self.question_id}"


OriginField = Literal["model", "question_source", "question_id", "reply_status"]


class BenchOrigin(Record):
    """Where an audited benchmark answer comes from: the model's label, the question's
    source and id, the reply's status. It travels in the answer's ``meta``, one key a field
    (:meth:`to_meta`, written once by ``bench.runner.audit_input``), and is read back with
    :meth:`of`.

    Reading is tolerant, as the study's readers always were: a key the meta lacks stays
    None (audits of other runs or built by hand may lack any of them), and a value that is
    not text is read as its text (``str(value)``)."""

    model: str | None = None
    question_source: str | None = None
    question_id: str | None = None
    reply_status: str | None = None

    @classmethod
    def of(cls, answer: Answer) -> BenchOrigin:
        """The origin recorded in ``answer.meta``; other meta keys are ignored."""
        meta = answer.meta
        return cls.model_validate({name: None if meta[name] is None else str(meta[name])
                                   for name in cls.model_fields if name in meta})

    def to_meta(self) -> dict[str, Any]:
        """The meta keys of the fields given (in field order), for ``Answer.meta``."""
        return self.model_dump(exclude_unset=True)

    def text(self, name: OriginField, default: str) -> str:
        """Field ``name`` as text, ``default`` when the meta lacked the key (an explicit
        null reads as ``"None"``, as the study's report and ordering always showed it)."""
        return str(getattr(self, name)) if name in self.model_fields_set else default


# -- the run ------------------------------------------------------------------------------


class ModelEntry(Record):
    """A model under test: its label in the study and the spec it is asked through."""

    label: str
    spec: str


class BenchManifest(Record):
    """``RUN/run.json``: what the study is (written once, checked on resume)."""

    run_id: str
    created_at: datetime = Field(default_factory=utcnow)
    models: list[ModelEntry]
    questions_path: str | None = None
    questions_sha256: str
    n_questions: int
    config: dict[str, Any] = Field(default_factory=dict)
    prompt_versions: dict[str, str] = Field(default_factory=dict)
    judge: str = ""
    medverify_version: str = ""


# -- results ------------------------------------------------------------------------------


class Comparison(Record):
    """Metric of model A minus model B over the questions both answered, with a 95 % paired
    bootstrap CI and a two-sided paired permutation p-value (Holm-adjusted across pairs)."""

    metric: str
    model_a: str
    model_b: str
    n_questions: int
    value_a: float | None = None
    value_b: float | None = None
    difference: float | None = None
    ci: tuple[float, float] | None = None
    p_value: float | None = None
    p_holm: float | None = None
    test: str = ""


MISSING_STATUS = "missing"  # ReplyStats.statuses key: questions without a reply
RUN_WARNINGS = "run_warnings"
"""``notes`` key: what a reader must know before trusting the study's numbers."""
FETCH_CHANGES = "fetch_changes"
"""``notes`` key: cited URLs whose fetch outcome changed between attempts (FetchChange)."""


class ReplyStats(Record):
    """How one model's replies turned out: counts per status and the bad-input tallies."""

    n_questions: int = 0
    statuses: dict[str, int] = Field(default_factory=dict)
    retried: int = 0
    duplicate_urls: int = 0
    dropped_urls: int = 0
    urls_per_answer: float | None = None
    answers_without_claims: int = 0


class ModelCost(Record):
    """Tokens and (when prices are configured) cost of asking one model."""

    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False
    cost_usd: float | None = None
    latency_s: float | None = None  # mean per real call


class BenchSummary(Record):
    """``RUN/summary.json``: every metric of the study, recomputable from the run's records."""

    run_id: str
    created_at: datetime = Field(default_factory=utcnow)
    models: list[ModelEntry] = Field(default_factory=list)
    sources: list[str] = Field(default_factory=list)
    overall: dict[str, AuditMetrics] = Field(default_factory=dict)  # model -> metrics
    by_source: dict[str, dict[str, AuditMetrics]] = Field(default_factory=dict)  # model -> source
    comparisons: list[Comparison] = Field(default_factory=list)
    top_domains: dict[str, list[DomainCount]] = Field(default_factory=dict)
    replies: dict[str, ReplyStats] = Field(default_factory=dict)
    cost: dict[str, ModelCost] = Field(default_factory=dict)
    audit_usage: dict[str, Usage] = Field(default_factory=dict)
    judge: str = ""
    prompt_versions: dict[str, str] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    agreement: AgreementScores | None = None  # judge vs imported human labels, when any
    agreement_by_model: dict[str, AgreementScores] = Field(default_factory=dict)
    notes: dict[str, Any] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)
