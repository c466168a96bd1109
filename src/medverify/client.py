"""A Python client for ``medverify serve``: :class:`Client` (blocking) and
:class:`AsyncClient` (asyncio), typed with the service's own records.

Both classes share everything but the I/O: each method builds a *plan*, a generator that
yields what to do next (send a :class:`_Call`, or sleep) and returns the parsed record. The
plan holds the request building, the retries of a 429 (sleeping its ``Retry-After``), the
parsing of responses and errors, and the polling of :meth:`Client.wait`; a client only
sends the requests and sleeps, with ``httpx.Client`` or ``httpx.AsyncClient``.

Every failure is a :class:`ServiceError` (a :class:`~medverify.errors.MedverifyError`) with
the HTTP ``status``, a machine-readable ``code``, a ``message`` and the server's per-field
``detail``::

    with Client("http://127.0.0.1:8765", key) as client:
        report = client.check("Metformin is first-line therapy for type 2 diabetes.")
        job = client.wait(client.submit_check([answer_1, answer_2]).id, timeout_s=600)
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from medverify.audit.records import AuditInput
from medverify.errors import MedverifyError
from medverify.learning import LoopReport
from medverify.records import Answer, Report
from medverify.risk.records import RiskScore
from medverify.risk.stage import RiskText
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
from medverify.store.access import AuditEvent, KeyInfo, NewKey, Role
from medverify.store.jobs import JobStatus
from medverify.store.review import ReviewItem, ReviewLabel, ReviewStatus

__all__ = ["AsyncClient", "Client", "RateLimited", "ServiceError", "WaitTimeout"]

T = TypeVar("T")

MAX_RETRY_AFTER_S = 60.0  # the longest a 429's Retry-After is honoured
DEFAULT_RETRY_AFTER_S = 1.0  # a 429 without a usable Retry-After
TERMINAL = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})
_BODY_PREVIEW = 200

# Looked up at call time, so tests can replace them.
_sleep: Callable[[float], None] = time.sleep
_asleep: Callable[[float], Any] = asyncio.sleep
_clock: Callable[[], float] = time.monotonic


# ----------------------------------------------------------------------- errors


class ServiceError(MedverifyError):
    """A request to the service failed.

    ``status`` is the HTTP status (None when no response came: ``code`` is then
    ``unreachable`` or ``timeout``); ``code`` is the service's machine-readable code
    (``unauthorized``, ``not_found``, ``invalid_input``, ...), ``http_error`` for an error
    response that is not the service's JSON shape, ``bad_response`` for a success response
    that is not the expected record; ``detail`` holds the per-field problems of a request
    that did not validate.
    """

    def __init__(self, message: str, *, status: int | None = None, code: str = "error",
                 detail: list[dict[str, Any]] | None = None) -> None:
        where = f"HTTP {status}, {code}" if status is not None else code
        super().__init__(f"{message} [{where}]")
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail


class RateLimited(ServiceError):
    """429 Too Many Requests, still answered after the client's own retries;
    ``retry_after`` is the server's ``Retry-After`` in seconds (None when absent)."""

    def __init__(self, message: str, *, retry_after: float | None = None,
                 status: int | None = 429, code: str = "rate_limited",
                 detail: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message, status=status, code=code, detail=detail)
        self.retry_after = retry_after


class WaitTimeout(ServiceError, TimeoutError):
    """:meth:`Client.wait` gave up: the job was not finished within ``timeout_s``;
    ``job`` is its last state (it goes on running on the server)."""

    def __init__(self, message: str, job: Job) -> None:
        super().__init__(message, code="wait_timeout")
        self.job = job


# ----------------------------------------------------------------------- plans


@dataclass(frozen=True)
class _Call:
    """One request: what a client sends, and how its response becomes a record."""

    method: str
    path: str
    parse: Callable[[_Call, httpx.Response], Any]
    body: BaseModel | None = None
    params: dict[str, str | int] = field(default_factory=dict)
    auth: bool = True
    accept: tuple[int, ...] = ()  # non-2xx statuses whose body is still the answer


@dataclass(frozen=True)
class _Sleep:
    seconds: float


