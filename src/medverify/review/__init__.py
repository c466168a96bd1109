"""Clinician review, the stage where people settle what the checker escalated.

* :mod:`~medverify.review.records`: items, labels, KB changes, reviewers' agreement, the
  loop report, and the review's refusals (ItemNotFound, ItemClosed, AlreadyLabelled,
  KBChangeNotFound);
* :mod:`~medverify.review.workflow`: an item's id, a vetted label and source URL, the
  status a label moves an item to, the label that settles it, Cohen's kappa, and
  :class:`ReviewLedger`, what these functions need of the store that keeps the queue;
* :mod:`~medverify.review.teaching`: review items from a report, queueing them, labelling
  and teaching the knowledge base what a closed item settled (reversibly), risk-classifier
  examples from settled labels;
* :mod:`~medverify.review.settled`: reviewed means settled: a checked claim that matches a
  closed item (same text or a near-duplicate, same KB lineage) gets the reviewer's label;
* :mod:`~medverify.review.report`: the loop report, period by period.

The queue itself lives in the run store (:class:`medverify.store.review.ReviewStore`,
SQL only); the service, its browser pages and ``medverify review`` call the functions here.
"""

from medverify.review.records import (
    AlreadyLabelled,
    ItemClosed,
    ItemLabel,
    ItemNotFound,
    ItemSummary,
    KBChange,
    KBChangeNotFound,
    LabelRole,
    LoopPeriod,
    LoopReport,
    PairAgreement,
    Period,
    ReviewItem,
    ReviewLabel,
    ReviewStatus,
)
from medverify.review.report import loop_report, period_of
from medverify.review.settled import (
    SettledClaims,
    SettledLedger,
    SettledRow,
    claim_key,
    near_duplicate,
)
from medverify.review.teaching import (
    DOC_PREFIX,
    escalator,
    finish_teaching,
    items_from_report,
    judged_example_id,
    label_and_teach,
    lesson,
    priority,
    queue_reports,
    revert,
    risk_examples,
    taught_document,
    teach,
)
from medverify.review.workflow import (
    ReviewLedger,
    check_source_url,
    cohen_kappa,
    deciding_label,
    next_status,
    pair_agreements,
    review_item_id,
)

__all__ = [
    "DOC_PREFIX",
    "AlreadyLabelled",
    "ItemClosed",
    "ItemLabel",
    "ItemNotFound",
    "ItemSummary",
    "KBChange",
    "KBChangeNotFound",
    "LabelRole",
    "LoopPeriod",
    "LoopReport",
    "PairAgreement",
    "Period",
    "ReviewItem",
    "ReviewLabel",
    "ReviewLedger",
    "ReviewStatus",
    "SettledClaims",
    "SettledLedger",
    "SettledRow",
    "check_source_url",
    "claim_key",
    "cohen_kappa",
    "deciding_label",
    "escalator",
    "finish_teaching",
    "items_from_report",
    "judged_example_id",
    "label_and_teach",
    "lesson",
    "loop_report",
    "near_duplicate",
    "next_status",
    "pair_agreements",
    "period_of",
    "priority",
    "queue_reports",
    "revert",
    "review_item_id",
    "risk_examples",
    "taught_document",
    "teach",
]
