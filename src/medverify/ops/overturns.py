"""How often clinicians overturn sure verdicts: per ISO week and per judge, from the run
store's closed review items (docs/operations.md, "Sure verdicts overturned").

An item counts when it is closed with a final label other than CANNOT_TELL and the verdict
that escalated it was shown as sure (its arbitration inputs' ``confident`` is true: 1.0 in
items stored before issue 43). It is *kept* when the label equals the judge's category and
*overturned* otherwise; precision = kept / labelled, with its 95 % Wilson interval. Spot
checks (rule ``audit``) are counted apart as well: they are the one unbiased sample of the
sure verdicts that would have been accepted (the others were escalated for a reason).

The judge is the one whose verdict the item carries: the re-check judge when the claim was
re-checked, otherwise the ``judge`` of the verdict the run stored for the claim (the item's
run, answer and claim ids lead to it); ``unknown`` when neither is recorded (a run deleted).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from medverify.arbitration import AUDIT_RULE
from medverify.config import OpsSettings
from medverify.review.records import ReviewLabel, ReviewStatus
from medverify.stats import wilson
from medverify.store.runs import RunStore

WINDOW_DAYS = 28
"""The recent window of the gauges, the alert and the report's per-judge totals: four weeks,
long enough to gather ``[ops] min_claims`` labels at a 2 % spot-check share."""

UNKNOWN_JUDGE = "unknown"
"""The judge of an item whose run no longer records the verdict."""


class SureLabel(BaseModel):
    """One closed review item of a sure verdict: who judged it and what the clinician said."""

    model_config = ConfigDict(extra="forbid")

    item_id: str
    closed_at: datetime
    judge: str
    category: str  # the judge's category
    label: str  # the clinician's final label
    audit: bool  # escalated by the spot check (rule audit)

    @property
    def overturned(self) -> bool:
        return self.label != self.category


class SureCount(BaseModel):
    """Sure verdicts of one judge labelled in one period, and how many were overturned."""

    model_config = ConfigDict(extra="forbid")

    period: str  # an ISO week ("2026-W49"), or "last 28 d"
    judge: str
    labelled: int
    overturned: int
    precision: float | None  # kept / labelled (None: nothing labelled)
    low: float | None  # its 95 % Wilson interval
    high: float | None
    audited: int  # of the labelled, spot checks (rule audit)
    audited_overturned: int


class SureReport(BaseModel):
    """The ``ops report`` section: per week and judge, and per judge over the last
    :data:`WINDOW_DAYS`, judged against ``[ops] sure_precision_target``."""

    model_config = ConfigDict(extra="forbid")

    target: float
    min_labelled: int
    weeks: list[SureCount]
    recent: list[SureCount]
    below_target: list[str]  # the judges below target over the recent window


def below_target(found: SureCount, settings: OpsSettings) -> bool:
    """Whether a judge's sure verdicts were kept less often than the target, on at least
    ``[ops] min_claims`` labels."""
    return (found.labelled >= settings.min_claims and found.precision is not None
            and found.precision < settings.sure_precision_target)


def sure_report(store: RunStore, settings: OpsSettings, since: datetime,
                now: datetime | None = None) -> SureReport:
    """The weeks of the items closed since ``since`` (from the start of its ISO week) and
    the recent window, each per judge."""
    now = now or datetime.now(UTC)
    start = since - timedelta(days=since.astimezone(UTC).weekday())
    start = start.replace(hour=0, minute=0, second=0, microsecond=0)
    weeks = weekly(sure_labels(store, start, now))
    window = recent_window(store, WINDOW_DAYS, now)
    return SureReport(target=settings.sure_precision_target, min_labelled=settings.min_claims,
                      weeks=weeks, recent=window,
                      below_target=[c.judge for c in window if below_target(c, settings)])


def sure_labels(store: RunStore, since: datetime, until: datetime | None = None,
                ) -> list[SureLabel]:
    """The closed review items of sure verdicts closed in ``[since, until)`` (until: now),
    CANNOT_TELL left out, oldest first."""
    until = until or datetime.now(UTC)
    db = store._db  # a reader of the run store, as ReviewStore is
    rows = db.execute(
        "SELECT ri.id, ri.closed_at, ri.category, ri.final_label, ri.item, c.verdict"
        " FROM review_items ri"
        " LEFT JOIN answers a ON a.run_id = ri.run_id AND a.answer_id = ri.answer_id"
        " LEFT JOIN claims c ON c.run_id = a.run_id AND c.position = a.position"
        " AND c.claim_id = ri.claim_id"
        " WHERE ri.status = ? AND ri.closed_at >= ? AND ri.closed_at < ?"
        " ORDER BY ri.closed_at, ri.id",
        (ReviewStatus.CLOSED.value, _stamp(since), _stamp(until))).fetchall()
    out: dict[str, SureLabel] = {}
    for item_id, closed_at, category, label, body, verdict in rows:
        if item_id in out or not label or label == ReviewLabel.CANNOT_TELL.value:
            continue
        found = _sure(item_id, closed_at, category, label, body, verdict)
        if found is not None:
            out[item_id] = found
    return list(out.values())


def _stamp(when: datetime) -> str:
    """As the review store records times (fixed-width ISO-8601 UTC), to compare as text."""
    return when.astimezone(UTC).isoformat(timespec="microseconds")


def _sure(item_id: str, closed_at: str, category: str, label: str, body: str,
          verdict: str | None) -> SureLabel | None:
    """The row as a :class:`SureLabel`, or None when its verdict was not shown as sure."""
    arbitration: dict[str, Any] = json.loads(body).get("arbitration") or {}
    flag = (arbitration.get("inputs") or {}).get("confident")
    if not isinstance(flag, bool | int | float) or not flag:
        return None
    return SureLabel(item_id=item_id, closed_at=datetime.fromisoformat(closed_at),
                     judge=_judge(arbitration, verdict), category=category, label=label,
                     audit=arbitration.get("rule") == AUDIT_RULE)


def _judge(arbitration: dict[str, Any], verdict: str | None) -> str:
    recheck = arbitration.get("recheck") or {}
    if recheck.get("judge") and not recheck.get("error"):
        return str(recheck["judge"])
    judge = json.loads(verdict).get("judge") if verdict else None
    return str(judge) if judge else UNKNOWN_JUDGE


def iso_week(when: datetime) -> str:
    """``when``'s ISO week (UTC), e.g. ``2026-W49``."""
    year, week, _ = when.astimezone(UTC).isocalendar()
    return f"{year}-W{week:02d}"


