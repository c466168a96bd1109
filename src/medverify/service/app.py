"""The HTTP service: thin routes over the library (see docs/service.md and docs/api.md).

``create_app(config)`` builds the FastAPI app; ``app_from_env()`` is the factory
``medverify serve`` gives uvicorn (each worker process builds its own app and loads the KB,
model and judge once, at start-up). Request and response bodies are the project's records,
so the OpenAPI schema (``/openapi.json``, the page at ``/docs``) is generated from them.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib import metadata
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse

from medverify.audit.store import audits as stored_audits
from medverify.config import Config
from medverify.errors import MedverifyError
from medverify.factcheck.store import factchecks as stored_factchecks
from medverify.harness import validate_answer
from medverify.records import Answer, Report
from medverify.report.html import render_html
from medverify.risk.stage import RiskText
from medverify.service.auth import role
from medverify.service.errors import ApiError, BodyGuard, install_error_handlers
from medverify.service.jobs import JobRunner
from medverify.service.records import (
    AuditBatch,
    CheckBatch,
    ErrorResponse,
    FactCheckBatch,
    Health,
    Job,
    KeyRequest,
    Readiness,
    RiskRequest,
    RiskResponse,
    RunRecord,
)
from medverify.service.state import ServiceState
from medverify.store.access import AuditEvent, KeyInfo, KeyNotFound, NewKey, Role
from medverify.store.jobs import JobKind, JobNotFound, JobRow, JobStatus

CONFIG_ENV = "MEDVERIFY_SERVE_CONFIG"
"""``medverify serve`` passes the worker processes their config as JSON in this variable."""

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text} for code, text in {
        400: "invalid_json: the body is not JSON in UTF-8",
        401: "unauthorized: missing, wrong or revoked key (not /healthz, /readyz)",
        403: "forbidden: the key's role is too low for this endpoint",
        404: "not_found: no such job, run or key for this key (or no such path)",
        409: "not_configured: the feature needs configuration the service lacks",
        413: "too_large: body over max_body_bytes, or a job over max_answers_per_job",
        415: "unsupported_media_type: a POST body that is not application/json",
        422: "invalid_request (the body or a parameter does not validate) or "
             "invalid_input (an answer the checker refuses, e.g. empty)",
        429: "rate_limited: over the key's rate limit; see the Retry-After header",
        500: "internal: an unexpected error (the server log has the details)",
        503: "not_ready: the KB or models did not load (see /readyz)",
        504: "timeout: no result within request_timeout_s"}.items()}

Client = Annotated[KeyInfo, Depends(role(Role.CLIENT))]
Admin = Annotated[KeyInfo, Depends(role(Role.ADMIN))]


def version() -> str:
    try:
        return metadata.version("medverify")
    except metadata.PackageNotFoundError:
        return "unknown"


def create_app(config: Config, *, run_jobs: bool = True) -> FastAPI:
    """The service over ``config`` (its KB, model, judge, run store and ``[service]``
    limits). ``run_jobs=False`` leaves queued jobs to other workers (tests)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = ServiceState.open(config)
        await asyncio.to_thread(state.load)
        app.state.service = state
        runner = JobRunner(state)
        if run_jobs:
            runner.start()
        try:
            yield
        finally:
            await runner.stop()
            await state.aclose()

    app = FastAPI(title="medverify", version=version(), lifespan=lifespan, responses=ERRORS,
                  description="Checks what medical LLM answers claim. Every request but the "
                  "health checks needs an API key: `Authorization: Bearer <key>`.")
    install_error_handlers(app)
    app.middleware("http")(audit_writes)
    app.add_middleware(BodyGuard, max_bytes=config.service.max_body_bytes)
    _routes(app, config)
    return app


def app_from_env() -> FastAPI:
    """The app of one ``medverify serve`` worker (config from :data:`CONFIG_ENV`)."""
    data = json.loads(os.environ.get(CONFIG_ENV) or "{}")
    return create_app(Config.model_validate(data))


