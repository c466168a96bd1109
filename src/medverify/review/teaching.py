"""What review teaches: escalated claims become review items, settled corrections go into
the knowledge base (reversibly), settled labels become risk-classifier examples.

* :func:`items_from_report`: the claims of a report that arbitration escalated, as review
  items with what a reviewer needs (the answer, the claim, the passages, the deciding quote,
  the judge's reason and probabilities, the risk, the decision); :func:`queue_reports` adds
  them to the queue;
* :func:`teach`: a closed item whose settled label carries a correction (or is FACT with a
  source URL) becomes a knowledge-base document with its provenance, recorded as a
  :class:`~medverify.review.records.KBChange`; :func:`revert` takes it out again;
  :func:`label_and_teach` records a label and teaches what it settles (the service, the UI
  and ``medverify review import`` all label through it);
* :func:`risk_examples`: closed items settled FACT or HALLUCINATION as labelled examples.

The store is any :class:`~medverify.review.workflow.ReviewLedger` (the run store's
:class:`~medverify.store.review.ReviewStore`).

Priority (higher is reviewed first) is arbitration's urgency
(:func:`medverify.arbitration.urgency`): clinical severity (doses and drugs, then groups
and numbers, then the rest) x uncertainty, plus a little for evidence of an error and for
the risk classifier's probability. A COVERAGE_GAP on a dose claim is high, not ~0.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from medverify.arbitration import arbitrate, urgency
from medverify.config import ArbitrationPolicy, Config
from medverify.errors import InputError, MedverifyError
from medverify.kb import KnowledgeBase
from medverify.kb.postgres import PostgresKB
from medverify.records import (
    Category,
    ClaimResult,
    Decision,
    Document,
    Report,
    Verdict,
    utcnow,
)
from medverify.review.records import ItemLabel, KBChange, ReviewItem, ReviewLabel, ReviewStatus
from medverify.review.workflow import (
    ReviewLedger,
    check_source_url,
    deciding_label,
    review_item_id,
)

if TYPE_CHECKING:
    from medverify.risk.records import LabeledExample

DOC_PREFIX = "review-"
"""A taught document's id: ``review-<item id>``."""

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------- items


def priority(result: ClaimResult) -> float:
    """How urgent a claim's review is (see the module's docstring)."""
    return urgency(result)