def count(period: str, judge: str, labels: Iterable[SureLabel]) -> SureCount:
    """The counts, precision and interval of ``labels`` (one judge, one period)."""
    rows = list(labels)
    overturned = sum(r.overturned for r in rows)
    interval = wilson(len(rows) - overturned, len(rows))
    audits = [r for r in rows if r.audit]
    return SureCount(
        period=period, judge=judge, labelled=len(rows), overturned=overturned,
        precision=(len(rows) - overturned) / len(rows) if rows else None,
        low=interval[0] if interval else None, high=interval[1] if interval else None,
        audited=len(audits), audited_overturned=sum(r.overturned for r in audits))


def weekly(labels: Iterable[SureLabel]) -> list[SureCount]:
    """Per ISO week (oldest first) and judge (by name)."""
    groups: dict[tuple[str, str], list[SureLabel]] = defaultdict(list)
    for row in labels:
        groups[(iso_week(row.closed_at), row.judge)].append(row)
    return [count(week, judge, rows) for (week, judge), rows in sorted(groups.items())]


def recent(labels: Iterable[SureLabel], days: int) -> list[SureCount]:
    """Per judge, pooled over the whole span (``labels`` of the last ``days`` days)."""
    groups: dict[str, list[SureLabel]] = defaultdict(list)
    for row in labels:
        groups[row.judge].append(row)
    return [count(f"last {days} d", judge, rows) for judge, rows in sorted(groups.items())]


def recent_window(store: RunStore, days: int, now: datetime | None = None) -> list[SureCount]:
    """Per judge over the last ``days`` days: what the ``medverify_sure_verdict*`` gauges
    show."""
    now = now or datetime.now(UTC)
    return recent(sure_labels(store, now - timedelta(days=days), now), days)
