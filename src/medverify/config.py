"""One typed configuration object.

Precedence: defaults < TOML file (``--config`` or ``$MEDVERIFY_HOME/config.toml``) <
environment (``MEDVERIFY_<FIELD>``, nested with ``__``, e.g. ``MEDVERIFY_LLM__TIMEOUT_S``)
< explicit overrides (CLI flags). Secrets are never stored here: a model spec names the
environment variable that holds the key, resolved at first use.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from medverify.connections import dialect_of, display, sqlite_path
from medverify.errors import ConfigError

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"


def home() -> Path:
    """medverify's home directory (run store, request cache): ``$MEDVERIFY_HOME`` or
    ``~/.medverify``."""
    return Path(os.environ.get("MEDVERIFY_HOME") or Path.home() / ".medverify")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSettings(_Section):
    """``[llm]``: how every model call is made (docs/models.md, "Limits")."""

    timeout_s: float = Field(60.0, gt=0)  # one attempt; the budgets below can cut it shorter
    max_retries: int = Field(4, ge=0)
    backoff_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(30.0, ge=0)
    concurrency: int = Field(8, ge=1)
    cache: bool = True
    # The total time of one call: every attempt and the waits between them, from its first
    # attempt. A stalled endpoint is an ERROR after this long instead of after (max_retries
    # + 1) x timeout_s; a server that needs longer than this for one legitimate reply (a
    # long generation on a slow machine) fails too: raise it, or per model with the spec's
    # ?budget=. 0: no limit (in-process models get at least their own timeout)
    call_budget_s: float = Field(30.0, ge=0)
    # The time the model calls of one answer's check may take together (decomposition,
    # judging, re-checking, waiting for a free slot); calls still going then end as ERROR.
    # Long answers on slow servers need more. 0: no limit (the default for in-process models)
    answer_budget_s: float = Field(45.0, ge=0)
    # The largest model reply read: the HTTP body as it arrives (JSON and log-probabilities
    # included; reading stops past it) or an in-process model's text. A larger reply is an
    # ERROR, never a verdict, and is not cached; a call holds at most about this much
    max_reply_bytes: int = Field(1_000_000, ge=1024)
    # The most characters of a judge's reply and reasoning kept in a verdict (raw_output,
    # reasons, quotes: reports and the run store hold them per claim); longer text is cut
    # and ends with a "[truncated ...]" mark
    max_stored_chars: int = Field(20_000, ge=200)

    @model_validator(mode="after")
    def _budget_covers_timeout(self) -> ModelSettings:
        """A timeout set above the default call budget gets one whole attempt: a config
        that says ``timeout_s = 120`` is not cut to 30 s by a budget it never set."""
        explicit = self.model_fields_set
        if ("timeout_s" in explicit and "call_budget_s" not in explicit
                and 0 < self.call_budget_s < self.timeout_s):
            self.call_budget_s = self.timeout_s
        return self


class KBSettings(_Section):
    chunk_tokens: int = Field(512, ge=16)
    chunk_overlap: int = Field(100, ge=0)
    embedder: str = DEFAULT_EMBEDDER
    batch_size: int = Field(64, ge=1)
    # the model embedder's precision and device (docs/kb.md, "Embedding precision"): auto =
    # fp32 (computed in fp16 on a CUDA GPU); int8 (CPU only) is 2-3x faster, opt-in. A KB
    # records the precision of its vectors and queries it in that precision, whatever
    # this says
    embed_precision: Literal["auto", "fp32", "int8"] = "auto"
    embed_device: Literal["auto", "cpu", "cuda"] = "auto"
    # what runs the model embedder on the CPU: torch, or ONNX Runtime (`pip install
    # 'medverify[onnx]'`; exported once into $MEDVERIFY_HOME/onnx; fp32 only; the same
    # vectors, a query about 2x faster: docs/kb.md)
    embed_runtime: Literal["torch", "onnx"] = "torch"
    # the vector index (docs/scale.md): auto = exact below index_threshold chunks, IVF above;
    # a KB records its choice, and one built with another kind is refused (kb reindex)
    index: Literal["auto", "flat", "ivf", "ivfpq", "hnsw"] = "auto"
    index_threshold: int = Field(100_000, ge=1)
    nprobe: int = Field(32, ge=1)  # IVF lists scanned per query
    ef_search: int = Field(128, ge=1)  # HNSW candidate list size
    # rank lexical queries past 1,000 postings without bm25() on KBs of at least this many
    # chunks (fast, but its top 10 agrees poorly with bm25's: docs/scale.md); None: off
    lexical_bounded_from: int | None = Field(None, ge=0)
    # rank lexical queries from the KB's stored postings (FTS5's bm25 computed in numpy:
    # the same scores and order as bm25(), several times faster at 1M chunks: docs/scale.md)
    # on KBs of at least this many chunks that hold postings built at their current
    # generation (`KnowledgeBase.build_lexical_postings`); None: always bm25()
    lexical_postings_from: int | None = Field(100_000, ge=0)


class RetrievalSettings(_Section):
    top_k: int = Field(7, ge=1)
    mode: Literal["hybrid", "lexical", "dense"] = "hybrid"
    candidates: int = Field(50, ge=1)
    rrf_k: int = Field(60, ge=1)
    batch: int = Field(16, ge=1)


class JudgeSettings(_Section):
    """Options of the built-in and cascade judges (the LLM judge takes ``claims_per_call``)."""

    verifier: Path | None = None
    support_threshold: float | None = Field(None, ge=0.0, le=1.0)
    contradict_threshold: float | None = Field(None, ge=0.0, le=1.0)
    batch_size: int = Field(32, ge=1)
    cascade_high: float = Field(0.9, ge=0.0, le=1.0)
    cascade_low: float = Field(0.1, ge=0.0, le=1.0)
    # Which claims the cascade sends on: "margins" (the built-in probabilities are between
    # cascade_low and cascade_high) or "not_sure" (every verdict the built-in judge does not
    # give confidently: with the default calibration, most of them, so most claims cost a
    # model call).
    cascade_route: Literal["margins", "not_sure"] = "margins"
    # The second stage: a registered judge that declares second_stage (medverify.judge.
    # second_stages), e.g. "llm" (generated JSON with quotes; slower, quotes to show) or
    # "llm-scored" (two Yes/No passes read from log-probabilities; needs a server or local
    # model that returns them, and a fitted prior correction to be confident). Another
    # name is a ConfigError when the cascade is built.
    cascade_second: str = "llm"
    # How sure a verdict is (docs/judges.md, "Bring your own judge"). A confidence card
    # fitted by `medverify calibrate` (a file, or the name of a shipped card or of one in
    # $MEDVERIFY_HOME/calibrations): every verdict of the judge the card was fitted for gets
    # the card's calibrated confidence; a verdict of another judge gets none (a warning).
    # A built-in judge calibration file (families; scripts/calibrate_judge.py) replaces the
    # shipped one. None: the built-in judge uses its shipped calibration, other judges give
    # no confidence.
    calibration: str | None = None
    # The built-in judge's calibration family: "general" holds on every training family;
    # "checkcovid", "citint" or "scifact" fit claims like theirs better. None: the built-in
    # judge gives no confidence and marks no verdict confident or not sure.
    calibration_family: str | None = "general"
    # The LLM judge asks for the log-probabilities of the tokens it writes (servers that
    # return them, and the local provider) and records how probable its true/false answers
    # were (Verdict.signals): what a confidence card learns from. Off: no signal, cheaper
    # replies on servers that charge for them.
    logprobs: bool = True
    # Self-consistency for the LLM judge: ask this many times (the first at temperature 0,
    # the rest sampled) and record the share that agree with the first reply's category
    # (Verdict.signals["agreement"]). Each extra sample costs one more model call per batch;
    # 1: off.
    samples: int = Field(1, ge=1, le=10)
    # Exact checks (numbers and dose counts, negation, direction, frequency words,
    # population, drug, entity) on every passage that would support a claim or is on its
    # point: off lets a wrong dose or interval through as FACT, and nothing is escalated
    # by rule vetoed.
    exact_checks: bool = True
    # The built-in judge quotes the sentence it relied on (off: no quote and no second pass
    # over long passages; `eval pairs` turns it off, labels never depend on the quote).
    quotes: bool = True
    # Passages the LLM judge puts in one call with its claims (fact-checking raises it).
    max_passages: int = Field(10, ge=1)


class FetchSettings(_Section):
    """The safe fetcher for cited URLs (untrusted input: every limit is enforced)."""

    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(15.0, gt=0)
    total_timeout_s: float = Field(30.0, gt=0)
    max_bytes: int = Field(10_000_000, ge=1024)
    max_redirects: int = Field(5, ge=0)
    per_host: int = Field(4, ge=1)
    concurrency: int = Field(32, ge=1)
    max_chars: int = Field(200_000, ge=1000)
    user_agent: str = "medverify/0.1 (citation audit; +https://github.com/medverify/medverify)"
    allow: list[str] = Field(default_factory=list)
    cache_path: Path | None = None
    offline: bool = False


class AuditSettings(_Section):
    """The citation audit: pairing, passage selection, bootstrap, URL analysis."""

    pairing: Literal["all", "cited"] = "all"
    selection: Literal["hybrid", "lexical"] = "hybrid"
    passages_per_source: int = Field(3, ge=1)
    passage_tokens: int = Field(128, ge=16)
    bootstrap: int = Field(2000, ge=1)
    seed: int = 0
    breakdowns: list[str] = Field(default_factory=list)
    paywalled_domains: list[str] | None = None
    wayback: bool = False


class BenchSettings(_Section):
    """Benchmark studies: how models under test are asked, and the pairwise tests."""

    concurrency: int = Field(16, ge=1)
    max_tokens: int = Field(1024, ge=16)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    retries: int = Field(1, ge=0, le=5)
    permutations: int = Field(10_000, ge=100)
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)


class TrialStudySettings(_Section):
    """``medverify trials study``: CHECK's 15-question clinical-trial study (docs/trials.md).
    Models under test are asked with the ``[bench]`` settings (concurrency, max_tokens,
    temperature, retries)."""

    json_chars: int = Field(120_000, ge=1_000)  # the raw-record context is cut beyond this
    evidence_k: int = Field(4, ge=1, le=15)  # summary sections shown to the judge per unit
    bootstrap: int = Field(2_000, ge=100)  # resamples of trials for the CIs
    seed: int = 0  # of the bootstrap
    examples: int = Field(3, ge=0)  # hallucinated units quoted per model and context


class AnswerSettings(_Section):
    """``medverify answer``: the RAG answer generated from the top chunks."""

    top_k: int = Field(7, ge=1)
    max_tokens: int = Field(1024, ge=16)


class FactCheckSettings(_Section):
    """Atomic fact-checking and correction: rounds, evidence per fact, tracing."""

    max_rounds: int = Field(3, ge=1, le=10)
    top_k: int = Field(7, ge=1)
    evidence: Literal["passages", "chunks"] = "passages"
    passage_tokens: int = Field(128, ge=16)
    passages_per_fact: int = Field(3, ge=1)
    facts_per_call: int = Field(8, ge=1)
    trace: Literal["similarity", "llm"] = "similarity"
    coverage_gap: Literal["keep", "false"] = "keep"


class RiskSettings(_Section):
    """Hallucination risk from token log-probabilities (no knowledge base)."""

    scorers: list[str] = Field(default_factory=list)
    top_k: int = Field(50, ge=1, le=1000)
    batch_size: int = Field(8, ge=1)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # weights and activations of an hf: scorer: auto = bfloat16 on CUDA, float32 on CPU;
    # bfloat16 on a CPU with AMX/AVX512-BF16 is 1.4-2.5x faster (benchmarks/results/
    # risk_dtype.md) and moves a mean token log-prob by ~0.01 nat (correlation 0.9999);
    # a classifier should be scored with the dtype its features were computed with
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    granularity: Literal["answer", "sentence", "claim"] = "claim"
    rephrasings: int = Field(0, ge=0, le=10)
    classifier: Path | None = None
    # bytes a scoring server's reply may have (its top_k log-probabilities per token make
    # it large: ~1 MB for a 200-token answer at top_k 50); over it the item is an error,
    # not retried, and reading stops at the cap (memory stays bounded)
    max_reply_bytes: int = Field(32_000_000, ge=1_000)


ARBITRATION_RULES = frozenset({
    "error", "judgment_error", "fact_high_risk", "hallucination_low_risk",
    "coverage_gap_high_risk", "not_sure", "not_sure_clinical", "vetoed", "low_confidence",
    "coverage_gap", "hallucination", "audit"})
"""The arbitration rules that can escalate a claim (``medverify.arbitration``)."""


class ArbitrationPolicy(_Section):
    """How the KB judge and the risk classifier decide together (docs/arbitration.md).
    ``version`` names the policy; its id (version + a hash of every setting) is recorded on
    every decision."""

    # v2: vetoed, not_sure_clinical and the escalation budget; v3: spot checks (audit)
    version: str = "v3"
    high_risk: float = Field(0.7, ge=0, le=1)  # a risk at or above this is high
    low_risk: float = Field(0.3, ge=0, le=1)  # a risk at or below this is low
    disagreement: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"  # FACT+high, HALL.+low
    coverage_gap_high_risk: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"
    judgment_error: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"
    error: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"
    coverage_gap: Literal["ACCEPT", "FLAG", "ESCALATE"] = "FLAG"
    hallucination: Literal["ACCEPT", "FLAG", "ESCALATE"] = "FLAG"
    # a verdict presented as NOT SURE (its ``confident`` is False: the category's calibrated
    # precision misses the target, or an exact check found a difference); FLAG shows it with
    # a warning, ESCALATE would send every unsure claim to the clinicians' queue
    not_sure: Literal["ACCEPT", "FLAG", "ESCALATE"] = "FLAG"
    # a NOT SURE verdict on a claim that states a dose, names a drug, a group of people or a
    # number (medverify.judge.severity): ESCALATE sends it to a clinician, within the budget
    not_sure_clinical: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"
    # an exact check vetoed a passage's support (another dose, direction, negation, group):
    # a likely error, ESCALATEd within the budget
    vetoed: Literal["ACCEPT", "FLAG", "ESCALATE"] = "ESCALATE"
    # the most an answer's claims may be escalated: ceil(budget x claims), the most urgent
    # first (severity x uncertainty); the rest are FLAGged (rule over_budget). 1.0: no cap;
    # lower: fewer claims for the clinicians, the least severe doubts shown only as flags
    escalation_budget: float = Field(0.25, ge=0, le=1)
    # spot checks of SURE verdicts: this share of the claims that would be ACCEPTed with a
    # confident verdict is escalated anyway (rule audit, outside the budget; chosen by a hash
    # of the claim text, so reruns pick the same claims). Their labels measure how often
    # sure verdicts are overturned (ops report, review progress, a Prometheus gauge); 0: no
    # spot checks and that precision is measured only on claims escalated for other reasons
    audit_share: float = Field(0.02, ge=0, le=1)
    # per category (FACT, HALLUCINATION, COVERAGE_GAP): escalate when the judge's probability
    # for the category it gave is below this
    min_confidence: dict[str, float] = Field(default_factory=dict)
    # Re-check before escalating (risk-guided compute): a claim that would go to a clinician
    # is first judged again by this registered judge over more passages, the riskiest first,
    # and decided again on that verdict. None: off (and the recheck_* settings below are
    # then left out of the policy id).
    recheck_judge: str | None = None
    recheck_top_k: int | None = Field(None, ge=1)  # None: twice [retrieval] top_k
    recheck_budget: float = Field(1.0, ge=0, le=1)  # share of an answer's escalations
    # the rules whose escalations are re-checked (default: every rule that can escalate)
    recheck_rules: list[str] = Field(default_factory=lambda: sorted(ARBITRATION_RULES))

    @field_validator("recheck_rules")
    @classmethod
    def _known_rules(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - ARBITRATION_RULES)
        if unknown:
            raise ValueError(f"unknown arbitration rule(s) {unknown}; rules that can escalate: "
                             f"{sorted(ARBITRATION_RULES)}")
        return value


class ServiceSettings(_Section):
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


class ReviewSettings(_Section):
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


class OpsSettings(_Section):
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


class Config(_Section):
    """Everything a check needs to know besides its input."""

    model: str | None = None
    judge: str | None = None
    decomposer: str | None = None
    kb: Path | None = None
    max_answer_chars: int = Field(200_000, ge=1)
    max_claims: int = Field(200, ge=1)
    claims_per_call: int = Field(4, ge=1)
    # the run store (runs, jobs, keys, review queue) and the LLM request cache: a file, or a
    # URL: sqlite:///PATH, or postgresql://USER:PASSWORD@HOST:PORT/DB for a database that
    # several processes or machines share (docs/scale.md)
    store: Path | str | None = None
    cache_path: Path | str | None = None
    llm: ModelSettings = Field(default_factory=ModelSettings)
    kb_settings: KBSettings = Field(default_factory=KBSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    judge_settings: JudgeSettings = Field(default_factory=JudgeSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    audit: AuditSettings = Field(default_factory=AuditSettings)
    bench: BenchSettings = Field(default_factory=BenchSettings)
    trials: TrialStudySettings = Field(default_factory=TrialStudySettings)
    answer: AnswerSettings = Field(default_factory=AnswerSettings)
    factcheck: FactCheckSettings = Field(default_factory=FactCheckSettings)
    risk: RiskSettings = Field(default_factory=RiskSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    arbitration: ArbitrationPolicy = Field(default_factory=ArbitrationPolicy)
    review: ReviewSettings = Field(default_factory=ReviewSettings)
    ops: OpsSettings = Field(default_factory=OpsSettings)

    @property
    def judge_name(self) -> str:
        """``llm`` when a model is configured, else ``builtin``."""
        return self.judge or ("llm" if self.model else "builtin")

    @property
    def decomposer_name(self) -> str:
        return self.decomposer or ("llm" if self.model else "rules")

    @field_validator("store", "cache_path", mode="plain")
    @classmethod
    def _location(cls, value: Any) -> Path | str | None:
        """A path stays a path; a URL stays text (its scheme checked here)."""
        if value is None or isinstance(value, Path):
            return value
        if not isinstance(value, str):
            raise ValueError(f"a path or a URL, not {type(value).__name__}")
        if "://" not in value:
            return Path(value)
        dialect_of(value)  # ValueError for an unknown scheme
        return value

    @property
    def store_location(self) -> Path | str:
        """Where the run store is: a SQLite file (default ``$MEDVERIFY_HOME/runs.db``) or a
        database URL."""
        return self.store or home() / "runs.db"

    @property
    def store_path(self) -> Path:
        """The run store's file (ConfigError when the store is a database server)."""
        location = self.store_location
        if dialect_of(location) != "sqlite":
            raise ConfigError(f"the run store is a database server ({display(location)}), "
                              "not a file")
        return sqlite_path(location)

    @property
    def local_dir(self) -> Path:
        """Where this machine keeps files beside the run store: the SQLite file's folder,
        or ``$MEDVERIFY_HOME`` when the store is a database server."""
        location = self.store_location
        return sqlite_path(location).parent if dialect_of(location) == "sqlite" else home()

    @property
    def request_cache_path(self) -> Path | str:
        """The LLM request cache: a SQLite file (default ``$MEDVERIFY_HOME/cache.db``) or a
        database URL."""
        return self.cache_path or home() / "cache.db"

    @property
    def fetch_cache_path(self) -> Path:
        return self.fetch.cache_path or home() / "fetch-cache.db"

    @classmethod
    def load(
        cls, path: Path | None = None, *, env: dict[str, str] | None = None, **overrides: Any
    ) -> Config:
        """Build a config from defaults, file, environment and overrides (in that order)."""
        data: dict[str, Any] = {}
        file = path or home() / "config.toml"
        if path is not None and not file.exists():
            raise ConfigError(f"config file not found: {file}")
        if file.exists():
            try:
                data = tomllib.loads(file.read_text("utf-8"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot read config file {file}: {exc}") from exc
        _merge(data, _from_env(os.environ if env is None else env))
        _merge(data, {k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}"
                                 for e in exc.errors()[:3])
            raise ConfigError(f"invalid configuration: {problems}") from exc

    def public(self) -> dict[str, Any]:
        """The config as recorded in the run store (no secrets are ever held here)."""
        return self.model_dump(mode="json")


_NOT_SETTINGS = {"MEDVERIFY_HOME", "MEDVERIFY_SERVE_CONFIG", "MEDVERIFY_DATA",
                 "MEDVERIFY_CHROMIUM", "MEDVERIFY_VERIFIER_BASE", "MEDVERIFY_LLAMACPP_PYTHON",
                 "MEDVERIFY_TRIALS_SAMPLES"}
"""MEDVERIFY_ variables that are not settings: the home folder, the config ``medverify
serve`` hands its worker processes, and the paths the tests and benchmarks read (the real
data, Chromium, the verifier base model, llama.cpp's Python, the trial samples)."""


def _from_env(env: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in env.items():
        if not key.startswith("MEDVERIFY_") or key in _NOT_SETTINGS:
            continue
        path = key[len("MEDVERIFY_") :].lower().split("__")
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
