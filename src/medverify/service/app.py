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
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse

from medverify.audit.store import audits as stored_audits
from medverify.config import Config
from medverify.errors import MedverifyError
from medverify.factcheck.store import factchecks as stored_factchecks
from medverify.harness import validate_answer
from medverify.kb import KnowledgeBase
from medverify.learning import LoopReport, loop_report
from medverify.learning import revert as revert_change
from medverify.records import Answer, Report, package_version
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
    LabelRequest,
    Readiness,
    RiskRequest,
    RiskResponse,
    RunRecord,
)
from medverify.service.state import ServiceState
from medverify.service.ui import router as review_pages
from medverify.store.access import AuditEvent, KeyInfo, KeyNotFound, NewKey, Role
from medverify.store.jobs import JobKind, JobNotFound, JobRow, JobState, JobStatus
from medverify.store.review import (
    AlreadyLabelled,
    ItemClosed,
    ItemNotFound,
    KBChange,
    KBChangeNotFound,
    PairAgreement,
    ReviewItem,
    ReviewStatus,
)

CONFIG_ENV = "MEDVERIFY_SERVE_CONFIG"
"""``medverify serve`` passes the worker processes their config as JSON in this variable."""

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text} for code, text in {
        400: "invalid_json: the body is not JSON in UTF-8",
        401: "unauthorized: missing, wrong or revoked key (not /healthz, /readyz)",
        403: "forbidden: the key's role is too low for this endpoint",
        404: "not_found: no such job, run, key, review item or KB change for this key (or "
             "no such path)",
        409: "not_configured: the feature needs configuration the service lacks; "
             "item_closed, already_labelled: the review item takes no label from this key",
        413: "too_large: body over max_body_bytes, or a job over max_answers_per_job",
        415: "unsupported_media_type: a POST body that is not application/json",
        422: "invalid_request (the body or a parameter does not validate) or "
             "invalid_input (an answer the checker refuses, e.g. empty)",
        429: "rate_limited: over the key's rate limit; see the Retry-After header",
        500: "internal: an unexpected error (the server log has the details)",
        503: "not_ready: the KB or models did not load (see /readyz)",
        504: "timeout: no result within request_timeout_s"}.items()}

Client = Annotated[KeyInfo, Depends(role(Role.CLIENT))]
Reviewer = Annotated[KeyInfo, Depends(role(Role.REVIEWER))]
Admin = Annotated[KeyInfo, Depends(role(Role.ADMIN))]


