"""What one worker process of the service holds: the run store (keys, jobs, audit log,
runs, the review queue), the flows loaded once (knowledge base, model, judge, risk stage)
and its metrics."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from medverify.audit.runner import Auditor
from medverify.checker import Checker
from medverify.config import Config
from medverify.errors import MedverifyError
from medverify.factcheck.loop import FactChecker, ScopedLedger, metered
from medverify.harness import close_owned
from medverify.judge import Judge, has_trait
from medverify.kb import KnowledgeBase
from medverify.kb.postgres import PostgresKB
from medverify.kit import FlowKit
from medverify.llm.facade import Model, UsageLedger, model_from_config
from medverify.records import Answer, Report
from medverify.review import (
    KBChange,
    ReviewItem,
    ReviewLabel,
    escalator,
    finish_teaching,
    label_and_teach,
)
from medverify.service.admission import CheckSlots
from medverify.service.auth import TokenBucket
from medverify.service.error_codes import ErrorCode
from medverify.service.errors import ApiError
from medverify.service.metrics import ServiceMetrics
from medverify.service.refusals import RefusalTally
from medverify.store.access import AuditLog, KeyStore
from medverify.store.jobs import JobStore
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore

log = logging.getLogger(__name__)

T = TypeVar("T")

_PROBE = ("Metformin is a first-line medicine for type 2 diabetes. The usual starting dose "
          "is 500 mg once or twice daily with meals. Insulin is used when other medicines "
          "do not control blood sugar well enough.")
"""What :meth:`ServiceState.time_a_check` checks at start: three sentences, any KB."""


@dataclass
class ServiceState:
    """The service's state in one worker; :meth:`load` fills the flows, and what failed to
    load is reported by ``/readyz`` (the endpoints that need it answer 503)."""

    config: Config
    runs: RunStore
    keys: KeyStore
    jobs: JobStore
    audit: AuditLog
    review: ReviewStore
    limiter: TokenBucket
    address_limiter: TokenBucket  # requests without a valid key, per client address
    refusals: RefusalTally  # those requests in the audit log, counted by the minute
    check_slots: CheckSlots
    worker: str
    model: Model | None = None
    checker: Checker | None = None
    factchecker: FactChecker | None = None
    problems: dict[str, str] = field(default_factory=dict)
    metrics: ServiceMetrics | None = None  # None: [service] metrics = false

    @classmethod
    def open(cls, config: Config) -> ServiceState:
        runs = RunStore(config.store_location)
        runs.interrupt_orphans()  # runs of killed processes of this host
        settings = config.service
        limiter = TokenBucket(rate=settings.rate_per_minute / 60.0, burst=settings.rate_burst)
        by_address = TokenBucket(rate=settings.auth_failures_per_minute / 60.0,
                                 burst=settings.auth_failure_burst)
        audit = AuditLog(runs)
        return cls(config=config, runs=runs, keys=KeyStore(runs), jobs=JobStore(runs),
                   audit=audit, review=ReviewStore(runs), limiter=limiter,
                   address_limiter=by_address, refusals=RefusalTally(audit),
                   check_slots=_check_slots(config, None),
                   worker=f"{socket.gethostname()}:{os.getpid()}")

    def load(self) -> None:
        """Open the KB and model and load the judge (and risk stage) once for this worker:
        the judge name is resolved once, and the check's judge and decomposer are the
        fact-checker's (its judge batched for facts) and every audit job's; the check slots
        follow what the made judge declares."""
        try:
            if self.config.model:
                self.model = model_from_config(self.config, ledger=ScopedLedger())
            self.checker = Checker.from_config(self.config, kit=FlowKit(model=self.model))
        except MedverifyError as exc:
            self.problems["checker"] = str(exc)
            return
        self.check_slots = _check_slots(self.config, self.checker.judge)
        try:
            self.factchecker = FactChecker.from_config(
                self.config,
                kit=FlowKit(kb=self.checker.kb, model=self.model, judge=self.checker.judge,
                            decomposer=self.checker.decomposer))  # type: ignore[arg-type]
        except MedverifyError as exc:
            self.problems["factcheck"] = str(exc)

    async def time_a_check(self) -> None:
        """Time one short check of this worker's own pipeline alone (nothing recorded), so
        that admission can size long answers from the first request. Only where that costs
        no model call (an offline judge, the rules decomposer, no risk stage) and checks
        are admitted through slots; elsewhere the rate is learnt from the checks served."""
        checker = self.checker
        if (checker is None or self.check_slots.slots is None
                or not has_trait(checker.judge, "offline")
                or checker.decomposer.prompt_version is not None or checker.risk is not None):
            return
        probe = Answer(question="How is type 2 diabetes treated?", text=_PROBE)
        try:
            await checker.check_answer(probe)  # the first check also loads what is lazy
            started = time.perf_counter()
            results, _ = await checker.check_answer(probe)
        except MedverifyError as exc:
            log.warning("could not time a check at start (%s): long answers are sized "
                        "once checks have been served", exc)
            return
        took = time.perf_counter() - started
        self.check_slots.timed_alone(max(1, len(results)), took)
        log.info("a check of %d claims took %.2f s alone", len(results), took)

    def finish_teaching(self) -> None:
        """Teach what closed review items settled but a stopped worker left untaught (on
        this thread: the run store's connection belongs to the event loop's)."""
        kb = self._teachable_kb()
        if self.config.review.enabled and kb is not None:
            taught = finish_teaching(self.review, kb)
            if taught:
                log.warning("taught %d reviewed item(s) a stopped worker left untaught", taught)

    @property
    def jobs_dir(self) -> Path:
        """Where audit jobs keep their outputs (answers.jsonl resumes them after a crash)."""
        return self.config.local_dir / "service-jobs"

    def readiness(self) -> dict[str, str]:
        checks = {"store": "ok"}
        try:
            self.runs.schema_version  # noqa: B018
        except Exception as exc:  # a broken store file: not ready
            checks["store"] = f"{type(exc).__name__}: {exc}"
        checks["kb"] = "ok" if self.checker is not None else self.problems.get(
            "checker", "not loaded")
        if self.checker is not None:
            checks["judge"] = "ok"
            if self.config.risk.classifier is not None:
                checks["risk"] = "ok" if self.checker.risk is not None else "not loaded"
        checks["factcheck"] = "ok" if self.factchecker is not None else self.problems.get(
            "factcheck", "not loaded")
        return checks

    def kb_generations(self) -> dict[str, int | None]:
        """``/readyz``'s KB fields: the KB's generation, the one this replica's search indexes
        have (a KB on PostgreSQL) and the lag between them; None where unknown (no KB
        loaded, a database that does not answer, no index of its own per replica). Reads
        the KB (one query on PostgreSQL), so not on the event loop."""
        kb = self.checker.kb if self.checker is not None else None
        generation = replica = None
        if kb is not None:
            try:
                with kb.reading():
                    generation = getattr(kb, "generation", None)
            except Exception as exc:  # the KB's database down: reported, not ready-breaking
                log.warning("could not read the KB's generation: %s", exc)
            replica = getattr(kb, "replica_generation", None)
        lag = None if generation is None or replica is None else generation - replica
        return {"kb_generation": generation, "kb_replica_generation": replica,
                "kb_generation_lag": lag}

    def need_checker(self) -> Checker:
        if self.checker is None:
            raise ApiError(503, ErrorCode.NOT_READY, "the service cannot check answers: "
                           + self.problems.get("checker", "not loaded") + " (see /readyz)")
        return self.checker

    def need_factchecker(self) -> FactChecker:
        if self.factchecker is None:
            raise ApiError(503, ErrorCode.NOT_READY, "the service cannot fact-check: "
                           + self.problems.get("factcheck", self.problems.get(
                               "checker", "not loaded")) + " (see /readyz)")
        return self.factchecker

    def auditor(self, job_id: str) -> Auditor:
        """An auditor for one audit job, sharing this worker's judge, embedder and model;
        its outputs (resumable) go to ``jobs_dir/<job id>``."""
        checker = self.need_checker()
        embedder = getattr(checker.kb, "embedder", None)
        return Auditor.from_config(
            self.config, out_dir=self.jobs_dir / job_id,
            kit=FlowKit(model=self.model, judge=checker.judge, decomposer=checker.decomposer,
                        embedder=embedder))

    async def checking(self, work: Callable[[], Awaitable[T]], units: int = 1) -> T:
        """Run ``work`` in one of ``[service] max_concurrent_checks`` slots, first come
        first served: under load, requests wait here in order instead of all sharing the
        CPU at once. The wait is bounded (``queue_wait_s``, then 503 ``overloaded`` before
        any work starts) and ``request_timeout_s`` counts from the slot's grant (504
        ``timeout``); ``units`` (the answer's sentences) sizes it: a long check waits for
        room in the worker's work, or is refused at once (503 ``too_long``) when it could
        not finish in time: see :mod:`medverify.service.admission`."""
        return await self.check_slots.run(work, units)

    async def check(self, answers: Sequence[Answer], **run: Any) -> list[Report]:
        """Check answers with this worker's checker, recorded in the run store; with
        ``[review] enabled`` each answer's escalated claims join the review queue in the
        transaction that records the answer (``run``: :meth:`Checker.run`'s progress,
        cancel token)."""
        return await self.need_checker().run(answers, store=self.runs,
                                             escalate=escalator(self.config), **run)

    def need_metrics(self) -> ServiceMetrics:
        settings = self.config.service
        if self.metrics is None:
            raise ApiError(409, ErrorCode.NOT_CONFIGURED, "metrics are off ([service] metrics = "
                           "false)")
        if settings.metrics_port is not None:
            raise ApiError(404, ErrorCode.NOT_FOUND, f"the metrics are served on port "
                           f"{settings.metrics_port} ([service] metrics_port), not here")
        return self.metrics

    def label_and_teach(self, item_id: str, reviewer: str, label: ReviewLabel | str,
                        **fields: str | None) -> tuple[ReviewItem, KBChange | None]:
        """Record a reviewer's label (``fields``: correction, source_url,
        source_passage_id, note); when it closes the item with something to teach, add it
        to the knowledge base this worker's checker searches (the retriever sees it at
        once: the KB's indexes are updated in place). Raises the review store's refusals
        (ItemNotFound, ItemClosed, AlreadyLabelled, InputError)."""
        return label_and_teach(self.review, item_id, reviewer, label, kb=self._teachable_kb(),
                               **fields)

    def _teachable_kb(self) -> KnowledgeBase | PostgresKB | None:
        """The knowledge base this worker's checker searches, when review can teach it."""
        kb = self.checker.kb if self.checker is not None else None
        return kb if isinstance(kb, KnowledgeBase | PostgresKB) else None

    @contextmanager
    def metered(self) -> Iterator[UsageLedger]:
        """The tokens spent in the block by this request alone (answers run concurrently)."""
        ledger = self.checker.ledger if self.checker is not None else UsageLedger()
        with metered(ledger) as used:
            yield used

    async def aclose(self) -> None:
        owned: list[object] = []
        if self.checker is not None:
            owned.extend(self.checker.owned)
        if self.model is not None:
            owned.append(self.model)
        await close_owned(owned)
        self.refusals.flush()
        self.runs.close()


def _check_slots(config: Config, judge: Judge | None) -> CheckSlots:
    """The worker's check slots: ``[service] max_concurrent_checks``, or 2 per core with a
    local (CPU-bound) judge; none with an I/O-bound judge left unlimited (the model
    layer's ``[llm] concurrency`` is the limit that counts there). ``judge``: the one this
    worker made (None before it is loaded: only the configured limit)."""
    settings = config.service
    limit = settings.max_concurrent_checks
    if limit is None and judge is not None and not has_trait(judge, "io_bound"):
        limit = 2 * (os.cpu_count() or 1)
    return CheckSlots(limit, queue_wait_s=settings.queue_wait_s,
                      timeout_s=settings.request_timeout_s,
                      work_share=settings.sync_work_share)
