"""The check flow: decompose -> retrieve -> judge -> arbitrate -> settle -> report, recorded
in the run store (settle: a claim a clinician already decided gets the reviewer's label,
:mod:`medverify.review.settled`).

:class:`Checker` holds the loaded pieces (knowledge base, model, decomposer, judge) so that
many answers can be checked with one set-up; :func:`check` / :func:`acheck` are the
one-call entry points. A failure of one answer is recorded as an error on that answer's
report and the others go on; a failure that would hit every answer (no KB, bad config)
raises before anything runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from medverify.arbitration import arbitrate_claims
from medverify.config import Config
from medverify.decompose import Decomposer
from medverify.decompose.answer import decompose_answer
from medverify.errors import MedverifyError
from medverify.harness import (
    CancelToken,
    Progress,
    Provenance,
    RunHarness,
    Stage,
    close_owned,
    prompt_versions,
    stage_id,
)
from medverify.judge import JUDGES, Judge, JudgeItem
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.llm.facade import Model, UsageLedger, answer_budget
from medverify.records import Answer, Claim, ClaimResult, Passage, Report
from medverify.report.metrics import compute_metrics
from medverify.retrieve import Retriever
from medverify.review.settled import SettledClaims, SettledIndex
from medverify.review.teaching import DOC_PREFIX, Escalate
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.terms import STRONG_RELEVANCE, key_terms, relevance

if TYPE_CHECKING:
    from medverify.review.records import ReviewItem
    from medverify.risk.stage import RiskStage

log = logging.getLogger(__name__)

@dataclass
class Checker:
    """Everything needed to check answers against one knowledge base."""

    config: Config
    kb: KnowledgeBase
    decomposer: Decomposer
    judge: Judge
    ledger: UsageLedger
    model: Model | None = None
    owned: tuple[object, ...] = ()
    risk: RiskStage | None = None
    recheck: Judge | None = None  # [arbitration] recheck_judge: re-checks before escalating
    retriever: Retriever = field(init=False)
    _settled: dict[tuple[str, str], SettledIndex] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        # fusion settings (candidates, rrf_k): the ones the KB was opened with
        self.retriever = Retriever(self.kb)

    @classmethod
    def from_config(cls, config: Config, *, kit: FlowKit = FlowKit()) -> Checker:
        """The check flow from ``config``; the kit's KB, model, judge and decomposer: ones
        made already (a service worker shares its own between its flows), else the
        configured ones."""
        opened = kit.open(config)
        assert opened.kb is not None
        kb, model, ledger, owned = opened.kb, opened.model, opened.ledger, opened.owned
        risk = None
        if config.risk.classifier is not None:
            from medverify.risk.stage import RiskStage

            risk = RiskStage.from_config(config, need_classifier=True, rephraser=model)
        return cls(
            risk=risk,
            config=config,
            kb=kb,
            ledger=ledger,
            model=model,
            decomposer=kit.decomposer_for(config, model),
            judge=kit.judge_for(config, model),
            recheck=(JUDGES.create(config.arbitration.recheck_judge, config, model)
                     if config.arbitration.recheck_judge else None),
            owned=tuple(owned),
        )

    async def aclose(self) -> None:
        """Close what this checker opened itself (not a KB or model passed in)."""
        await close_owned(self.owned)

    @property
    def models(self) -> dict[str, str]:
        spec = self.model.spec if self.model else None
        out = {"judge": stage_id(self.judge)}
        if self.recheck is not None:
            out["recheck"] = stage_id(self.recheck)
        if self.decomposer.prompt_version is not None and spec:  # it asks the model
            out["decompose"] = spec
        if self.risk is not None and self.risk.classifier is not None:
            out["risk"] = f"{self.risk.classifier.id} over " + ", ".join(
                s.id for s in self.risk.scorers)
        return out

    @property
    def prompt_versions(self) -> dict[str, str]:
        stages: dict[str, Stage | str | None] = {"decompose": self.decomposer,
                                                 "judge": self.judge}
        if self.recheck is not None:
            stages["recheck"] = self.recheck
        return prompt_versions(stages)

    @property
    def provenance(self) -> Provenance:
        return Provenance(self.models, self.prompt_versions, self.kb.snapshot_id,
                          self.kb_lineage)

    @property
    def kb_lineage(self) -> str | None:
        """The KB's identity across ingests (None for a store that has none)."""
        lineage = getattr(self.kb, "lineage", None)
        return lineage if isinstance(lineage, str) else None

    def settled_claims(self, store: RunStore | None) -> SettledClaims | None:
        """The closed review items this run's claims are matched against (``[review]
        settle``; :mod:`medverify.review.settled`): None without a run store, a KB lineage,
        or when settling is off."""
        settings = self.config.review
        if store is None or not (settings.enabled and settings.settle) or not self.kb_lineage:
            return None
        key = (store.location, self.kb_lineage)
        settled = SettledClaims(ReviewStore(store), self.kb_lineage, settings.near_duplicate,
                                index=self._settled.get(key))
        self._settled[key] = settled.index  # kept: the next run adds only what closed since
        return settled

    async def check_answer(self, answer: Answer, settled: SettledClaims | None = None,
                           ) -> tuple[list[ClaimResult], list[str]]:
        """Check one answer. Returns claim results and answer-level errors; never raises for
        a problem confined to this answer. ``settled``: a claim matching a closed review
        item gets the reviewer's label (rule ``reviewed``)."""
        claims, errors = await decompose_answer(answer, self.decomposer, self.config)
        if not claims:
            return [], errors
        results = await self._retrieve_and_judge(claims)
        if self.risk is not None and results:
            results = await self._add_risk(answer, results, errors)
        # arbitrate -> re-check -> settle (settling on this thread: the store is its own)
        results = await arbitrate_claims(
            results, self.config.arbitration,
            recheck=self._recheck if self.recheck is not None else None,
            recheck_judge=stage_id(self.recheck) if self.recheck is not None else "",
            settled=settled)
        return results, errors

    async def _recheck(self, claims: list[Claim]) -> list[ClaimResult]:
        """Judge again the claims arbitration would escalate (``[arbitration] recheck_*``):
        more passages, the second judge; a failed re-check gives ERROR results (the claims
        stay escalated; :func:`medverify.arbitration.after_recheck`)."""
        assert self.recheck is not None
        top_k = self.config.arbitration.recheck_top_k or 2 * self.config.retrieval.top_k
        passages = await asyncio.to_thread(self.search, [c.text for c in claims], top_k)
        try:
            rechecked = await self._judge(claims, passages, self.recheck)
        except MedverifyError as exc:  # the re-check failed: the claims stay escalated
            rechecked = [ClaimResult.failed(c, f"re-check failed: {exc}", p)
                         for c, p in zip(claims, passages, strict=True)]
        return rechecked

    async def _add_risk(self, answer: Answer, results: list[ClaimResult],
                        errors: list[str]) -> list[ClaimResult]:
        """Each claim's hallucination probability from the risk stage (no knowledge base):
        a second opinion next to the judge's category, never a replacement for it."""
        from medverify.risk.stage import RiskText

        assert self.risk is not None
        texts = [RiskText(id=r.claim.id, text=r.claim.text, question=answer.question)
                 for r in results]
        try:
            scores = await self.risk.score(texts)
        except MedverifyError as exc:
            errors.append(f"risk: {exc}")
            return results
        failed = [s for s in scores if s.error]
        if failed:
            errors.append(f"risk: {len(failed)} claim(s) unscored: {failed[0].error}")
        return [r.model_copy(update={"hallucination_risk": s.probability})
                for r, s in zip(results, scores, strict=True)]

    async def _retrieve_and_judge(self, claims: Sequence[Claim]) -> list[ClaimResult]:
        """Retrieve evidence in groups and start judging each group as soon as its evidence
        is in, so retrieval (CPU) overlaps with judge calls (I/O)."""
        group = self.config.retrieval.batch
        async with asyncio.TaskGroup() as tasks:
            pending = []
            for start in range(0, len(claims), group):
                part = claims[start : start + group]
                passages = await self._retrieve(part)
                pending.append(tasks.create_task(self._judge(part, passages)))
        return [result for task in pending for result in task.result()]

    async def _retrieve(self, claims: Sequence[Claim]) -> list[list[Passage]]:
        if not claims:
            return []
        return await asyncio.to_thread(self.search, [c.text for c in claims],
                                       self.config.retrieval.top_k)

    def search(self, texts: Sequence[str], k: int) -> list[list[Passage]]:
        """Each claim's top ``k`` passages of the KB's own documents, then at most
        ``[review] reviewed_passages`` clinician-taught ones that hold at least half of
        the claim's key content (searched apart: teaching never moves an unrelated claim's
        passages, and a taught document reaches only claims on its point)."""
        mode = self.config.retrieval.mode
        apart = self.config.review.reviewed_passages
        main, taught = self.retriever.search_apart(texts, k, mode, prefix=DOC_PREFIX,
                                                   apart=apart)
        out = []
        for text, passages, extra in zip(texts, main, taught, strict=True):
            claim = key_terms(text)
            out.append(passages + [p for p in extra
                                   if relevance(claim, p.text) >= STRONG_RELEVANCE])
        return out

    async def _judge(
        self, claims: Sequence[Claim], passages: Sequence[list[Passage]],
        judge: Judge | None = None,
    ) -> list[ClaimResult]:
        judge = judge or self.judge
        items = [JudgeItem(claim=c, passages=p) for c, p in zip(claims, passages, strict=True)]
        verdicts = await judge.judge(items) if items else []
        by_claim = {v.claim_id: v for v in verdicts}
        results = []
        for item in items:
            verdict = by_claim.get(item.claim.id)
            if verdict is None:
                results.append(
                    ClaimResult.failed(item.claim, "judge returned no verdict", item.passages)
                )
            else:
                results.append(ClaimResult.from_verdict(item.claim, item.passages, verdict))
        return results

    @cached_property
    def public_config(self) -> dict[str, object]:
        """The config as reports carry it (``Config.public``), made once: every report of
        this checker holds the same (the model dump took ~50 µs an answer)."""
        return self.config.public()

    def report(
        self, answer: Answer, results: list[ClaimResult], errors: list[str], run_id: str | None,
        provenance: Provenance | None = None,
    ) -> Report:
        """``answer``'s report; ``provenance``: its run's, as the run recorded it (else read
        now: the KB's snapshot is a read of its store)."""
        made = provenance or self.provenance
        return Report(
            answer=answer,
            results=results,
            metrics=compute_metrics(results),
            run_id=run_id,
            config=self.public_config,
            models=made.models,
            prompt_versions=made.prompt_versions,
            kb_snapshot=made.kb_snapshot,
            kb_lineage=made.kb_lineage,
            usage=self.ledger.as_dict(),
            errors=errors,
            notes=self._notes(results),
        )

    def _notes(self, results: list[ClaimResult]) -> dict[str, object]:
        """Judge facts beyond token usage (the cascade's saved calls), when it has any."""
        notes = getattr(self.judge, "notes", None)
        return {f"judge.{self.judge.name}": notes(results)} if callable(notes) else {}

    async def run(
        self,
        answers: Sequence[Answer],
        *,
        store: RunStore | None = None,
        progress: Progress | None = None,
        concurrency: int = 4,
        cancel: CancelToken | None = None,
        escalate: Escalate | None = None,
    ) -> list[Report]:
        """Check many answers; record the run when a store is given. ``escalate``: each
        answer's claims for the review queue, queued (with a store) in the transaction that
        records the answer, so that a process killed between the two leaves neither."""
        harness = RunHarness("check", self.config, ledger=self.ledger, store=store,
                             progress=progress, cancel=cancel,
                             public_config=self.public_config)
        settled = self.settled_claims(store)
        provenance = self.provenance  # the run's, recorded once and given to its reports

        async def one(position: int, answer: Answer) -> Report:
            with answer_budget(self.model):  # [llm] answer_budget_s over its model calls
                results, errors = await self.check_answer(answer, settled)
            report = self.report(answer, results, errors, harness.run_id, provenance)
            if store is not None and harness.run_id is not None:
                record_answer(store, position, report, escalate(report) if escalate else [])
            return report

        with harness.recording(provenance):
            reports = await harness.each(answers, one, concurrency=concurrency)
            harness.fail_items(sum(1 for r in reports if not r.results), len(reports), "result")
        return [r.model_copy(update={"usage": self.ledger.as_dict()}) for r in reports]


