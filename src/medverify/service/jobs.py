"""The job runner of one worker: takes queued jobs from the run store and runs the flows.

Jobs live in the run store (:class:`medverify.store.jobs.JobStore`), so they survive the
process: a queued job waits for any worker; a running job's worker writes a heartbeat every
``[service] heartbeat_s``, and a job whose heartbeat is older than ``stale_after_s`` (its
worker was killed) is queued again, up to ``max_job_attempts`` starts, then failed with the
cause. Rerunning a job costs little: check and fact-check requests go through the request
cache, an audit resumes from its ``answers.jsonl``. A job's result is written once
(``JobStore.finish`` refuses a second), so a job that two workers ran still has one result.

On shutdown the runner stops taking jobs, lets running ones finish for ``shutdown_grace_s``,
then cancels them and puts them back in the queue (a checkpoint: what they recorded stays).

A job runs for the request that submitted it: its runs and log lines carry that request's id
(:mod:`medverify.store.context`); when it ends, one line is logged (its id, kind, status,
duration, claims) and it is counted in the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from medverify.connections import StoreUnavailable
from medverify.harness import CancelToken, RunCancelled, cause
from medverify.service.metrics import Checked
from medverify.service.records import (
    AuditBatch,
    AuditResult,
    CheckBatch,
    CheckResult,
    FactCheckBatch,
    FactCheckResult,
)
from medverify.service.state import ServiceState
from medverify.store.context import request_id
from medverify.store.jobs import JobKind, JobRow, JobStatus

log = logging.getLogger(__name__)

SHUTDOWN = "the server shut down"


@dataclass
class JobRunner:
    state: ServiceState
    active: dict[str, tuple[asyncio.Task[None], CancelToken]] = field(default_factory=dict)
    stopping: bool = False
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _freed: asyncio.Event = field(default_factory=asyncio.Event)
    _store_was_down: bool = False  # a warning said the store is unavailable

    @property
    def settings(self):  # type: ignore[no-untyped-def]
        return self.state.config.service

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._take_loop(), name="jobs: take"),
                       asyncio.create_task(self._heartbeat_loop(), name="jobs: heartbeat")]

    async def _take_loop(self) -> None:
        while not self.stopping:
            row = None
            if len(self.active) < self.settings.job_concurrency:
                try:
                    row = self.state.jobs.claim(self.state.worker)
                except StoreUnavailable as exc:  # the database server is down: wait for it
                    self._store_down(exc)
            if row is None:  # full or nothing queued: until a slot frees up, or a poll later
                self._freed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._freed.wait(), self.settings.job_poll_s)
                continue
            token = CancelToken()
            task = asyncio.create_task(self._run(row, token), name=f"job {row.id}")
            self.active[row.id] = (task, token)

    async def _heartbeat_loop(self) -> None:
        while not self.stopping:
            try:
                self._tick()
                self._store_was_down = False
            except StoreUnavailable as exc:
                self._store_down(exc)
            await asyncio.sleep(self.settings.heartbeat_s)

    def _store_down(self, exc: StoreUnavailable) -> None:
        """Say once that the store is unavailable; the loops go on and resume with it."""
        if not self._store_was_down:
            log.warning("jobs wait for the store: %s", exc)
        self._store_was_down = True

    def _tick(self) -> None:
        jobs = self.state.jobs
        if self.active:
            jobs.heartbeat(list(self.active), self.state.worker)
        for job_id, (_, token) in list(self.active.items()):
            if not token.cancelled and jobs.cancel_requested(job_id):
                token.cancel("cancelled by request")
        requeued, failed = jobs.recover(self.settings.stale_after_s,
                                        self.settings.max_job_attempts)
        if requeued or failed:
            runs = self.state.runs.interrupt_orphans()
            log.warning("jobs of stopped workers: %d queued again, %d failed (%d of their "
                        "runs recorded as interrupted)", requeued, failed, runs)

    async def _run(self, row: JobRow, token: CancelToken) -> None:
        request_id.set(row.request_id)  # this task's context: the submitting request's id
        jobs, started = self.state.jobs, time.perf_counter()
        status, claims = JobStatus.QUEUED, {}  # queued: put back in the queue
        try:
            result = await self._execute(row, token)
            jobs.finish(row.id, JobStatus.DONE, result_json=result.model_dump_json())
            status = JobStatus.DONE
            if isinstance(result, CheckResult):
                claims = Checked.of(result.reports).fields()
        except RunCancelled as exc:
            if self.stopping and token.reason == SHUTDOWN:
                jobs.requeue(row.id, SHUTDOWN)
            else:
                jobs.finish(row.id, JobStatus.CANCELLED, error=str(exc))
                status = JobStatus.CANCELLED
        except asyncio.CancelledError:
            jobs.requeue(row.id, SHUTDOWN)
            raise
        except StoreUnavailable as exc:  # not the job's fault: queued again, or (while the
            log.warning("job %s stopped: %s", row.id, exc)  # store is down) recovered later
            with contextlib.suppress(StoreUnavailable):
                jobs.requeue(row.id, f"the store was unavailable: {exc}")
        except Exception as exc:
            log.warning("job %s failed: %s", row.id, cause(exc))
            jobs.finish(row.id, JobStatus.FAILED, error=cause(exc))
            status = JobStatus.FAILED
        finally:
            self.active.pop(row.id, None)
            self._freed.set()
            self._ended(row, status, time.perf_counter() - started, claims)

    def _ended(self, row: JobRow, status: JobStatus, seconds: float,
               claims: dict[str, Any]) -> None:
        """One log line and the metrics of a job's attempt that ended (``queued``: it went
        back to the queue)."""
        if self.state.metrics is not None and status is not JobStatus.QUEUED:
            self.state.metrics.job_finished(row.kind.value, status.value)
        log.info("job ended", extra={"fields": {
            "job_id": row.id, "kind": row.kind.value, "status": status.value,
            "attempt": row.attempts, "duration_ms": round(1000 * seconds, 2),
            "key_id": row.key_id, **claims}})

    async def _execute(self, row: JobRow, token: CancelToken) -> BaseModel:
        def progress(done: int, total: int) -> None:
            self.state.jobs.progress(row.id, done, total)

        if row.kind is JobKind.CHECK:
            batch = CheckBatch.model_validate_json(row.request)
            reports = await self.state.check(batch.answers, progress=progress, cancel=token)
            self._ran(row, reports[0].run_id if reports else None, len(reports))
            checked = Checked.of(reports)
            if self.state.metrics is not None:
                self.state.metrics.checked(checked, "job")
            return CheckResult(reports=reports)
        if row.kind is JobKind.FACTCHECK:
            fbatch = FactCheckBatch.model_validate_json(row.request)
            factchecker = self.state.need_factchecker()
            freports = await factchecker.run(fbatch.answers, store=self.state.runs,
                                             progress=progress, cancel=token)
            self._ran(row, freports[0].run_id if freports else None, len(freports))
            return FactCheckResult(reports=freports)
        abatch = AuditBatch.model_validate_json(row.request)
        auditor = self.state.auditor(row.id)
        auditor.progress = progress
        audits, summary = await auditor.run(abatch.inputs, cancel=token)
        self._ran(row, summary.run_id, len(audits))
        return AuditResult(audits=audits, summary=summary)

    def _ran(self, row: JobRow, run_id: str | None, n: int) -> None:
        self.state.jobs.progress(row.id, n, n, run_id=run_id)

    async def stop(self) -> None:
        """Stop taking jobs; give running ones ``shutdown_grace_s`` to finish, then cancel
        them back into the queue."""
        self.stopping = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        running = [task for task, _ in self.active.values()]
        if running:
            await asyncio.wait(running, timeout=self.settings.shutdown_grace_s)
        left = list(self.active.values())
        for task, token in left:  # a checkpoint: back to the queue, what they recorded stays
            token.cancel(SHUTDOWN)
            task.cancel()
        for task, _ in left:
            with contextlib.suppress(asyncio.CancelledError):
                await task
