"""The fact-check-and-correct loop (Vladika et al. 2025, steps 2-5).

:class:`FactChecker` splits an answer into atomic facts, retrieves fresh evidence for each,
judges them all (TRUE / FALSE / UNVERIFIABLE, or ERROR when the judge failed), rewrites the
FALSE ones from their evidence and judges the rewrites again, for at most
``config.factcheck.max_rounds`` rounds. A rewrite is always judged by the next round, so
the last round rewrites nothing (``max_rounds=1`` detects only). Facts that are TRUE,
UNVERIFIABLE or ERROR are never checked again, and the loop stops as soon as no rewritten
fact is left to check: that is where the tokens are saved.

The final answer is rewritten by the model to include the corrected facts and drop the
refuted ones, or, offline, corrected extractively with visible markers (see
:mod:`medverify.factcheck.rewrite`). Every round is kept: one :class:`FactStep` per fact
per round, and an answer version after each round that changed a fact.

Evidence: ``config.factcheck.evidence == "passages"`` (default) trims each fact's
``top_k`` chunks to their best ``passage_tokens`` windows, ``passages_per_fact`` in all per
fact, ranked by BM25, embedding similarity and the retrieval order fused; a window keeps its
chunk's doc_id/title/url, its id is the chunk id + ``:w<n>`` and its span is in document
offsets. ``"chunks"`` sends the whole chunks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from medverify.audit.select import PassageSelector
from medverify.config import Config
from medverify.decompose import Decomposer
from medverify.decompose.answer import decompose_answer
from medverify.errors import ConfigError, MedverifyError
from medverify.factcheck.records import (
    AnswerVersion,
    Fact,
    FactCheckReport,
    FactStep,
    FactVerdict,
    RagAnswer,
    Rewrite,
    SentenceLink,
    TokenSummary,
)
from medverify.factcheck.rewrite import (
    ExtractiveRewriter,
    LLMRewriter,
    answer_edits,
    extractive_answer,
    replace_facts,
    rewrite_answer,
)
from medverify.harness import (
    CancelToken,
    Provenance,
    RunHarness,
    close_owned,
    prompt_versions,
    stage_id,
)
from medverify.judge import Judge, JudgeItem, rebatched
from medverify.judge.build import create_judge
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.llm.facade import Model, UsageLedger
from medverify.records import Answer, Category, Claim, Passage, Source, Span, Usage, Verdict
from medverify.retrieve import Retriever, TextIndex
from medverify.store.runs import RunStore

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
"""Called with (answers done, answers total)."""

FinalMode = Literal["llm", "extractive", "unchanged"]

# ----------------------------------------------------------------------- token accounting

_SCOPE: ContextVar[UsageLedger | None] = ContextVar("medverify_factcheck_usage", default=None)


class ScopedLedger(UsageLedger):
    """A usage ledger that also records into the ledger of the answer being checked in the
    current context, so each report counts its own tokens while answers run concurrently."""

    def add(self, stage: str, usage: Usage) -> None:
        super().add(stage, usage)
        scope = _SCOPE.get()
        if scope is not None:
            scope.add(stage, usage)

    @contextmanager
    def scope(self) -> Iterator[UsageLedger]:
        mine = UsageLedger()
        token = _SCOPE.set(mine)
        try:
            yield mine
        finally:
            _SCOPE.reset(token)


def _minus(after: Usage, before: Usage | None) -> Usage:
    if before is None:
        return after
    return Usage(calls=after.calls - before.calls,
                 cached_calls=after.cached_calls - before.cached_calls,
                 prompt_tokens=after.prompt_tokens - before.prompt_tokens,
                 completion_tokens=after.completion_tokens - before.completion_tokens)


@contextmanager
def metered(ledger: UsageLedger) -> Iterator[UsageLedger]:
    """The usage of the block: exact per context with a :class:`ScopedLedger`, else the
    ledger's growth during the block (exact when nothing else uses the ledger meanwhile)."""
    if isinstance(ledger, ScopedLedger):
        with ledger.scope() as mine:
            yield mine
        return
    before, out = ledger.as_dict(), UsageLedger()
    try:
        yield out
    finally:
        for stage, usage in ledger.as_dict().items():
            delta = _minus(usage, before.get(stage))
            if delta != Usage():
                out.add(stage, delta)