def passage_probabilities(verdict: Verdict | None) -> dict[str, dict[str, float]]:
    """Each passage's own probabilities from the built-in judge's raw output (JSON
    ``{"passages": {id: {"SUPPORTED": p, ...}}}``); {} for any other judge or output."""
    try:
        rows = json.loads(verdict.raw_output or "")["passages"] if verdict else {}
        return {str(pid): {str(k): float(v) for k, v in row.items()}
                for pid, row in rows.items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def judge_reason(result: ClaimResult) -> str | None:
    """The judge's reason for its category: the analysis that decided it (both for a
    JUDGMENT_ERROR; the factual one for a COVERAGE_GAP), or the error."""
    verdict = result.verdict
    if result.category is Category.ERROR or verdict is None:
        return result.error
    factual = verdict.factual.reason if verdict.factual else None
    counter = verdict.counterfactual.reason if verdict.counterfactual else None
    if result.category is Category.HALLUCINATION:
        return counter
    if result.category is Category.JUDGMENT_ERROR:
        parts = [f"supported: {factual}" if factual else None,
                 f"contradicted: {counter}" if counter else None]
        return "; ".join(p for p in parts if p) or None
    return factual


def analysis_reasons(verdict: Verdict | None) -> dict[str, str]:
    """The reason of each of the verdict's analyses that has one: ``support`` (factual),
    ``contradiction`` (counterfactual)."""
    if verdict is None:
        return {}
    pairs = (("support", verdict.factual), ("contradiction", verdict.counterfactual))
    return {name: a.reason for name, a in pairs if a is not None and a.reason}


def items_from_report(report: Report, *, labels_needed: int = 1, topic: str | None = None,
                      policy: ArbitrationPolicy | None = None) -> list[ReviewItem]:
    """The review items of a report: one per claim whose arbitration decision is
    ESCALATE. ``topic`` defaults to the answer's ``meta["topic"]``; a result without a
    decision (a report from before arbitration) is arbitrated with ``policy`` when one is
    given, and skipped otherwise."""
    if labels_needed not in (1, 2):
        raise InputError(f"labels_needed is 1 or 2, not {labels_needed}")
    answer = report.answer
    meta_topic = answer.meta.get("topic")
    topic = topic if topic is not None else (meta_topic if isinstance(meta_topic, str) else None)
    now = utcnow()
    items = []
    for result in report.results:
        decision = result.arbitration
        if decision is None and policy is not None:
            decision = arbitrate(result, policy)
        if decision is None or decision.decision is not Decision.ESCALATE:
            continue
        verdict = result.verdict
        items.append(ReviewItem(
            id=review_item_id(report.run_id, answer.id, result.claim.id),
            run_id=report.run_id, answer_id=answer.id, question=answer.question,
            answer_text=answer.text, claim=result.claim, passages=result.passages,
            category=result.category.value,
            probabilities=dict(verdict.probabilities or {}) if verdict else {},
            passage_probabilities=passage_probabilities(verdict),
            evidence_passage_id=result.evidence_passage_id,
            evidence_quote=result.evidence_quote, judge_reason=judge_reason(result),
            analyses=analysis_reasons(verdict),
            findings=list(verdict.findings) if verdict else [],
            risk=result.hallucination_risk, arbitration=decision.model_dump(mode="json"),
            priority=priority(result), topic=topic, labels_needed=labels_needed,
            kb_lineage=report.kb_lineage, created_at=now))
    return items


# ----------------------------------------------------------------------- teaching


def lesson(item: ReviewItem) -> tuple[ItemLabel, str] | None:
    """(the settling label, the statement to add to the KB) when a closed item teaches
    something: a settled label with a correction (the correction), or FACT with a source
    URL (the claim itself); None otherwise (open, CANNOT_TELL, nothing to add)."""
    if item.status is not ReviewStatus.CLOSED:
        return None
    label = deciding_label(item)
    if label is None or label.label is ReviewLabel.CANNOT_TELL:
        return None
    if label.correction:
        return label, label.correction
    if label.label is ReviewLabel.FACT and label.source_url:
        return label, item.claim.text
    return None


def taught_document(item: ReviewItem, label: ItemLabel, text: str,
                    url: str | None) -> Document:
    """The KB document of a settled correction, with its provenance in ``meta``."""
    return Document(
        doc_id=f"{DOC_PREFIX}{item.id}",
        title=f"Clinician-reviewed statement (review item {item.id})",
        text=text, url=url, source="clinician-review",
        meta={"provenance": "clinician review", "review_item": item.id,
              "label_id": label.id, "label": label.label.value, "reviewer": label.reviewer,
              "reviewed_at": label.created_at.isoformat(),
              "taught_at": datetime.now(UTC).isoformat(), "claim": item.claim.text,
              "run_id": item.run_id, "answer_id": item.answer_id,
              "source_passage_id": label.source_passage_id})


def teach(item: ReviewItem, kb: KnowledgeBase | PostgresKB,
          store: ReviewLedger) -> KBChange | None:
    """Add what a closed item settled to the knowledge base (see :func:`lesson`) and
    record the change; None when it teaches nothing. An item already taught (a change in
    force) is not taught twice: its change is returned. InputError for a source URL that
    is not a public http(s) address."""
    found = lesson(item)
    if found is None:
        return None
    in_force = store.kb_changes(item_id=item.id)
    if in_force:
        return in_force[-1]
    label, text = found
    url = check_source_url(label.source_url)
    doc = taught_document(item, label, text, url)
    kb.ingest([doc])
    try:
        return store.record_kb_change(KBChange(
            item_id=item.id, label_id=label.id, doc_id=doc.doc_id, kb_path=str(kb.path),
            reviewer=label.reviewer, text=text, source_url=url, created_at=utcnow()))
    except BaseException:
        kb.remove_documents([doc.doc_id])  # nothing half-done: no document without its record
        raise


def finish_teaching(store: ReviewLedger, kb: KnowledgeBase | PostgresKB) -> int:
    """Teach what closed items settled but a crash left untaught (the label was recorded,
    the process died before its KB document or its change record): the service runs this
    at start-up. A document already in the KB is not added twice (same id and text), and an
    item whose change was reverted is never taught again. Returns how many were taught."""
    taught = 0
    for item in store.list(status=ReviewStatus.CLOSED, limit=None):
        if lesson(item) is None or store.kb_changes(include_reverted=True, item_id=item.id):
            continue
        try:
            teach(item, kb, store)
            taught += 1
        except MedverifyError as exc:
            log.warning("review item %s: not taught: %s", item.id, exc)
    return taught


def revert(change_id: int, kb: KnowledgeBase | PostgresKB,
           store: ReviewLedger) -> KBChange:
    """Take a taught document out of the knowledge base again and record the change as
    reverted (a reverted change is returned as it is). KBChangeNotFound for an unknown id;
    InputError when the change was made in another KB."""
    change = store.kb_change(change_id)
    if change.reverted_at is not None:
        return change
    if Path(change.kb_path).resolve() != Path(kb.path).resolve():
        raise InputError(f"KB change {change_id} was made in {change.kb_path}, not in "
                         f"{kb.path}: open that knowledge base to revert it")
    kb.remove_documents([change.doc_id])
    return store.mark_reverted(change_id)


Escalate = Callable[[Report], list[ReviewItem]]
"""A report's claims for the clinicians' review queue (what :func:`escalator` makes):
:meth:`medverify.checker.Checker.run` queues them in the answer's own transaction."""


def escalator(config: Config) -> Escalate | None:
    """A report's review items under ``config`` (``[review] labels_needed``, the
    ``[arbitration]`` policy for results without a decision), or None when ``[review]
    enabled`` is off: what the service gives :meth:`medverify.checker.Checker.run` so that
    an answer and its escalations are recorded in one transaction."""
    if not config.review.enabled:
        return None
    return partial(items_from_report, labels_needed=config.review.labels_needed,
                   policy=config.arbitration)


def queue_reports(store: ReviewLedger, reports: Sequence[Report], *, labels_needed: int = 1,
                  policy: ArbitrationPolicy | None = None) -> int:
    """Add the escalated claims of checked reports to the review queue (see
    :func:`items_from_report`); returns how many items were new."""
    items = [item for report in reports for item in items_from_report(
        report, labels_needed=labels_needed, policy=policy)]
    return store.add_items(items) if items else 0


def label_and_teach(store: ReviewLedger, item_id: str, reviewer: str,
                    label: ReviewLabel | str, *, kb: KnowledgeBase | PostgresKB | None,
                    **fields: str | None) -> tuple[ReviewItem, KBChange | None]:
    """Record a reviewer's label (``fields``: correction, source_url, source_passage_id,
    note); when it closes the item with something to teach and ``kb`` is given, add it to
    that knowledge base (see :func:`teach`; a retriever over it sees it at once). Raises the
    store's refusals (ItemNotFound, ItemClosed, AlreadyLabelled, InputError); a failure to
    teach is logged, not raised: the label stands, and :func:`finish_teaching` teaches it
    later."""
    item = store.label(item_id, reviewer, label, **fields)
    change = None
    if kb is not None:
        try:
            change = teach(item, kb, store)
        except MedverifyError as exc:  # the label stands; the change can be taught again
            log.warning("review item %s: could not teach the KB: %s", item_id, exc)
    return item, change


# ----------------------------------------------------------------------- risk training data

RISK_LABELS = {ReviewLabel.FACT: "FACT", ReviewLabel.HALLUCINATION: "HALLUCINATION"}
"""The settled labels that are risk-classifier examples (the rest are skipped)."""


def risk_examples(items: Iterable[ReviewItem]) -> tuple[list[LabeledExample], Counter[str]]:
    """Closed items settled FACT or HALLUCINATION as labelled examples for the risk
    classifier (text: the claim; question: the answer's question; id ``review:<item id>``;
    the label's provenance), and the items skipped by reason: ``not closed``, or the final
    label (JUDGMENT_ERROR, COVERAGE_GAP, CANNOT_TELL: no FACT/HALLUCINATION to learn)."""
    from medverify.risk.records import LabeledExample, RiskLabel

    examples: list[LabeledExample] = []
    skipped: Counter[str] = Counter()
    for item in items:
        label = deciding_label(item) if item.status is ReviewStatus.CLOSED else None
        if label is None:
            skipped["not closed"] += 1
            continue
        if label.label not in RISK_LABELS:
            skipped[label.label.value] += 1
            continue
        examples.append(LabeledExample(
            id=f"review:{item.id}", question=item.question, text=item.claim.text,
            label=RiskLabel(RISK_LABELS[label.label]),
            provenance={"source": "clinician_review", "review_item": item.id,
                        "label_id": label.id, "reviewer": label.reviewer,
                        "reviewed_at": label.created_at.isoformat(),
                        "judge_category": item.category, "run_id": item.run_id,
                        "answer_id": item.answer_id, "claim_id": item.claim.id}))
    return examples, skipped


def judged_example_id(item: ReviewItem) -> str:
    """The id ``risk data kb`` gives the judge's example of the same claim of the same run
    (so a reviewed label can replace the judge's)."""
    return f"kb:{item.run_id or 'no-run'}:{item.answer_id}:{item.claim.id}"
