"""Settings of the check pipeline: model calls (``[llm]``), the knowledge base
(``[kb_settings]``), retrieval (``[retrieval]``) and the judges (``[judge_settings]``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from medverify.config.base import DEFAULT_EMBEDDER, Section


class ModelSettings(Section):
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


class KBSettings(Section):
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
    # what runs the model embedder on the CPU: auto = torch for documents, and a query
    # (fewer than 8 token windows in a call; fp32 KBs only) in bfloat16 on a CPU with AMX
    # (cosine to fp32 >= 0.99997) or else on ONNX Runtime fp32 where it is installed (the
    # same vectors; p50 0.65x torch's on the 2-core machine without AMX: docs/kb.md);
    # torch (all fp32); or ONNX Runtime for everything (`pip install 'medverify[onnx]'`;
    # exported once per machine into $MEDVERIFY_ONNX_CACHE or ~/.cache/medverify/onnx;
    # fp32 only)
    embed_runtime: Literal["auto", "torch", "onnx"] = "auto"
    # the vector index (docs/scale.md): auto = exact below index_threshold chunks, a graph from
    # it: hnswlib when installed (`pip install 'medverify[hnswlib]'`: faster per query, but each
    # process reads the whole graph into memory), else faiss's HNSW up to 1M chunks and IVF
    # from there; "hnswlib" without the package fails; a KB records its choice, and one built
    # with another kind is refused (kb reindex)
    index: Literal["auto", "flat", "ivf", "ivfpq", "hnsw", "hnswlib"] = "auto"
    index_threshold: int = Field(100_000, ge=1)
    nprobe: int = Field(32, ge=1)  # IVF lists scanned per query
    # HNSW candidate list size, at least: raised as the graph grows so recall@10 stays >= 0.95
    # (faiss: 128 per started 100k vectors, a fixed 128 gave 0.81 at 1M; hnswlib: 128 x
    # (started 100ks)^0.8); more: slower, surer
    ef_search: int = Field(128, ge=1)
    # rank lexical queries past 1,000 postings without bm25() on KBs of at least this many
    # chunks (fast, but its top 10 agrees poorly with bm25's: docs/scale.md); None: off
    lexical_bounded_from: int | None = Field(None, ge=0)
    # rank lexical queries from the KB's stored postings (FTS5's bm25 computed in numpy:
    # the same scores and order as bm25(), several times faster at 1M chunks: docs/scale.md)
    # on KBs of at least this many chunks that hold postings built at their current
    # generation (`KnowledgeBase.build_lexical_postings`); None: always bm25()
    lexical_postings_from: int | None = Field(100_000, ge=0)
    # a KB on PostgreSQL (docs/scale.md): how often, at most, a replica checks the KB's
    # generation on a read and brings its vector index up to it. A document taught or
    # reverted on another replica is searched here within about this many seconds; 0:
    # check on every read (one more query per search)
    generation_poll_s: float = Field(1.0, ge=0.0)
    # the KB in a PostgreSQL database that several replicas share (docs/scale.md,
    # "Knowledge base on PostgreSQL"): postgresql://USER:PASSWORD@HOST:PORT/DB. When set,
    # it is the KB (`kb` is not read); None: the embedded KB directory `kb`
    location: str | None = Field(None, pattern=r"^postgres(ql)?(\+\w+)?://")


class RetrievalSettings(Section):
    top_k: int = Field(7, ge=1)
    mode: Literal["hybrid", "lexical", "dense"] = "hybrid"
    candidates: int = Field(50, ge=1)
    rrf_k: int = Field(60, ge=1)
    batch: int = Field(16, ge=1)


class JudgeSettings(Section):
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
