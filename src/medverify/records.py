"""The public vocabulary of medverify: records passed between pipeline stages.

Every stage takes and returns these pydantic models, never loose dicts. Label
vocabularies are closed enums; a stage that failed says so in an ``error`` field and
is never folded into a label.
"""

from __future__ import annotations

import functools
import hashlib
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from medverify.verdict_rules import (
    CATEGORY_SCORE,
    Category,
    CheckKind,
    Decision,
    EvidenceLabel,
    categorize,
    deciding_side,
    evidence_label,
    upgrade_inputs,
    verdict_warnings,
)


def content_hash(text: str) -> str:
    """Stable short hash of a text (sha256, 16 hex chars)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def utcnow() -> datetime:
    return datetime.now(UTC)


@functools.cache
def package_version() -> str:
    """The installed medverify version ("unknown" when run from an uninstalled tree); read
    once per process (reading the package metadata costs ~5 ms, once per recorded run)."""
    from importlib import metadata

    try:
        return metadata.version("medverify")
    except metadata.PackageNotFoundError:
        return "unknown"


class RunStatus(StrEnum):
    """How a recorded run stands: one vocabulary for every flow (check, audit, factcheck,
    bench) and the service.

    ``running`` until it ends; ``done``: every answer produced a result; ``error``: it ran to
    the end but some answers produced none (each answer's cause is on its record);
    ``failed``: an exception stopped it (the cause is the run's error); ``interrupted``:
    Ctrl-C, a signal or task cancellation stopped it; ``cancelled``: its cancel token was
    set. A process killed outright leaves ``running`` behind; a rerun resumes it."""

    RUNNING = "running"
    DONE = "done"
    ERROR = "error"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


class Record(BaseModel):
    """The base of every record medverify passes around or stores: an unknown field is
    a validation error, never silently dropped."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)


class Span(Record):
    """Character offsets [start, end) into a text."""

    start: int = Field(ge=0)
    end: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Span:
        if self.end < self.start:
            raise ValueError(f"span end {self.end} is before start {self.start}")
        return self


class FetchFailure(StrEnum):
    """Why a cited URL is not a valid source (SourceCheckup: valid = status 200 and text)."""

    NO_URL = "no_url"
    BAD_URL = "bad_url"
    SCHEME = "scheme"
    BLOCKED = "blocked"
    DNS = "dns"
    CONNECT = "connect"
    TLS = "tls"
    TIMEOUT = "timeout"
    REDIRECTS = "redirects"
    HTTP_STATUS = "http_status"
    TOO_LARGE = "too_large"
    NOT_TEXT = "not_text"
    EMPTY = "empty"
    EXTRACTION = "extraction"
    OFFLINE = "offline"


class Source(Record):
    """A cited source: its URL and, once fetched or given, its text.

    ``status`` is ``given`` (text supplied with the input), ``fetched`` (valid page),
    ``invalid`` (``failure`` and ``reason`` say why) or ``not_fetched``.
    """

    id: str = ""
    url: str | None = None
    title: str | None = None
    text: str | None = None
    status: Literal["given", "fetched", "invalid", "not_fetched"] = "not_fetched"
    http_status: int | None = None
    reason: str | None = None
    failure: FetchFailure | None = None
    content_hash: str | None = None
    final_url: str | None = None
    content_type: str | None = None
    truncated: bool = False
    fetched_at: datetime | None = None
    from_cache: StrictBool = False

    @property
    def valid(self) -> bool:
        """A usable source: given or fetched, with non-empty text."""
        return self.status in ("given", "fetched") and bool(self.text and self.text.strip())


class Answer(Record):
    """A question and the answer to check, with any sources it cites."""

    text: str
    question: str | None = None
    sources: list[Source] = Field(default_factory=list)
    id: str = ""
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _default_id(self) -> Answer:
        if not self.id:
            self.id = "a-" + content_hash((self.question or "") + "\x00" + self.text)
        return self


class Claim(Record):
    """An atomic, self-contained statement taken from an answer."""

    id: str
    text: str
    span: Span | None = None
    markers: list[str] = Field(default_factory=list)
    sentence: int | None = None
    decomposer: str = ""
    # The answer's own words for this claim (its sentence, markers removed) when the claim's
    # text differs from them: e.g. "Start with 5000 mg daily." for the claim "Start
    # metformin with 5000 mg daily.", whose subject was taken from the answer. Shown beside
    # the claim; None when the claim is the answer's sentence as written.
    original: str | None = None


class Document(Record):
    """A knowledge-base document before chunking."""

    doc_id: str
    text: str
    title: str | None = None
    url: str | None = None
    source: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class Passage(Record):
    """A chunk of a knowledge-base document (or of a fetched source)."""

    id: str
    doc_id: str
    text: str
    title: str | None = None
    url: str | None = None
    source: str | None = None
    span: Span | None = None
    score: float | None = None
    scores: dict[str, float] = Field(default_factory=dict)


class CheckFinding(Record):
    """One difference an exact check found between a claim and a passage said to support
    it. A veto stops that support from counting (the claim is not FACT on that passage); a
    finding without veto only makes the verdict not confident. Checks never make a claim
    FACT on their own."""

    kind: CheckKind
    veto: bool
    passage_id: str | None = None
    claim_says: str = Field(description="The words of the claim that differ.")
    passage_says: str = Field(description="What the passage says in their place.")
    reason: str = Field(description='One line for people: "the claim says every 2 years; '
                        'the passage says every 10 years".')


class Analysis(Record):
    """One half of the judge's work: factual (is the claim supported?) or
    counterfactual (is its negation supported, i.e. is the claim contradicted?)."""

    holds: bool
    passage_id: str | None = None
    quote: str | None = None
    quote_found: bool | None = None
    reason: str | None = None
    verified: bool | None = Field(
        default=None,
        description="For a judge that must quote its evidence (the LLM judge), whether a "
        "holding analysis rests on a quote found in a passage shown to it; False means the "
        "analysis is kept for the record but does not count. None: not checked.",
    )
    quote_problem: str | None = Field(
        default=None,
        description="Why the quote does not count as evidence (not found, a fragment that "
        "drops a negation, too little of the claim's content, ...); None when it counts or "
        "was not checked.",
    )
    vetoed: bool = Field(
        default=False,
        description="An exact check found the passage to say otherwise (Verdict.findings); "
        "a vetoed analysis does not count.",
    )

    @property
    def counts(self) -> bool:
        """Whether this analysis counts towards the category: it holds, and its evidence
        was not found to be invented (``verified`` is not False)."""
        return self.holds and self.verified is not False and not self.vetoed

    @property
    def shown_quote(self) -> str | None:
        """The quote, when it may be displayed as evidence (not one found to be invented)."""
        if self.quote_found is False or self.verified is False:
            return None
        return self.quote


class Verdict(Record):
    """A judge's decision on one claim against the evidence it was given.

    ``factual.holds`` says the evidence supports the claim; ``counterfactual.holds`` says
    it supports the claim's negation. ``error`` is set (and both analyses are None) when
    the judge failed or its output could not be parsed.
    """

    claim_id: str
    passage_ids: list[str] = Field(default_factory=list)
    factual: Analysis | None = None
    counterfactual: Analysis | None = None
    probabilities: dict[str, float] | None = None
    judge: str = ""
    prompt_version: str | None = None
    raw_output: str | None = None
    error: str | None = None
    findings: list[CheckFinding] = Field(
        default_factory=list,
        description="What the exact checks found between the claim and its evidence.",
    )
    confidence: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="The calibrated probability that the category is right (None: the "
        "judge gives none).",
    )
    confident: bool | None = Field(
        default=None,
        description="Whether the verdict is presented as a confident one: its category's "
        "calibrated precision reaches the target and nothing made it doubtful. False: the "
        "category is kept but shown as not sure (``not_sure`` says why). None: not "
        "assessed (runs recorded before this existed).",
    )
    not_sure: str | None = Field(
        default=None, description="Why the verdict is not confident (None when it is)."
    )
    signals: dict[str, float] = Field(
        default_factory=dict,
        description="What the judge reported about how sure it was, for a confidence card "
        "to learn from: e.g. ``p_supported`` / ``p_contradicted`` (the probability of the "
        "true/false it wrote, from token log-probabilities) and ``agreement`` (the share of "
        "self-consistency samples that agree). Empty: none reported.",
    )

    @property
    def ok(self) -> bool:
        return self.error is None and self.factual is not None and self.counterfactual is not None

    @property
    def label(self) -> EvidenceLabel | None:
        if not self.ok:
            return None
        assert self.factual is not None and self.counterfactual is not None
        return evidence_label(self.factual.counts, self.counterfactual.counts)

    @property
    def category(self) -> Category:
        if not self.ok:
            return Category.ERROR
        assert self.factual is not None and self.counterfactual is not None
        return categorize(self.factual.counts, self.counterfactual.counts)


class Recheck(Record):
    """A claim re-checked before it was escalated (``[arbitration] recheck_judge``): what
    the first check decided, and who re-checked it. The claim result then holds the
    re-check's passages and verdict, and the arbitration its decision; a re-check that
    failed (``error``) changes nothing and the claim stays escalated."""

    judge: str
    passages: int = Field(ge=0)  # passages the re-check judged
    category_before: Category
    decision_before: Decision
    rule_before: str
    error: str | None = None


class Reviewed(Record):
    """A claim settled by a clinician: it matched a closed review item (the same claim
    text once normalised, or a near-duplicate; :mod:`medverify.review.settled`) in the same
    knowledge-base lineage, so it gets the reviewer's label instead of the judge's
    category, with this provenance. The claim result keeps the judge's verdict and
    passages; ``category_before`` / ``decision_before`` / ``rule_before`` are what the judge
    and the rules had decided."""

    item_id: str
    label: Category  # the reviewer's settled label (never ERROR)
    reviewer: str
    reviewed_at: datetime
    label_id: int | None = None
    correction: str | None = None
    source_url: str | None = None
    match: Literal["same_text", "near_duplicate"]
    similarity: float = Field(ge=0.0, le=1.0)  # word-sequence similarity of the two texts
    reviewed_claim: str  # the claim text the reviewer labelled
    category_before: Category
    decision_before: Decision | None = None
    rule_before: str | None = None


class Arbitration(Record):
    """The decision on one claim: the rule that fired, the policy (its id names the exact
    settings) and the inputs it saw (category, risk, ``judge_probability``: the judge's raw
    probability for its category, ``confident``); ``recheck`` when it was re-checked."""

    decision: Decision
    rule: str
    policy: str
    inputs: dict[str, bool | float | str | None] = Field(default_factory=dict)
    recheck: Recheck | None = None
    reviewed: Reviewed | None = None  # rule "reviewed": a clinician's label settled it

    @model_validator(mode="before")
    @classmethod
    def _stored_inputs(cls, data: Any) -> Any:  # old stored runs keep loading
        if isinstance(data, dict) and isinstance(data.get("inputs"), dict):
            return {**data, "inputs": upgrade_inputs(data["inputs"])}
        return data


class ClaimResult(Record):
    """A claim's final category and everything that decided it."""

    claim: Claim
    passages: list[Passage] = Field(default_factory=list)
    verdict: Verdict | None = None
    category: Category
    score: float | None = None
    evidence_passage_id: str | None = None
    evidence_quote: str | None = None
    error: str | None = None
    hallucination_risk: float | None = None  # the risk stage's probability, when it ran
    arbitration: Arbitration | None = None  # the decision, when arbitration ran
    warnings: list[str] = Field(
        default_factory=list,
        description="Why part of the judge's output was not counted (e.g. an analysis whose "
        "quote is not in the passage it names).",
    )
    confidence: float | None = None  # the verdict's calibrated probability of its category
    confident: bool | None = None  # False: shown as not sure (see Verdict.confident)
    not_sure: str | None = None  # why it is not confident

    @classmethod
    def from_verdict(cls, claim: Claim, passages: list[Passage], verdict: Verdict) -> ClaimResult:
        category = verdict.category
        side = deciding_side(category)
        deciding: Analysis | None = getattr(verdict, side) if side else None
        return cls(
            claim=claim,
            passages=passages,
            verdict=verdict,
            category=category,
            score=CATEGORY_SCORE.get(category),
            evidence_passage_id=deciding.passage_id if deciding else None,
            evidence_quote=deciding.shown_quote if deciding else None,
            error=verdict.error,
            warnings=verdict_warnings(verdict.factual, verdict.counterfactual, verdict.findings),
            confidence=verdict.confidence,
            confident=verdict.confident if verdict.ok else None,
            not_sure=verdict.not_sure if verdict.ok else None,
        )

    def decided(self, decision: Arbitration | None) -> ClaimResult:
        """This result with its arbitration decision; a reviewed decision
        (``decision.reviewed``) also makes the reviewer's label the category, sure (a
        clinician settled it), with the judge's category kept in the provenance."""
        update: dict[str, Any] = {"arbitration": decision}
        reviewed = decision.reviewed if decision is not None else None
        if reviewed is not None:
            update.update(category=reviewed.label, score=CATEGORY_SCORE.get(reviewed.label),
                          confident=True, not_sure=None)
        return self.model_copy(update=update)

    @classmethod
    def failed(cls, claim: Claim, error: str, passages: list[Passage] | None = None) -> ClaimResult:
        return cls(claim=claim, passages=passages or [], category=Category.ERROR, error=error)


class Metrics(Record):
    """Summary numbers for one report. Errors are counted apart, never as scores."""

    n_claims: int
    n_scored: int
    n_errors: int
    counts: dict[str, int]
    statement_support: float | None
    response_support: bool | None
    mean_score: float | None
    decisions: dict[str, int] = Field(
        default_factory=dict,
        description="Claims per arbitration decision (ACCEPT, FLAG, ESCALATE); empty when "
        "no claim carries a decision (arbitration did not run, or a run recorded before it).",
    )
    confident: dict[str, int] = Field(
        default_factory=dict,
        description="Claims per category whose verdict is confident (``confident`` True; "
        "False is shown as not sure); empty when no claim's verdict was assessed (a judge "
        "that does not assess it, or a run recorded before it).",
    )


class Usage(Record):
    """Token accounting for one stage or one model."""

    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, other: Usage) -> Usage:
        return Usage(
            calls=self.calls + other.calls,
            cached_calls=self.cached_calls + other.cached_calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


class Report(Record):
    """Everything a check produced, plus metrics and provenance."""

    answer: Answer
    results: list[ClaimResult]
    metrics: Metrics
    run_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    config: dict[str, Any] = Field(default_factory=dict)
    models: dict[str, str] = Field(default_factory=dict)
    prompt_versions: dict[str, str] = Field(default_factory=dict)
    kb_snapshot: str | None = None
    kb_lineage: str | None = None  # the KB's identity across ingests (KnowledgeBase.lineage)
    usage: dict[str, Usage] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)
    notes: dict[str, Any] = Field(
        default_factory=dict,
        description="Stage facts that are not token usage, by stage name, e.g. "
        "'judge.cascade': claims settled by the built-in judge and model calls saved.",
    )