def record_answer(store: RunStore, position: int, report: Report,
                  items: Sequence[ReviewItem]) -> None:
    """Record a checked answer (its claims, errors and notes) and queue its escalated
    claims for review in one transaction (under the write lock when there are any: the
    queue's check for a claim already waiting cannot go stale before its insert)."""
    assert report.run_id is not None
    with store.immediate() if items else nullcontext():
        store.save_answer(report.run_id, position, report.answer, report.results,
                          "; ".join(report.errors) or None, notes=report.notes)
        if items:
            ReviewStore(store).add_items(items)


def _as_answer(answer: Answer | str, question: str | None) -> Answer:
    if isinstance(answer, Answer):
        return answer if question is None else answer.model_copy(update={"question": question})
    return Answer(text=answer, question=question)


async def acheck(
    answer: Answer | str,
    *,
    question: str | None = None,
    kb: str | Path | None = None,
    model: str | None = None,
    config: Config | None = None,
    record: bool = True,
) -> Report:
    """Check one answer against a knowledge base and return its report.

    ``kb`` and ``model`` override the config's; the run is recorded in the run store
    (``config.store_location``) unless ``record`` is False."""
    config = (config or Config.load()).model_copy(
        update={k: v for k, v in {"kb": Path(kb) if kb else None, "model": model}.items() if v}
    )
    checker = Checker.from_config(config)
    try:
        if not record:
            return (await checker.run([_as_answer(answer, question)]))[0]
        with RunStore(config.store_location) as store:
            return (await checker.run([_as_answer(answer, question)], store=store))[0]
    finally:
        await checker.aclose()


def check(answer: Answer | str, **kwargs: object) -> Report:
    """Synchronous twin of :func:`acheck` (same arguments)."""
    return asyncio.run(acheck(answer, **kwargs))  # type: ignore[arg-type]
