"""The run store: every run recorded with its config, model ids, prompt versions, KB
snapshot, records, raw outputs and token counts, so that reports and metrics can be
recomputed without calling a model.

The store is a SQLite file (the default) or a PostgreSQL database shared by several
processes or machines, named by a URL (``postgresql://...``;
``medverify.connections`` adapts the few SQL differences, so both run the same
queries and migrations). Schema changes are forward migrations in
``store/migrations/NNNN_name.sql``, applied in order and tracked with
``PRAGMA user_version`` (PostgreSQL: the table ``medverify_schema``). One connection per
store; the pipeline writes from one task (one writer per connection).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter

from medverify.connections import (
    Database,
    Dialect,
    PostgresDatabase,
    SqliteDatabase,
    StoreUnavailable,
    dialect_of,
    display,
    sqlite_path,
)
from medverify.errors import MedverifyError
from medverify.records import (
    Answer,
    Arbitration,
    Claim,
    ClaimResult,
    Passage,
    Report,
    Usage,
    Verdict,
    package_version,
)
from medverify.report.metrics import compute_metrics
from medverify.store.context import current_request_id
from medverify.store.outcomes import OutcomeCount, count_outcomes, outcome_columns
from medverify.store.saved import AuditRecord, BenchReplyRecord, FactCheckRecord

_MIGRATION = re.compile(r"^(\d{4})_\w+\.sql$")
_PASSAGES = TypeAdapter(list[Passage])

R = TypeVar("R", bound=BaseModel)

Table = Literal["audits", "bench_replies", "factchecks"]
"""The tables of records a flow saves as JSON, one record a row."""

_TABLES: dict[str, tuple[str, str]] = {
    # table: (the record's JSON column, the reading order)
    "audits": ("audit", "position, answer_id"),
    "bench_replies": ("reply", "model, question_id"),
    "factchecks": ("report", "position"),
}


class RunInfo(BaseModel):
    """One row of ``medverify runs list``."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: str
    status: str
    created_at: str
    finished_at: str | None
    medverify_version: str
    config: dict[str, Any]
    models: dict[str, str]
    prompt_versions: dict[str, str]
    kb_snapshot: str | None
    usage: dict[str, Usage]
    error: str | None
    n_answers: int = 0
    n_claims: int = 0
    process: str | None = None  # "host:pid" that ran it (runs recorded since version 7)
    process_gone: bool = False  # running, but its process on this host is gone (killed)
    kb_lineage: str | None = None  # the KB's identity across ingests (since version 11)
    request_id: str | None = None  # the service request it was made for (since version 12)


_RUN_COLUMNS = ("r.id, r.kind, r.status, r.created_at, r.finished_at, r.medverify_version, "
                "r.config, r.models, r.prompt_versions, r.kb_snapshot, r.usage, r.error, "
                "r.process, r.kb_lineage, r.request_id")


_ANSWER_COLUMNS = ("run_id", "position", "answer_id", "answer", "status", "error", "notes")
_AUDIT_COLUMNS = ("run_id", "answer_id", "position", "audit", "n_claims", "error")
_BENCH_COLUMNS = ("run_id", "model", "question_id", "status", "reply", "created_at")
_FACTCHECK_COLUMNS = ("run_id", "position", "answer_id", "report", "n_facts", "error")


