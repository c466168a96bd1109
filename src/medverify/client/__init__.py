"""A Python client for ``medverify serve``: :class:`Client` (blocking) and
:class:`AsyncClient` (asyncio), typed with the service's own records.

Both classes share everything but the I/O: each method builds a *plan*, a generator that
yields what to do next (send a :class:`~medverify.client.plans.Call`, or sleep) and
returns the parsed record. The plan holds the request building, the retries of a 429
(sleeping its ``Retry-After``), the parsing of responses and errors, and the polling of
:meth:`Client.wait`; a client only sends the requests and sleeps, with ``httpx.Client`` or
``httpx.AsyncClient``. The plans are in :mod:`medverify.client.api` (one per endpoint)
over :mod:`medverify.client.plans` (calls, 429 retries, response parsing); the errors in
:mod:`medverify.client.errors`.

Every failure is a :class:`ServiceError` (a :class:`~medverify.errors.MedverifyError`) with
the HTTP ``status``, a machine-readable ``code``, a ``message`` and the server's per-field
``detail``::

    with Client("http://127.0.0.1:8765", key) as client:
        report = client.check("Metformin is first-line therapy for type 2 diabetes.")
        job = client.wait(client.submit_check([answer_1, answer_2]).id, timeout_s=600)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import httpx

from medverify.audit.records import AuditInput
from medverify.client.api import Api, Detail
from medverify.client.errors import (
    Overloaded,
    RateLimited,
    ServiceError,
    TooLong,
    WaitTimeout,
)
from medverify.client.plans import Plan, Sleep, request_args, unreachable
from medverify.records import Answer, Report
from medverify.review import LoopReport, ReviewItem, ReviewLabel, ReviewStatus
from medverify.risk.records import RiskScore
from medverify.risk.stage import RiskText
from medverify.service.records import Health, Job, Readiness, RunRecord
from medverify.store.access import AuditEvent, KeyInfo, NewKey, Role
from medverify.store.jobs import JobStatus

__all__ = ["AsyncClient", "Client", "Overloaded", "RateLimited", "ServiceError", "TooLong",
           "WaitTimeout"]

T = TypeVar("T")

# Looked up at call time, so tests can replace them.
_sleep: Callable[[float], None] = time.sleep
_asleep: Callable[[float], Any] = asyncio.sleep
_clock: Callable[[], float] = time.monotonic


class _Base:
    def __init__(self, base_url: str, key: str | None, retries_429: int) -> None:
        self.base_url = str(base_url)
        self._key = key
        self._api = Api(retries_429)

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({self.base_url!r})"


class Client(_Base):
    """A blocking client of ``medverify serve`` (one ``httpx.Client``; close it, or use
    it as a context manager).

    ``key`` is an API key's secret (None for :meth:`health` and :meth:`ready` only);
    ``timeout`` is seconds per request; a 429 is retried ``retries_429`` times, after its
    ``Retry-After`` (at most 60 s); a 503 ``overloaded`` is not retried but raised at once
    as :class:`Overloaded` (with ``retry_after``); ``transport`` replaces httpx's (e.g. a
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
            if isinstance(step, Sleep):
                _sleep(step.seconds)
                reply = None
                continue
            try:
                reply = self._http.request(**request_args(step, self._key))
            except httpx.RequestError as exc:
                raise unreachable(self.base_url, step, exc) from exc

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

    def check(self, answer: Answer | str, question: str | None = None, *,
              detail: Detail = "compact") -> Report:
        """Check one answer and wait for its :class:`Report` (``POST /v1/check``).
        ``detail="compact"`` (default): each claim's decision, category, confidence,
        deciding quote and the passages it names, without their texts (``notes["response"]``
        says so); ``"full"``: the whole report, as :meth:`run` reads it from the store."""
        return self._run(self._api.check(answer, question, detail))

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
        return self._run(self._api.wait(job_id, poll_s, timeout_s, _clock))

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
            if isinstance(step, Sleep):
                await _asleep(step.seconds)
                reply = None
                continue
            try:
                reply = await self._http.request(**request_args(step, self._key))
            except httpx.RequestError as exc:
                raise unreachable(self.base_url, step, exc) from exc

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

    async def check(self, answer: Answer | str, question: str | None = None, *,
                    detail: Detail = "compact") -> Report:
        return await self._run(self._api.check(answer, question, detail))

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
        return await self._run(self._api.wait(job_id, poll_s, timeout_s, _clock))

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