Step = _Call | _Sleep
Plan = Generator[Step, httpx.Response | None, T]


def _call_plan(call: _Call, retries_429: int) -> Plan[Any]:
    """Send ``call``; on 429 sleep its Retry-After and send again, ``retries_429`` times."""
    retried = 0
    while True:
        response = yield call
        assert response is not None
        if response.status_code == 429 and retried < retries_429:
            retried += 1
            after = _retry_after(response)
            yield _Sleep(min(DEFAULT_RETRY_AFTER_S if after is None else after,
                             MAX_RETRY_AFTER_S))
            continue
        return _result(call, response)


def _wait_plan(job_id: str, retries_429: int, poll_s: float,
               timeout_s: float | None) -> Plan[Job]:
    """Poll the job every ``poll_s`` until it is done, failed or cancelled."""
    if poll_s <= 0:
        raise ValueError("poll_s must be positive")
    deadline = None if timeout_s is None else _clock() + timeout_s
    while True:
        job: Job = yield from _call_plan(_job(job_id), retries_429)
        if job.status in TERMINAL:
            return job
        pause = poll_s
        if deadline is not None:
            left = deadline - _clock()
            if left <= 0:
                raise WaitTimeout(
                    f"job {job_id} is still {job.status.value} after {timeout_s:g} s "
                    "(it goes on running: wait again, or cancel it)", job)
            pause = min(poll_s, left)
        yield _Sleep(pause)


# ----------------------------------------------------------------------- responses