def current_process() -> str:
    """This process as a run records it: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def process_gone(process: str | None) -> bool:
    """Whether ``host:pid`` names a process of this host that no longer exists (a process
    of another host cannot be checked: False)."""
    host, _, pid = (process or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def migrations() -> list[tuple[int, str]]:
    folder = resources.files("medverify.store") / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text("utf-8")))
    return sorted(found)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


SQL_INT_MAX = 2**62
"""The largest LIMIT or OFFSET the stores pass to the database: SQLite and PostgreSQL take
64-bit integers (a larger Python int overflows there), and no table holds 2**62 rows."""


def sql_bound(n: int | None) -> int:
    """``n`` as a LIMIT or OFFSET the database accepts: at least 0, at most
    :data:`SQL_INT_MAX` (None, "no limit": the maximum)."""
    return SQL_INT_MAX if n is None else min(max(0, int(n)), SQL_INT_MAX)


class RunStore:
    """The record of runs, in SQLite or PostgreSQL. Use as a context manager or call
    ``close()``.

    ``location`` is a path or a URL (``sqlite:///PATH``, ``postgresql://...``)."""

    def __init__(self, location: Path | str) -> None:
        try:
            dialect = dialect_of(location)
        except ValueError as exc:
            raise MedverifyError(str(exc)) from None
        self.location = display(location)
        self.path: Path | None = sqlite_path(location) if dialect == "sqlite" else None
        if self.path is not None:
            try:
                self._db: Database = SqliteDatabase(self.path, private=True)
                self._migrate()
            except sqlite3.DatabaseError as exc:
                raise MedverifyError(
                    f"cannot open run store {self.path}: {exc}; move it aside to start a new "
                    "one") from exc
            return
        self._db = PostgresDatabase(str(location))
        try:
            self._migrate()
        except StoreUnavailable:
            self._db.close()
            raise
        except self._db.Error as exc:
            self._db.close()
            raise MedverifyError(f"cannot open run store {self.location}: {exc}") from exc

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    @property
    def dialect(self) -> Dialect:
        return self._db.dialect

    @property
    def schema_version(self) -> int:
        return self._db.schema_version()

    def _migrate(self) -> None:
        """Apply the migrations this store lacks, each whole or not at all. Several
        processes may open a new or old store at once (the service's workers): each
        migration is applied once."""
        self._db.migrate(migrations())

    def _transaction(self) -> _Tx:
        return _Tx(self._db)

    @contextmanager
    def immediate(self) -> Iterator[None]:
        """A write transaction that takes the write lock at once, so that what it reads
        cannot change before it writes, in any process (inside a caller's transaction: that
        one). Anything raised inside rolls it back whole."""
        if self._db.in_transaction:
            yield
            return
        self._db.begin(immediate=True)
        try:
            yield
            self._db.commit()
        except BaseException:
            self._db.rollback()
            raise

    # -- writing -----------------------------------------------------------------------

    def start_run(
        self,
        *,
        kind: str,
        config: dict[str, Any],
        models: dict[str, str],
        prompt_versions: dict[str, str],
        kb_snapshot: str | None,
        kb_lineage: str | None = None,
    ) -> str:
        run_id = datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        self._db.execute(
            "INSERT INTO runs (id, kind, status, created_at, medverify_version, config, models,"
            " prompt_versions, kb_snapshot, process, kb_lineage, request_id) VALUES (?, ?,"
            " 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                run_id,
                kind,
                _now(),
                package_version(),
                json.dumps(config),
                json.dumps(models),
                json.dumps(prompt_versions),
                kb_snapshot,
                current_process(),
                kb_lineage,
                current_request_id(),
            ),
        )
        return run_id

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

    def interrupt_orphans(self) -> int:
        """Record the running runs whose process on this host is gone (killed) as
        interrupted; returns how many. The service calls it when it takes over the jobs of
        a dead worker."""
        rows = self._db.execute(
            "SELECT id, process FROM runs WHERE status = 'running' AND process IS NOT NULL"
        ).fetchall()
        gone = [(run_id, process) for run_id, process in rows if process_gone(process)]
        for run_id, process in gone:
            self._db.execute(
                "UPDATE runs SET status = 'interrupted', finished_at = ?, error = ? "
                "WHERE id = ? AND status = 'running'",
                (_now(), f"its process ({process}) stopped while running it (killed?)", run_id))
        return len(gone)

    def finish_run(
        self, run_id: str, *, status: str, usage: dict[str, Usage], error: str | None = None
    ) -> None:
        self._db.execute(
            "UPDATE runs SET status = ?, finished_at = ?, usage = ?, error = ? WHERE id = ?",
            (
                status,
                _now(),
                json.dumps({k: v.model_dump() for k, v in usage.items()}),
                error,
                run_id,
            ),
        )

    # -- reading -----------------------------------------------------------------------

    def _readable(self) -> _Readable:
        return _Readable(self.location, self._db.Error)

    def list_runs(self, limit: int = 50) -> list[RunInfo]:
        with self._readable():
            return self._select_runs("", (), limit=limit)

    def outcomes(self, since: datetime, until: datetime) -> list[OutcomeCount]:
        """The claims of check runs started in ``[since, until)``, counted by hour and
        outcome (:mod:`medverify.store.outcomes`: the drift report's input)."""
        with self._readable():
            return count_outcomes(self._db, since, until)

    def get_run(self, run_id: str) -> RunInfo:
        """The run whose id starts with ``run_id`` (a unique prefix is enough)."""
        prefix = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where = ("WHERE r.id LIKE ? ESCAPE '\\'", (prefix + "%",))
        with self._readable():
            matches = self._select_runs(*where, limit=2)
        if len(matches) != 1:
            sql = f"SELECT COUNT(*) FROM runs r {where[0]}"
            count = self._db.execute(sql, where[1]).fetchone()[0]
            problem = "no run" if not matches else f"{count} runs"
            raise MedverifyError(f"{problem} matching {run_id!r}; see `medverify runs list`")
        return matches[0]

    def _select_runs(self, where: str, params: tuple[Any, ...], *, limit: int) -> list[RunInfo]:
        rows = self._db.execute(
            f"SELECT {_RUN_COLUMNS}, (SELECT COUNT(*) FROM answers a WHERE a.run_id = r.id)"
            " + (SELECT COUNT(*) FROM audits u WHERE u.run_id = r.id)"
            " + (SELECT COUNT(*) FROM bench_replies b WHERE b.run_id = r.id)"
            " + (SELECT COUNT(*) FROM factchecks f WHERE f.run_id = r.id),"
            " (SELECT COUNT(*) FROM claims c WHERE c.run_id = r.id)"
            " + (SELECT COALESCE(SUM(n_claims), 0) FROM audits u WHERE u.run_id = r.id)"
            " + (SELECT COALESCE(SUM(n_facts), 0) FROM factchecks f WHERE f.run_id = r.id)"
            f" FROM runs r {where} ORDER BY created_at DESC, id DESC LIMIT ?",
            (*params, sql_bound(limit)),
        ).fetchall()
        return [self._info(row) for row in rows]

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

    @staticmethod
    def _info(row: tuple[Any, ...]) -> RunInfo:
        (run_id, kind, status, created, finished, version, config, models, prompts, snapshot,
         usage, error, process, lineage, request, n_answers, n_claims) = row
        return RunInfo(
            id=run_id,
            kind=kind,
            status=status,
            created_at=created,
            finished_at=finished,
            medverify_version=version,
            config=json.loads(config),
            models=json.loads(models),
            prompt_versions=json.loads(prompts),
            kb_snapshot=snapshot,
            usage={k: Usage.model_validate(v) for k, v in json.loads(usage).items()},
            error=error,
            n_answers=n_answers,
            n_claims=n_claims,
            process=process,
            process_gone=status == "running" and process_gone(process),
            kb_lineage=lineage,
            request_id=request,
        )


class _Readable:
    """Turns a damaged record or database page met while reading into a MedverifyError (a
    server that cannot be reached is a StoreUnavailable error already)."""

    def __init__(self, path: str, database_error: type[Exception]) -> None:
        self.path = path
        self.database_error = database_error

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> None:
        if exc is not None and not isinstance(exc, MedverifyError) and isinstance(
                exc, sqlite3.DatabaseError | self.database_error | ValueError | TypeError
                | AttributeError):
            detail = " ".join(str(exc).split())[:160]
            raise MedverifyError(f"run store {self.path} has a damaged record "
                                 f"({type(exc).__name__}: {detail}); move it aside to start "
                                 "a new one") from None


class _Tx:
    """BEGIN/COMMIT around a block, ROLLBACK on error (connection is in autocommit mode);
    inside a caller's transaction: that one."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._outer = False

    def __enter__(self) -> None:
        self._outer = self._db.in_transaction
        if not self._outer:
            self._db.begin()

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if self._outer or not self._db.in_transaction:
            return
        if exc_type:
            self._db.rollback()
        else:
            self._db.commit()
