"""Records of atomic fact-checking and correction (Vladika et al. 2025).

A RAG answer (:class:`RagAnswer`) is split into atomic facts; each fact is checked against
freshly retrieved evidence (TRUE / FALSE, or UNVERIFIABLE when the evidence does not settle
it), FALSE facts are rewritten from their evidence and checked again, up to three rounds;
then the whole answer is rewritten to include the corrected facts, and every final fact is
traced to the chunk that supports it. Every intermediate version is kept
(:class:`FactStep`, :class:`AnswerVersion`) so the report can show each step as a diff.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from medverify.answerer import RagAnswer  # the answer stage's record, re-exported here
from medverify.records import Category, Claim, Passage, Record, Span, Usage, Verdict, utcnow


class FactVerdict(StrEnum):
    """The paper's verdict, plus the cases it has no word for."""

    TRUE = "TRUE"  # supported by the evidence (category FACT)
    FALSE = "FALSE"  # contradicted, not supported (HALLUCINATION)
    UNVERIFIABLE = "UNVERIFIABLE"  # not settled: COVERAGE_GAP, or JUDGMENT_ERROR (conflict)
    ERROR = "ERROR"  # the judge failed: unscored, never a verdict


RewriteMode = Literal["llm", "extractive"]


class Rewrite(Record):
    """A FALSE fact rewritten from its evidence: by the model (``llm``), or offline by
    replacing it with the evidence sentence that contradicts it (``extractive``)."""

    before: str
    after: str | None = None
    mode: RewriteMode
    evidence_passage_id: str | None = None
    evidence_quote: str | None = None
    raw_output: str | None = None
    prompt_version: str | None = None
    error: str | None = None


class FactStep(Record):
    """One round for one fact: the text checked, its evidence, the verdict, and the
    rewrite when it was FALSE."""

    round: int
    text: str
    passage_ids: list[str] = Field(default_factory=list)
    verdict: FactVerdict
    category: Category
    judge_verdict: Verdict | None = None
    rewrite: Rewrite | None = None


class TraceCandidate(Record):
    passage_id: str
    score: float | None = None
    reason: str | None = None


class FactTrace(Record):
    """The chunk that best supports a final fact and the top candidates, chosen by
    similarity or by an LLM re-ranking with its reasoning."""

    method: Literal["similarity", "llm"]
    best_passage_id: str | None = None
    candidates: list[TraceCandidate] = Field(default_factory=list)
    reasoning: str | None = None
    raw_output: str | None = None
    error: str | None = None


class Fact(Record):
    """An atomic fact from the first answer, with every round it went through."""

    id: str
    claim: Claim
    steps: list[FactStep] = Field(default_factory=list)
    final_text: str
    final_verdict: FactVerdict
    corrected: bool = False  # its text changed (rewritten at least once)
    trace: FactTrace | None = None

    @property
    def initial_verdict(self) -> FactVerdict:
        return self.steps[0].verdict if self.steps else FactVerdict.ERROR


class AnswerVersion(Record):
    """One version of the answer (initial, after each round, final)."""

    label: str
    text: str
    mode: Literal["initial", "facts", "llm", "extractive", "unchanged"] = "facts"


class SentenceLink(Record):
    """A sentence of the final answer linked to the facts in it and their best chunk."""

    sentence: str
    span: Span | None = None
    fact_ids: list[str] = Field(default_factory=list)
    passage_id: str | None = None
    doc_id: str | None = None
    title: str | None = None
    url: str | None = None


class TokenSummary(Record):
    """Tokens of the check-and-correct against the initial answer (the paper: ~10x)."""

    initial_answer_tokens: int | None = None  # the RAG answer's prompt + completion
    check_tokens: int = 0  # every stage of fact-checking and correction
    ratio: float | None = None
    per_stage: dict[str, int] = Field(default_factory=dict)


class FactCheckReport(Record):
    """Everything a fact-check-and-correct run did for one answer."""

    answer_id: str | None = None
    question: str | None = None
    initial_answer: str
    rag: RagAnswer | None = None
    facts: list[Fact] = Field(default_factory=list)
    passages: dict[str, Passage] = Field(default_factory=dict)  # every passage referenced
    rounds_run: int = 0
    final_answer: str
    final_mode: Literal["llm", "extractive", "unchanged"] = "unchanged"
    versions: list[AnswerVersion] = Field(default_factory=list)
    sentences: list[SentenceLink] = Field(default_factory=list)
    tokens: TokenSummary = Field(default_factory=TokenSummary)
    usage: dict[str, Usage] = Field(default_factory=dict)
    run_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    config: dict[str, Any] = Field(default_factory=dict)
    models: dict[str, str] = Field(default_factory=dict)
    prompt_versions: dict[str, str] = Field(default_factory=dict)
    kb_snapshot: str | None = None
    errors: list[str] = Field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Facts per initial and final verdict, and how many were corrected."""
        out: dict[str, int] = {"facts": len(self.facts),
                               "corrected": sum(f.corrected for f in self.facts)}
        for fact in self.facts:
            out[f"initial_{fact.initial_verdict.value}"] = (
                out.get(f"initial_{fact.initial_verdict.value}", 0) + 1)
            out[f"final_{fact.final_verdict.value}"] = (
                out.get(f"final_{fact.final_verdict.value}", 0) + 1)
        return out


class SelfRefineResult(Record):
    """The Self-Refine baseline (Madaan et al. 2023): feedback, then refine, same model."""

    initial_answer: str
    feedback: str | None = None
    refined: str | None = None
    model: str = ""
    prompt_versions: dict[str, str] = Field(default_factory=dict)
    usage: dict[str, Usage] = Field(default_factory=dict)
    error: str | None = None


# -- evaluation -----------------------------------------------------------------------------


class FactCheckScores(Record):
    """Verdicts against human labels, FALSE as the positive class."""

    n: int = 0
    n_unscored: int = 0
    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0
    sensitivity: float | None = None
    specificity: float | None = None
    ppv: float | None = None
    f1: float | None = None
    balanced_accuracy: float | None = None


class RatingSummary(Record):
    """Answer ratings, final against initial: improved / equal / worse."""

    n: int = 0
    improved: int = 0
    equal: int = 0
    worse: int = 0
