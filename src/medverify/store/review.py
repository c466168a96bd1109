"""The clinician review queue, in the run store: escalated claims, reviewers' labels,
adjudication, and the knowledge-base changes the labels made (reversible)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from medverify.records import Claim, Passage


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class ItemLabel(_Record):
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


class ReviewItem(_Record):
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
    evidence_passage_id: str | None = None
    evidence_quote: str | None = None
    judge_reason: str | None = None
    risk: float | None = None  # the classifier's hallucination probability
    arbitration: dict[str, Any] = Field(default_factory=dict)  # the decision that escalated it
    priority: float = 0.0  # higher first
    topic: str | None = None
    status: ReviewStatus = ReviewStatus.OPEN
    assignee: str | None = None
    labels_needed: int = 1
    final_label: ReviewLabel | None = None
    labels: list[ItemLabel] = Field(default_factory=list)
    created_at: datetime
    closed_at: datetime | None = None


class KBChange(_Record):
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
