"""Drift of the verdicts: how often each category, decision and "not sure" is given, day by
day, against a baseline of the days before (docs/operations.md, "Drift").

Input: the claims of the check runs in the run store (:meth:`RunStore.outcomes
<medverify.store.runs.RunStore.outcomes>`), by the hour their run started (UTC). For each
period (a calendar day, or the service's live window: the last ``[ops] window_hours``) and
each rate of :data:`~medverify.config.DRIFT_RATES`: ``k`` of ``n`` claims, the share and its
95 % Wilson interval; the baseline is the pooled share of the ``[ops] baseline_days`` days
before the period. A rate with a margin in ``[ops] margins`` is *drifted* in a period when

* the period and its baseline each hold at least ``[ops] min_claims`` claims, and
* margin >= 0: the share is above baseline + margin and the interval's lower end is above
  the baseline (the rise is not noise); margin < 0: the share is below baseline + margin
  (that is, below by more than |margin|) and the interval's upper end is below the baseline.

Every claim counts once in its category's rate, once in its decision's (when arbitration
ran) and in NOT_SURE when its verdict is shown as not sure; each rate's denominator is every
claim of the period.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from medverify.config import DRIFT_RATES, OpsSettings
from medverify.errors import InputError
from medverify.evals.confidence import wilson
from medverify.records import Category, Decision
from medverify.store.outcomes import OutcomeCount
from medverify.store.runs import RunStore

assert set(DRIFT_RATES) == {*Category, *Decision, "NOT_SURE"}, "DRIFT_RATES is out of date"

_HOURS = re.compile(r"^(\d+)\s*([hdw])$")
_UNIT_H = {"h": 1, "d": 24, "w": 24 * 7}


class RateNow(BaseModel):
    """One rate in one period, with its baseline and whether it drifted."""

    model_config = ConfigDict(extra="forbid")

    k: int
    n: int
    share: float | None  # k / n (None without claims)
    low: float | None  # the share's 95 % Wilson interval
    high: float | None
    baseline: float | None  # the pooled share of the baseline days (None without claims)
    baseline_n: int
    margin: float | None  # [ops] margins of this rate (None: not watched)
    drifted: bool


class Period(BaseModel):
    """One day (or the live window) of the drift report."""

    model_config = ConfigDict(extra="forbid")

    label: str  # "2025-05-01", or "last 24 h"
    start: datetime
    end: datetime
    claims: int
    rates: dict[str, RateNow]
    drifted: list[str] = Field(default_factory=list)  # the rates that drifted


class DriftReport(BaseModel):
    """The days from ``since`` to ``until``, oldest first, and the settings that judged them."""

    model_config = ConfigDict(extra="forbid")

    since: datetime
    until: datetime
    baseline_days: int
    min_claims: int
    margins: dict[str, float]
    days: list[Period]


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``7d``, ``36h``, ``2w`` (that long before ``now``) or a date ``2025-05-01`` (its start,
    UTC) as a time."""
    now = now or datetime.now(UTC)
    found = _HOURS.match(text.strip().lower())
    if found:
        return now - timedelta(hours=int(found.group(1)) * _UNIT_H[found.group(2)])
    try:
        day = date.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"--since {text!r}: give a span (7d, 36h, 2w) or a date "
                         "(2025-05-01)") from None
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def drift_report(store: RunStore, settings: OpsSettings, since: datetime,
                 until: datetime | None = None) -> DriftReport:
    """Every calendar day (UTC) from ``since``'s to ``until``'s (default now), each judged
    against its baseline days."""
    until = until or datetime.now(UTC)
    first = _day_start(since)
    counts = _hourly(store.outcomes(first - timedelta(days=settings.baseline_days), until))
    days = []
    start = first
    while start < until:
        end = min(start + timedelta(days=1), until)
        days.append(_period(start.date().isoformat(), start, end, counts, settings))
        start += timedelta(days=1)
    return DriftReport(since=first, until=until, baseline_days=settings.baseline_days,
                       min_claims=settings.min_claims, margins=settings.margins, days=days)


def live_window(store: RunStore, settings: OpsSettings, now: datetime | None = None) -> Period:
    """The last ``[ops] window_hours`` (whole hours, the current one included) against the
    ``baseline_days`` before them: what the service's drift gauges show."""
    now = now or datetime.now(UTC)
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(
        hours=settings.window_hours - 1)
    end = now + timedelta(seconds=1)  # runs started this second count
    counts = _hourly(store.outcomes(start - timedelta(days=settings.baseline_days), end))
    return _period(f"last {settings.window_hours} h", start, end, counts, settings)


def _day_start(when: datetime) -> datetime:
    when = when.astimezone(UTC)
    return datetime(when.year, when.month, when.day, tzinfo=UTC)


def _hourly(rows: Iterable[OutcomeCount]) -> dict[datetime, Counter[str]]:
    """Per hour: claims (``n``) and the claims of each rate."""
    hours: dict[datetime, Counter[str]] = {}
    for row in rows:
        hour = datetime.fromisoformat(row.hour + ":00:00+00:00")
        counter = hours.setdefault(hour, Counter())
        counter["n"] += row.n
        counter[row.category] += row.n
        if row.decision is not None:
            counter[row.decision] += row.n
        if row.confident is False:
            counter["NOT_SURE"] += row.n
    return hours


def _sum(hours: dict[datetime, Counter[str]], start: datetime, end: datetime) -> Counter[str]:
    total: Counter[str] = Counter()
    for hour, counter in hours.items():
        if start <= hour < end:
            total.update(counter)
    return total


def _period(label: str, start: datetime, end: datetime, hours: dict[datetime, Counter[str]],
            settings: OpsSettings) -> Period:
    now = _sum(hours, start, end)
    base = _sum(hours, start - timedelta(days=settings.baseline_days), start)
    rates = {name: _rate(now[name], now["n"], base[name], base["n"],
                         settings.margins.get(name), settings.min_claims)
             for name in DRIFT_RATES}
    return Period(label=label, start=start, end=end, claims=now["n"], rates=rates,
                  drifted=[name for name, rate in rates.items() if rate.drifted])


def _rate(k: int, n: int, base_k: int, base_n: int, margin: float | None,
          min_claims: int) -> RateNow:
    interval = wilson(k, n)
    low, high = interval if interval is not None else (None, None)
    share = k / n if n else None
    baseline = base_k / base_n if base_n else None
    return RateNow(k=k, n=n, share=share, low=low, high=high, baseline=baseline,
                   baseline_n=base_n, margin=margin,
                   drifted=drifted(share, low, high, baseline, margin,
                                   enough=n >= min_claims and base_n >= min_claims))


def drifted(share: float | None, low: float | None, high: float | None,
            baseline: float | None, margin: float | None, *, enough: bool) -> bool:
    """The rule of the module's docstring."""
    if margin is None or not enough or None in (share, low, high, baseline):
        return False
    assert share is not None and low is not None and high is not None and baseline is not None
    if margin >= 0:
        return share > baseline + margin and low > baseline
    return share < baseline + margin and high < baseline
