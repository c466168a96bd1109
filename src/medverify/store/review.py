"""The clinician review queue, in the run store: escalated claims, reviewers' labels,
adjudication, and the knowledge-base changes the labels made (reversible).

:class:`ReviewStore` keeps the queue in the tables of migration 0009 (``review_items``,
``review_labels``, ``kb_changes``). An item is an escalated claim with what a reviewer
needs to decide it; its id is derived from run id, answer id and claim id
(:func:`review_item_id`), so adding the same escalations twice adds nothing.

Labelling (:meth:`ReviewStore.label`) is one ``BEGIN IMMEDIATE`` transaction: when
reviewers label at once, in any process, each slot is taken by exactly one of them and a
refused label writes nothing. With ``labels_needed=1`` the first label closes the item;
with ``labels_needed=2`` the first makes it ``needs_second``, a second that agrees closes
it, one that disagrees sends it to ``adjudication``, where a third reviewer's label (role
``adjudication``) closes it. ``CANNOT_TELL`` is a label like the others (an item closed
with it teaches nothing).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from itertools import combinations
from typing import Any

from pydantic import Field, ValidationError

from medverify.errors import InputError, MedverifyError
from medverify.records import CheckFinding, Claim, Passage, Record
from medverify.sources.safety import check_url
from medverify.store.runs import RunStore


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
    evidence_passage_id: str | None = None
    evidence_quote: str | None = None
    judge_reason: str | None = None
    findings: list[CheckFinding] = Field(default_factory=list)  # the exact checks' findings
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


class ItemNotFound(MedverifyError):
    """No review item has this id."""


class ItemClosed(MedverifyError):
    """The review item is closed: it takes no more labels."""


class AlreadyLabelled(MedverifyError):
    """This reviewer has labelled this item already."""


class KBChangeNotFound(MedverifyError):
    """No knowledge-base change has this id."""


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


def _stamp(when: datetime | None = None) -> str:
    """A fixed-width ISO-8601 UTC time (microseconds), so that times compare as text."""
    return (when or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="microseconds")


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


_ITEM_COLUMNS = ("id, status, assignee, final_label, closed_at, item")
_LABEL_COLUMNS = ("id, item_id, reviewer, role, label, correction, source_url, "
                  "source_passage_id, note, created_at")
_CHANGE_COLUMNS = ("id, item_id, label_id, doc_id, kb_path, reviewer, text, source_url, "
                   "created_at, reverted_at")
_ITEM_INSERT = ("id", "run_id", "answer_id", "claim_id", "topic", "category", "priority",
                "status", "assignee", "labels_needed", "created_at", "item")
_NO_LIMIT = 2**62  # LIMIT for "all of them" (SQLite's -1 is not PostgreSQL's)
_STATE_FIELDS = {"labels", "status", "assignee", "final_label", "closed_at"}


def _label_row(row: Sequence[Any]) -> ItemLabel:
    (label_id, item_id, reviewer, role, label, correction, source_url, passage_id, note,
     created_at) = row
    return ItemLabel(id=label_id, item_id=item_id, reviewer=reviewer, role=LabelRole(role),
                     label=ReviewLabel(label), correction=correction, source_url=source_url,
                     source_passage_id=passage_id, note=note,
                     created_at=datetime.fromisoformat(created_at))


def _change_row(row: Sequence[Any]) -> KBChange:
    (change_id, item_id, label_id, doc_id, kb_path, reviewer, text, source_url, created_at,
     reverted_at) = row
    return KBChange(id=change_id, item_id=item_id, label_id=label_id, doc_id=doc_id,
                    kb_path=kb_path, reviewer=reviewer, text=text, source_url=source_url,
                    created_at=datetime.fromisoformat(created_at),
                    reverted_at=_when(reverted_at))


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


class ReviewStore:
    """The review queue in the run store.

    Every write is one statement or one ``BEGIN IMMEDIATE`` transaction, so the queue stays
    consistent when several processes (the service's workers, the command line) share the
    database file; a refused write (an exception) leaves nothing behind.
    """

    def __init__(self, runs: RunStore) -> None:
        self.runs = runs
        self._db = runs._db

    # -- items -------------------------------------------------------------------------

    def add_items(self, items: Iterable[ReviewItem]) -> int:
        """Add items to the queue; an item whose id is there already is left as it is.
        Returns how many were added."""
        added = 0
        with self.runs.immediate():
            for item in items:
                if item.labels_needed not in (1, 2):
                    raise InputError(f"labels_needed is 1 or 2, not {item.labels_needed}")
                body = item.model_dump_json(exclude=_STATE_FIELDS)
                cursor = self._db.execute(
                    self._db.insert_ignore_sql("review_items", _ITEM_INSERT),
                    (item.id, item.run_id, item.answer_id, item.claim.id, item.topic,
                     item.category, item.priority, ReviewStatus.OPEN.value, None,
                     item.labels_needed, _stamp(item.created_at), body))
                added += cursor.rowcount
        return added

    def list(
        self,
        status: ReviewStatus | str | None = None,
        min_priority: float | None = None,
        topic: str | None = None,
        assignee: str | None = None,
        limit: int | None = 50,
        offset: int = 0,
    ) -> list[ReviewItem]:
        """Items, highest priority first, then oldest (``limit=None``: all of them)."""
        where, args = self._filters(status, min_priority, topic, assignee)
        rows = self._db.execute(
            f"SELECT {_ITEM_COLUMNS} FROM review_items{where}"
            " ORDER BY priority DESC, created_at, id LIMIT ? OFFSET ?",
            (*args, _NO_LIMIT if limit is None else max(0, limit), max(0, offset))).fetchall()
        labels = self._labels_of([row[0] for row in rows])
        return [self._item(row, labels.get(row[0], [])) for row in rows]

    @staticmethod
    def _filters(status: ReviewStatus | str | None, min_priority: float | None,
                 topic: str | None, assignee: str | None) -> tuple[str, list[Any]]:
        where: list[str] = []
        args: list[Any] = []
        if status is not None:
            where.append("status = ?")
            args.append(ReviewStatus(status).value)
        if min_priority is not None:
            where.append("priority >= ?")
            args.append(float(min_priority))
        if topic is not None:
            where.append("topic = ?")
            args.append(topic)
        if assignee is not None:
            where.append("assignee = ?")
            args.append(assignee)
        return (f" WHERE {' AND '.join(where)}" if where else ""), args

    def get(self, item_id: str) -> ReviewItem:
        """One item with its labels (ItemNotFound when there is none)."""
        row = self._db.execute(f"SELECT {_ITEM_COLUMNS} FROM review_items WHERE id = ?",
                               (item_id,)).fetchone()
        if row is None:
            raise ItemNotFound(f"no review item {item_id!r}")
        return self._item(row, self._labels_of([item_id]).get(item_id, []))

    def _item(self, row: Sequence[Any], labels: list[ItemLabel]) -> ReviewItem:
        _, status, assignee, final_label, closed_at, body = row
        item = ReviewItem.model_validate_json(body)
        return item.model_copy(update={
            "status": ReviewStatus(status), "assignee": assignee,
            "final_label": ReviewLabel(final_label) if final_label else None,
            "closed_at": _when(closed_at), "labels": labels})

    def _labels_of(self, item_ids: Sequence[str]) -> dict[str, list[ItemLabel]]:
        out: dict[str, list[ItemLabel]] = {}
        for start in range(0, len(item_ids), 500):
            part = item_ids[start:start + 500]
            marks = ", ".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT {_LABEL_COLUMNS} FROM review_labels WHERE item_id IN ({marks})"
                " ORDER BY id", part).fetchall()
            for row in rows:
                out.setdefault(row[1], []).append(_label_row(row))
        return out

    def summaries(self) -> list[ItemSummary]:
        """Every item without its content, oldest first (for reports)."""
        rows = self._db.execute(
            "SELECT id, run_id, category, status, topic, final_label, created_at, closed_at"
            " FROM review_items ORDER BY created_at, id").fetchall()
        return [ItemSummary(id=r[0], run_id=r[1], category=r[2], status=ReviewStatus(r[3]),
                            topic=r[4], final_label=ReviewLabel(r[5]) if r[5] else None,
                            created_at=datetime.fromisoformat(r[6]), closed_at=_when(r[7]))
                for r in rows]

    def counts(self) -> dict[str, int]:
        """Items per status (every status, zero included)."""
        counts = {status.value: 0 for status in ReviewStatus}
        rows = self._db.execute("SELECT status, COUNT(*) FROM review_items GROUP BY status")
        counts.update({status: int(n) for status, n in rows.fetchall()})
        return counts

    def assign(self, item_id: str, reviewer: str | None) -> ReviewItem:
        """Give an open item to ``reviewer`` (None: to nobody). ItemClosed for a closed one."""
        with self.runs.immediate():
            row = self._db.execute("SELECT status FROM review_items WHERE id = ?",
                                   (item_id,)).fetchone()
            if row is None:
                raise ItemNotFound(f"no review item {item_id!r}")
            if row[0] == ReviewStatus.CLOSED.value:
                raise ItemClosed(f"review item {item_id} is closed")
            self._db.execute("UPDATE review_items SET assignee = ? WHERE id = ?",
                             (reviewer, item_id))
        return self.get(item_id)

    # -- labels ------------------------------------------------------------------------

    def label(
        self,
        item_id: str,
        reviewer: str,
        label: ReviewLabel | str,
        correction: str | None = None,
        source_url: str | None = None,
        source_passage_id: str | None = None,
        note: str | None = None,
    ) -> ReviewItem:
        """Record ``reviewer``'s label of an item and move it on (see the module's
        docstring); returns the item as it is now.

        Refusals, each writing nothing: ItemNotFound; ItemClosed (it is settled);
        AlreadyLabelled (this reviewer labelled it before; an adjudicator must be a third
        reviewer); InputError (an unknown label, a blank reviewer, a text over its limit, a
        source URL that is not a public http(s) address)."""
        checked = self._checked_label(item_id, reviewer, label, correction, source_url,
                                      source_passage_id, note)
        with self.runs.immediate():
            row = self._db.execute(
                "SELECT status, labels_needed FROM review_items WHERE id = ?",
                (item_id,)).fetchone()
            if row is None:
                raise ItemNotFound(f"no review item {item_id!r}")
            status, needed = ReviewStatus(row[0]), int(row[1])
            if status is ReviewStatus.CLOSED:
                raise ItemClosed(f"review item {item_id} is closed: it takes no more labels")
            earlier = self._labels_of([item_id]).get(item_id, [])
            if any(e.reviewer == checked.reviewer for e in earlier):
                raise AlreadyLabelled(f"{checked.reviewer} has labelled review item "
                                      f"{item_id} already")
            role, status, final = _next(status, needed, earlier, checked.label)
            now = _stamp()
            self._db.execute(
                "INSERT INTO review_labels (item_id, reviewer, role, label, correction,"
                " source_url, source_passage_id, note, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (item_id, checked.reviewer, role.value, checked.label.value,
                 checked.correction, checked.source_url, checked.source_passage_id,
                 checked.note, now))
            self._db.execute(
                "UPDATE review_items SET status = ?, final_label = ?, closed_at = ?"
                " WHERE id = ?",
                (status.value, final.value if final else None,
                 now if status is ReviewStatus.CLOSED else None, item_id))
        return self.get(item_id)

    @staticmethod
    def _checked_label(item_id: str, reviewer: str, label: ReviewLabel | str,
                       correction: str | None, source_url: str | None,
                       source_passage_id: str | None, note: str | None) -> ItemLabel:
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

    def labels(self, since: datetime | None = None) -> list[ItemLabel]:
        """Every label, oldest first (given since ``since``)."""
        where, args = ("", ()) if since is None else (" WHERE created_at >= ?", (_stamp(since),))
        rows = self._db.execute(
            f"SELECT {_LABEL_COLUMNS} FROM review_labels{where} ORDER BY created_at, id",
            args).fetchall()
        return [_label_row(row) for row in rows]

    def agreement(self) -> list[PairAgreement]:
        """Cohen's kappa of every pair of reviewers over the items both labelled (any
        role), pairs in name order."""
        by_item: dict[str, dict[str, str]] = {}
        for row in self._db.execute("SELECT item_id, reviewer, label FROM review_labels"):
            by_item.setdefault(row[0], {})[row[1]] = row[2]
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

    # -- knowledge-base changes --------------------------------------------------------

    def record_kb_change(self, change: KBChange) -> KBChange:
        """Record a document added to the KB from a review; returns it with its id."""
        try:
            change_id = self._db.insert_id(
                "INSERT INTO kb_changes (item_id, label_id, doc_id, kb_path, reviewer, text,"
                " source_url, created_at, reverted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (change.item_id, change.label_id, change.doc_id, change.kb_path,
                 change.reviewer, change.text, change.source_url, _stamp(change.created_at),
                 _stamp(change.reverted_at) if change.reverted_at else None))
        except self._db.IntegrityError as exc:
            raise InputError(f"cannot record the KB change of item {change.item_id} "
                             f"(label {change.label_id}): {exc}") from None
        return self.kb_change(change_id)

    def kb_change(self, change_id: int) -> KBChange:
        row = self._db.execute(f"SELECT {_CHANGE_COLUMNS} FROM kb_changes WHERE id = ?",
                               (change_id,)).fetchone()
        if row is None:
            raise KBChangeNotFound(f"no KB change {change_id}")
        return _change_row(row)

    def kb_changes(self, include_reverted: bool = False,
                   item_id: str | None = None) -> list[KBChange]:
        """KB changes, oldest first: those in force (``include_reverted``: all of them), of
        one item if given."""
        where, args = [], []
        if not include_reverted:
            where.append("reverted_at IS NULL")
        if item_id is not None:
            where.append("item_id = ?")
            args.append(item_id)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._db.execute(
            f"SELECT {_CHANGE_COLUMNS} FROM kb_changes{clause} ORDER BY id", args).fetchall()
        return [_change_row(row) for row in rows]

    def mark_reverted(self, change_id: int) -> KBChange:
        """Record a change as reverted (once: a reverted change keeps its first time)."""
        self._db.execute("UPDATE kb_changes SET reverted_at = ? WHERE id = ? AND"
                         " reverted_at IS NULL", (_stamp(), change_id))
        return self.kb_change(change_id)

    # -- what the loop report needs from the run store ----------------------------------

    def checked_claims(self) -> list[tuple[datetime, int]]:
        """(start, claims) of every recorded check run: the escalation rate's denominator."""
        rows = self._db.execute(
            "SELECT r.created_at, COUNT(c.claim_id) FROM runs r LEFT JOIN claims c"
            " ON c.run_id = r.id WHERE r.kind = 'check' GROUP BY r.id").fetchall()
        return [(datetime.fromisoformat(created), int(n)) for created, n in rows]


def _next(status: ReviewStatus, needed: int, earlier: list[ItemLabel],
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