def create_app(config: Config, *, run_jobs: bool = True) -> FastAPI:
    """The service over ``config`` (its KB, model, judge, run store and ``[service]``
    limits). ``run_jobs=False`` leaves queued jobs to other workers (tests)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = ServiceState.open(config)
        await asyncio.to_thread(state.load)
        state.finish_teaching()
        app.state.service = state
        runner = JobRunner(state)
        if run_jobs:
            runner.start()
        try:
            yield
        finally:
            await runner.stop()
            await state.aclose()

    app = FastAPI(title="medverify", version=package_version(), lifespan=lifespan, responses=ERRORS,
                  description="Checks what medical LLM answers claim. Every request but the "
                  "health checks needs an API key: `Authorization: Bearer <key>`.")
    install_error_handlers(app)
    app.middleware("http")(audit_writes)
    app.add_middleware(BodyGuard, max_bytes=config.service.max_body_bytes)
    _routes(app, config)
    _review_routes(app)
    app.include_router(review_pages)  # the review UI (docs/review.md)
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
    fields = row.model_dump(include=set(JobState.model_fields))
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
        return Health(version=package_version())

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
        hallucination risk when a classifier is configured), arbitration decisions, and the
        tokens this request spent (``usage``). Recorded in the run store; escalated claims
        join the review queue (``[review] enabled``); batches go to ``POST
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
        state.queue_for_review([report])
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


def _review_routes(app: FastAPI) -> None:
    """The clinician review queue as JSON (the browser pages are under ``/review``)."""

    @app.get("/v1/review/items", response_model=list[ReviewItem], tags=["review"])
    async def review_items(
            request: Request, key: Reviewer, status: ReviewStatus | None = None,
            topic: str | None = None, min_priority: float | None = None,
            assignee: str | None = None, limit: Annotated[int, Query(ge=1, le=500)] = 50,
            offset: Annotated[int, Query(ge=0)] = 0) -> list[ReviewItem]:
        """The review queue: escalated claims, highest priority first, then oldest.

        Filters: ``status`` (open, needs_second, adjudication, closed; default all),
        ``topic``, ``min_priority``, ``assignee`` (a key id). While an item waits for its
        second label, a key sees only its own labels of it (the second review is blind);
        an admin key sees every label."""
        items = _state(request).review.list(status=status, min_priority=min_priority,
                                            topic=topic, assignee=assignee, limit=limit,
                                            offset=offset)
        return [_shown(item, key) for item in items]

    @app.get("/v1/review/items/{item_id}", response_model=ReviewItem, tags=["review"])
    async def review_item(item_id: str, request: Request, key: Reviewer) -> ReviewItem:
        """One review item with everything a reviewer needs to decide it.

        The answer, the claim, the passages, the deciding quote, the judge's reason and
        probabilities, the risk, the decision that escalated it, and its labels (blind
        while it waits for a second one, as in the list). 404 ``not_found`` for an unknown
        item."""
        return _shown(_review_item(_state(request), item_id), key)

    @app.post("/v1/review/items/{item_id}/labels", response_model=ReviewItem,
              tags=["review"])
    async def label_item(item_id: str, body: LabelRequest, request: Request,
                         key: Reviewer) -> ReviewItem:
        """Label a review item as this key's reviewer.

        With ``[review] labels_needed = 1`` the label closes the item; with 2, the first
        waits for a second, a second that agrees closes it and one that disagrees sends it
        to adjudication, where a third reviewer's label closes it. When the item closes
        with a correction (or FACT with a ``source_url``), the statement is added to the
        knowledge base with its provenance (see ``GET /v1/review/kb-changes``), and the
        next check retrieves it. 404 ``not_found`` for an unknown item; 409
        ``item_closed`` for a closed one, ``already_labelled`` when this key labelled it
        before; 422 ``invalid_input`` for a source URL that is not a public http(s)
        address (it is never fetched)."""
        state = _state(request)
        request.state.target = item_id
        try:
            item, _ = state.label_and_teach(
                item_id, key.id, body.label, correction=body.correction,
                source_url=body.source_url, source_passage_id=body.source_passage_id,
                note=body.note)
        except ItemNotFound:
            raise ApiError(404, "not_found", f"no review item {item_id!r}") from None
        except ItemClosed as exc:
            raise ApiError(409, "item_closed", str(exc)) from None
        except AlreadyLabelled as exc:
            raise ApiError(409, "already_labelled", str(exc)) from None
        return _shown(item, key)

    @app.post("/v1/review/items/{item_id}/assign", response_model=ReviewItem,
              tags=["review"])
    async def assign_item(item_id: str, request: Request, key: Reviewer) -> ReviewItem:
        """Take a review item: assign it to this key.

        ``GET /v1/review/items?assignee=<key id>`` lists a reviewer's items. 404
        ``not_found`` for an unknown item, 409 ``item_closed`` for a closed one."""
        request.state.target = item_id
        try:
            item = _state(request).review.assign(item_id, key.id)
        except ItemNotFound:
            raise ApiError(404, "not_found", f"no review item {item_id!r}") from None
        except ItemClosed as exc:
            raise ApiError(409, "item_closed", str(exc)) from None
        return _shown(item, key)

    @app.get("/v1/review/agreement", response_model=list[PairAgreement], tags=["review"])
    async def review_agreement(request: Request, key: Reviewer) -> list[PairAgreement]:
        """Agreement between reviewers.

        Cohen's kappa of every pair of reviewers over the items both labelled (``n``), with
        the share of identical labels (``observed``); kappa is null when it is undefined
        (both used one and the same label)."""
        return _state(request).review.agreement()

    @app.get("/v1/review/progress", response_model=LoopReport, tags=["review"])
    async def review_progress(request: Request, key: Reviewer,
                              by: Literal["day", "week", "month"] = "week") -> LoopReport:
        """The clinical loop, period by period.

        Per day, week (ISO) or month: claims checked and escalated (the escalation rate),
        labels given, items closed, the share of final labels that agree with the judge's
        category (``CANNOT_TELL`` aside), and the KB documents added and reverted; with the
        totals and the queue's items per status now."""
        return loop_report(_state(request).review, by=by)

    @app.get("/v1/review/kb-changes", response_model=list[KBChange], tags=["review"])
    async def kb_changes(request: Request, key: Reviewer,
                         include_reverted: bool = False) -> list[KBChange]:
        """The knowledge-base documents the review added, oldest first.

        Those in force; with ``include_reverted=true``, the reverted ones too."""
        return _state(request).review.kb_changes(include_reverted=include_reverted)

    @app.post("/v1/review/kb-changes/{change_id}/revert", response_model=KBChange,
              tags=["review"])
    async def revert_kb_change(change_id: int, request: Request, key: Admin) -> KBChange:
        """Take a document the review added out of the knowledge base again.

        Its chunks leave the full-text and vector indexes and the KB snapshot id changes
        back; the change is kept, marked reverted (reverting it again changes nothing).
        404 ``not_found`` for an unknown change; 503 ``not_ready`` without a loaded KB."""
        state = _state(request)
        request.state.target = str(change_id)
        kb = state.need_checker().kb
        if not isinstance(kb, KnowledgeBase):
            raise ApiError(409, "not_configured", "the knowledge base is not the embedded "
                           "store: its documents cannot be removed here")
        try:
            return revert_change(change_id, kb, state.review)
        except KBChangeNotFound:
            raise ApiError(404, "not_found", f"no KB change {change_id}") from None


def _review_item(state: ServiceState, item_id: str) -> ReviewItem:
    try:
        return state.review.get(item_id)
    except ItemNotFound:
        raise ApiError(404, "not_found", f"no review item {item_id!r}") from None


def _shown(item: ReviewItem, key: KeyInfo) -> ReviewItem:
    """The item as ``key`` may see it: while it waits for a second label, only the key's
    own labels (the second review is blind), unless the key is an admin's."""
    if key.role is Role.ADMIN or item.status is not ReviewStatus.NEEDS_SECOND:
        return item
    return item.model_copy(update={"labels": [x for x in item.labels if x.reviewer == key.id]})


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