def token_summary(usage: Mapping[str, Usage], rag: RagAnswer | None) -> TokenSummary:
    """Tokens per stage; check tokens (every stage but ``answer``) against the RAG answer's."""
    per_stage = {stage: u.prompt_tokens + u.completion_tokens for stage, u in usage.items()}
    check = sum(n for stage, n in per_stage.items() if stage != "answer")
    initial = rag.usage.prompt_tokens + rag.usage.completion_tokens if rag else None
    ratio = round(check / initial, 3) if initial else None
    return TokenSummary(initial_answer_tokens=initial, check_tokens=check, ratio=ratio,
                        per_stage=per_stage)


# ----------------------------------------------------------------------- verdicts and state


def fact_verdict(category: Category, coverage_gap: str = "keep") -> FactVerdict:
    """FACT -> TRUE; HALLUCINATION -> FALSE; JUDGMENT_ERROR (the evidence both supports
    and contradicts the fact) -> UNVERIFIABLE: flagged, never rewritten automatically from
    evidence that disagrees with itself; COVERAGE_GAP -> UNVERIFIABLE (FALSE with
    ``coverage_gap="false"``, the paper's binary verdict); ERROR -> ERROR."""
    if category is Category.FACT:
        return FactVerdict.TRUE
    if category is Category.HALLUCINATION:
        return FactVerdict.FALSE
    if category is Category.JUDGMENT_ERROR:
        return FactVerdict.UNVERIFIABLE
    if category is Category.COVERAGE_GAP:
        return FactVerdict.FALSE if coverage_gap == "false" else FactVerdict.UNVERIFIABLE
    return FactVerdict.ERROR


@dataclass
class _State:
    """A fact while the loop runs: its current text and the rounds so far."""

    id: str
    claim: Claim
    text: str
    steps: list[FactStep] = field(default_factory=list)
    verdict: FactVerdict = FactVerdict.ERROR
    corrected: bool = False
    open: bool = True  # to be judged in the next round

    def fact(self) -> Fact:
        return Fact(id=self.id, claim=self.claim, steps=list(self.steps), final_text=self.text,
                    final_verdict=self.verdict, corrected=self.corrected)


# ----------------------------------------------------------------------- evidence windows


def _windows(selector: PassageSelector, chunk: Passage) -> list[Passage]:
    """The chunk split into windows of about ``selector.passage_tokens`` tokens (the chunk
    itself when it fits in one)."""
    source = Source(id=chunk.id, text=chunk.text, title=chunk.title, url=chunk.url)
    split = selector.passages(source).passages
    if len(split) <= 1:
        return [chunk]
    offset = chunk.span.start if chunk.span else 0
    return [_window(chunk, w, n, offset) for n, w in enumerate(split, 1)]


def _window(chunk: Passage, window: Passage, n: int, offset: int) -> Passage:
    span = None
    if window.span is not None and chunk.span is not None:
        span = Span(start=offset + window.span.start, end=offset + window.span.end)
    return window.model_copy(update={
        "id": f"{chunk.id}:w{n}", "doc_id": chunk.doc_id, "source": chunk.source,
        "span": span, "score": None, "scores": {}})


def trim_evidence(selector: PassageSelector, texts: Sequence[str],
                  chunks: Sequence[Sequence[Passage]], k: int) -> list[list[Passage]]:
    """Per text, the ``k`` best windows of its chunks, best first (one embedding call)."""
    pools = [[w for chunk in pool for w in _windows(selector, chunk)] for pool in chunks]
    unique = {w.id: w for pool in pools for w in pool}
    ranked = [i for i, pool in enumerate(pools) if len(pool) > k]
    if not ranked:
        return pools
    vectors = np.asarray(selector.embedder.embed(
        [*(texts[i] for i in ranked), *(w.text for w in unique.values())]), dtype=np.float32)
    rows = {wid: len(ranked) + n for n, wid in enumerate(unique)}
    out = list(pools)
    for position, i in enumerate(ranked):
        out[i] = _best(texts[i], vectors[position], pools[i], vectors, rows, k)
    return out


