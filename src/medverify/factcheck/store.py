"""The fact-checks in the run store (table ``factchecks``, migration 0005)."""

from __future__ import annotations

from medverify.factcheck.records import FactCheckReport
from medverify.store.runs import RunStore


def factchecks(store: RunStore, run_id: str) -> list[FactCheckReport]:
    """The fact-check reports of a factcheck run, in input order (a unique id prefix is
    enough)."""
    return store.records(run_id, "factchecks", FactCheckReport)
