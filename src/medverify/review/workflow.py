"""How an item moves through review: its id, the label a reviewer may give (a vetted source
URL), the status the label moves it to, the label that settles it, reviewers' agreement,
and :class:`ReviewLedger`, what the review's functions need of the store that keeps them.

With ``labels_needed=1`` the first label closes an item; with ``labels_needed=2`` the first
makes it ``needs_second``, a second that agrees closes it, one that disagrees sends it to
``adjudication``, where a third reviewer's label (role ``adjudication``) closes it
(:func:`next_status`). ``CANNOT_TELL`` is a label like the others (an item closed with it
teaches nothing).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from itertools import combinations
from typing import Protocol

from pydantic import ValidationError

from medverify.errors import InputError
from medverify.review.records import (
    ItemLabel,
    ItemSummary,
    KBChange,
    LabelRole,
    PairAgreement,
    ReviewItem,
    ReviewLabel,
    ReviewStatus,
)
from medverify.sources.safety import check_url


class ReviewLedger(Protocol):
    """What the review's functions need of the store that keeps the queue
    (:class:`medverify.store.review.ReviewStore` is one)."""

    def add_items(self, items: Iterable[ReviewItem]) -> int: ...

    def label(self, item_id: str, reviewer: str, label: ReviewLabel | str,
              correction: str | None = None, source_url: str | None = None,
              source_passage_id: str | None = None, note: str | None = None) -> ReviewItem: ...

    def labels(self, since: datetime | None = None) -> list[ItemLabel]: ...

    def summaries(self) -> list[ItemSummary]: ...

    def counts(self) -> dict[str, int]: ...

    def record_kb_change(self, change: KBChange) -> KBChange: ...

    def kb_change(self, change_id: int) -> KBChange: ...

    def kb_changes(self, include_reverted: bool = False,
                   item_id: str | None = None) -> list[KBChange]: ...

    def mark_reverted(self, change_id: int) -> KBChange: ...

    def checked_claims(self) -> list[tuple[datetime, int]]: ...

    def list(self, status: ReviewStatus | str | None = None,
             min_priority: float | None = None, topic: str | None = None,
             assignee: str | None = None, limit: int | None = 50,
             offset: int = 0) -> list[ReviewItem]: ...


def review_item_id(run_id: str | None, answer_id: str, claim_id: str) -> str:
    """The id of the review item of one claim of one answer of one run: ``rv-`` and 16 hex
    characters of the SHA-256 of the three (the same escalation always has the same id)."""
    key = "\x00".join((run_id or "", answer_id, claim_id))
    return "rv-" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


_LOCAL_NAMES = ("localhost", "localhost.localdomain")


def check_source_url(url: str | None) -> str | None:
    """A reviewer's source URL, vetted without touching the network: None when blank;
    InputError unless it is an http(s) URL whose host is not a blocked address (private,
    loopback, link-local, cloud metadata, ... in any notation: the safe fetcher's rules,
    :func:`medverify.sources.safety.check_url`) nor a loopback name (``localhost``).
    Names are not resolved here."""
    if url is None or not url.strip():
        return None
    checked = check_url(url)
    if not checked.ok:
        raise InputError(f"source_url {url.strip()[:200]!r} is refused: {checked.reason}; "
                         "give a public http(s) address")
    if checked.host in _LOCAL_NAMES or checked.host.endswith(".localhost"):
        raise InputError(f"source_url {url.strip()[:200]!r} is refused: {checked.host} is a "
                         "loopback name; give a public http(s) address")
    return url.strip()


def checked_label(item_id: str, reviewer: str, label: ReviewLabel | str,
                  correction: str | None, source_url: str | None,
                  source_passage_id: str | None, note: str | None) -> ItemLabel:
    """A reviewer's label as it is recorded (texts stripped, blanks None, the source URL
    vetted), or InputError: an unknown label, a blank reviewer, a text over its limit, a
    source URL that is not a public http(s) address."""
    if not reviewer or not reviewer.strip():
        raise InputError("a label needs a reviewer")
    try:
        value = ReviewLabel(label)
    except ValueError:
        raise InputError(f"unknown label {label!r}: one of "
                         + ", ".join(x.value for x in ReviewLabel)) from None
    url = check_source_url(source_url)

    def blank(text: str | None) -> str | None:
        return text.strip() if text and text.strip() else None

    try:
        return ItemLabel(item_id=item_id, reviewer=reviewer.strip(), label=value,
                         correction=blank(correction), source_url=url,
                         source_passage_id=blank(source_passage_id), note=blank(note),
                         created_at=datetime.now(UTC))
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(x) for x in problem.get("loc", ()))
        raise InputError(f"{where}: {problem.get('msg')}") from None


def next_status(status: ReviewStatus, needed: int, earlier: list[ItemLabel],
                label: ReviewLabel) -> tuple[LabelRole, ReviewStatus, ReviewLabel | None]:
    """(the new label's role, the item's next status, its final label if it closes)."""
    if status is ReviewStatus.OPEN:
        if needed == 1:
            return LabelRole.FIRST, ReviewStatus.CLOSED, label
        return LabelRole.FIRST, ReviewStatus.NEEDS_SECOND, None
    if status is ReviewStatus.NEEDS_SECOND:
        first = next(e for e in earlier if e.role is LabelRole.FIRST)
        if first.label is label:
            return LabelRole.SECOND, ReviewStatus.CLOSED, label
        return LabelRole.SECOND, ReviewStatus.ADJUDICATION, None
    return LabelRole.ADJUDICATION, ReviewStatus.CLOSED, label


def deciding_label(item: ReviewItem) -> ItemLabel | None:
    """The label that settled a closed item: the adjudicator's; else, of the labels that
    agree with the final one, the latest with a correction or source, else the latest."""
    if item.final_label is None:
        return None
    agreeing = [x for x in item.labels if x.label is item.final_label]
    for x in agreeing:
        if x.role is LabelRole.ADJUDICATION:
            return x
    sourced = [x for x in agreeing if x.correction or x.source_url or x.source_passage_id]
    return (sourced or agreeing or [None])[-1]


def cohen_kappa(pairs: Sequence[tuple[str, str]]) -> float | None:
    """Cohen's kappa of two raters' labels, one (a, b) pair per item: (p_o - p_e) /
    (1 - p_e), p_o the share of items labelled the same and p_e the agreement expected by
    chance from each rater's label frequencies. None without items, or when p_e is 1
    (both raters used one and the same category: kappa is undefined)."""
    n = len(pairs)
    if n == 0:
        return None
    observed = sum(a == b for a, b in pairs) / n
    first, second = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    expected = sum(first[k] * second[k] for k in first) / (n * n)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def pair_agreements(by_item: Mapping[str, Mapping[str, str]]) -> list[PairAgreement]:
    """Cohen's kappa of every pair of reviewers over the items both labelled, pairs in name
    order; ``by_item``: item id -> reviewer -> label."""
    pairs: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for labels in by_item.values():
        for a, b in combinations(sorted(labels), 2):
            pairs.setdefault((a, b), []).append((labels[a], labels[b]))
    out = []
    for (a, b), seen in sorted(pairs.items()):
        observed = sum(x == y for x, y in seen) / len(seen)
        out.append(PairAgreement(reviewer_a=a, reviewer_b=b, n=len(seen),
                                 observed=observed, kappa=cohen_kappa(seen)))
    return out
