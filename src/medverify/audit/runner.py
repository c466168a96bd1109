"""The whole citation audit: fetch, claims, passage selection, judging, metrics,
SourceCleanup, outputs.

Per answer: its sources are fetched (given texts are used as they are), its claims taken
from the input or decomposed from the answer, every claim-source pair judged on the
passages selected for it, the answer's metrics computed and, when asked for and a model is
configured, its unsupported statements cleaned up. Each finished answer is appended to
``DIR/answers.jsonl`` at once (a crash keeps what was done; a rerun resumes); then
``DIR/summary.json`` (metrics with bootstrap CIs, breakdowns, URL analysis, provenance)
and ``DIR/report.html`` are written, and the run is recorded in the run store.

With an ``executor`` other than the local one (``medverify audit --executor ray``), the
answers still to do are cut into chunks of :data:`AUDIT_CHUNK`; each chunk is an
:class:`AuditChunk` task that builds its own :class:`Auditor` from the config in the
process that runs it (judge, model, fetcher: fetching happens there) and returns the
chunk's :class:`AnswerAudit` records. This process appends each chunk's audits to
``answers.jsonl`` as the chunk comes back (so a rerun resumes after them) and builds the
summary exactly as a local run does.

One failing answer is recorded in its ``AnswerAudit.errors`` and the others go on. The
run's summary (metrics, URL analysis, provenance, warnings) is :mod:`medverify.audit.summary`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from medverify.audit.inputs import given_claims
from medverify.audit.metrics import answer_metrics
from medverify.audit.records import (
    AnswerAudit,
    AuditInput,
    AuditSummary,
    SupportLabel,
)
from medverify.audit.select import PassageSelector
from medverify.audit.summary import AuditSummaries
from medverify.audit.verify import PairVerifier
from medverify.config import Config
from medverify.decompose import Decomposer
from medverify.decompose.answer import cap_claims, decompose_answer
from medverify.errors import ConfigError
from medverify.executor import Executor, LocalExecutor
from medverify.files import append_record, atomic_write_text, read_records
from medverify.harness import (
    CancelToken,
    RunHarness,
    close_owned,
    run_each,
)
from medverify.judge import JUDGES, Judge
from medverify.kit import FlowKit
from medverify.llm.facade import Model, UsageLedger
from medverify.records import Claim, Usage
from medverify.sources.factory import Fetcher, FetcherFactory

if TYPE_CHECKING:
    from medverify.audit.cleanup import SourceCleanup

log = logging.getLogger(__name__)

ANSWERS_FILE = "answers.jsonl"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"

Progress = Callable[[int, int], None]
"""Called with (answers done, answers total)."""

AUDIT_CHUNK = 8
"""Answers per executor task. An answer costs seconds to minutes (its URLs fetched, every
claim-source pair judged), so 8 amortise what a task sets up (judge, model client,
fetcher and its cache) while the answers of a chunk overlap their fetches and judge calls
(``concurrency``); a dead worker costs at most 8 answers redone, a killed driver at most
the chunks in flight, and 100 answers still make 13 tasks to spread over a cluster."""


@dataclass
class Auditor(AuditSummaries):
    """Everything needed to audit answers; build it with :meth:`from_config`."""

    config: Config
    out_dir: Path
    decomposer: Decomposer
    judge: Judge
    selector: PassageSelector
    ledger: UsageLedger
    fetcher_factory: FetcherFactory
    model: Model | None = None
    cleanup: SourceCleanup | None = None
    fresh: bool = False
    limit: int | None = None
    record: bool = True
    concurrency: int = 4
    progress: Progress | None = None
    input_path: str | None = None
    owned: tuple[object, ...] = ()
    warnings: list[str] = field(default_factory=list)
    executor: Executor | None = None
    chunk_size: int = AUDIT_CHUNK

    @classmethod
    def from_config(cls, config: Config, *, out_dir: Path, fresh: bool = False,
                    cleanup: bool = False, limit: int | None = None,
                    kit: FlowKit = FlowKit()) -> Auditor:
        """Build the audit from the config; the parts in ``kit`` (model, judge, embedder,
        decomposer, fetcher factory, executor, record) replace the configured ones (tests,
        benchmarks, a service worker sharing its own). With an ``executor`` (not the local
        one) the answers are audited by :class:`AuditChunk` tasks there, each with the
        judge and embedder of ``config`` and the kit's fetcher factory (which must pickle);
        the kit's judge and embedder then only name them in the summary."""
        opened = kit.open(config, need_kb=False)
        model, ledger = opened.model, opened.ledger
        judge = kit.judge_for(config, model)
        settings = config.audit
        selector = PassageSelector(kit.embedder_for(config),
                                   passage_tokens=settings.passage_tokens,
                                   k=settings.passages_per_source, mode=settings.selection)
        return cls(config=config, out_dir=Path(out_dir),
                   decomposer=kit.decomposer_for(config, model), judge=judge,
                   selector=selector, ledger=ledger, fetcher_factory=kit.fetcher_for(config),
                   model=model, cleanup=_make_cleanup(cleanup, model, judge, selector),
                   fresh=fresh, limit=limit, record=kit.record, owned=opened.owned,
                   executor=kit.executor)

    async def aclose(self) -> None:
        """Close what this auditor opened itself (not a model passed in)."""
        await close_owned(self.owned)

    @property
    def verifier(self) -> PairVerifier:
        return PairVerifier(self.judge, self.selector, pairing=self.config.audit.pairing)

    # -- running -------------------------------------------------------------------------

    async def run(
        self, inputs: Sequence[AuditInput], out_dir: Path | None = None, *,
        cancel: CancelToken | None = None,
    ) -> tuple[list[AnswerAudit], AuditSummary]:
        """Audit ``inputs`` (the first ``limit``), resuming from ``answers.jsonl`` unless
        ``fresh``; write the outputs and return the audits (input order) and the summary."""
        out = Path(out_dir or self.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        chosen = list(inputs)[: self.limit] if self.limit is not None else list(inputs)
        path = out / ANSWERS_FILE
        done = {} if self.fresh else load_done(path, self.warnings)
        if self.fresh:
            path.write_text("", "utf-8")
        kept = {i.answer.id: done[i.answer.id] for i in chosen if i.answer.id in done}
        todo = [(n, i) for n, i in enumerate(chosen) if i.answer.id not in kept]
        started = time.monotonic()
        harness = RunHarness.opening("audit", self.config, record=self.record,
                                     ledger=self.ledger, progress=self.progress, cancel=cancel,
                                     always_id=True)
        with harness.recording(self.provenance):
            if self.executor is None or isinstance(self.executor, LocalExecutor):
                new = await self._audit_all(todo, path, harness, len(chosen))
            else:
                new = await self._audit_on(self.executor, todo, path, harness, len(chosen))
            audits = [kept.get(i.answer.id) or new[i.answer.id] for i in chosen]
            run_id = harness.run_id or ""
            if harness.store is not None:
                for position, item in enumerate(chosen):
                    if item.answer.id in kept:
                        harness.store.save_audit(run_id, position, kept[item.answer.id])
            notes = {"resumed": len(kept), "audited": len(todo)}
            summary = await self.summarize(audits, run_id, time.monotonic() - started, notes)
            self._write(out, summary, audits)
        return audits, summary

    async def _audit_all(
        self,
        todo: Sequence[tuple[int, AuditInput]],
        path: Path,
        harness: RunHarness,
        total: int,
    ) -> dict[str, AnswerAudit]:
        """Audit answers, at most ``concurrency`` at a time; each finished one is appended to
        ``answers.jsonl`` (and flushed) in completion order."""
        results: dict[str, AnswerAudit] = {}
        store, run_id = harness.store, harness.run_id or ""
        async with self.fetcher_factory() as fetcher:
            with path.open("a", encoding="utf-8") as handle:

                async def one(_: int, job: tuple[int, AuditInput]) -> None:
                    position, item = job
                    audit = await self.audit_answer(item, fetcher)
                    append_record(handle, audit)
                    if store is not None:
                        store.save_audit(run_id, position, audit)
                    results[item.answer.id] = audit

                await harness.each(todo, one, concurrency=self.concurrency,
                                   done=total - len(todo), total=total)
        return results

    async def _audit_on(
        self,
        executor: Executor,
        todo: Sequence[tuple[int, AuditInput]],
        path: Path,
        harness: RunHarness,
        total: int,
    ) -> dict[str, AnswerAudit]:
        """:meth:`_audit_all` on ``executor``: chunks of :attr:`chunk_size` answers, each
        audited by an :class:`AuditChunk` task; each chunk's audits are appended to
        ``answers.jsonl`` (and recorded, and their token usage added to the ledger) as the
        chunk comes back (each chunk once, in completion order), then progress."""
        results: dict[str, AnswerAudit] = {}
        if not todo:
            return results
        store, run_id = harness.store, harness.run_id or ""
        if harness.cancel is not None:
            harness.cancel.check()
        executor.slots  # noqa: B018 (connects here, in this thread, before any task is sent)
        task = AuditChunk.for_auditor(self)
        chunks = executor.imap(task, [item for _, item in todo], chunk_size=self.chunk_size)
        count = total - len(todo)
        try:
            with path.open("a", encoding="utf-8") as handle:
                # the executor blocks while it waits for a chunk: wait in a thread
                while (done := await asyncio.to_thread(next, chunks, None)) is not None:
                    index, audited = done
                    start = index * self.chunk_size
                    for (position, item), result in zip(todo[start:start + len(audited)],
                                                        audited, strict=True):
                        if result.audit.answer.id != item.answer.id:
                            raise RuntimeError(f"chunk {index} sent back answer "
                                               f"{result.audit.answer.id!r} for {item.answer.id!r}")
                        append_record(handle, result.audit)
                        if store is not None:
                            store.save_audit(run_id, position, result.audit)
                        results[item.answer.id] = result.audit
                        for stage, usage in result.usage.items():
                            self.ledger.add(stage, usage)
                    count += len(audited)
                    if harness.progress is not None:
                        harness.progress(count, total)
                    if harness.cancel is not None:
                        harness.cancel.check()
        finally:
            # cancels the chunks still pending (a ValueError: a wait still runs in its thread)
            with contextlib.suppress(ValueError):
                chunks.close()  # type: ignore[attr-defined]
        return results

    async def audit_answer(self, item: AuditInput, fetcher: Fetcher) -> AnswerAudit:
        """Audit one answer; never raises for a problem confined to it."""
        try:
            return await self._audit(item, fetcher)
        except Exception as exc:
            log.warning("answer %s failed: %s", item.answer.id, exc)
            return AnswerAudit(answer=item.answer, errors=[f"{type(exc).__name__}: {exc}"])

    async def _audit(self, item: AuditInput, fetcher: Fetcher) -> AnswerAudit:
        errors: list[str] = []
        answer = item.answer
        try:
            sources = await fetcher.fetch_all(answer.sources)
        except Exception as exc:  # the fetcher records per-URL failures; this is a bug
            errors.append(f"fetch: {type(exc).__name__}: {exc}")
            sources = list(answer.sources)
        answer = answer.model_copy(update={"sources": sources})
        claims, gold = await self._claims(item, errors)
        audit = AnswerAudit(
            answer=answer,
            claims=await self.verifier.verify(claims, sources, gold),
            errors=errors,
        )
        audit = audit.model_copy(update={"metrics": answer_metrics(audit)})
        return await self._clean(audit)

    async def _claims(
        self, item: AuditInput, errors: list[str]
    ) -> tuple[list[Claim], list[SupportLabel | None]]:
        if item.claims is None:
            claims, found = await decompose_answer(item.answer, self.decomposer, self.config,
                                                   verb="audited", cap_prefix="")
            errors.extend(found)
            return claims, [None] * len(claims)
        claims = given_claims(item.answer, item.claims)
        gold: list[SupportLabel | None] = [c.label for c in item.claims]
        claims, capped = cap_claims(claims, self.config.max_claims, verb="audited", prefix="")
        errors.extend(capped)
        return claims, gold[: len(claims)]

    async def _clean(self, audit: AnswerAudit) -> AnswerAudit:
        if self.cleanup is None or not any(c.supported is False for c in audit.claims):
            return audit
        try:
            results = await self.cleanup.clean(audit)
        except Exception as exc:
            errors = [*audit.errors, f"cleanup: {type(exc).__name__}: {exc}"]
            return audit.model_copy(update={"errors": errors})
        return audit.model_copy(update={"cleanup": results})

    # -- outputs and the run store -------------------------------------------------------

    def _write(self, out: Path, summary: AuditSummary, audits: Sequence[AnswerAudit]) -> None:
        from medverify.audit.html import write_audit_html

        atomic_write_text(out / SUMMARY_FILE, summary.model_dump_json(indent=2) + "\n")
        write_audit_html(out / REPORT_FILE, summary, audits)


@dataclass(frozen=True)
class AuditedAnswer:
    """What an :class:`AuditChunk` task returns per answer: its audit, and on the chunk's
    first answer the tokens the whole chunk used (per stage; ``{}`` on the others)."""

    audit: AnswerAudit
    usage: dict[str, Usage] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditChunk:
    """The picklable task of an audit on an executor: audits a chunk of answers with an
    :class:`Auditor` it builds, in the process that runs it, from ``config`` (judge, model,
    decomposer, embedder, passage selection) and ``fetcher_factory`` (None: the config's
    fetcher), closes what it opened and returns one :class:`AuditedAnswer` per answer.

    ``judge_factory`` is the judge's registry factory as the driver resolved it; the
    worker adopts it under the judge's name (``Registry.adopt``)."""

    config: Config
    cleanup: bool = False
    concurrency: int = 4
    fetcher_factory: FetcherFactory | None = None
    judge_factory: Callable[..., Judge] | None = field(default=None, compare=False)

    @classmethod
    def for_auditor(cls, auditor: Auditor) -> AuditChunk:
        return cls(auditor.config, cleanup=auditor.cleanup is not None,
                   concurrency=auditor.concurrency, fetcher_factory=auditor.fetcher_factory,
                   judge_factory=JUDGES.get(auditor.config.judge_name))

    def __call__(self, chunk: list[AuditInput]) -> list[AuditedAnswer]:
        return asyncio.run(self.audit(chunk))

    async def audit(self, chunk: Sequence[AuditInput]) -> list[AuditedAnswer]:
        JUDGES.adopt(self.config.judge_name, self.judge_factory)
        auditor = Auditor.from_config(
            self.config, out_dir=Path(), cleanup=self.cleanup,
            kit=FlowKit(fetcher_factory=self.fetcher_factory, record=False))
        try:
            async with auditor.fetcher_factory() as fetcher:

                async def one(_: int, item: AuditInput) -> AnswerAudit:
                    return await auditor.audit_answer(item, fetcher)

                audits = await run_each(chunk, one, concurrency=self.concurrency)
        finally:
            await auditor.aclose()
        usage = auditor.ledger.as_dict()
        return [AuditedAnswer(audit, usage if n == 0 else {}) for n, audit in enumerate(audits)]


def _make_cleanup(
    wanted: bool, model: Model | None, judge: Judge, selector: PassageSelector
) -> SourceCleanup | None:
    if not wanted:
        return None
    if model is None:
        raise ConfigError("--cleanup rewrites statements with a model: pass --model SPEC")
    from medverify.audit.cleanup import SourceCleanup

    return SourceCleanup(model, judge, selector=selector)


def load_done(path: Path, warnings: list[str] | None = None) -> dict[str, AnswerAudit]:
    """Audits already in ``answers.jsonl`` (the last line per answer id wins). Unreadable
    lines (a truncated last line after a crash) are dropped and the file is rewritten
    without them, so appending stays safe."""
    audits = read_records(path, AnswerAudit, warnings, key=lambda a: a.answer.id)
    return {a.answer.id: a for a in audits}