def _best(text: str, vector: np.ndarray, pool: list[Passage], vectors: np.ndarray,
          rows: Mapping[str, int], k: int) -> list[Passage]:
    """The ``k`` best windows of ``pool`` for ``text``: the retrieval stage's in-memory
    ranking, BM25 and embedding similarity fused with the order retrieval returned them in."""
    dense = np.array([float(vectors[rows[w.id]] @ vector) for w in pool])
    chosen = TextIndex([w.text for w in pool]).rank(
        text, k, dense=dense, also={"retrieval": list(range(len(pool)))})
    return [pool[i].model_copy(update={"score": scores["rrf"]}) for i, scores in chosen]


# ----------------------------------------------------------------------- the checker


@dataclass
class FactChecker:
    """Everything needed to fact-check and correct answers against one knowledge base."""

    config: Config
    kb: KnowledgeBase
    decomposer: Decomposer
    judge: Judge
    ledger: UsageLedger
    rewriter: LLMRewriter | ExtractiveRewriter
    model: Model | None = None
    selector: PassageSelector | None = None
    owned: tuple[object, ...] = ()
    retriever: Retriever = field(init=False)

    def __post_init__(self) -> None:
        self.retriever = Retriever(self.kb)  # fusion settings: the KB's own

    @classmethod
    def from_config(cls, config: Config, *, kit: FlowKit = FlowKit()) -> FactChecker:
        """Load the pieces: the LLM rewriter and final rewrite when a model is configured
        (or in the kit), else the extractive ones; the judge named by
        ``config.judge_name`` (the kit's: one made already, e.g. a worker's check judge,
        batched for facts here) and the configured decomposer (or the kit's)."""
        opened = kit.open(config, ledger=ScopedLedger())
        assert opened.kb is not None
        kb, model, ledger, owned = opened.kb, opened.model, opened.ledger, opened.owned
        settings = config.factcheck
        if settings.trace == "llm" and model is None:
            raise ConfigError("tracing with trace = 'llm' needs a model: pass --model SPEC "
                              "or use trace = 'similarity'")
        selector = None
        if settings.evidence == "passages":
            selector = PassageSelector(kit.embedder or kb.embedder, k=1, mode="lexical",
                                       passage_tokens=settings.passage_tokens)
        rewriter = (LLMRewriter(model, facts_per_call=settings.facts_per_call)
                    if model is not None else ExtractiveRewriter())
        return cls(config=config, kb=kb, ledger=ledger, model=model, selector=selector,
                   decomposer=kit.decomposer_for(config, model),
                   judge=(create_judge(judge_config(config), model) if kit.judge is None
                          else rebatched(kit.judge, *fact_batching(config))),
                   rewriter=rewriter,
                   owned=tuple(owned))

    async def aclose(self) -> None:
        """Close what this checker opened itself (not a KB or model passed in)."""
        await close_owned(self.owned)

    @property
    def llm_rewrites(self) -> bool:
        return isinstance(self.rewriter, LLMRewriter) and self.model is not None

    @property
    def models(self) -> dict[str, str]:
        spec = self.model.spec if self.model else None
        out = {"judge": stage_id(self.judge),
               "rewrite": spec if self.llm_rewrites and spec else "extractive"}
        if self.decomposer.prompt_version is not None and spec:  # it asks the model
            out["decompose"] = spec
        if self.llm_rewrites and spec:
            out["rewrite_answer"] = spec
        if self.config.factcheck.trace == "llm" and spec:
            out["trace"] = spec
        return out

    @property
    def prompt_versions(self) -> dict[str, str]:
        return prompt_versions({
            "decompose": self.decomposer, "judge": self.judge, "rewrite": self.rewriter,
            "rewrite_answer": "rewrite_answer/v1" if self.llm_rewrites else None,
            "trace": "trace/v1" if self.config.factcheck.trace == "llm" else None})

    @property
    def provenance(self) -> Provenance:
        return Provenance(self.models, self.prompt_versions, self.kb.snapshot_id)

    # -- one answer --------------------------------------------------------------------

    async def check(self, answer: Answer, *, rag: RagAnswer | None = None) -> FactCheckReport:
        """Fact-check and correct one answer. Never raises for a problem confined to this
        answer: it is in ``report.errors``."""
        with metered(self.ledger) as usage:
            report = await self._check(answer, rag)
        spent = usage.as_dict()
        return report.model_copy(update={"usage": spent, "tokens": token_summary(spent, rag)})

    async def _check(self, answer: Answer, rag: RagAnswer | None) -> FactCheckReport:
        errors: list[str] = []
        claims = await self._decompose(answer, errors)
        states = [_State(id=f"f{i}", claim=c, text=c.text) for i, c in enumerate(claims, 1)]
        passages: dict[str, Passage] = {}
        rounds, versions = await self._rounds(answer.text, states, passages)
        facts = [s.fact() for s in states]
        final, mode = await self._final(answer, facts, errors)
        versions.append(AnswerVersion(label="final", text=final,
                                      mode="unchanged" if mode == "unchanged" else mode))
        facts, sentences = await self._trace(facts, passages, final, errors)
        return FactCheckReport(
            answer_id=answer.id or None, question=answer.question, initial_answer=answer.text,
            rag=rag, facts=facts,
            passages=passages, rounds_run=rounds, final_answer=final, final_mode=mode,
            versions=versions, sentences=sentences, config=self.config.public(),
            models=self.models, prompt_versions=self.prompt_versions,
            kb_snapshot=self.kb.snapshot_id, errors=errors)

    async def _decompose(self, answer: Answer, errors: list[str]) -> list[Claim]:
        claims, found = await decompose_answer(answer, self.decomposer, self.config,
                                               noun="fact")
        errors.extend(found)
        return claims

    async def _rounds(self, answer_text: str, states: list[_State],
                      passages: dict[str, Passage]) -> tuple[int, list[AnswerVersion]]:
        versions = [AnswerVersion(label="initial", text=answer_text, mode="initial")]
        rounds = 0
        for number in range(1, self.config.factcheck.max_rounds + 1):
            todo = [s for s in states if s.open]
            if not todo:
                break
            rounds = number
            if await self._round(number, todo, passages):
                texts = {s.id: s.text for s in states if s.corrected}
                text = replace_facts(answer_text, [s.fact() for s in states], texts)
                versions.append(AnswerVersion(label=f"after round {number}", text=text,
                                              mode="facts"))
        return rounds, versions

    async def _round(self, number: int, todo: list[_State],
                     passages: dict[str, Passage]) -> bool:
        """Judge the open facts, rewrite the FALSE ones (not in the last round); True when
        some fact got a new text."""
        evidence, verdicts = await self._judge(todo)
        for pool in evidence:
            passages.update((p.id, p) for p in pool)
        coverage_gap = self.config.factcheck.coverage_gap
        outcome = [fact_verdict(v.category, coverage_gap) for v in verdicts]
        last = number == self.config.factcheck.max_rounds
        wrong = [i for i, o in enumerate(outcome) if o is FactVerdict.FALSE and not last]
        rewrites = await self._rewrite([todo[i] for i in wrong], [evidence[i] for i in wrong],
                                       {todo[i].id: verdicts[i] for i in wrong})
        changed = False
        for i, state in enumerate(todo):
            rewrite = rewrites.get(state.id)
            state.steps.append(FactStep(
                round=number, text=state.text, passage_ids=[p.id for p in evidence[i]],
                verdict=outcome[i], category=verdicts[i].category,
                judge_verdict=verdicts[i], rewrite=rewrite))
            state.verdict = outcome[i]
            state.open = rewrite is not None and rewrite.after is not None
            if rewrite is not None and rewrite.after is not None:
                state.text, state.corrected, changed = rewrite.after, True, True
        return changed

    async def _judge(self, todo: list[_State]) -> tuple[list[list[Passage]], list[Verdict]]:
        """Fresh evidence for each fact's current text, then one judge call for all."""
        try:
            evidence = await self._evidence([s.text for s in todo])
        except MedverifyError as exc:
            error = f"retrieval failed: {exc}"
            return [[] for _ in todo], [Verdict(claim_id=s.id, error=error) for s in todo]
        items = [JudgeItem(claim=s.claim.model_copy(update={"id": s.id, "text": s.text}),
                           passages=pool) for s, pool in zip(todo, evidence, strict=True)]
        try:
            by_id = {v.claim_id: v for v in await self.judge.judge(items)}
        except MedverifyError as exc:
            by_id = {s.id: Verdict(claim_id=s.id, error=f"judge failed: {exc}") for s in todo}
        missing = "judge returned no verdict"
        return evidence, [by_id.get(s.id) or Verdict(claim_id=s.id, error=missing) for s in todo]

    async def _evidence(self, texts: list[str]) -> list[list[Passage]]:
        settings = self.config.factcheck
        chunks = await asyncio.to_thread(self.retriever.search_many, texts, settings.top_k,
                                         self.config.retrieval.mode)
        if self.selector is None:
            return chunks
        return await asyncio.to_thread(trim_evidence, self.selector, texts, chunks,
                                       settings.passages_per_fact)

    async def _rewrite(self, states: list[_State], evidence: list[list[Passage]],
                       verdicts: dict[str, Verdict]) -> dict[str, Rewrite]:
        if not states:
            return {}
        items = [(s.id, s.text, pool) for s, pool in zip(states, evidence, strict=True)]
        try:
            rewrites = await self.rewriter.rewrite(items, verdicts)
        except MedverifyError as exc:
            mode: Literal["llm", "extractive"] = "llm" if self.llm_rewrites else "extractive"
            rewrites = [Rewrite(before=s.text, mode=mode, error=f"rewrite failed: {exc}")
                        for s in states]
        return {s.id: r for s, r in zip(states, rewrites, strict=True)}

    async def _final(self, answer: Answer, facts: list[Fact],
                     errors: list[str]) -> tuple[str, FinalMode]:
        if not answer_edits(facts):
            return answer.text, "unchanged"
        if self.llm_rewrites and self.model is not None:
            try:
                text, _raw = await rewrite_answer(self.model, answer.question, answer.text, facts)
                return text, "llm"
            except MedverifyError as exc:
                errors.append(f"rewrite_answer: {exc}; the answer was corrected "
                              "extractively instead")
        return extractive_answer(answer.text, facts), "extractive"

    async def _trace(self, facts: list[Fact], passages: Mapping[str, Passage], final: str,
                     errors: list[str]) -> tuple[list[Fact], list[SentenceLink]]:
        from medverify.factcheck.trace import link_sentences, trace_facts

        try:
            embedder = self.selector.embedder if self.selector else self.kb.embedder
            traces = await trace_facts(facts, passages, method=self.config.factcheck.trace,
                                       model=self.model, embedder=embedder)
            facts = [f.model_copy(update={"trace": t}) for f, t in zip(facts, traces, strict=True)]
        except MedverifyError as exc:
            errors.append(f"trace: {exc}")
        return facts, link_sentences(final, facts, passages)

    # -- many answers ------------------------------------------------------------------

    async def run(self, answers: Sequence[Answer], *,
                  rags: Sequence[RagAnswer | None] | None = None, store: RunStore | None = None,
                  progress: Progress | None = None, concurrency: int = 4,
                  cancel: CancelToken | None = None) -> list[FactCheckReport]:
        """Check many answers (``rags[i]`` is answer i's RAG answer, if any); record the
        run (kind ``factcheck``) when a store is given."""
        if rags is not None and len(rags) != len(answers):
            raise ConfigError(f"{len(rags)} RAG answers for {len(answers)} answers")
        harness = RunHarness("factcheck", self.config, ledger=self.ledger, store=store,
                             progress=progress, cancel=cancel)

        async def one(position: int, answer: Answer) -> FactCheckReport:
            report = await self.check(answer, rag=rags[position] if rags else None)
            report = report.model_copy(update={"run_id": harness.run_id})
            if store is not None and harness.run_id is not None:
                store.save_factcheck(harness.run_id, position, answer.id, report)
            return report

        with harness.recording(self.provenance):
            reports = await harness.each(answers, one, concurrency=concurrency)
            harness.fail_items(sum(1 for r in reports if not r.facts), len(reports), "fact")
        return reports


def fact_batching(config: Config) -> tuple[int, int]:
    """The fact-checker's judge batching: ``facts_per_call`` facts per call, with room for
    their passages (``[judge_settings] max_passages``) when the evidence is trimmed to
    windows."""
    settings = config.factcheck
    room = config.judge_settings.max_passages
    if settings.evidence == "passages":
        room = max(room, settings.passages_per_fact * settings.facts_per_call)
    return settings.facts_per_call, room


def judge_config(config: Config) -> Config:
    """The config the fact-checker makes its judge from (:func:`fact_batching`)."""
    claims_per_call, max_passages = fact_batching(config)
    settings = config.judge_settings.model_copy(update={"max_passages": max_passages})
    return config.model_copy(update={"claims_per_call": claims_per_call,
                                     "judge_settings": settings})
