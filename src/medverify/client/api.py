"""The service's API as plans (:mod:`medverify.client.plans`): one method of :class:`Api`
per endpoint, building its request from the caller's arguments and parsing its response
into the service's records; :class:`~medverify.client.Client` and
:class:`~medverify.client.AsyncClient` run these plans."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal
from urllib.parse import quote

from medverify.audit.records import AuditInput
from medverify.client.errors import WaitTimeout
from medverify.client.plans import As, Call, Plan, Sleep, as_html, call_plan
from medverify.records import Answer, Report
from medverify.review import LoopReport, ReviewItem, ReviewLabel, ReviewStatus
from medverify.risk.records import RiskScore
from medverify.risk.stage import RiskText
from medverify.service.records import (
    AuditBatch,
    CheckBatch,
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

Detail = Literal["compact", "full"]
"""How much of a report ``POST /v1/check`` answers: ``compact`` (the service's default:
passages named without their texts, no raw judge output, no config) or ``full``."""

TERMINAL = frozenset({JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED})

_HEALTH = As(Health)
_READINESS = As(Readiness)
_REPORT = As(Report)
_RISK = As(RiskResponse)
_JOB = As(Job)
_JOBS = As(list[Job])
_RUN = As(RunRecord)
_KEY = As(KeyInfo)
_KEYS = As(list[KeyInfo])
_NEW_KEY = As(NewKey)
_EVENTS = As(list[AuditEvent])
_REVIEW_ITEM = As(ReviewItem)
_REVIEW_ITEMS = As(list[ReviewItem])
_LOOP_REPORT = As(LoopReport)


def _segment(value: str) -> str:
    """An id as one path segment (so an id cannot reach another route)."""
    return quote(str(value), safe="")


def _job_id(job: Job | str) -> str:
    return job.id if isinstance(job, Job) else job


def _job(job: Job | str) -> Call:
    return Call("GET", f"/v1/jobs/{_segment(_job_id(job))}", _JOB)


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


def wait_plan(job_id: str, retries_429: int, poll_s: float, timeout_s: float | None,
              clock: Callable[[], float]) -> Plan[Job]:
    """Poll the job every ``poll_s`` until it is done, failed or cancelled (``clock``: seconds,
    for ``timeout_s``)."""
    if poll_s <= 0:
        raise ValueError("poll_s must be positive")
    deadline = None if timeout_s is None else clock() + timeout_s
    while True:
        job: Job = yield from call_plan(_job(job_id), retries_429)
        if job.status in TERMINAL:
            return job
        pause = poll_s
        if deadline is not None:
            left = deadline - clock()
            if left <= 0:
                raise WaitTimeout(
                    f"job {job_id} is still {job.status.value} after {timeout_s:g} s "
                    "(it goes on running: wait again, or cancel it)", job)
            pause = min(poll_s, left)
        yield Sleep(pause)


class Api:
    """The service's API as plans, shared by :class:`Client` and :class:`AsyncClient`."""

    def __init__(self, retries_429: int) -> None:
        if retries_429 < 0:
            raise ValueError("retries_429 must be 0 or more")
        self.retries_429 = retries_429

    def call(self, call: Call) -> Plan[Any]:
        return call_plan(call, self.retries_429)

    def health(self) -> Plan[Health]:
        return self.call(Call("GET", "/healthz", _HEALTH, auth=False))

    def ready(self) -> Plan[Readiness]:
        return self.call(Call("GET", "/readyz", _READINESS, auth=False, accept=(503,)))

    def check(self, answer: Answer | str, question: str | None,
              detail: Detail = "compact") -> Plan[Report]:
        if detail not in ("compact", "full"):
            raise ValueError("detail must be 'compact' or 'full'")
        return self.call(Call("POST", "/v1/check", _REPORT, body=_answer(answer, question),
                              params={"detail": detail}))

    def risk(self, texts: Iterable[RiskText | str]) -> Plan[list[RiskScore]]:
        body = RiskRequest(texts=[_risk_text(t, i) for i, t in enumerate(texts)])
        response: RiskResponse = yield from self.call(
            Call("POST", "/v1/risk", _RISK, body=body))
        return response.scores

    def submit_check(self, answers: Iterable[Answer | str]) -> Plan[Job]:
        body = CheckBatch(answers=[_answer(a) for a in answers])
        return self.call(Call("POST", "/v1/jobs/check", _JOB, body=body))

    def submit_audit(self, inputs: Iterable[AuditInput | Answer | str]) -> Plan[Job]:
        body = AuditBatch(inputs=[_audit_input(i) for i in inputs])
        return self.call(Call("POST", "/v1/audit", _JOB, body=body))

    def submit_factcheck(self, answers: Iterable[Answer | str]) -> Plan[Job]:
        body = FactCheckBatch(answers=[_answer(a) for a in answers])
        return self.call(Call("POST", "/v1/factcheck", _JOB, body=body))

    def job(self, job: Job | str) -> Plan[Job]:
        return self.call(_job(job))

    def jobs(self, status: JobStatus | str | None, limit: int) -> Plan[list[Job]]:
        params: dict[str, str | int] = {"limit": limit}
        if status is not None:
            params["status"] = JobStatus(status).value
        return self.call(Call("GET", "/v1/jobs", _JOBS, params=params))

    def cancel(self, job: Job | str) -> Plan[Job]:
        return self.call(Call("POST", f"/v1/jobs/{_segment(_job_id(job))}/cancel", _JOB))

    def wait(self, job: Job | str, poll_s: float, timeout_s: float | None,
             clock: Callable[[], float]) -> Plan[Job]:
        return wait_plan(_job_id(job), self.retries_429, poll_s, timeout_s, clock)

    def run(self, run_id: str) -> Plan[RunRecord]:
        return self.call(Call("GET", f"/v1/runs/{_segment(run_id)}", _RUN))

    def run_report_html(self, run_id: str) -> Plan[str]:
        return self.call(Call("GET", f"/v1/runs/{_segment(run_id)}/report", as_html))

    def keys(self) -> Plan[list[KeyInfo]]:
        return self.call(Call("GET", "/v1/keys", _KEYS))

    def create_key(self, name: str, role: Role | str) -> Plan[NewKey]:
        body = KeyRequest(name=name, role=Role(role))
        return self.call(Call("POST", "/v1/keys", _NEW_KEY, body=body))

    def revoke_key(self, key_id: str) -> Plan[KeyInfo]:
        return self.call(Call("POST", f"/v1/keys/{_segment(key_id)}/revoke", _KEY))

    def audit_log(self, limit: int) -> Plan[list[AuditEvent]]:
        return self.call(Call("GET", "/v1/audit-log", _EVENTS, params={"limit": limit}))

    def review_items(self, status: ReviewStatus | str | None, topic: str | None,
                     min_priority: float | None, limit: int) -> Plan[list[ReviewItem]]:
        params: dict[str, str | int] = {"limit": limit}
        if status is not None:
            params["status"] = ReviewStatus(status).value
        if topic is not None:
            params["topic"] = topic
        if min_priority is not None:
            params["min_priority"] = str(min_priority)
        return self.call(Call("GET", "/v1/review/items", _REVIEW_ITEMS, params=params))

    def review_item(self, item_id: str) -> Plan[ReviewItem]:
        return self.call(Call("GET", f"/v1/review/items/{_segment(item_id)}", _REVIEW_ITEM))

    def label(self, item_id: str, label: ReviewLabel | str, correction: str | None,
              source_url: str | None, note: str | None) -> Plan[ReviewItem]:
        body = LabelRequest(label=ReviewLabel(label), correction=correction,
                            source_url=source_url, note=note)
        return self.call(Call("POST", f"/v1/review/items/{_segment(item_id)}/labels",
                              _REVIEW_ITEM, body=body))

    def review_progress(self) -> Plan[LoopReport]:
        return self.call(Call("GET", "/v1/review/progress", _LOOP_REPORT))
