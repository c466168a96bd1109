"""The loop report: per day, week or month, the claims checked and escalated, labels given,
items closed, how often the final label agreed with the judge, and the KB documents added
and reverted (:class:`~medverify.review.records.LoopReport`)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from medverify.errors import InputError
from medverify.records import utcnow
from medverify.review.records import LoopPeriod, LoopReport, Period, ReviewLabel
from medverify.review.workflow import ReviewLedger


def period_of(when: datetime, by: Period) -> tuple[str, date]:
    """(name, first day) of the period holding ``when`` (UTC)."""
    day = when.astimezone(UTC).date()
    if by == "day":
        return day.isoformat(), day
    if by == "month":
        return f"{day:%Y-%m}", day.replace(day=1)
    year, week, weekday = day.isocalendar()
    return f"{year}-W{week:02d}", day - timedelta(days=weekday - 1)


def loop_report(store: ReviewLedger, *, by: Period = "week") -> LoopReport:
    """The loop report of the review queue in ``store`` (see :class:`LoopPeriod`)."""
    if by not in ("day", "week", "month"):
        raise InputError(f"by is day, week or month, not {by!r}")
    periods: dict[str, LoopPeriod] = {}
    agree: dict[str, list[bool]] = {}

    def at(when: datetime) -> LoopPeriod:
        name, start = period_of(when, by)
        if name not in periods:
            periods[name] = LoopPeriod(period=name, start=start)
        return periods[name]

    for started, n in store.checked_claims():
        at(started).claims_checked += n
    escalated_in_runs: dict[str, int] = {}
    for item in store.summaries():
        at(item.created_at).escalated += 1
        if item.run_id is not None:
            name = period_of(item.created_at, by)[0]
            escalated_in_runs[name] = escalated_in_runs.get(name, 0) + 1
        if item.closed_at is not None:
            at(item.closed_at).items_closed += 1
            if item.final_label not in (None, ReviewLabel.CANNOT_TELL):
                name = period_of(item.closed_at, by)[0]
                agree.setdefault(name, []).append(item.final_label == item.category)
    for label in store.labels():
        at(label.created_at).labels += 1
    for change in store.kb_changes(include_reverted=True):
        at(change.created_at).kb_added += 1
        if change.reverted_at is not None:
            at(change.reverted_at).kb_reverted += 1
    ordered = [periods[k] for k in sorted(periods, key=lambda k: (periods[k].start, k))]
    for p in ordered:
        p.escalation_rate = _share(escalated_in_runs.get(p.period, 0), p.claims_checked)
        p.judge_agreement = _mean(agree.get(p.period, []))
    total = LoopPeriod(period="all", start=ordered[0].start if ordered else utcnow().date())
    for field in ("claims_checked", "escalated", "labels", "items_closed", "kb_added",
                  "kb_reverted"):
        setattr(total, field, sum(getattr(p, field) for p in ordered))
    total.escalation_rate = _share(sum(escalated_in_runs.values()), total.claims_checked)
    total.judge_agreement = _mean([x for v in agree.values() for x in v])
    return LoopReport(by=by, periods=ordered, total=total, queue=store.counts())


def _share(part: int, whole: int) -> float | None:
    return min(1.0, part / whole) if whole else None


def _mean(values: list[bool]) -> float | None:
    return sum(values) / len(values) if values else None
