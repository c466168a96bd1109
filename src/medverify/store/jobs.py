"""The job queue of the HTTP service, in the run store: survives restarts.

:class:`JobStore` keeps the queue in the table ``jobs`` (migration 0006). Several processes
(``uvicorn --workers N``) may share the database file: a job is taken by one worker only
(:meth:`JobStore.claim` takes it in a ``BEGIN IMMEDIATE`` transaction, or under the store's
write lock in PostgreSQL), a finished job is
never overwritten (:meth:`JobStore.finish` changes only a queued or running one), and a job
whose worker died (no heartbeat) goes back to the queue (:meth:`JobStore.recover`).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import Field

from medverify.errors import MedverifyError
from medverify.records import Record
from medverify.store.context import current_request_id
from medverify.store.runs import RunStore
from medverify.store.sql_bounds import sql_bound


class JobKind(StrEnum):
    CHECK = "check"
    AUDIT = "audit"
    FACTCHECK = "factcheck"


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"  # the result is there (answers that failed carry their errors in it)
    FAILED = "failed"  # nothing usable: ``error`` says why
    CANCELLED = "cancelled"


class JobProgress(Record):
    done: int = 0
    total: int = 0


class JobState(Record):
    """What a job is and where it stands: the fields the store keeps and the API shows."""

    id: str
    kind: JobKind
    status: JobStatus
    key_id: str | None = None
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    progress: JobProgress = Field(default_factory=JobProgress)
    attempts: int = 0  # times a worker took it (a restart after a crash adds one)
    run_id: str | None = None
    error: str | None = None
    cancel_requested: bool = False


class JobRow(JobState):
    """One row of ``jobs``: a job as stored (``request`` and ``result`` are JSON text), with
    the worker running it and its last heartbeat."""

    heartbeat_at: datetime | None = None
    worker: str | None = None
    request: str
    result: str | None = None
    request_id: str | None = None  # the service request that submitted it (version 12)

    @property
    def finished(self) -> bool:
        return self.status in _TERMINAL


class JobNotFound(MedverifyError):
    """No job has this id."""


_TERMINAL = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})
_COLUMNS = (
    "id, kind, status, key_id, created_at, started_at, finished_at, heartbeat_at, worker,"
    " attempts, progress_done, progress_total, run_id, error, cancel_requested, request, result,"
    " request_id"
)


def _stamp(when: datetime | None = None) -> str:
    """A fixed-width ISO-8601 UTC time (microseconds), so that times compare as text."""
    return (when or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="microseconds")


def _when(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text) if text else None


def _row(row: tuple) -> JobRow:
    (job_id, kind, status, key_id, created_at, started_at, finished_at, heartbeat_at, worker,
     attempts, done, total, run_id, error, cancel_requested, request, result, request_id) = row
    return JobRow(
        id=job_id, kind=JobKind(kind), status=JobStatus(status), key_id=key_id,
        created_at=datetime.fromisoformat(created_at), started_at=_when(started_at),
        finished_at=_when(finished_at), heartbeat_at=_when(heartbeat_at), worker=worker,
        attempts=attempts, progress=JobProgress(done=done, total=total), run_id=run_id,
        error=error, cancel_requested=bool(cancel_requested), request=request, result=result,
        request_id=request_id,
    )


class JobStore:
    """The job queue in the run store.

    Every method is one statement or one ``BEGIN IMMEDIATE`` transaction, so the queue stays
    consistent when several processes share the database file (SQLite serialises their
    writes; a writer waits for the lock up to the connection's timeout).
    """

    def __init__(self, runs: RunStore) -> None:
        self.runs = runs
        self._db = runs._db

    def _fetch(self, job_id: str) -> JobRow | None:
        row = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _row(row) if row else None

    # -- submitting and reading --------------------------------------------------------

    def submit(self, kind: JobKind | str, request_json: str, key_id: str | None) -> JobRow:
        """Queue a job; ``request_json`` is the request body as JSON text. The job keeps the
        id of the request being served (:mod:`medverify.store.context`), which its runs then
        record."""
        kind = JobKind(kind)
        now = datetime.now(UTC)
        for _ in range(5):
            job_id = f"job-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(4)}"
            try:
                self._db.execute(
                    "INSERT INTO jobs (id, kind, status, key_id, created_at, request, request_id)"
                    " VALUES (?, ?, 'queued', ?, ?, ?, ?)",
                    (job_id, kind.value, key_id, _stamp(now), request_json, current_request_id()),
                )
            except self._db.IntegrityError:
                continue
            return self.get(job_id)
        raise MedverifyError("could not find a free job id; try again")

    def get(self, job_id: str) -> JobRow:
        job = self._fetch(job_id)
        if job is None:
            raise JobNotFound(f"no job with id {job_id!r}")
        return job

    def list(
        self,
        key_id: str | None = None,
        status: JobStatus | str | None = None,
        limit: int = 50,
    ) -> list[JobRow]:
        """The newest ``limit`` jobs, newest first (of one key, in one status, if given)."""
        where, args = [], []
        if key_id is not None:
            where.append("key_id = ?")
            args.append(key_id)
        if status is not None:
            where.append("status = ?")
            args.append(JobStatus(status).value)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM jobs{clause} ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (*args, sql_bound(limit)),
        ).fetchall()
        return [_row(row) for row in rows]

    def counts(self) -> dict[tuple[str, str], int]:
        """Jobs per (kind, status), those present only."""
        rows = self._db.execute("SELECT kind, status, COUNT(*) FROM jobs GROUP BY kind, status")
        return {(kind, status): int(n) for kind, status, n in rows.fetchall()}

    def oldest_queued(self) -> datetime | None:
        """When the job waiting longest in the queue was submitted (None: none waits)."""
        row = self._db.execute("SELECT MIN(created_at) FROM jobs WHERE status = 'queued'")
        return _when(row.fetchone()[0])

    def has_run(self, key_id: str, run_id: str) -> bool:
        """Whether a job of key ``key_id`` produced run ``run_id``."""
        row = self._db.execute("SELECT 1 FROM jobs WHERE key_id = ? AND run_id = ? LIMIT 1",
                               (key_id, run_id)).fetchone()
        return row is not None

    # -- running -----------------------------------------------------------------------

    def claim(self, worker: str) -> JobRow | None:
        """Take the oldest queued job for ``worker`` (running, one more attempt), or None
        when the queue is empty. No two callers, in any process, get the same job."""
        now = _stamp()
        with self.runs.immediate():
            row = self._db.execute(
                "SELECT id FROM jobs WHERE status = 'queued' ORDER BY created_at, rowid LIMIT 1"
            ).fetchone()
            if row is None:
                return None
            taken = self._db.execute(
                "UPDATE jobs SET status = 'running', worker = ?, started_at = ?,"
                " heartbeat_at = ?, attempts = attempts + 1 WHERE id = ? AND status = 'queued'",
                (worker, now, now, row[0]),
            ).rowcount
            return self._fetch(row[0]) if taken else None

    def heartbeat(self, job_ids: Iterable[str], worker: str) -> int:
        """Mark ``worker``'s running jobs alive; returns how many are still its own (a job
        :meth:`recover` gave to another worker, or finished, is left alone)."""
        ids = list(job_ids)
        if not ids:
            return 0
        marks = ", ".join("?" * len(ids))
        cursor = self._db.execute(
            f"UPDATE jobs SET heartbeat_at = ? WHERE status = 'running' AND worker = ?"
            f" AND id IN ({marks})",
            (_stamp(), worker, *ids),
        )
        return cursor.rowcount

    def progress(self, job_id: str, done: int, total: int, run_id: str | None = None) -> None:
        """Record a job's progress (and the run it writes to); a running job's heartbeat
        is renewed too. A finished job is left alone."""
        self._db.execute(
            "UPDATE jobs SET progress_done = ?, progress_total = ?,"
            " run_id = COALESCE(?, run_id),"
            " heartbeat_at = CASE status WHEN 'running' THEN ? ELSE heartbeat_at END"
            " WHERE id = ? AND status IN ('queued', 'running')",
            (done, total, run_id, _stamp(), job_id),
        )

    def finish(
        self,
        job_id: str,
        status: JobStatus | str,
        result_json: str | None = None,
        error: str | None = None,
    ) -> bool:
        """End a queued or running job as done, failed or cancelled. Returns False, and
        changes nothing, when the job had already ended: a result is written once."""
        status = JobStatus(status)
        if status not in _TERMINAL:
            raise ValueError(f"finish() needs done, failed or cancelled, not {status.value}")
        cursor = self._db.execute(
            "UPDATE jobs SET status = ?, result = ?, error = ?, finished_at = ?,"
            " heartbeat_at = NULL WHERE id = ? AND status IN ('queued', 'running')",
            (status.value, result_json, error, _stamp(), job_id),
        )
        return cursor.rowcount == 1

    # -- cancelling --------------------------------------------------------------------

    def request_cancel(self, job_id: str) -> JobRow:
        """Cancel a job: a queued one at once; a running one is marked (its worker sees
        :meth:`cancel_requested` and stops); a finished one is left as it is."""
        now = _stamp()
        with self.runs.immediate():
            self._db.execute(
                "UPDATE jobs SET status = 'cancelled', cancel_requested = 1, finished_at = ?"
                " WHERE id = ? AND status = 'queued'",
                (now, job_id),
            )
            self._db.execute(
                "UPDATE jobs SET cancel_requested = 1 WHERE id = ? AND status = 'running'",
                (job_id,),
            )
            return self.get(job_id)

    def cancel_requested(self, job_id: str) -> bool:
        row = self._db.execute(
            "SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)
        ).fetchone()
        if row is None:
            raise JobNotFound(f"no job with id {job_id!r}")
        return bool(row[0])

    # -- interruptions -----------------------------------------------------------------

    def requeue(self, job_id: str, error: str | None = None) -> bool:
        """Put a running job back in the queue (a graceful shutdown that could not wait
        for it): it keeps its attempts, progress and run; ``error`` says why. A job whose
        cancellation was requested is cancelled instead. Returns False when the job was
        not running."""
        now = _stamp()
        cursor = self._db.execute(
            "UPDATE jobs SET"
            " status = CASE cancel_requested WHEN 1 THEN 'cancelled' ELSE 'queued' END,"
            " finished_at = CASE cancel_requested WHEN 1 THEN ? ELSE NULL END,"
            " worker = NULL, heartbeat_at = NULL, error = ?"
            " WHERE id = ? AND status = 'running'",
            (now, error, job_id),
        )
        return cursor.rowcount == 1

    def recover(
        self, stale_after_s: float, max_attempts: int, now: datetime | None = None
    ) -> tuple[int, int]:
        """Running jobs without a heartbeat for ``stale_after_s`` seconds (their worker was
        killed) go back to the queue, or fail once ``max_attempts`` workers have taken
        them; those whose cancellation was requested are cancelled. Returns (requeued,
        failed)."""
        now = now or datetime.now(UTC)
        cutoff = _stamp(now - timedelta(seconds=stale_after_s))
        stale = "status = 'running' AND (heartbeat_at IS NULL OR heartbeat_at < ?)"
        # every worker calls this often: take the write lock only when there is work
        if not self._db.execute(f"SELECT 1 FROM jobs WHERE {stale} LIMIT 1", (cutoff,)).fetchall():
            return 0, 0
        with self.runs.immediate():
            self._db.execute(
                "UPDATE jobs SET status = 'cancelled', finished_at = ?, worker = NULL,"
                f" heartbeat_at = NULL WHERE {stale} AND cancel_requested = 1",
                (_stamp(now), cutoff),
            )
            failed = self._db.execute(
                "UPDATE jobs SET status = 'failed', finished_at = ?, heartbeat_at = NULL,"
                " error = 'interrupted ' || attempts || ' times (the worker stopped while"
                " running it); giving up'"
                f" WHERE {stale} AND attempts >= ?",
                (_stamp(now), cutoff, max_attempts),
            ).rowcount
            requeued = self._db.execute(
                "UPDATE jobs SET status = 'queued', worker = NULL, heartbeat_at = NULL,"
                " error = 'interrupted: the worker stopped while running it; queued again'"
                f" WHERE {stale}",
                (cutoff,),
            ).rowcount
        return requeued, failed