async def audit_writes(request: Request,
                       call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """Every write (and every refused key) goes to the audit log: key id, action, target,
    status."""
    response = await call_next(request)
    state = getattr(request.app.state, "service", None)
    if state is not None and (request.method != "GET" or response.status_code == 401):
        key = getattr(request.state, "key", None)
        route = request.scope.get("route")
        action = f"{request.method} {getattr(route, 'path', request.url.path)}"
        state.audit.record(key.id if key else None, action,
                           target=getattr(request.state, "target", None),
                           status=response.status_code)
    return response


def _state(request: Request) -> ServiceState:
    return request.app.state.service  # type: ignore[no-any-return]


def _job(row: JobRow) -> Job:
    """The job as the API shows it: the stored row without its request, worker and
    heartbeat, with its result parsed."""
    fields = row.model_dump(include=set(Job.model_fields) - {"result"})
    return Job(**fields, result=json.loads(row.result) if row.result else None)


def _own_job(state: ServiceState, key: KeyInfo, job_id: str) -> JobRow:
    try:
        row = state.jobs.get(job_id)
    except JobNotFound:
        row = None
    if row is None or (key.role is not Role.ADMIN and row.key_id != key.id):
        raise ApiError(404, "not_found", f"no job {job_id!r} for this key")
    return row


def _submit(request: Request, key: KeyInfo, kind: JobKind, body: Any, n: int) -> Job:
    state = _state(request)
    limit = state.config.service.max_answers_per_job
    if n > limit:
        raise ApiError(413, "too_large", f"{n} answers in one job, over the limit of {limit} "
                       "([service] max_answers_per_job): split the batch")
    row = state.jobs.submit(kind, body.model_dump_json(), key.id)
    request.state.target = row.id
    return _job(row)


async def _timed(request: Request, work: Awaitable[Any]) -> Any:
    limit = _state(request).config.service.request_timeout_s
    try:
        return await asyncio.wait_for(work, limit)
    except TimeoutError:
        raise ApiError(504, "timeout", f"no result within {limit:g} s ([service] "
                       "request_timeout_s); submit long work as a job") from None


def _routes(app: FastAPI, config: Config) -> None:
    @app.get("/healthz", response_model=Health, tags=["health"])
    async def healthz() -> Health:
        """The process is up (no key needed)."""
        return Health(version=version())

    @app.get("/readyz", response_model=Readiness, tags=["health"], responses={
        503: {"model": Readiness, "description": "not ready: what is missing"}})
    async def readyz(request: Request) -> JSONResponse:
        """The KB is open and the models are loaded (503 with what is missing otherwise)."""
        checks = _state(request).readiness()
        ready = all(v == "ok" for v in checks.values())
        body = Readiness(ready=ready, checks=checks).model_dump(mode="json")
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.post("/v1/check", response_model=Report, tags=["check"])
    async def check(answer: Answer, request: Request, key: Client) -> Report:
        """Check one answer against the knowledge base.

        The report holds its claims with categories, evidence, probabilities (and
        hallucination risk when a classifier is configured), and the tokens this request
        spent (``usage``). Recorded in the run store; batches go to ``POST
        /v1/jobs/check``.

        422 ``invalid_input`` for an empty answer or one over ``max_answer_chars``; 503
        ``not_ready`` when the KB or judge did not load; 504 ``timeout`` after ``[service]
        request_timeout_s``."""
        state = _state(request)
        checker = state.need_checker()
        validate_answer(answer, config.max_answer_chars)
        with state.metered() as used:
            [report] = await _timed(request, state.checking(
                lambda: checker.run([answer], store=state.runs)))
        request.state.target = report.run_id
        return report.model_copy(update={"usage": used.as_dict()})

    @app.post("/v1/risk", response_model=RiskResponse, tags=["check"])
    async def risk(body: RiskRequest, request: Request, key: Client) -> RiskResponse:
        """Hallucination risk of each text from token log-probabilities (no KB).

        409 ``not_configured`` without a ``[risk] classifier``; 504 ``timeout`` after
        ``[service] request_timeout_s``."""
        checker = _state(request).need_checker()
        if checker.risk is None:
            raise ApiError(409, "not_configured", "no risk classifier is configured "
                           "([risk] classifier = DIR, with its scorers)")
        texts: list[RiskText] = body.texts
        scores = await _timed(request, checker.risk.score(texts))
        return RiskResponse(scores=scores)

    @app.post("/v1/jobs/check", response_model=Job, status_code=202, tags=["jobs"])
    async def check_batch(body: CheckBatch, request: Request, key: Client) -> Job:
        """Check many answers as a job.

        202 with the queued job; poll ``GET /v1/jobs/{job_id}`` until it is finished (413
        ``too_large`` over ``[service] max_answers_per_job`` answers)."""
        return _submit(request, key, JobKind.CHECK, body, len(body.answers))

    @app.post("/v1/audit", response_model=Job, status_code=202, tags=["jobs"])
    async def audit(body: AuditBatch, request: Request, key: Client) -> Job:
        """Audit answers' citations (cited URLs are fetched, safely) as a job.

        202 with the queued job (413 ``too_large`` over ``[service] max_answers_per_job``
        inputs)."""
        return _submit(request, key, JobKind.AUDIT, body, len(body.inputs))

    @app.post("/v1/factcheck", response_model=Job, status_code=202, tags=["jobs"])
    async def factcheck(body: FactCheckBatch, request: Request, key: Client) -> Job:
        """Fact-check and correct answers as a job.

        202 with the queued job (413 ``too_large`` over ``[service] max_answers_per_job``
        answers)."""
        return _submit(request, key, JobKind.FACTCHECK, body, len(body.answers))

    @app.get("/v1/jobs", response_model=list[Job], tags=["jobs"])
    async def jobs(request: Request, key: Client, status: JobStatus | None = None,
                   limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[Job]:
        """This key's jobs, newest first (an admin key sees every job)."""
        owner = None if key.role is Role.ADMIN else key.id
        return [_job(r) for r in _state(request).jobs.list(key_id=owner, status=status,
                                                            limit=limit)]

    @app.get("/v1/jobs/{job_id}", response_model=Job, tags=["jobs"])
    async def job(job_id: str, request: Request, key: Client) -> Job:
        """A job's status, progress and, once finished, its result.

        404 for another key's job, unless the key is an admin's."""
        return _job(_own_job(_state(request), key, job_id))

    @app.post("/v1/jobs/{job_id}/cancel", response_model=Job, tags=["jobs"])
    async def cancel(job_id: str, request: Request, key: Client) -> Job:
        """Cancel a job.

        A queued job is cancelled at once, a running one before its next answer (so it may
        still end ``done`` when its last answer was under way); a finished job is returned
        as it is."""
        state = _state(request)
        _own_job(state, key, job_id)
        request.state.target = job_id
        return _job(state.jobs.request_cancel(job_id))

    @app.get("/v1/runs/{run_id}", response_model=RunRecord, tags=["runs"])
    async def run(run_id: str, request: Request, key: Client) -> RunRecord:
        """A recorded run and what it produced (read from the store, no model call).

        The runs of this key's checks and jobs (an admin key: any run); 404 otherwise."""
        state = _state(request)
        info = _run_info(state, key, run_id)
        out = RunRecord(info=info.model_dump(mode="json"))
        if info.kind == "check":
            out.reports = state.runs.reports(info.id)
        elif info.kind == "audit":
            out.audits = stored_audits(state.runs, info.id)
        elif info.kind == "factcheck":
            out.factchecks = stored_factchecks(state.runs, info.id)
        return out

    @app.get("/v1/runs/{run_id}/report", response_class=HTMLResponse, tags=["runs"])
    async def run_report(run_id: str, request: Request, key: Client,
                         answer: Annotated[int, Query(ge=0)] = 0) -> HTMLResponse:
        """The HTML report of one answer of a check run.

        ``answer`` counts from 0. 404 for audit and fact-check runs (their data is at ``GET
        /v1/runs/{run_id}``)."""
        state = _state(request)
        info = _run_info(state, key, run_id)
        if info.kind != "check":
            raise ApiError(404, "not_found", f"run {info.id} is a {info.kind} run: its HTML "
                           "report is written by the command (GET /v1/runs/{id} has its data)")
        reports = state.runs.reports(info.id)
        if answer >= len(reports):
            raise ApiError(404, "not_found", f"run {info.id} has {len(reports)} answers")
        return HTMLResponse(render_html(reports[answer]))

    @app.get("/v1/keys", response_model=list[KeyInfo], tags=["admin"])
    async def keys(request: Request, key: Admin) -> list[KeyInfo]:
        """Every API key (never a secret)."""
        return _state(request).keys.list()

    @app.post("/v1/keys", response_model=NewKey, status_code=201, tags=["admin"])
    async def create_key(body: KeyRequest, request: Request, key: Admin) -> NewKey:
        """A new key; its secret is in this response only."""
        made = _state(request).keys.create(body.name, body.role)
        request.state.target = made.key.id
        return made

    @app.post("/v1/keys/{key_id}/revoke", response_model=KeyInfo, tags=["admin"])
    async def revoke_key(key_id: str, request: Request, key: Admin) -> KeyInfo:
        """Revoke a key: its next request is 401 (revoking it again changes nothing)."""
        request.state.target = key_id
        try:
            return _state(request).keys.revoke(key_id)
        except KeyNotFound:
            raise ApiError(404, "not_found", f"no key {key_id!r}") from None

    @app.get("/v1/audit-log", response_model=list[AuditEvent], tags=["admin"])
    async def audit_log(request: Request, key: Admin,
                        limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> list[AuditEvent]:
        """Who did what, newest first.

        Every write (key id, ``METHOD /path``, target, HTTP status), every refused key, and
        the ``medverify keys`` commands."""
        return _state(request).audit.list(limit=limit)


def _run_info(state: ServiceState, key: KeyInfo, run_id: str) -> Any:
    """The run, when this key may see it: an admin key any; another key the runs of its
    own requests and jobs."""
    try:
        info = state.runs.get_run(run_id)
    except MedverifyError:
        info = None
    if info is not None and (key.role is Role.ADMIN or state.audit.touched(key.id, info.id)
                             or state.jobs.has_run(key.id, info.id)):
        return info
    raise ApiError(404, "not_found", f"no run {run_id!r} for this key")

