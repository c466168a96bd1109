"""The ``answers`` and ``claims`` tables of the run store: a check run's answers, each
with its claim results (claim, passages, verdict, arbitration, outcome columns) and stage
notes, written in one transaction, and read back as :class:`~medverify.records.Report`
objects whose metrics are recomputed.

:class:`AnswerTables` is a mixin of :class:`medverify.store.runs.RunStore`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from medverify.connections import Database
from medverify.records import Answer, Arbitration, Claim, ClaimResult, Passage, Report, Verdict
from medverify.report.metrics import compute_metrics
from medverify.store.outcomes import outcome_columns
from medverify.store.run_table import RunInfo

_PASSAGES = TypeAdapter(list[Passage])
_ANSWER_COLUMNS = ("run_id", "position", "answer_id", "answer", "status", "error", "notes")


class AnswerTables:
    """The answers and claims tables' writer and readers (a mixin: ``_db``,
    ``_transaction``, ``_readable`` and ``get_run`` are the store's)."""

    _db: Database
    _readable: Any  # () -> a context in which a damaged record is a MedverifyError
    _transaction: Any  # () -> one transaction (inside a caller's: that one)
    get_run: Any  # (run_id) -> RunInfo

    def save_answer(
        self,
        run_id: str,
        position: int,
        answer: Answer,
        results: Sequence[ClaimResult],
        error: str | None = None,
        *,
        notes: dict[str, Any] | None = None,
    ) -> None:
        """Record one answer, its claim results and its stage notes in one transaction."""
        with self._transaction():
            self._db.execute(
                self._db.upsert_sql("answers", _ANSWER_COLUMNS, ("run_id", "position")),
                (
                    run_id,
                    position,
                    answer.id,
                    answer.model_dump_json(),
                    "error" if error else "done",
                    error,
                    json.dumps(notes or {}),
                ),
            )
            self._db.execute(
                "DELETE FROM claims WHERE run_id = ? AND position = ?", (run_id, position)
            )
            self._db.executemany(
                "INSERT INTO claims (run_id, position, claim_id, claim, passages, verdict, error,"
                " hallucination_risk, arbitration, category, decision, confident)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        run_id,
                        position,
                        r.claim.id,
                        r.claim.model_dump_json(),
                        _PASSAGES.dump_json(r.passages).decode(),
                        r.verdict.model_dump_json() if r.verdict else None,
                        r.error,
                        r.hallucination_risk,
                        r.arbitration.model_dump_json() if r.arbitration else None,
                        *outcome_columns(r),
                    )
                    for r in results
                ],
            )

    def reports(self, run_id: str) -> list[Report]:
        """Rebuild every report of a run from stored records; metrics are recomputed."""
        info = self.get_run(run_id)
        with self._readable():
            return list(self._reports(info))

    def _reports(self, info: RunInfo) -> Iterator[Report]:
        answers = self._db.execute(
            "SELECT position, answer, error, notes FROM answers WHERE run_id = ?"
            " ORDER BY position",
            (info.id,),
        ).fetchall()
        for position, answer_json, error, notes in answers:
            results = self._results(info.id, position)
            yield Report(
                answer=Answer.model_validate_json(answer_json),
                results=results,
                metrics=compute_metrics(results),
                run_id=info.id,
                config=info.config,
                models=info.models,
                prompt_versions=info.prompt_versions,
                kb_snapshot=info.kb_snapshot,
                kb_lineage=info.kb_lineage,
                usage=info.usage,
                errors=[error] if error else [],
                notes=json.loads(notes),
                created_at=datetime.fromisoformat(info.created_at),
            )

    def _results(self, run_id: str, position: int) -> list[ClaimResult]:
        rows = self._db.execute(
            "SELECT claim, passages, verdict, error, hallucination_risk, arbitration FROM claims"
            " WHERE run_id = ? AND position = ? ORDER BY rowid",
            (run_id, position),
        ).fetchall()
        results = []
        for claim_json, passages_json, verdict_json, error, risk, arbitration in rows:
            claim = Claim.model_validate_json(claim_json)
            passages = _PASSAGES.validate_json(passages_json)
            if verdict_json is None:
                result = ClaimResult.failed(claim, error or "not judged", passages)
            else:
                verdict = Verdict.model_validate_json(verdict_json)
                result = ClaimResult.from_verdict(claim, passages, verdict)
            # risk and decision: NULL for claims recorded before version 8
            result.hallucination_risk = risk
            if arbitration is not None:  # a reviewed decision also sets the category
                result = result.decided(Arbitration.model_validate_json(arbitration))
            results.append(result)
        return results
