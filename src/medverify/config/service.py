"""Settings of the HTTP service (``[service]``), its clinician review queue (``[review]``)
and its operation: drift reports and gauges (``[ops]``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from medverify.config.base import Section


class ServiceSettings(Section):
    """``medverify serve``: the HTTP service (see docs/service.md)."""

    host: str = "127.0.0.1"
    port: int = Field(8765, ge=1, le=65535)
    workers: int = Field(1, ge=1, le=64)
    max_body_bytes: int = Field(1_048_576, ge=1024)  # larger bodies: 413
    max_answers_per_job: int = Field(1000, ge=1)
    # synchronous endpoints: 504 after this much work (POST /v1/check: counted from when
    # its check slot is granted, not from arrival; the cut-off run is recorded interrupted)
    request_timeout_s: float = Field(30.0, gt=0)
    # POST /v1/check at once per worker, the rest wait; None: 2 per core with a local
    # (CPU-bound) judge, no limit with the LLM judge ([llm] concurrency caps its calls)
    max_concurrent_checks: int | None = Field(None, ge=1)
    # longest a check waits for a slot; then 503 overloaded + Retry-After, nothing checked
    # or recorded. Larger: fewer refusals, longer waits; 0: refuse whenever all are busy
    queue_wait_s: float = Field(5.0, ge=0)
    # share of request_timeout_s a check's predicted time (its sentences times the learnt
    # time of one, alone) may take: a longer answer is refused at once (503 too_long, to
    # jobs), and a long one that fits takes several slots so fewer checks slow it. Lower:
    # long answers go to jobs sooner; higher: less room for a wrong prediction (504)
    sync_work_share: float = Field(0.8, gt=0, le=1)
    rate_per_minute: int = Field(600, ge=1)  # per API key; beyond it: 429 + Retry-After
    rate_burst: int = Field(60, ge=1)
    # requests without a valid key (none, wrong, revoked) per client address, checked
    # before any key is read; beyond it that address gets 429 + Retry-After on every
    # keyed endpoint, a valid key included, until a token is due (per worker process)
    auth_failures_per_minute: int = Field(30, ge=1)
    auth_failure_burst: int = Field(20, ge=1)  # such requests an address may make at once
    job_concurrency: int = Field(2, ge=1)  # jobs run at once per worker
    job_poll_s: float = Field(0.2, gt=0)
    max_job_attempts: int = Field(3, ge=1)  # a job a crash interrupted this often: failed
    heartbeat_s: float = Field(2.0, gt=0)  # a running job's worker says it is alive
    stale_after_s: float = Field(10.0, gt=0)  # no heartbeat this long: its worker died
    shutdown_grace_s: float = Field(20.0, ge=0)  # in-flight jobs may finish this long
    # GET /metrics in the Prometheus text format (docs/operations.md); false: no metric is
    # kept and /metrics answers 409
    metrics: bool = True
    # serve the metrics on this port instead, without a key (bind it where only Prometheus
    # reaches: metrics_host); None: on the API's port, for admin keys only
    metrics_port: int | None = Field(None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"  # the address metrics_port listens on
    # the service's log lines from this level: debug, info (one line per request), warning
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # text: human-readable; json: one JSON object a line; auto: text on a terminal, else json
    log_format: Literal["auto", "text", "json"] = "auto"
    # one line per request: request id, key id, route, status, duration, claims (at info)
    access_log: bool = True


class ReviewSettings(Section):
    """The clinician review queue (docs/review.md): escalated claims of the service's checks
    become review items."""

    enabled: bool = True  # escalated claims of POST /v1/check and check jobs are queued
    labels_needed: int = Field(1, ge=1, le=2)  # 2: two reviewers, adjudication on disagreement
    # a checked claim matching a closed review item of the same KB lineage gets the
    # reviewer's label (rule "reviewed", never escalated again); False: the judge decides
    # every claim anew and reviewed claims can be queued again (checks recorded in a run
    # store only: the store holds the review queue)
    settle: bool = True
    # word-sequence similarity from which a claim restates a reviewed one (same key words,
    # numbers, negation and hedging too); 1.0: only the same text once normalised settles
    near_duplicate: float = Field(0.9, ge=0.5, le=1.0)
    # taught (clinician-reviewed) documents are searched apart from the rest of the KB and
    # at most this many are added to a claim's passages, only when they hold at least half
    # of its key content: teaching then changes only the verdicts whose evidence includes a
    # taught document (0: taught documents are never retrieved)
    reviewed_passages: int = Field(2, ge=0, le=20)


DRIFT_RATES = ("FACT", "HALLUCINATION", "JUDGMENT_ERROR", "COVERAGE_GAP", "ERROR", "ACCEPT",
               "FLAG", "ESCALATE", "NOT_SURE")
"""The rates the drift report follows: each category's share of the claims checked, each
arbitration decision's, and the share of verdicts shown as not sure (medverify.ops.drift)."""


class OpsSettings(Section):
    """``medverify ops report`` and the drift gauges of the service's ``/metrics``
    (docs/operations.md)."""

    # a day (or the live window) is compared with the claims of this many days before it
    baseline_days: int = Field(7, ge=1, le=90)
    # a day, window or baseline with fewer claims is shown but never called drifted; a judge
    # with fewer sure verdicts labelled (28 days) is never called below sure_precision_target
    min_claims: int = Field(20, ge=1)
    # rate -> margin (a share, 0.05 = 5 points): a day is drifted on a rate that rises above
    # its baseline by more than the margin while the day's 95 % Wilson interval lies wholly
    # above the baseline; a negative margin watches a fall the same way. Rates: DRIFT_RATES.
    # Setting margins replaces these defaults
    margins: dict[str, float] = Field(default_factory=lambda: {
        "ERROR": 0.05, "HALLUCINATION": 0.10, "ESCALATE": 0.10})
    # the drift gauges of /metrics compare the last this many hours with the baseline
    window_hours: int = Field(24, ge=1, le=24 * 14)
    # seconds between recounts of the drift gauges and the KB's size (0: at every scrape)
    refresh_s: float = Field(60.0, ge=0)
    # sure verdicts overturned (ops report, review progress, medverify_sure_verdict_* gauges):
    # a judge whose sure verdicts clinicians kept less often than this over the last 28 days
    # (with at least min_claims of them labelled) sets medverify_sure_verdict_below_target
    # and fires MedverifySureVerdictsOverturned. 0.7 is the precision the built-in
    # calibration requires before it calls a FACT sure: lower, "sure" no longer means what
    # was calibrated; higher would alert on a judge working as calibrated
    sure_precision_target: float = Field(0.7, ge=0, le=1)

    @field_validator("margins")
    @classmethod
    def _known_rates(cls, value: dict[str, float]) -> dict[str, float]:
        upper = {name.upper(): float(margin) for name, margin in value.items()}
        unknown = sorted(set(upper) - set(DRIFT_RATES))
        if unknown:
            raise ValueError(f"unknown rate(s) {unknown}; rates: {list(DRIFT_RATES)}")
        return upper
