"""The records of clinician review: the queue's items and their labels, the knowledge-base
changes the labels made, reviewers' agreement, the loop report, and the review's refusals.

An item is an escalated claim with what a reviewer needs to decide it; its status moves
``open`` -> (``needs_second`` -> (``adjudication`` ->)) ``closed`` as labels come in (the
rule is :func:`medverify.review.workflow.next_status`). The run store keeps them
(:class:`medverify.store.review.ReviewStore`).
"""

from __future__ import annotations

from datetime import date, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, field_validator

from medverify.errors import MedverifyError
from medverify.records import CheckFinding, Claim, Passage, Record
from medverify.verdict_rules import upgrade_inputs


class ReviewStatus(StrEnum):
    OPEN = "open"  # no label yet
    NEEDS_SECOND = "needs_second"  # two-reviewer mode: one label so far
    ADJUDICATION = "adjudication"  # two labels that disagree: an adjudicator decides
    CLOSED = "closed"  # settled: ``final_label`` holds


class ReviewLabel(StrEnum):
    """What a reviewer says of a claim: CHECK's four categories, or that they cannot tell."""

    FACT = "FACT"
    HALLUCINATION = "HALLUCINATION"
    JUDGMENT_ERROR = "JUDGMENT_ERROR"
    COVERAGE_GAP = "COVERAGE_GAP"
    CANNOT_TELL = "CANNOT_TELL"


class LabelRole(StrEnum):
    FIRST = "first"
    SECOND = "second"
    ADJUDICATION = "adjudication"


class ItemLabel(Record):
    """One reviewer's label of one item."""

    id: int = 0
    item_id: str
    reviewer: str  # the reviewer's API key id
    role: LabelRole = LabelRole.FIRST
    label: ReviewLabel
    correction: str | None = Field(None, max_length=4000)  # the claim as it should read
    source_url: str | None = Field(None, max_length=2000)  # where the correction comes from
    source_passage_id: str | None = None  # or a KB passage
    note: str | None = Field(None, max_length=4000)
    created_at: datetime


class ReviewItem(Record):
    """An escalated claim with everything a reviewer needs to decide it."""

    id: str
    run_id: str | None = None
    answer_id: str
    question: str | None = None
    answer_text: str
    claim: Claim
    passages: list[Passage] = Field(default_factory=list)
    category: str  # the KB judge's category
    probabilities: dict[str, float] = Field(default_factory=dict)
    # passage id -> that passage's own SUPPORTED / CONTRADICTED / NOT_ENOUGH_INFO
    # probabilities (the built-in judge's; {} for a judge that gives none)
    passage_probabilities: dict[str, dict[str, float]] = Field(default_factory=dict)
    evidence_passage_id: str | None = None
    evidence_quote: str | None = None
    judge_reason: str | None = None
    # the judge's two analyses, "support" (factual) and "contradiction" (counterfactual) ->
    # its reason for each, held or not: the item page says from them which rule decided
    # ({} for an item queued before they were stored: the page then says less)
    analyses: dict[str, str] = Field(default_factory=dict)
    findings: list[CheckFinding] = Field(default_factory=list)  # the exact checks' findings
    risk: float | None = None  # the classifier's hallucination probability
    arbitration: dict[str, Any] = Field(default_factory=dict)  # the decision that escalated it
    priority: float = 0.0  # higher first
    topic: str | None = None
    kb_lineage: str | None = None  # the KB the claim was checked against (settles only there)
    status: ReviewStatus = ReviewStatus.OPEN
    assignee: str | None = None
    labels_needed: int = 1
    final_label: ReviewLabel | None = None
    labels: list[ItemLabel] = Field(default_factory=list)
    created_at: datetime
    closed_at: datetime | None = None

    @field_validator("arbitration")
    @classmethod
    def _stored_inputs(cls, value: dict[str, Any]) -> dict[str, Any]:
        """An item queued before issue 43 keeps loading with its inputs renamed
        (:func:`~medverify.verdict_rules.upgrade_inputs`)."""
        inputs = value.get("inputs")
        return {**value, "inputs": upgrade_inputs(inputs)} if isinstance(inputs, dict) else value


class KBChange(Record):
    """A knowledge-base document added from a reviewed correction (reverted: rolled back)."""

    id: int = 0
    item_id: str
    label_id: int
    doc_id: str
    kb_path: str
    reviewer: str
    text: str
    source_url: str | None = None
    created_at: datetime
    reverted_at: datetime | None = None


class PairAgreement(Record):
    """How two reviewers agree over the items both labelled."""

    reviewer_a: str
    reviewer_b: str
    n: int  # items both labelled
    observed: float  # share of those items they labelled the same
    kappa: float | None  # Cohen's kappa; None when undefined (one category used by both)


class ItemSummary(Record):
    """An item without its content: what the loop report counts."""

    id: str
    run_id: str | None
    category: str
    status: ReviewStatus
    topic: str | None
    final_label: ReviewLabel | None
    created_at: datetime
    closed_at: datetime | None


Period = Literal["day", "week", "month"]


class LoopPeriod(Record):
    """The loop over one period (or all of it: ``period`` is ``all``)."""

    period: str  # e.g. 2025-02-11, 2025-W07, 2025-02
    start: date
    claims_checked: int = 0  # claims of the check runs started in the period
    escalated: int = 0  # review items created in the period
    escalation_rate: float | None = None  # escalated / claims_checked (items of check runs)
    labels: int = 0  # labels given
    items_closed: int = 0
    judge_agreement: float | None = None  # share of the final labels (CANNOT_TELL aside)
    # of items closed in the period that equal the judge's category
    kb_added: int = 0  # KB documents taught
    kb_reverted: int = 0


class LoopReport(Record):
    """How the clinical loop is doing, period by period (oldest first)."""

    by: Period
    periods: list[LoopPeriod]
    total: LoopPeriod
    queue: dict[str, int]  # items per status now


class ItemNotFound(MedverifyError):
    """No review item has this id."""


class ItemClosed(MedverifyError):
    """The review item is closed: it takes no more labels."""


class AlreadyLabelled(MedverifyError):
    """This reviewer has labelled this item already."""


class KBChangeNotFound(MedverifyError):
    """No knowledge-base change has this id."""