def _retry_after(response: httpx.Response) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date; None when absent or unusable."""
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def _result(call: _Call, response: httpx.Response) -> Any:
    if response.is_success:
        return call.parse(call, response)
    if response.status_code in call.accept:  # e.g. /readyz's 503, unless an error body
        try:
            return call.parse(call, response)
        except ServiceError:
            pass
    raise _error(call, response)


def _error(call: _Call, response: httpx.Response) -> ServiceError:
    status = response.status_code
    kind = RateLimited if status == 429 else ServiceError
    extra: dict[str, Any] = {"retry_after": _retry_after(response)} if status == 429 else {}
    try:
        body = ErrorResponse.model_validate_json(response.content).error
    except ValidationError:
        preview = response.text[:_BODY_PREVIEW].strip() or "(empty body)"
        return kind(f"{call.method} {call.path} answered HTTP {status} "
                    f"{response.reason_phrase}: {preview}",
                    status=status, code="http_error", **extra)
    return kind(body.message, status=status, code=body.code, detail=body.detail, **extra)


def _bad_response(call: _Call, response: httpx.Response, problem: str) -> ServiceError:
    preview = response.text[:_BODY_PREVIEW]
    return ServiceError(f"{call.method} {call.path} answered HTTP {response.status_code} "
                        f"with {problem}: {preview!r}",
                        status=response.status_code, code="bad_response")


class _As:
    """Parses a success response into ``kind`` (a record, or a list of them)."""

    def __init__(self, kind: Any) -> None:
        self.adapter: TypeAdapter[Any] = TypeAdapter(kind)

    def __call__(self, call: _Call, response: httpx.Response) -> Any:
        try:
            return self.adapter.validate_json(response.content)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "body"
            problem = (f"a body that is not the expected record "
                       f"({where}: {first.get('msg', 'invalid')})")
            raise _bad_response(call, response, problem) from exc


def _html(call: _Call, response: httpx.Response) -> str:
    kind = response.headers.get("content-type", "")
    if "html" not in kind:
        raise _bad_response(call, response, f"content type {kind or '(none)'}, not HTML")
    return response.text


_HEALTH = _As(Health)
_READINESS = _As(Readiness)
_REPORT = _As(Report)
_RISK = _As(RiskResponse)
_JOB = _As(Job)
_JOBS = _As(list[Job])
_RUN = _As(RunRecord)
_KEY = _As(KeyInfo)
_KEYS = _As(list[KeyInfo])
_NEW_KEY = _As(NewKey)
_EVENTS = _As(list[AuditEvent])
_REVIEW_ITEM = _As(ReviewItem)
_REVIEW_ITEMS = _As(list[ReviewItem])
_LOOP_REPORT = _As(LoopReport)


# ----------------------------------------------------------------------- requests


def _segment(value: str) -> str:
    """An id as one path segment (so an id cannot reach another route)."""
    return quote(str(value), safe="")


def _job_id(job: Job | str) -> str:
    return job.id if isinstance(job, Job) else job


def _job(job: Job | str) -> _Call:
    return _Call("GET", f"/v1/jobs/{_segment(_job_id(job))}", _JOB)


def _answer(answer: Answer | str, question: str | None = None) -> Answer:
    """``answer`` as an :class:`Answer`; ``question``, when given, replaces its question
    (and its id, when that was the default one derived from question and text)."""
    if isinstance(answer, str):
        return Answer(text=answer, question=question)
    if question is None or question == answer.question:
        return answer
    data = answer.model_dump() | {"question": question}
    if answer.id == Answer(text=answer.text, question=answer.question).id:
        data["id"] = ""
    return Answer.model_validate(data)


def _risk_text(text: RiskText | str, index: int) -> RiskText:
    return text if isinstance(text, RiskText) else RiskText(id=f"t{index + 1}", text=text)


def _audit_input(item: AuditInput | Answer | str) -> AuditInput:
    return item if isinstance(item, AuditInput) else AuditInput(answer=_answer(item))


def _request_args(call: _Call, key: str | None) -> dict[str, Any]:
    """The keyword arguments of ``httpx.Client.request`` (and of the async one) for
    ``call``."""
    headers = {"Accept": "application/json"}
    if call.auth and key:
        headers["Authorization"] = f"Bearer {key}"
    args: dict[str, Any] = {"method": call.method, "url": call.path, "headers": headers}
    if call.params:
        args["params"] = call.params
    if call.body is not None:
        headers["Content-Type"] = "application/json"
        args["content"] = call.body.model_dump_json().encode()
    return args


def _unreachable(base_url: str, call: _Call, exc: httpx.RequestError) -> ServiceError:
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError):
        return ServiceError(f"cannot reach the service at {base_url} ({reason}): is "
                            "`medverify serve` running there?", code="unreachable")
    if isinstance(exc, httpx.TimeoutException):
        return ServiceError(f"{call.method} {call.path} got no answer in time ({reason}): "
                            "raise the client's timeout, or submit the work as a job",
                            code="timeout")
    code = "unreachable" if isinstance(exc, httpx.TransportError) else "request_failed"
    return ServiceError(f"{call.method} {call.path} to {base_url} failed: {reason}",
                        code=code)


class _Api:
    """The service's API as plans, shared by :class:`Client` and :class:`AsyncClient`."""

    def __init__(self, retries_429: int) -> None:
        if retries_429 < 0:
            raise ValueError("retries_429 must be 0 or more")
        self.retries_429 = retries_429

    def call(self, call: _Call) -> Plan[Any]:
        return _call_plan(call, self.retries_429)

    def health(self) -> Plan[Health]:
        return self.call(_Call("GET", "/healthz", _HEALTH, auth=False))

    def ready(self) -> Plan[Readiness]:
        return self.call(_Call("GET", "/readyz", _READINESS, auth=False, accept=(503,)))

    def check(self, answer: Answer | str, question: str | None) -> Plan[Report]:
        return self.call(_Call("POST", "/v1/check", _REPORT, body=_answer(answer, question)))

    def risk(self, texts: Iterable[RiskText | str]) -> Plan[list[RiskScore]]:
        body = RiskRequest(texts=[_risk_text(t, i) for i, t in enumerate(texts)])
        response: RiskResponse = yield from self.call(
            _Call("POST", "/v1/risk", _RISK, body=body))
        return response.scores

    def submit_check(self, answers: Iterable[Answer | str]) -> Plan[Job]:
        body = CheckBatch(answers=[_answer(a) for a in answers])
        return self.call(_Call("POST", "/v1/jobs/check", _JOB, body=body))

    def submit_audit(self, inputs: Iterable[AuditInput | Answer | str]) -> Plan[Job]:
        body = AuditBatch(inputs=[_audit_input(i) for i in inputs])
        return self.call(_Call("POST", "/v1/audit", _JOB, body=body))

    def submit_factcheck(self, answers: Iterable[Answer | str]) -> Plan[Job]:
        body = FactCheckBatch(answers=[_answer(a) for a in answers])
        return self.call(_Call("POST", "/v1/factcheck", _JOB, body=body))

    def job(self, job: Job | str) -> Plan[Job]:
        return self.call(_job(job))

    def jobs(self, status: JobStatus | str | None, limit: int) -> Plan[list[Job]]:
        params: dict[str, str | int] = {"limit": limit}
        if status is not None:
            params["status"] = JobStatus(status).value
        return self.call(_Call("GET", "/v1/jobs", _JOBS, params=params))

    def cancel(self, job: Job | str) -> Plan[Job]:
        return self.call(_Call("POST", f"/v1/jobs/{_segment(_job_id(job))}/cancel", _JOB))

    def wait(self, job: Job | str, poll_s: float, timeout_s: float | None) -> Plan[Job]:
        return _wait_plan(_job_id(job), self.retries_429, poll_s, timeout_s)

    def run(self, run_id: str) -> Plan[RunRecord]:
        return self.call(_Call("GET", f"/v1/runs/{_segment(run_id)}", _RUN))

    def run_report_html(self, run_id: str) -> Plan[str]:
        return self.call(_Call("GET", f"/v1/runs/{_segment(run_id)}/report", _html))

    def keys(self) -> Plan[list[KeyInfo]]:
        return self.call(_Call("GET", "/v1/keys", _KEYS))

    def create_key(self, name: str, role: Role | str) -> Plan[NewKey]:
        body = KeyRequest(name=name, role=Role(role))
        return self.call(_Call("POST", "/v1/keys", _NEW_KEY, body=body))

    def revoke_key(self, key_id: str) -> Plan[KeyInfo]:
        return self.call(_Call("POST", f"/v1/keys/{_segment(key_id)}/revoke", _KEY))

    def audit_log(self, limit: int) -> Plan[list[AuditEvent]]:
        return self.call(_Call("GET", "/v1/audit-log", _EVENTS, params={"limit": limit}))

    def review_items(self, status: ReviewStatus | str | None, topic: str | None,
                     min_priority: float | None, limit: int) -> Plan[list[ReviewItem]]:
        params: dict[str, str | int] = {"limit": limit}
        if status is not None:
            params["status"] = ReviewStatus(status).value
        if topic is not None:
            params["topic"] = topic
        if min_priority is not None:
            params["min_priority"] = str(min_priority)
        return self.call(_Call("GET", "/v1/review/items", _REVIEW_ITEMS, params=params))

    def review_item(self, item_id: str) -> Plan[ReviewItem]:
        return self.call(_Call("GET", f"/v1/review/items/{_segment(item_id)}", _REVIEW_ITEM))

    def label(self, item_id: str, label: ReviewLabel | str, correction: str | None,
              source_url: str | None, note: str | None) -> Plan[ReviewItem]:
        body = LabelRequest(label=ReviewLabel(label), correction=correction,
                            source_url=source_url, note=note)
        return self.call(_Call("POST", f"/v1/review/items/{_segment(item_id)}/labels",
                               _REVIEW_ITEM, body=body))

    def review_progress(self) -> Plan[LoopReport]:
        return self.call(_Call("GET", "/v1/review/progress", _LOOP_REPORT))


