"""Claims' outcomes counted by the hour: what the drift report and the service's drift gauges
read (:mod:`medverify.ops.drift`).

Since version 12 of the run store each claim row holds its outcome as plain columns
(:func:`outcome_columns`: final category, arbitration decision, confident or not), so the
counts are one grouped query. Claims recorded before have NULL there; theirs are rebuilt
from the stored JSON exactly as a report is (:meth:`ClaimResult.from_verdict
<medverify.records.ClaimResult.from_verdict>`, ``.decided``), one row at a time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import NamedTuple

from medverify.connections import Database
from medverify.records import Arbitration, Claim, ClaimResult, Verdict


class OutcomeCount(NamedTuple):
    """Claims of check runs started in one hour with one outcome."""

    hour: str  # "YYYY-MM-DDTHH" (UTC) of the run's start
    category: str  # the final category (a reviewed claim: the reviewer's label)
    decision: str | None  # ACCEPT, FLAG, ESCALATE; None: arbitration did not run
    confident: bool | None  # the verdict is confident (sure); None: not assessed
    n: int


def outcome_columns(result: ClaimResult) -> tuple[str, str | None, int | None]:
    """A claim's ``category``, ``decision`` and ``confident`` columns."""
    decision = result.arbitration.decision.value if result.arbitration else None
    confident = None if result.confident is None else int(result.confident)
    return result.category.value, decision, confident


def stamp(when: datetime) -> str:
    """``when`` as runs record their start (ISO-8601 UTC, seconds), to compare as text."""
    return when.astimezone(UTC).isoformat(timespec="seconds")


_WHERE = ("FROM claims c JOIN runs r ON r.id = c.run_id WHERE r.kind = 'check'"
          " AND r.created_at >= ? AND r.created_at < ?")


def count_outcomes(db: Database, since: datetime, until: datetime) -> list[OutcomeCount]:
    """The claims of the check runs started in ``[since, until)``, counted by hour and
    outcome (hours without claims are absent)."""
    bounds = (stamp(since), stamp(until))
    rows = db.execute(
        "SELECT substr(r.created_at, 1, 13), c.category, c.decision, c.confident, COUNT(*) "
        f"{_WHERE} AND c.category IS NOT NULL GROUP BY 1, 2, 3, 4", bounds).fetchall()
    counts = [OutcomeCount(hour, category, decision,
                           None if confident is None else bool(confident), int(n))
              for hour, category, decision, confident, n in rows]
    legacy = db.execute(
        f"SELECT substr(r.created_at, 1, 13), c.claim, c.verdict, c.error, c.arbitration "
        f"{_WHERE} AND c.category IS NULL", bounds).fetchall()
    for hour, claim, verdict, error, arbitration in legacy:
        category, decision, confident = outcome_columns(
            _rebuilt(claim, verdict, error, arbitration))
        counts.append(OutcomeCount(hour, category, decision,
                                   None if confident is None else bool(confident), 1))
    return counts


def _rebuilt(claim_json: str, verdict_json: str | None, error: str | None,
             arbitration_json: str | None) -> ClaimResult:
    """A claim recorded before version 12, as a rebuilt report has it."""
    claim = Claim.model_validate_json(claim_json)
    if verdict_json is None:
        result = ClaimResult.failed(claim, error or "not judged")
    else:
        result = ClaimResult.from_verdict(claim, [], Verdict.model_validate_json(verdict_json))
    if arbitration_json is not None:
        result = result.decided(Arbitration.model_validate_json(arbitration_json))
    return result
