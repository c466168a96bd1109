"""The clinician review queue as JSON (the browser pages are under ``/review``,
:mod:`medverify.service.ui`): items listed, read, assigned and labelled; reviewer
agreement, the loop's progress, and the KB documents the review added (and their revert)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Request

from medverify.errors import ConfigError
from medverify.kb import KnowledgeBase
from medverify.kb.postgres import PostgresKB
from medverify.review import (
    KBChange,
    LoopReport,
    PairAgreement,
    ReviewItem,
    ReviewStatus,
    loop_report,
)
from medverify.review import revert as revert_change
from medverify.service.records import MAX_OFFSET, LabelRequest
from medverify.service.routes.deps import Admin, Reviewer, State
from medverify.store.access import KeyInfo, Role

router = APIRouter(tags=["review"])


@router.get("/v1/review/items", response_model=list[ReviewItem])
async def review_items(
        key: Reviewer, state: State, status: ReviewStatus | Literal["all"] | None = None,
        topic: str | None = None, min_priority: float | None = None,
        assignee: str | None = None, limit: Annotated[int, Query(ge=1, le=500)] = 50,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0) -> list[ReviewItem]:
    """The review queue: escalated claims, highest priority first, then oldest.

    Filters: ``status`` (open, needs_second, adjudication, closed, or all: the default),
    ``topic``, ``min_priority``, ``assignee`` (a key id). While an item waits for its
    second label, a key sees only its own labels of it (the second review is blind);
    an admin key sees every label."""
    wanted = None if status == "all" else status
    items = state.review.list(status=wanted, min_priority=min_priority, topic=topic,
                              assignee=assignee, limit=limit, offset=offset)
    return [_shown(item, key) for item in items]


@router.get("/v1/review/items/{item_id}", response_model=ReviewItem)
async def review_item(item_id: str, key: Reviewer, state: State) -> ReviewItem:
    """One review item with everything a reviewer needs to decide it.

    The answer, the claim, the passages, the deciding quote, the judge's reason and
    probabilities, the risk, the decision that escalated it, and its labels (blind
    while it waits for a second one, as in the list). 404 ``not_found`` for an unknown
    item."""
    return _shown(state.review.get(item_id), key)


@router.post("/v1/review/items/{item_id}/labels", response_model=ReviewItem)
async def label_item(item_id: str, body: LabelRequest, request: Request, key: Reviewer,
                     state: State) -> ReviewItem:
    """Label a review item as this key's reviewer.

    With ``[review] labels_needed = 1`` the label closes the item; with 2, the first
    waits for a second, a second that agrees closes it and one that disagrees sends it
    to adjudication, where a third reviewer's label closes it. When the item closes
    with a correction (or FACT with a ``source_url``), the statement is added to the
    knowledge base with its provenance (see ``GET /v1/review/kb-changes``), and the
    next check retrieves it. 404 ``not_found`` for an unknown item; 409
    ``item_closed`` for a closed one, ``already_labelled`` when this key labelled it
    before; 422 ``invalid_input`` for a source URL that is not a public http(s)
    address (it is never fetched)."""
    request.state.target = item_id
    item, _ = state.label_and_teach(
        item_id, key.id, body.label, correction=body.correction,
        source_url=body.source_url, source_passage_id=body.source_passage_id,
        note=body.note)
    return _shown(item, key)


@router.post("/v1/review/items/{item_id}/assign", response_model=ReviewItem)
async def assign_item(item_id: str, request: Request, key: Reviewer,
                      state: State) -> ReviewItem:
    """Take a review item: assign it to this key.

    ``GET /v1/review/items?assignee=<key id>`` lists a reviewer's items. 404
    ``not_found`` for an unknown item, 409 ``item_closed`` for a closed one."""
    request.state.target = item_id
    return _shown(state.review.assign(item_id, key.id), key)


@router.get("/v1/review/agreement", response_model=list[PairAgreement])
async def review_agreement(key: Reviewer, state: State) -> list[PairAgreement]:
    """Agreement between reviewers.

    Cohen's kappa of every pair of reviewers over the items both labelled (``n``), with
    the share of identical labels (``observed``); kappa is null when it is undefined
    (both used one and the same label)."""
    return state.review.agreement()


@router.get("/v1/review/progress", response_model=LoopReport)
async def review_progress(key: Reviewer, state: State,
                          by: Literal["day", "week", "month"] = "week") -> LoopReport:
    """The clinical loop, period by period.

    Per day, week (ISO) or month: claims checked and escalated (the escalation rate),
    labels given, items closed, the share of final labels that agree with the judge's
    category (``CANNOT_TELL`` aside), and the KB documents added and reverted; with the
    totals and the queue's items per status now."""
    return loop_report(state.review, by=by)


@router.get("/v1/review/kb-changes", response_model=list[KBChange])
async def kb_changes(key: Reviewer, state: State,
                     include_reverted: bool = False) -> list[KBChange]:
    """The knowledge-base documents the review added, oldest first.

    Those in force; with ``include_reverted=true``, the reverted ones too."""
    return state.review.kb_changes(include_reverted=include_reverted)


@router.post("/v1/review/kb-changes/{change_id}/revert", response_model=KBChange)
async def revert_kb_change(change_id: Annotated[int, Path(ge=1, le=2**31 - 1)],
                           request: Request, key: Admin,
                           state: State) -> KBChange:
    """Take a document the review added out of the knowledge base again.

    Its chunks leave the full-text and vector indexes and the KB snapshot id changes
    back; the change is kept, marked reverted (reverting it again changes nothing).
    404 ``not_found`` for an unknown change; 503 ``not_ready`` without a loaded KB."""
    request.state.target = str(change_id)
    kb = state.need_checker().kb
    if not isinstance(kb, KnowledgeBase | PostgresKB):
        raise ConfigError("the knowledge base is neither the embedded store nor the "
                          "PostgreSQL one: its documents cannot be removed here")
    return revert_change(change_id, kb, state.review)


def _shown(item: ReviewItem, key: KeyInfo) -> ReviewItem:
    """The item as ``key`` may see it: while it waits for a second label, only the key's
    own labels (the second review is blind), unless the key is an admin's."""
    if key.role is Role.ADMIN or item.status is not ReviewStatus.NEEDS_SECOND:
        return item
    return item.model_copy(update={"labels": [x for x in item.labels if x.reviewer == key.id]})
