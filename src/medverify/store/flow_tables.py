"""The record tables of the run store that the flows save as JSON, one record a row:
``audits`` (citation audits), ``bench_replies`` (benchmark replies) and ``factchecks``
(fact-checked answers); their writers, and the one reader the flows' typed readers use
(``medverify.audit.store``, ``medverify.bench.store``, ``medverify.factcheck.store``).

:class:`FlowRecordTables` is a mixin of :class:`medverify.store.runs.RunStore`.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from medverify.connections import Database
from medverify.store.saved import AuditRecord, BenchReplyRecord, FactCheckRecord

R = TypeVar("R", bound=BaseModel)

Table = Literal["audits", "bench_replies", "factchecks"]
"""The tables of records a flow saves as JSON, one record a row."""

_TABLES: dict[str, tuple[str, str]] = {
    # table: (the record's JSON column, the reading order)
    "audits": ("audit", "position, answer_id"),
    "bench_replies": ("reply", "model, question_id"),
    "factchecks": ("report", "position"),
}

_AUDIT_COLUMNS = ("run_id", "answer_id", "position", "audit", "n_claims", "error")
_BENCH_COLUMNS = ("run_id", "model", "question_id", "status", "reply", "created_at")
_FACTCHECK_COLUMNS = ("run_id", "position", "answer_id", "report", "n_facts", "error")


class FlowRecordTables:
    """The flows' record tables: writers and reader (a mixin: ``_db``, ``_readable`` and
    ``get_run`` are the store's)."""

    _db: Database
    _readable: Any  # () -> a context in which a damaged record is a MedverifyError
    get_run: Any  # (run_id) -> RunInfo

    def save_audit(self, run_id: str, position: int, audit: AuditRecord) -> None:
        """Record one audited answer (citation audit) of run ``run_id``."""
        self._db.execute(
            self._db.upsert_sql("audits", _AUDIT_COLUMNS, ("run_id", "answer_id")),
            (
                run_id,
                audit.answer.id,
                position,
                audit.model_dump_json(),
                len(audit.claims),
                "; ".join(audit.errors) or None,
            ),
        )

    def save_bench_reply(self, run_id: str, reply: BenchReplyRecord) -> None:
        """Record one model's reply to one question of benchmark run ``run_id`` (a redone
        reply replaces the earlier one)."""
        self._db.execute(
            self._db.upsert_sql("bench_replies", _BENCH_COLUMNS,
                                ("run_id", "model", "question_id")),
            (
                run_id,
                reply.model,
                reply.question_id,
                reply.status.value,
                reply.model_dump_json(),
                reply.created_at.isoformat(timespec="seconds"),
            ),
        )

    def save_factcheck(
        self, run_id: str, position: int, answer_id: str, report: FactCheckRecord
    ) -> None:
        """Record one fact-checked answer of run ``run_id`` (a redone one replaces it)."""
        self._db.execute(
            self._db.upsert_sql("factchecks", _FACTCHECK_COLUMNS, ("run_id", "position")),
            (
                run_id,
                position,
                answer_id,
                report.model_dump_json(),
                len(report.facts),
                "; ".join(report.errors) or None,
            ),
        )

    def records(self, run_id: str, table: Table, record: type[R]) -> list[R]:
        """The records a flow saved in ``table`` for run ``run_id`` (a unique id prefix is
        enough), read back as ``record``: audits in input order, bench replies by model and
        question id, fact-checks in input order. The flows have typed readers:
        ``medverify.audit.store.audits``, ``medverify.bench.store.bench_replies``,
        ``medverify.factcheck.store.factchecks``."""
        if table not in _TABLES:
            raise ValueError(f"no record table {table!r}; one of {', '.join(_TABLES)}")
        column, order = _TABLES[table]
        info = self.get_run(run_id)
        rows = self._db.execute(
            f"SELECT {column} FROM {table} WHERE run_id = ? ORDER BY {order}", (info.id,)
        ).fetchall()
        with self._readable():
            return [record.model_validate_json(row[0]) for row in rows]