# ----------------------------------------------------------------------- clients


class _Base:
    def __init__(self, base_url: str, key: str | None, retries_429: int) -> None:
        self.base_url = str(base_url)
        self._key = key
        self._api = _Api(retries_429)

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({self.base_url!r})"


class Client(_Base):
    """A blocking client of ``medverify serve`` (one ``httpx.Client``; close it, or use
    it as a context manager).

    ``key`` is an API key's secret (None for :meth:`health` and :meth:`ready` only);
    ``timeout`` is seconds per request; a 429 is retried ``retries_429`` times, after its
    ``Retry-After`` (at most 60 s); ``transport`` replaces httpx's (e.g. a
    ``httpx.MockTransport`` in tests). Every failure raises :class:`ServiceError`.
    """

    def __init__(self, base_url: str, key: str | None, *, timeout: float = 60.0,
                 retries_429: int = 3, transport: httpx.BaseTransport | None = None) -> None:
        super().__init__(base_url, key, retries_429)
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout,
                                  transport=transport)

    def _run(self, plan: Plan[T]) -> T:
        reply: httpx.Response | None = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as done:
                return done.value
            if isinstance(step, _Sleep):
                _sleep(step.seconds)
                reply = None
                continue
            try:
                reply = self._http.request(**_request_args(step, self._key))
            except httpx.RequestError as exc:
                raise _unreachable(self.base_url, step, exc) from exc

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def health(self) -> Health:
        """``GET /healthz``: the process is up (no key needed)."""
        return self._run(self._api.health())

    def ready(self) -> Readiness:
        """``GET /readyz``: whether the service can take work (``ready`` False on 503)."""
        return self._run(self._api.ready())

    def check(self, answer: Answer | str, question: str | None = None) -> Report:
        """Check one answer and wait for its :class:`Report` (``POST /v1/check``)."""
        return self._run(self._api.check(answer, question))

    def risk(self, texts: Iterable[RiskText | str]) -> list[RiskScore]:
        """Hallucination risk of each text (plain strings get ids ``t1``, ``t2``, ...);
        raises ServiceError code ``not_configured`` when the service has no classifier."""
        return self._run(self._api.risk(texts))

    def submit_check(self, answers: Iterable[Answer | str]) -> Job:
        """Queue answers to check as one job (``POST /v1/jobs/check``)."""
        return self._run(self._api.submit_check(answers))

    def submit_audit(self, inputs: Iterable[AuditInput | Answer | str]) -> Job:
        """Queue answers with their cited sources for a source audit (``POST /v1/audit``)."""
        return self._run(self._api.submit_audit(inputs))

    def submit_factcheck(self, answers: Iterable[Answer | str]) -> Job:
        """Queue answers to fact-check and rewrite (``POST /v1/factcheck``)."""
        return self._run(self._api.submit_factcheck(answers))

    def job(self, job_id: Job | str) -> Job:
        return self._run(self._api.job(job_id))

    def jobs(self, status: JobStatus | str | None = None, limit: int = 50) -> list[Job]:
        return self._run(self._api.jobs(status, limit))

    def cancel(self, job_id: Job | str) -> Job:
        return self._run(self._api.cancel(job_id))

    def wait(self, job_id: Job | str, *, poll_s: float = 0.5,
             timeout_s: float | None = None) -> Job:
        """Poll until the job is done, failed or cancelled, and return it; raises
        :class:`WaitTimeout` (a ServiceError and a TimeoutError) after ``timeout_s``."""
        return self._run(self._api.wait(job_id, poll_s, timeout_s))

    def run(self, run_id: str) -> RunRecord:
        return self._run(self._api.run(run_id))

    def run_report_html(self, run_id: str) -> str:
        return self._run(self._api.run_report_html(run_id))

    def keys(self) -> list[KeyInfo]:
        """Every API key (admin)."""
        return self._run(self._api.keys())

    def create_key(self, name: str, role: Role | str = Role.CLIENT) -> NewKey:
        """A new API key (admin); its ``secret`` is shown only this once."""
        return self._run(self._api.create_key(name, role))

    def revoke_key(self, key_id: str) -> KeyInfo:
        return self._run(self._api.revoke_key(key_id))

    def audit_log(self, limit: int = 100) -> list[AuditEvent]:
        """The latest audit-log events (admin)."""
        return self._run(self._api.audit_log(limit))

    def review_items(self, status: ReviewStatus | str | None = None, topic: str | None = None,
                     min_priority: float | None = None, limit: int = 50) -> list[ReviewItem]:
        """The review queue (reviewer or admin key), highest priority first; filters as
        ``GET /v1/review/items``."""
        return self._run(self._api.review_items(status, topic, min_priority, limit))

    def review_item(self, item_id: str) -> ReviewItem:
        """One review item with everything a reviewer needs to decide it."""
        return self._run(self._api.review_item(item_id))

    def label(self, item_id: str, label: ReviewLabel | str, correction: str | None = None,
              source_url: str | None = None, note: str | None = None) -> ReviewItem:
        """Label a review item as this key's reviewer; returns the item as it is now
        (a closing label with a correction, or FACT with a source URL, teaches the KB)."""
        return self._run(self._api.label(item_id, label, correction, source_url, note))

    def review_progress(self) -> LoopReport:
        """The clinical loop report (per week, with the totals and the queue now)."""
        return self._run(self._api.review_progress())


