"""The jobs routes: batches of checks, audits and fact-checks queued as jobs
(:class:`medverify.service.jobs.JobRunner` runs them), listed, polled and cancelled."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel

from medverify.decompose.answer import validate_answer
from medverify.errors import InputError
from medverify.records import Answer
from medverify.service.error_codes import ErrorCode
from medverify.service.errors import ApiError
from medverify.service.records import AuditBatch, CheckBatch, FactCheckBatch, Job
from medverify.service.routes.deps import Client, State
from medverify.service.state import ServiceState
from medverify.store.access import KeyInfo, Role
from medverify.store.jobs import JobKind, JobNotFound, JobRow, JobState, JobStatus

router = APIRouter(tags=["jobs"])


@router.post("/v1/jobs/check", response_model=Job, status_code=202)
async def check_batch(body: CheckBatch, request: Request, key: Client, state: State) -> Job:
    """Check many answers as a job.

    202 with the queued job; poll ``GET /v1/jobs/{job_id}`` until it is finished (413
    ``too_large`` over ``[service] max_answers_per_job`` answers). An answer ``POST
    /v1/check`` would refuse is refused here too, nothing queued: 422 ``invalid_request``
    for a blank text or one with NUL bytes (the schema), ``invalid_input`` for one over
    ``max_answer_chars``."""
    _valid_answers(state, body.answers)
    return _submit(state, request, key, JobKind.CHECK, body, len(body.answers))


@router.post("/v1/audit", response_model=Job, status_code=202)
async def audit(body: AuditBatch, request: Request, key: Client, state: State) -> Job:
    """Audit answers' citations (cited URLs are fetched, safely) as a job.

    202 with the queued job (413 ``too_large`` over ``[service] max_answers_per_job``
    inputs)."""
    return _submit(state, request, key, JobKind.AUDIT, body, len(body.inputs))


@router.post("/v1/factcheck", response_model=Job, status_code=202)
async def factcheck(body: FactCheckBatch, request: Request, key: Client, state: State) -> Job:
    """Fact-check and correct answers as a job.

    202 with the queued job (413 ``too_large`` over ``[service] max_answers_per_job``
    answers; 422 for an answer ``POST /v1/check`` would refuse, as for check jobs)."""
    _valid_answers(state, body.answers)
    return _submit(state, request, key, JobKind.FACTCHECK, body, len(body.answers))


@router.get("/v1/jobs", response_model=list[Job])
async def jobs(key: Client, state: State, status: JobStatus | None = None,
               limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[Job]:
    """This key's jobs, newest first (an admin key sees every job)."""
    owner = None if key.role is Role.ADMIN else key.id
    return [_job(r) for r in state.jobs.list(key_id=owner, status=status, limit=limit)]


@router.get("/v1/jobs/{job_id}", response_model=Job)
async def job(job_id: str, key: Client, state: State) -> Job:
    """A job's status, progress and, once finished, its result.

    404 for another key's job, unless the key is an admin's."""
    return _job(_own_job(state, key, job_id))


@router.post("/v1/jobs/{job_id}/cancel", response_model=Job)
async def cancel(job_id: str, request: Request, key: Client, state: State) -> Job:
    """Cancel a job.

    A queued job is cancelled at once, a running one before its next answer (so it may
    still end ``done`` when its last answer was under way); a finished job is returned
    as it is."""
    _own_job(state, key, job_id)
    request.state.target = job_id
    return _job(state.jobs.request_cancel(job_id))


def _job(row: JobRow) -> Job:
    """The job as the API shows it: the stored row without its request, worker and
    heartbeat, with its result parsed."""
    fields = row.model_dump(include=set(JobState.model_fields))
    return Job(**fields, result=json.loads(row.result) if row.result else None)


def _own_job(state: ServiceState, key: KeyInfo, job_id: str) -> JobRow:
    try:
        row = state.jobs.get(job_id)
    except JobNotFound:
        row = None
    if row is None or (key.role is not Role.ADMIN and row.key_id != key.id):
        raise ApiError(404, ErrorCode.NOT_FOUND, f"no job {job_id!r} for this key")
    return row


def _valid_answers(state: ServiceState, answers: Sequence[Answer]) -> None:
    """422 ``invalid_input`` (nothing queued) for the first answer the checker would
    refuse, as ``POST /v1/check`` refuses it."""
    for n, answer in enumerate(answers):
        try:
            validate_answer(answer, state.config.max_answer_chars)
        except InputError as exc:  # 422 invalid_input, naming the answer
            raise InputError(f"answers[{n}]: {exc}") from None


def _submit(state: ServiceState, request: Request, key: KeyInfo, kind: JobKind,
            body: BaseModel, n: int) -> Job:
    limit = state.config.service.max_answers_per_job
    if n > limit:
        raise ApiError(413, ErrorCode.TOO_LARGE, f"{n} answers in one job, over the limit "
                       f"of {limit} ([service] max_answers_per_job): split the batch")
    row = state.jobs.submit(kind, body.model_dump_json(), key.id)
    request.state.target = row.id
    return _job(row)
