"""Settings of the flows beside checking: fetching cited sources (``[fetch]``), the citation
audit (``[audit]``), benchmark and trial studies (``[bench]``, ``[trials]``), answering
(``[answer]``), fact-checking (``[factcheck]``) and the risk classifier (``[risk]``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from medverify.config.base import Section


class FetchSettings(Section):
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


class AuditSettings(Section):
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


class BenchSettings(Section):
    """Benchmark studies: how models under test are asked, and the pairwise tests."""

    concurrency: int = Field(16, ge=1)
    max_tokens: int = Field(1024, ge=16)
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    retries: int = Field(1, ge=0, le=5)
    permutations: int = Field(10_000, ge=100)
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)


class TrialStudySettings(Section):
    """``medverify trials study``: CHECK's 15-question clinical-trial study (docs/trials.md).
    Models under test are asked with the ``[bench]`` settings (concurrency, max_tokens,
    temperature, retries)."""

    json_chars: int = Field(120_000, ge=1_000)  # the raw-record context is cut beyond this
    evidence_k: int = Field(4, ge=1, le=15)  # summary sections shown to the judge per unit
    bootstrap: int = Field(2_000, ge=100)  # resamples of trials for the CIs
    seed: int = 0  # of the bootstrap
    examples: int = Field(3, ge=0)  # hallucinated units quoted per model and context


class AnswerSettings(Section):
    """``medverify answer``: the RAG answer generated from the top chunks."""

    top_k: int = Field(7, ge=1)
    max_tokens: int = Field(1024, ge=16)


class FactCheckSettings(Section):
    """Atomic fact-checking and correction: rounds, evidence per fact, tracing."""

    max_rounds: int = Field(3, ge=1, le=10)
    top_k: int = Field(7, ge=1)
    evidence: Literal["passages", "chunks"] = "passages"
    passage_tokens: int = Field(128, ge=16)
    passages_per_fact: int = Field(3, ge=1)
    facts_per_call: int = Field(8, ge=1)
    trace: Literal["similarity", "llm"] = "similarity"
    coverage_gap: Literal["keep", "false"] = "keep"


class RiskSettings(Section):
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
