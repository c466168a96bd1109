"""The service's Prometheus metrics (``GET /metrics``; docs/operations.md says what each one
means and how to scrape them).

Two kinds, both with the ``prometheus-client`` library:

* counted in each worker as things happen (:class:`ServiceMetrics`): requests by route
  template, method and status, with their latency; admission refusals (429, 503); the
  answers and claims checked by category, decision and confidence; model calls, errors,
  retries, latency and tokens per model and stage (an observer of
  :mod:`medverify.llm.observe`); jobs finished;
* read when scraped from what the workers share, the run store and the KB
  (:class:`StoreCollector`): jobs by kind and status, the queue's depth and age, review
  items opened, closed and waiting with the oldest's age, the KB's size and generation, and
  the drift gauges (the live window of :mod:`medverify.ops.drift`). The KB and drift
  numbers are recounted at most every ``[ops] refresh_s``.

Several workers (``medverify serve --workers N``): the library's multiprocess mode. When
``PROMETHEUS_MULTIPROC_DIR`` is set (``medverify serve`` sets it for N > 1), each worker
writes its counts to files there and a scrape of any worker (or of ``[service]
metrics_port``, served by the parent process) sums every worker's, with the shared numbers
read once from the store. One worker: the counts stay in memory.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from medverify.config import DRIFT_RATES, Config
from medverify.errors import MedverifyError
from medverify.kb.database import DB_NAME, count_rows, read_generation
from medverify.kb.postgres import PostgresKB
from medverify.llm.observe import CallEvent
from medverify.ops.drift import live_window
from medverify.ops.overturns import WINDOW_DAYS, below_target, recent_window
from medverify.records import Category, Decision, Report, package_version
from medverify.review import ReviewStatus
from medverify.service.error_codes import ErrorCode
from medverify.store.jobs import JobKind, JobStatus, JobStore
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MODEL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
REFUSALS = ((503, ErrorCode.OVERLOADED), (503, ErrorCode.TOO_LONG), (503, ErrorCode.NOT_READY),
            (503, ErrorCode.STORE_UNAVAILABLE), (429, ErrorCode.RATE_LIMITED))
"""The admission refusals counted (their series exist from the start)."""
UNMATCHED = "unmatched"
"""The route label of a request no route matched (its path is not a label: unbounded)."""


def multiprocess() -> bool:
    """Whether the counts go to ``PROMETHEUS_MULTIPROC_DIR`` (several workers)."""
    return bool(os.environ.get(MULTIPROC_ENV))


def confidence(confident: bool | None) -> str:
    """The ``confidence`` label of a claim: sure, not_sure or unassessed."""
    return "unassessed" if confident is None else "sure" if confident else "not_sure"


@dataclass(frozen=True)
class Checked:
    """What a check produced, as the metrics count it and a log line tells it: the answers,
    and the claims by (category, decision, confidence); decision ``none``: no arbitration."""

    answers: int
    claims: Tally[tuple[str, str, str]]

    @classmethod
    def of(cls, reports: Sequence[Report]) -> Checked:
        claims: Tally[tuple[str, str, str]] = Tally()
        for report in reports:
            for r in report.results:
                decision = r.arbitration.decision.value if r.arbitration else "none"
                claims[(r.category.value, decision, confidence(r.confident))] += 1
        return cls(len(reports), claims)

    def fields(self) -> dict[str, Any]:
        """For a log line: answers, claims, and claims per category and per decision."""
        categories: Tally[str] = Tally()
        decisions: Tally[str] = Tally()
        for (category, decision, _), n in self.claims.items():
            categories[category] += n
            if decision != "none":
                decisions[decision] += n
        return {"answers": self.answers, "claims": sum(self.claims.values()),
                "categories": dict(categories), "decisions": dict(decisions)}


@dataclass(frozen=True)
class _CallChildren:
    """The series of one model and stage, looked up once."""

    outcomes: dict[str, Any]
    latency: Any
    prompt: Any
    completion: Any


class ServiceMetrics:
    """One worker's metrics (see the module). ``call`` and ``retry`` make it an observer
    of model calls (:func:`medverify.llm.observe.add_observer`)."""

    _replica: Gauge | None = None  # a KB with an index per replica: see watch_kb
    _kb: Any = None

    def __init__(self, config: Config) -> None:
        self.registry = CollectorRegistry()
        self.store = StoreCollector(config)
        r = self.registry
        self.requests = Counter("medverify_http_requests", "HTTP requests answered, by route "
                                "template, method and status", ["route", "method", "status"],
                                registry=r)
        self.latency = Histogram("medverify_http_request_duration_seconds", "Time to answer a "
                                 "request", ["route", "method", "status"],
                                 buckets=REQUEST_BUCKETS, registry=r)
        self.refusals = Counter("medverify_admission_refusals", "Requests refused to protect "
                                "the service: 503 overloaded/too_long/not_ready/"
                                "store_unavailable, 429 rate_limited", ["status", "code"],
                                registry=r)
        self.answers = Counter("medverify_answers_checked", "Answers checked (source: request "
                               "= POST /v1/check, job = check jobs)", ["source"], registry=r)
        self.claims = Counter("medverify_claims", "Claims checked, by final category, "
                              "arbitration decision (none: no arbitration) and confidence",
                              ["category", "decision", "confidence"], registry=r)
        self.model_calls = Counter("medverify_model_calls", "Model calls by model, stage and "
                                   "outcome (ok, cached, error)", ["model", "stage", "outcome"],
                                   registry=r)
        self.model_errors = Counter("medverify_model_errors", "Model calls that failed, by "
                                    "kind of error", ["model", "stage", "kind"], registry=r)
        self.model_retries = Counter("medverify_model_retries", "Model call attempts retried",
                                     ["model", "stage"], registry=r)
        self.model_latency = Histogram("medverify_model_call_duration_seconds", "Time of a "
                                       "model call (not from the cache), retries included",
                                       ["model", "stage"], buckets=MODEL_BUCKETS, registry=r)
        self.tokens = Counter("medverify_model_tokens", "Tokens of model calls (kind: prompt, "
                              "completion)", ["model", "stage", "kind"], registry=r)
        self.jobs_finished = Counter("medverify_jobs_finished", "Jobs this service finished, "
                                     "by kind and status", ["kind", "status"], registry=r)
        Gauge("medverify_service_info", "1, labelled with what this service runs: its "
              "version, judge, decomposer and model (none: no model)",
              ["version", "judge", "decomposer", "model"], registry=r,
              multiprocess_mode="max").labels(package_version(), config.judge_name,
                                              config.decomposer_name, config.model or "none"
                                              ).set(1)
        self.calibration = Gauge(
            "medverify_calibration_info", "1, labelled with the confidence card the judge "
            "uses (card: its id, none: no card) and the judge it was fitted for",
            ["card", "judge"], registry=r, multiprocess_mode="max")
        self._calls: dict[tuple[str, str], _CallChildren] = {}
        self._children: dict[tuple[Any, ...], Any] = {}
        self._zeros()
        if not multiprocess():
            ProcessCollector(registry=r)  # CPU, memory, file descriptors of this worker
            r.register(self.store)

    def _zeros(self) -> None:
        """Every series an alert divides by or takes the rate of exists from the start, at
        0 (a series that appears with its first count loses that count to rate())."""
        for category in Category:
            for decision in [*(d.value for d in Decision), "none"]:
                for sure in ("sure", "not_sure", "unassessed"):
                    self.claims.labels(category.value, decision, sure)
        for status, code in REFUSALS:
            self.refusals.labels(str(status), code)
        for source in ("request", "job"):
            self.answers.labels(source)

    # -- counted as it happens ---------------------------------------------------------

    def request(self, route: str | None, method: str, status: int, seconds: float,
                error: str | None = None) -> None:
        labels = (route or UNMATCHED, method if method in METHODS else "other", str(status))
        self._child(self.requests, *labels).inc()
        self._child(self.latency, *labels).observe(seconds)
        if status in (429, 503) and error:
            self.refusals.labels(str(status), error).inc()

    def watch_kb(self, kb: Any) -> None:
        """Report the KB this worker searches: a KB on PostgreSQL gets
        ``medverify_knowledge_base_replica_generation`` (the generation this worker's
        search indexes have, read after each check and at each scrape; several workers: the
        lowest live one; 0 until its first search) and its database's size and generation
        (read at each scrape through this worker's connection)."""
        self._kb = self.store.kb = kb
        if self._replica is None and hasattr(kb, "replica_generation"):
            self._replica = Gauge("medverify_knowledge_base_replica_generation", "The KB "
                                  "generation this worker's search indexes have (it follows "
                                  "the KB's within [kb_settings] generation_poll_s of a "
                                  "search; 0: not built yet)", registry=self.registry,
                                  multiprocess_mode="livemin")
        self.replica_seen()

    def replica_seen(self) -> None:
        """Set the replica-generation gauge from the worker's KB (no query: an attribute)."""
        at = getattr(self._kb, "replica_generation", None)
        if self._replica is not None and at is not None:
            self._replica.set(at)

    def checked(self, checked: Checked, source: str) -> None:
        self.replica_seen()
        self._child(self.answers, source).inc(checked.answers)
        for labels, n in checked.claims.items():
            self._child(self.claims, *labels).inc(n)

    def call(self, event: CallEvent) -> None:
        children = self._calls.get((event.model, event.stage))
        if children is None:  # its series exist from now on, at 0 (see _zeros)
            labels = (event.model, event.stage)
            children = self._calls[labels] = _CallChildren(
                {o: self.model_calls.labels(*labels, o) for o in ("ok", "cached", "error")},
                self.model_latency.labels(*labels), self.tokens.labels(*labels, "prompt"),
                self.tokens.labels(*labels, "completion"))
        children.outcomes[event.outcome].inc()
        if event.outcome == "cached":
            return
        children.latency.observe(event.seconds)
        if event.outcome == "error":
            self.model_errors.labels(event.model, event.stage, event.error or "error").inc()
            return
        children.prompt.inc(event.prompt_tokens)
        children.completion.inc(event.completion_tokens)

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once (a lookup costs a lock and more)."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def retry(self, model: str, stage: str) -> None:
        self.model_retries.labels(model, stage).inc()

    def job_finished(self, kind: str, status: str) -> None:
        self.jobs_finished.labels(kind, status).inc()

    # -- exposition ----------------------------------------------------------------------

    def exposition_registry(self) -> CollectorRegistry:
        """What a scrape reads: this worker's registry, or with several workers every
        worker's counts from the multiprocess folder, and the store's numbers once."""
        self.replica_seen()
        if not multiprocess():
            return self.registry
        return scrape_registry(self.store)

    def exposition(self) -> tuple[bytes, str]:
        """The text format and its content type."""
        return generate_latest(self.exposition_registry()), CONTENT_TYPE_LATEST


def scrape_registry(store: StoreCollector) -> CollectorRegistry:
    """A registry summing the workers' counts from ``PROMETHEUS_MULTIPROC_DIR``, with the
    store's numbers (``medverify serve``'s parent process serves it on metrics_port)."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    registry.register(store)
    return registry


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> Any:
    """Serve ``registry`` on ``host:port`` (``/metrics``, no key) in a daemon thread; returns
    the server (``.shutdown()`` stops it)."""
    server, _ = start_http_server(port, host, registry=registry)
    return server


def metrics_for_serve(config: Config) -> Any:
    """What ``medverify serve`` sets up before its workers start: with several workers, the
    multiprocess folder (``PROMETHEUS_MULTIPROC_DIR``, or ``metrics/PORT`` beside the run
    store), emptied of a previous run's counts; with ``metrics_port`` and that folder, the
    metrics server of this (parent) process, which sums the workers'. Returns that server
    (None: a single worker serves its own)."""
    settings = config.service
    if not settings.metrics:
        return None
    if settings.workers > 1 and not os.environ.get(MULTIPROC_ENV):
        os.environ[MULTIPROC_ENV] = str(config.local_dir / "metrics" / str(settings.port))
    folder = os.environ.get(MULTIPROC_ENV)
    if not folder:
        return None
    Path(folder).mkdir(parents=True, exist_ok=True)
    for old in Path(folder).glob("*.db"):  # counts of a previous run of the service
        old.unlink()
    if settings.metrics_port is None:
        return None
    return serve_metrics(scrape_registry(StoreCollector(config)), settings.metrics_host,
                         settings.metrics_port)


class StoreCollector:
    """The numbers the workers share, read from the run store and the KB at each scrape (a
    connection of its own each time, so any thread may scrape); the KB's and the drift
    gauges are recounted at most every ``[ops] refresh_s``."""

    def __init__(self, config: Config, clock: Any = time.monotonic) -> None:
        self.config, self._clock = config, clock
        self.kb: Any = None  # a worker's KB on PostgreSQL (ServiceMetrics.watch_kb)
        self._lock = threading.Lock()
        self._slow: list[Metric] = []
        self._slow_at: float | None = None

    def describe(self) -> list[Metric]:
        return []  # not collected when registered (it opens the store)

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily("medverify_store_up", "1: the run store answered this scrape")
        try:
            with RunStore(self.config.store_location) as runs:
                found = [*_queue_metrics(runs), *self._slow_metrics(runs),
                         *_shared_kb_metrics(self.kb, size=False)]
        except (MedverifyError, sqlite3.Error):
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return [up, *found]

    def _slow_metrics(self, runs: RunStore) -> list[Metric]:
        with self._lock:
            now = self._clock()
            if self._slow_at is None or now - self._slow_at >= self.config.ops.refresh_s:
                kb = (_kb_metrics(self.config.kb) if self.config.kb_settings.location is None
                      else _shared_kb_metrics(self.kb, size=True))
                self._slow = [*kb, *_drift_metrics(runs, self.config),
                              *_sure_metrics(runs, self.config)]
                self._slow_at = now
            return self._slow


def _age(since: datetime | None) -> float:
    return 0.0 if since is None else max(0.0, (datetime.now(UTC) - since).total_seconds())


def _queue_metrics(runs: RunStore) -> list[Metric]:
    jobs, review = JobStore(runs), ReviewStore(runs)
    counts = jobs.counts()
    by_state = GaugeMetricFamily("medverify_jobs", "Jobs in the run store by kind and status",
                                 labels=["kind", "status"])
    for kind in JobKind:
        for status in JobStatus:
            by_state.add_metric([kind.value, status.value], counts.get((kind.value,
                                                                        status.value), 0))
    queued = sum(n for (_, status), n in counts.items() if status == JobStatus.QUEUED.value)
    items = review.counts()
    waiting = GaugeMetricFamily("medverify_review_items", "Review items by status",
                                labels=["status"])
    for status, n in items.items():
        waiting.add_metric([status], n)
    return [
        by_state,
        GaugeMetricFamily("medverify_job_queue_depth", "Jobs waiting for a worker",
                          value=queued),
        GaugeMetricFamily("medverify_job_queue_oldest_age_seconds", "How long the oldest "
                          "queued job has waited (0: none waits)", value=_age(
                              jobs.oldest_queued())),
        waiting,
        CounterMetricFamily("medverify_review_items_opened", "Review items ever added to the "
                            "queue", value=sum(items.values())),
        CounterMetricFamily("medverify_review_items_closed", "Review items ever closed",
                            value=items.get(ReviewStatus.CLOSED.value, 0)),
        GaugeMetricFamily("medverify_review_queue_oldest_age_seconds", "How long the oldest "
                          "item not closed has waited (0: none waits)", value=_age(
                              review.oldest_waiting())),
    ]


def _shared_kb_metrics(kb: Any, size: bool) -> list[Metric]:
    """A KB on PostgreSQL (a worker's, see :meth:`ServiceMetrics.watch_kb`), read through
    its connection: its documents and chunks (``size``, recounted every ``[ops]
    refresh_s``), else its generation (read at every scrape, so that it compares with the
    replica's); nothing without one (the parent's metrics_port server), or when the
    database does not answer."""
    if not isinstance(kb, PostgresKB):
        return []
    try:
        if size:
            documents, chunks = kb.counts()
            return [GaugeMetricFamily("medverify_knowledge_base_documents", "Documents in "
                                      "the KB", value=documents),
                    GaugeMetricFamily("medverify_knowledge_base_chunks", "Chunks (passages) "
                                      "in the KB", value=chunks)]
        return [GaugeMetricFamily("medverify_knowledge_base_generation", "The KB's "
                                  "generation: bumped by every ingest batch and every "
                                  "change the review teaches", value=kb.generation)]
    except Exception:  # the database down: the store_up gauge and the logs say so
        return []


def _kb_metrics(kb: Path | None) -> list[Metric]:
    if kb is None or not (kb / DB_NAME).is_file():
        return []
    try:
        conn = sqlite3.connect(f"file:{kb / DB_NAME}?mode=ro", uri=True)
        try:
            (documents, chunks), generation = count_rows(conn), read_generation(conn)
        finally:
            conn.close()
    except (sqlite3.Error, TypeError):
        return []
    # knowledge_base, not kb: promtool check metrics reads "kb" as kilobytes
    return [GaugeMetricFamily("medverify_knowledge_base_documents", "Documents in the KB",
                              value=documents),
            GaugeMetricFamily("medverify_knowledge_base_chunks", "Chunks (passages) in the "
                              "KB", value=chunks),
            GaugeMetricFamily("medverify_knowledge_base_generation", "The KB's generation: "
                              "bumped by every ingest batch and every change the review "
                              "teaches", value=generation)]


def _drift_metrics(runs: RunStore, config: Config) -> list[Metric]:
    window = live_window(runs, config.ops)
    families = {name: GaugeMetricFamily(f"medverify_drift_{name}", text, labels=["rate"])
                for name, text in (
                    ("share", f"Share of the claims of the last {config.ops.window_hours} h "
                     "per rate (a category, a decision, NOT_SURE)"),
                    ("share_low", "Lower end of the share's 95 % Wilson interval"),
                    ("share_high", "Upper end of the share's 95 % Wilson interval"),
                    ("baseline", f"The rate's share over the {config.ops.baseline_days} days "
                     "before the window"),
                    ("margin", "[ops] margins of the rate (absent: not watched)"),
                    ("drifted", "1: the rate moved past its baseline by more than its margin "
                     "(docs/operations.md, Drift)"))}
    nan = float("nan")
    for name in DRIFT_RATES:
        rate = window.rates[name]
        for key, value in (("share", rate.share), ("share_low", rate.low),
                           ("share_high", rate.high), ("baseline", rate.baseline)):
            families[key].add_metric([name], nan if value is None else value)
        if rate.margin is not None:
            families["margin"].add_metric([name], rate.margin)
        families["drifted"].add_metric([name], 1.0 if rate.drifted else 0.0)
    claims = GaugeMetricFamily("medverify_drift_claims", "Claims in the drift window and in "
                               "its baseline", labels=["period"])
    claims.add_metric(["window"], window.claims)
    claims.add_metric(["baseline"], window.rates[DRIFT_RATES[0]].baseline_n)
    return [*families.values(), claims]


def _sure_metrics(runs: RunStore, config: Config) -> list[Metric]:
    """Sure verdicts clinicians labelled over the last 28 days, per judge
    (:mod:`medverify.ops.overturns`); a judge without labels has no sample."""
    days = f"closed in the last {WINDOW_DAYS} days"
    families = {name: GaugeMetricFamily(f"medverify_sure_verdict{name}", text, labels=["judge"])
                for name, text in (
                    ("s_labelled", f"Sure verdicts labelled by clinicians ({days}, CANNOT_TELL "
                     "left out)"),
                    ("s_overturned", f"Of those, labelled otherwise than the judge ({days})"),
                    ("_precision", f"Share of the labelled sure verdicts kept ({days})"),
                    ("_below_target", "1: the precision is under [ops] sure_precision_target "
                     "on at least [ops] min_claims labels (docs/operations.md)"))}
    for found in recent_window(runs, WINDOW_DAYS):
        families["s_labelled"].add_metric([found.judge], found.labelled)
        families["s_overturned"].add_metric([found.judge], found.overturned)
        families["_precision"].add_metric([found.judge], found.precision or 0.0)
        families["_below_target"].add_metric(
            [found.judge], 1.0 if below_target(found, config.ops) else 0.0)
    target = GaugeMetricFamily("medverify_sure_verdict_precision_target",
                               "[ops] sure_precision_target")
    target.add_metric([], config.ops.sure_precision_target)
    return [*families.values(), target]
