"""The check flow: decompose -> retrieve -> judge -> report, recorded in the run store.

:class:`Checker` holds the loaded pieces (knowledge base, model, decomposer, judge) so that
many answers can be checked with one set-up; :func:`check` / :func:`acheck` are the
one-call entry points. A failure of one answer is recorded as an error on that answer's
report and the others go on; a failure that would hit every answer (no KB, bad config)
raises before anything runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from medverify.config import Config
from medverify.decompose import Decomposer, make_decomposer
from medverify.errors import ConfigError, InputError, MedverifyError
from medverify.judge import Judge, JudgeItem, judge_id, judge_options, make_judge
from medverify.kb import KnowledgeBase
from medverify.llm.facade import Model, UsageLedger, model_from_config
from medverify.records import Answer, Claim, ClaimResult, Passage, Report
from medverify.report.metrics import compute_metrics
from medverify.store.runs import RunStore

if TYPE_CHECKING:
    from medverify.risk.stage import RiskStage

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
"""Called with (answers done, answers total)."""

T = TypeVar("T")


async def run_each(answers: Sequence[Answer], work: Callable[[int, Answer], Awaitable[T]], *,
                   concurrency: int = 4, progress: Progress | None = None) -> list[T]:
    """``work(position, answer)`` for every answer, at most ``concurrency`` at a time;
    results in input order; ``progress(done, total)`` after each."""
    limit = asyncio.Semaphore(concurrency)
    done = 0

    async def one(position: int, answer: Answer) -> T:
        nonlocal done
        async with limit:
            result = await work(position, answer)
        done += 1
        if progress:
            progress(done, len(answers))
        return result

    return list(await asyncio.gather(*(one(i, a) for i, a in enumerate(answers))))


async def close_owned(owned: Sequence[object]) -> None:
    """Close the knowledge bases and models a checker opened itself."""
    for resource in owned:
        if isinstance(resource, KnowledgeBase):
            resource.close()
        elif isinstance(resource, Model):
            await resource.aclose()


async def run_recorded(answers: Sequence[Answer], work: Callable[[int, Answer], Awaitable[T]],
                       *, finish: Callable[[str, str | None], None],
                       empty: Callable[[T], bool], what: str, concurrency: int = 4,
                       progress: Progress | None = None) -> list[T]:
    """:func:`run_each`, then ``finish(status, error)`` for the run record: ``interrupted``
    (and re-raised) when it stops, ``error`` when some answer produced no ``what``, else
    ``done``."""
    try:
        results = await run_each(answers, work, concurrency=concurrency, progress=progress)
    except BaseException as exc:
        finish("interrupted", f"{type(exc).__name__}: {exc}")
        raise
    failed = sum(1 for r in results if empty(r))
    finish("error" if failed else "done",
           f"{failed} of {len(results)} answers produced no {what}" if failed else None)
    return results


def open_kb(config: Config) -> KnowledgeBase:
    """The configured knowledge base, or a ConfigError that says how to get one."""
    if config.kb is None:
        raise ConfigError(
            "no knowledge base given: pass --kb DIR (build one with "
            "`medverify kb ingest PATH --kb DIR`)"
        )
    return KnowledgeBase.open(config.kb, retrieval=config.retrieval)


def open_kb_and_model(
    config: Config,
    *,
    kb: KnowledgeBase | None,
    model: Model | None,
    ledger: UsageLedger,
) -> tuple[KnowledgeBase, Model | None, UsageLedger, list[object]]:
    """The KB and model a run uses: the ones given, else opened from ``config`` (the model
    only when one is configured). Returns them with the usage ledger (the given model's own,
    else ``ledger``) and the list of what was opened here, for :func:`close_owned`."""
    owned: list[object] = []
    if kb is None:
        kb = open_kb(config)
        owned.append(kb)
    if model is not None:
        return kb, model, model.usage, owned
    if config.model:
        model = model_from_config(config, ledger=ledger)
        owned.append(model)
    return kb, model, ledger, owned


def validate_answer(answer: Answer, max_chars: int) -> None:
    """Refuse input that cannot be checked, with a message the user can act on."""
    if not answer.text.strip():
        raise InputError("the answer is empty: nothing to check")
    if len(answer.text) > max_chars:
        raise InputError(
            f"the answer has {len(answer.text):,} characters, over the limit of {max_chars:,}; "
            "split it, or raise the limit with --max-answer-chars / MEDVERIFY_MAX_ANSWER_CHARS"
        )
    if "\x00" in answer.text:
        raise InputError("the answer contains NUL bytes: is it a binary file?")


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

    @classmethod
    def from_config(
        cls, config: Config, *, kb: KnowledgeBase | None = None, model: Model | None = None
    ) -> Checker:
        kb, model, ledger, owned = open_kb_and_model(
            config, kb=kb, model=model, ledger=UsageLedger()
        )
        judge_name = config.judge_name
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
            decomposer=make_decomposer(config.decomposer_name, model),
            judge=make_judge(judge_name, **judge_options(judge_name, config, model)),
            owned=tuple(owned),
        )

    async def aclose(self) -> None:
        """Close what this checker opened itself (not a KB or model passed in)."""
        await close_owned(self.owned)

    @property
    def models(self) -> dict[str, str]:
        spec = self.model.spec if self.model else None
        out = {"judge": judge_id(self.judge)}
        if self.decomposer.name == "llm" and spec:
            out["decompose"] = spec
        if self.risk is not None and self.risk.classifier is not None:
            out["risk"] = f"{self.risk.classifier.id} over " + ", ".join(
                s.id for s in self.risk.scorers)
        return out

    @property
    def prompt_versions(self) -> dict[str, str]:
        versions = {"decompose": self.decomposer.prompt_version, "judge": self.judge.prompt_version}
        return {stage: v for stage, v in versions.items() if v}

    async def check_answer(self, answer: Answer) -> tuple[list[ClaimResult], list[str]]:
        """Check one answer. Returns claim results and answer-level errors; never raises for
        a problem confined to this answer."""
        try:
            validate_answer(answer, self.config.max_answer_chars)
            claims = await self.decomposer.decompose(answer)
        except MedverifyError as exc:
            return [], [f"decompose: {exc}"]
        errors = []
        if not claims:
            errors.append("decompose: no checkable claim found in the answer")
        if len(claims) > self.config.max_claims:
            errors.append(
                f"decompose: {len(claims)} claims, only the first "
                f"{self.config.max_claims} were checked (max_claims)"
            )
            claims = claims[: self.config.max_claims]
        results = await self._retrieve_and_judge(claims)
        if self.risk is not None and results:
            results = await self._add_risk(answer, results, errors)
        return results, errors

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
        settings = self.config.retrieval
        return await asyncio.to_thread(
            self.kb.search_many, [c.text for c in claims], settings.top_k, settings.mode
        )

    async def _judge(
        self, claims: Sequence[Claim], passages: Sequence[list[Passage]]
    ) -> list[ClaimResult]:
        items = [JudgeItem(claim=c, passages=p) for c, p in zip(claims, passages, strict=True)]
        verdicts = await self.judge.judge(items) if items else []
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

    def report(
        self, answer: Answer, results: list[ClaimResult], errors: list[str], run_id: str | None
    ) -> Report:
        return Report(
            answer=answer,
            results=results,
            metrics=compute_metrics(results),
            run_id=run_id,
            config=self.config.public(),
            models=self.models,
            prompt_versions=self.prompt_versions,
            kb_snapshot=self.kb.snapshot_id,
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
    ) -> list[Report]:
        """Check many answers; record the run when a store is given."""
        run_id = self._start(store)

        async def one(position: int, answer: Answer) -> Report:
            results, errors = await self.check_answer(answer)
            report = self.report(answer, results, errors, run_id)
            if store is not None and run_id is not None:
                store.save_answer(run_id, position, answer, results, "; ".join(errors) or None,
                                  notes=report.notes)
            return report

        reports = await run_recorded(
            answers, one, finish=lambda status, error: self._finish(store, run_id, status, error),
            empty=lambda r: not r.results, what="result", concurrency=concurrency,
            progress=progress)
        return [r.model_copy(update={"usage": self.ledger.as_dict()}) for r in reports]

    def _start(self, store: RunStore | None) -> str | None:
        if store is None:
            return None
        return store.start_run(
            kind="check",
            config=self.config.public(),
            models=self.models,
            prompt_versions=self.prompt_versions,
            kb_snapshot=self.kb.snapshot_id,
        )

    def _finish(
        self, store: RunStore | None, run_id: str | None, status: str, error: str | None
    ) -> None:
        if store is not None and run_id is not None:
            store.finish_run(run_id, status=status, usage=self.ledger.as_dict(), error=error)


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
    (``config.store_path``) unless ``record`` is False."""
    config = (config or Config.load()).model_copy(
        update={k: v for k, v in {"kb": Path(kb) if kb else None, "model": model}.items() if v}
    )
    checker = Checker.from_config(config)
    try:
        if not record:
            return (await checker.run([_as_answer(answer, question)]))[0]
        with RunStore(config.store_path) as store:
            return (await checker.run([_as_answer(answer, question)], store=store))[0]
    finally:
        await checker.aclose()


def check(answer: Answer | str, **kwargs: object) -> Report:
    """Synchronous twin of :func:`acheck` (same arguments)."""
    return asyncio.run(acheck(answer, **kwargs))  # type: ignore[arg-type]
