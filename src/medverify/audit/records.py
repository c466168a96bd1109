"""Records of a citation audit (SourceCheckup): the vocabulary the audit stages pass.

An audit reads answers that cite sources, checks every claim against every valid source
(or only the sources it cites), and measures source URL validity, statement-level support,
response-level support and unused sources, with bootstrap confidence intervals.

Support of one claim by one source is binary here, as in the paper: a pair is
*supported* when the judge's verdict is ``FACT`` (the source supports the claim and does
not contradict it). A failed judge call leaves the pair unscored (``supported is None``),
never unsupported.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field, StrictInt

from medverify.records import Answer, Category, Claim, Passage, Record, Usage, Verdict, utcnow


class SupportLabel(StrEnum):
    """Gold or predicted support of a claim by its sources."""

    SUPPORTED = "SUPPORTED"
    NOT_SUPPORTED = "NOT_SUPPORTED"


class AuditInput(Record):
    """One input line: the answer (with its given sources; extra input fields in
    ``answer.meta``) and, when given, its claims with optional gold labels."""

    answer: Answer
    claims: list[GoldClaim] | None = None
    line: StrictInt | None = None


class GoldClaim(Record):
    text: str
    label: SupportLabel | None = None


class PairJudgement(Record):
    """One claim judged against one source, on the passages selected from it."""

    claim_id: str
    source_id: str
    passages: list[Passage] = Field(default_factory=list)
    verdict: Verdict
    input_tokens: int = 0
    source_tokens: int = 0

    @property
    def supported(self) -> bool | None:
        if not self.verdict.ok:
            return None
        return self.verdict.category == Category.FACT


class ClaimAudit(Record):
    """A claim, the sources it was checked against and whether any supports it.

    ``supported``: True when some pair is supported; False when every pair was scored
    and none is (or there was no valid source to check); None when no pair supports it
    and at least one pair failed.
    """

    claim: Claim
    gold: SupportLabel | None = None
    cited_source_ids: list[str] = Field(default_factory=list)
    pairs: list[PairJudgement] = Field(default_factory=list)
    supported: bool | None = None
    supporting_source_ids: list[str] = Field(default_factory=list)
    error: str | None = None


class CleanupOutcome(StrEnum):
    REMOVED = "removed"
    FIXED = "fixed"
    STILL_UNSUPPORTED = "still_unsupported"
    ERROR = "error"


class CleanupResult(Record):
    """SourceCleanup of one unsupported claim: rewritten to what its source supports (and
    verified again), or removed."""

    claim_id: str
    source_id: str | None = None
    original: str
    rewritten: str | None = None
    outcome: CleanupOutcome
    reason: str | None = None
    verdict: Verdict | None = None
    raw_output: str | None = None
    prompt_version: str | None = None
    error: str | None = None


class AnswerMetrics(Record):
    """SourceCheckup metrics of one answer. Shares are None when undefined."""

    n_urls: int = 0
    n_valid_urls: int = 0
    url_validity: float | None = None
    n_claims: int = 0
    n_scored: int = 0
    n_supported: int = 0
    statement_support: float | None = None
    response_support: bool | None = None
    n_unused_sources: int = 0
    unused_source_share: float | None = None


class AnswerAudit(Record):
    """Everything the audit found for one answer (one line of ``answers.jsonl``)."""

    answer: Answer
    claims: list[ClaimAudit] = Field(default_factory=list)
    metrics: AnswerMetrics = Field(default_factory=AnswerMetrics)
    cleanup: list[CleanupResult] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


class Estimate(Record):
    """A share with its 95 % percentile-bootstrap interval; ``n`` is the number of units
    it is computed over (URLs, claims, answers or sources). Without a value, ``reason``
    says why it was not measured (never a 0 standing for "nothing to measure")."""

    value: float | None = None
    ci: tuple[float, float] | None = None
    n: int = 0
    reason: str | None = None

    @property
    def measured(self) -> bool:
        return self.value is not None


class FetchOutcome(Record):
    """One outcome the fetcher gave for a URL: ``fetched`` (with the page's content hash)
    or the failure kind, and the answers whose copy of the source has it."""

    outcome: str
    content_hash: str | None = None
    n_answers: int = 0
    answer_ids: list[str] = Field(default_factory=list)
    first_at: datetime | None = None


class FetchChange(Record):
    """A URL whose fetch outcome differed between attempts in one run (typically a resumed
    run: fetched in the first attempt and failing now, or with other content)."""

    url: str  # the URL, or the host (scheme://host:port) for kind "host"
    kind: str  # "validity" (valid, then invalid or back), "content" (other hash),
    # "failure" (invalid both times, for different reasons) or "host" (see urls.host_changes)
    outcomes: list[FetchOutcome] = Field(default_factory=list)


class AuditMetrics(Record):
    """The paper's metrics over a set of answers (all of them, or one breakdown group)."""

    n_answers: int = 0
    n_urls: int = 0
    n_claims: int = 0
    n_scored_claims: int = 0
    n_pairs: int = 0
    n_pair_errors: int = 0
    url_validity: Estimate = Field(default_factory=Estimate)
    statement_support: Estimate = Field(default_factory=Estimate)
    response_support: Estimate = Field(default_factory=Estimate)
    unused_sources: Estimate = Field(default_factory=Estimate)
    invalid_reasons: dict[str, int] = Field(default_factory=dict)


class AuditSummary(Record):
    """``summary.json`` of an audit run: provenance, overall metrics, breakdowns by input
    field (field -> value -> metrics), URL analysis and SourceCleanup counts."""

    run_id: str
    created_at: datetime = Field(default_factory=utcnow)
    input_path: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)
    judge: str = ""
    models: dict[str, str] = Field(default_factory=dict)
    prompt_versions: dict[str, str] = Field(default_factory=dict)
    offline: bool = False
    pairing: str = "all"
    overall: AuditMetrics = Field(default_factory=AuditMetrics)
    breakdowns: dict[str, dict[str, AuditMetrics]] = Field(default_factory=dict)
    url_analysis: dict[str, Any] = Field(default_factory=dict)
    cleanup: dict[str, int] = Field(default_factory=dict)
    usage: dict[str, Usage] = Field(default_factory=dict)
    notes: dict[str, Any] = Field(default_factory=dict)
    skipped: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    fetch_changes: list[FetchChange] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    @property
    def measured(self) -> bool:
        """Whether the run measured statement-level support at all."""
        return self.overall.statement_support.measured


AuditInput.model_rebuild()
