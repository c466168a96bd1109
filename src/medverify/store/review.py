"""The clinician review queue in the run store: the SQL of items, labels and
knowledge-base changes (the records and rules are :mod:`medverify.review`).

:class:`ReviewStore` keeps the queue in the tables of migration 0009 (``review_items``,
``review_labels``, ``kb_changes``). An item's id is derived from run id, answer id and
claim id (:func:`~medverify.review.workflow.review_item_id`), so adding the same
escalations twice adds nothing.

Labelling (:meth:`ReviewStore.label`) is one ``BEGIN IMMEDIATE`` transaction: when
reviewers label at once, in any process, each slot is taken by exactly one of them and a
refused label writes nothing; the status the label moves the item to is
:func:`~medverify.review.workflow.next_status`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from medverify.errors import InputError
from medverify.review.records import (
    AlreadyLabelled,
    ItemClosed,
    ItemLabel,
    ItemNotFound,
    ItemSummary,
    KBChange,
    KBChangeNotFound,
    LabelRole,
    PairAgreement,
    ReviewItem,
    ReviewLabel,
    ReviewStatus,
)
from medverify.review.settled import SettledRow, claim_key
from medverify.review.workflow import checked_label, pair_agreements
from medverify.review.workflow import next_status as _next  # module-level: tests patch it
from medverify.store.runs import RunStore
from medverify.store.sql_bounds import SQL_INT_MAX, sql_bound


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
                "status", "assignee", "labels_needed", "created_at", "item", "claim_key",
                "kb_lineage")
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
        """Add items to the queue; an item whose id is there already is left as it is, and
        so is one whose claim (normalised text) already waits for review in the same KB
        lineage (the same claim is never reviewed twice at once). Returns how many were
        added.

        When every item's claim already waits (the service's repeated claims), nothing is
        written and no write lock is taken: that read is as if the add ran at its moment,
        when each would have been left as it is. Otherwise the checks and inserts run
        again under the write lock."""
        items = list(items)
        for item in items:
            if item.labels_needed not in (1, 2):
                raise InputError(f"labels_needed is 1 or 2, not {item.labels_needed}")
        if items and not self._db.in_transaction and all(map(self._waiting, items)):
            return 0  # each already waits: no write lock (see the docstring)
        added = 0
        with self.runs.immediate():
            for item in items:
                if self._waiting(item):
                    continue
                body = item.model_dump_json(exclude=_STATE_FIELDS)
                cursor = self._db.execute(
                    self._db.insert_ignore_sql("review_items", _ITEM_INSERT),
                    (item.id, item.run_id, item.answer_id, item.claim.id, item.topic,
                     item.category, item.priority, ReviewStatus.OPEN.value, None,
                     item.labels_needed, _stamp(item.created_at), body,
                     claim_key(item.claim.text), item.kb_lineage))
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
            (*args, sql_bound(limit), sql_bound(offset))).fetchall()
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

    def _waiting(self, item: ReviewItem) -> bool:
        """Whether another item with the same claim text and KB lineage is not closed."""
        if item.kb_lineage is None:
            return False
        return self._db.execute(
            "SELECT 1 FROM review_items WHERE kb_lineage = ? AND claim_key = ? AND status != ?"
            " AND id != ? LIMIT 1", (item.kb_lineage, claim_key(item.claim.text),
                                     ReviewStatus.CLOSED.value, item.id)).fetchone() is not None

    def settled(self, kb_lineage: str, since: datetime | None = None) -> list[SettledRow]:
        """The closed items of one KB lineage as matching needs them (normalised claim text,
        final label, closing time; :mod:`medverify.review.settled`), those closed at or
        after ``since`` when given; an item whose KB change was reverted settles nothing."""
        after = " AND closed_at >= ?" if since is not None else ""  # (ids dedupe ties)
        args = (kb_lineage, ReviewStatus.CLOSED.value) + ((_stamp(since),) if since else ())
        rows = self._db.execute(
            "SELECT id, claim_key, final_label, closed_at FROM review_items"
            " WHERE kb_lineage = ? AND status = ? AND claim_key IS NOT NULL" + after +
            " AND id NOT IN (SELECT item_id FROM kb_changes WHERE reverted_at IS NOT NULL)",
            args).fetchall()
        return [SettledRow(item_id=r[0], claim_key=r[1], label=ReviewLabel(r[2]),
                           closed_at=_when(r[3]) or datetime.min.replace(tzinfo=UTC))
                for r in rows if r[2]]

    def settled_version(self, kb_lineage: str) -> tuple[object, ...]:
        """(items closed in the lineage, the last closing time, KB changes reverted):
        changes whenever what :meth:`settled` returns can change."""
        closed, last = self._db.execute(
            "SELECT COUNT(*), MAX(closed_at) FROM review_items WHERE kb_lineage = ? AND"
            " status = ?", (kb_lineage, ReviewStatus.CLOSED.value)).fetchone()
        reverted = self._db.execute(
            "SELECT COUNT(*) FROM kb_changes WHERE reverted_at IS NOT NULL").fetchone()[0]
        return int(closed), last, int(reverted)

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

    def oldest_waiting(self) -> datetime | None:
        """When the item waiting longest for review (any status but closed) was added."""
        row = self._db.execute("SELECT MIN(created_at) FROM review_items WHERE status <> ?",
                               (ReviewStatus.CLOSED.value,)).fetchone()
        return _when(row[0])

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
        checked = checked_label(item_id, reviewer, label, correction, source_url,
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
        return pair_agreements(by_item)

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
        if not 0 < change_id <= SQL_INT_MAX:  # no such row, and out of SQLite's range
            raise KBChangeNotFound(f"no KB change {change_id}")
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
        self.kb_change(change_id)  # KBChangeNotFound, before any write
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

