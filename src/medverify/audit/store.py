"""The audit's records in the run store (table ``audits``, migration 0002)."""

from __future__ import annotations

from medverify.audit.records import AnswerAudit
from medverify.store.runs import RunStore


def audits(store: RunStore, run_id: str) -> list[AnswerAudit]:
    """The audited answers of an audit run, in input order (a unique id prefix is enough);
    the audit summary is recomputable from them without a model call."""
    return store.records(run_id, "audits", AnswerAudit)