class AsyncClient(_Base):
    """The asyncio twin of :class:`Client`: the same methods, awaited (one
    ``httpx.AsyncClient``; ``await close()``, or ``async with``)."""

    def __init__(self, base_url: str, key: str | None, *, timeout: float = 60.0,
                 retries_429: int = 3,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        super().__init__(base_url, key, retries_429)
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout,
                                       transport=transport)

    async def _run(self, plan: Plan[T]) -> T:
        reply: httpx.Response | None = None
        while True:
            try:
                step = plan.send(reply)
            except StopIteration as done:
                return done.value
            if isinstance(step, _Sleep):
                await _asleep(step.seconds)
                reply = None
                continue
            try:
                reply = await self._http.request(**_request_args(step, self._key))
            except httpx.RequestError as exc:
                raise _unreachable(self.base_url, step, exc) from exc

    async def close(self) -> None:
        await self._http.aclose()

    aclose = close

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def health(self) -> Health:
        return await self._run(self._api.health())

    async def ready(self) -> Readiness:
        return await self._run(self._api.ready())

    async def check(self, answer: Answer | str, question: str | None = None) -> Report:
        return await self._run(self._api.check(answer, question))

    async def risk(self, texts: Iterable[RiskText | str]) -> list[RiskScore]:
        return await self._run(self._api.risk(texts))

    async def submit_check(self, answers: Iterable[Answer | str]) -> Job:
        return await self._run(self._api.submit_check(answers))

    async def submit_audit(self, inputs: Iterable[AuditInput | Answer | str]) -> Job:
        return await self._run(self._api.submit_audit(inputs))

    async def submit_factcheck(self, answers: Iterable[Answer | str]) -> Job:
        return await self._run(self._api.submit_factcheck(answers))

    async def job(self, job_id: Job | str) -> Job:
        return await self._run(self._api.job(job_id))

    async def jobs(self, status: JobStatus | str | None = None, limit: int = 50) -> list[Job]:
        return await self._run(self._api.jobs(status, limit))

    async def cancel(self, job_id: Job | str) -> Job:
        return await self._run(self._api.cancel(job_id))

    async def wait(self, job_id: Job | str, *, poll_s: float = 0.5,
                   timeout_s: float | None = None) -> Job:
        return await self._run(self._api.wait(job_id, poll_s, timeout_s))

    async def run(self, run_id: str) -> RunRecord:
        return await self._run(self._api.run(run_id))

    async def run_report_html(self, run_id: str) -> str:
        return await self._run(self._api.run_report_html(run_id))

    async def keys(self) -> list[KeyInfo]:
        return await self._run(self._api.keys())

    async def create_key(self, name: str, role: Role | str = Role.CLIENT) -> NewKey:
        return await self._run(self._api.create_key(name, role))

    async def revoke_key(self, key_id: str) -> KeyInfo:
        return await self._run(self._api.revoke_key(key_id))

    async def audit_log(self, limit: int = 100) -> list[AuditEvent]:
        return await self._run(self._api.audit_log(limit))

    async def review_items(self, status: ReviewStatus | str | None = None,
                           topic: str | None = None, min_priority: float | None = None,
                           limit: int = 50) -> list[ReviewItem]:
        return await self._run(self._api.review_items(status, topic, min_priority, limit))

    async def review_item(self, item_id: str) -> ReviewItem:
        return await self._run(self._api.review_item(item_id))

    async def label(self, item_id: str, label: ReviewLabel | str,
                    correction: str | None = None, source_url: str | None = None,
                    note: str | None = None) -> ReviewItem:
        return await self._run(self._api.label(item_id, label, correction, source_url, note))

    async def review_progress(self) -> LoopReport:
        return await self._run(self._api.review_progress())
