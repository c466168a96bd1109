"""The whole citation audit: fetch, claims, passage selection, judging, metrics,
SourceCleanup, outputs.

Per answer: its sources are fetched (given texts are used as they are), its claims taken
from the input or decomposed from the answer, every claim-source pair judged on the
passages selected for it, the answer's metrics computed and, when asked for and a model is
configured, its unsupported statements cleaned up. Each finished answer is appended to
``DIR/answers.jsonl`` at once (a crash keeps what was done; a rerun resumes); then
``DIR/summary.json`` (metrics with bootstrap CIs, breakdowns, URL analysis, provenance)
and ``DIR/report.html`` are written, and the run is recorded in the run store.

One failing answer is recorded in its ``AnswerAudit.errors`` and the others go on.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from medverify.audit.inputs import given_claims, unread_source_fields
from medverify.audit.metrics import answer_metrics, audit_metrics, breakdowns
from medverify.audit.records import (
    AnswerAudit,
    AuditInput,
    AuditMetrics,
    AuditSummary,
    FetchChange,
    SupportLabel,
)
from medverify.audit.select import PassageSelector
from medverify.audit.urls import (
    analyze_urls,
    archive_candidates,
    check_archived,
    fetch_change_lines,
    fetch_changes,
)
from medverify.audit.verify import PairVerifier
from medverify.config import Config
from medverify.decompose import Decomposer, make_decomposer
from medverify.errors import ConfigError, MedverifyError
from medverify.files import atomic_write_text
from medverify.judge import Judge, judge_id, judge_options, make_judge
from medverify.kb.embed import Embedder, get_embedder
from medverify.llm.facade import Model, UsageLedger, model_from_config
from medverify.pipeline import validate_answer
from medverify.records import Claim, Source
from medverify.store.runs import RunStore

if TYPE_CHECKING:
    from medverify.audit.cleanup import SourceCleanup

log = logging.getLogger(__name__)

ANSWERS_FILE = "answers.jsonl"
SUMMARY_FILE = "summary.json"
REPORT_FILE = "report.html"

Progress = Callable[[int, int], None]
"""Called with (answers done, answers total)."""


class Fetcher(Protocol):
    """What the audit needs from the source fetcher (``medverify.sources.SourceFetcher``)."""

    async def fetch_all(self, sources: Sequence[Source]) -> list[Source]: ...


FetcherFactory = Callable[[], AbstractAsyncContextManager[Fetcher]]


def default_fetcher(config: Config) -> FetcherFactory:
    """The safe fetcher with the config's settings, cache and offline flag."""

    def make() -> AbstractAsyncContextManager[Fetcher]:
        from medverify.sources import SourceFetcher

        return SourceFetcher(  # type: ignore[return-value]
            config.fetch, cache_path=config.fetch_cache_path, offline=config.fetch.offline
        )

    return make


@dataclass
class _Progress:
    done: int = 0
    total: int = 0
    callback: Progress | None = None

    def step(self) -> None:
        self.done += 1
        if self.callback:
            self.callback(self.done, self.total)


@dataclass
class Auditor:
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

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        model: Model | None = None,
        out_dir: Path,
        fresh: bool = False,
        cleanup: bool = False,
        limit: int | None = None,
        judge: Judge | None = None,
        embedder: Embedder | None = None,
        fetcher_factory: FetcherFactory | None = None,
        record: bool = True,
    ) -> Auditor:
        """Build the audit from the config. ``judge``, ``embedder`` and ``fetcher_factory``
        replace the configured ones (tests, benchmarks)."""
        owned: list[object] = []
        ledger = model.usage if model is not None else UsageLedger()
        if model is None and config.model:
            model = model_from_config(config, ledger=ledger)
            owned.append(model)
        if judge is None:
            name = config.judge_name
            judge = make_judge(name, **judge_options(name, config, model))
        settings = config.audit
        selector = PassageSelector(
            embedder or get_embedder(config.kb_settings.embedder),
            passage_tokens=settings.passage_tokens,
            k=settings.passages_per_source,
            mode=settings.selection,
        )
        return cls(
            config=config,
            out_dir=Path(out_dir),
            decomposer=make_decomposer(config.decomposer_name, model),
            judge=judge,
            selector=selector,
            ledger=ledger,
            fetcher_factory=fetcher_factory or default_fetcher(config),
            model=model,
            cleanup=_make_cleanup(cleanup, model, judge, selector),
            fresh=fresh,
            limit=limit,
            record=record,
            owned=tuple(owned),
        )

    async def aclose(self) -> None:
        """Close what this auditor opened itself (not a model passed in)."""
        for resource in self.owned:
            if isinstance(resource, Model):
                await resource.aclose()

    @property
    def verifier(self) -> PairVerifier:
        return PairVerifier(self.judge, self.selector, pairing=self.config.audit.pairing)

    # -- running -------------------------------------------------------------------------

    async def run(
        self, inputs: Sequence[AuditInput], out_dir: Path | None = None
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
        store = RunStore(self.config.store_path) if self.record else None
        run_id = self._start(store)
        try:
            new = await self._audit_all(todo, path, store, run_id, len(chosen))
            audits = [kept.get(i.answer.id) or new[i.answer.id] for i in chosen]
            if store is not None:
                for position, item in enumerate(chosen):
                    if item.answer.id in kept:
                        store.save_audit(run_id, position, kept[item.answer.id])
            notes = {"resumed": len(kept), "audited": len(todo)}
            summary = await self.summarize(audits, run_id, time.monotonic() - started, notes)
            self._write(out, summary, audits)
            self._finish(store, run_id, "done", None)
            return audits, summary
        except BaseException as exc:
            self._finish(store, run_id, "interrupted", f"{type(exc).__name__}: {exc}")
            raise
        finally:
            if store is not None:
                store.close()

    async def _audit_all(
        self,
        todo: Sequence[tuple[int, AuditInput]],
        path: Path,
        store: RunStore | None,
        run_id: str,
        total: int,
    ) -> dict[str, AnswerAudit]:
        """Audit answers, at most ``concurrency`` at a time; each finished one is appended to
        ``answers.jsonl`` (and flushed) in completion order."""
        limit = asyncio.Semaphore(self.concurrency)
        progress = _Progress(total - len(todo), total, self.progress)
        results: dict[str, AnswerAudit] = {}
        async with self.fetcher_factory() as fetcher:
            with path.open("a", encoding="utf-8") as handle:

                async def one(position: int, item: AuditInput) -> None:
                    async with limit:
                        audit = await self.audit_answer(item, fetcher)
                    _append(handle, audit)
                    if store is not None:
                        store.save_audit(run_id, position, audit)
                    results[item.answer.id] = audit
                    progress.step()

                await asyncio.gather(*(one(n, item) for n, item in todo))
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
        if item.claims is not None:
            claims = given_claims(item.answer, item.claims)
            gold: list[SupportLabel | None] = [c.label for c in item.claims]
        else:
            try:
                validate_answer(item.answer, self.config.max_answer_chars)
                claims = await self.decomposer.decompose(item.answer)
            except MedverifyError as exc:
                errors.append(f"decompose: {exc}")
                claims = []
            gold = [None] * len(claims)
            if not claims and not errors:
                errors.append("decompose: no checkable claim found in the answer")
        cap = self.config.max_claims
        if len(claims) > cap:
            errors.append(f"{len(claims)} claims, only the first {cap} were audited (max_claims)")
        return claims[:cap], gold[:cap]

    async def _clean(self, audit: AnswerAudit) -> AnswerAudit:
        if self.cleanup is None or not any(c.supported is False for c in audit.claims):
            return audit
        try:
            results = await self.cleanup.clean(audit)
        except Exception as exc:
            errors = [*audit.errors, f"cleanup: {type(exc).__name__}: {exc}"]
            return audit.model_copy(update={"errors": errors})
        return audit.model_copy(update={"cleanup": results})

    # -- summary -------------------------------------------------------------------------

    async def summarize(
        self,
        audits: Sequence[AnswerAudit],
        run_id: str,
        wall_s: float = 0.0,
        notes: dict[str, Any] | None = None,
    ) -> AuditSummary:
        """The run's :class:`AuditSummary` from its audits (no model call)."""
        settings = self.config.audit
        options: dict[str, Any] = {"n_boot": settings.bootstrap, "seed": settings.seed}
        archived, skipped, errors = await self._archived(audits)
        if self.cleanup is None:
            skipped.append("cleanup: not requested (--cleanup with --model)")
        overall = audit_metrics(audits, **options)
        changes = fetch_changes(audits)
        return AuditSummary(
            run_id=run_id,
            input_path=self.input_path,
            config=self.config.public(),
            judge=judge_id(self.judge),
            models=self.models,
            prompt_versions=self.prompt_versions,
            offline=self.config.fetch.offline,
            pairing=settings.pairing,
            overall=overall,
            breakdowns=breakdowns(audits, settings.breakdowns or None, **options),
            url_analysis=analyze_urls(
                audits, group_by=_group_by(audits), paywalled=settings.paywalled_domains,
                archived=archived,
            ),
            cleanup=self._cleanup_counts(audits),
            usage=self.ledger.as_dict(),
            notes={**(notes or {}), **self._notes(audits, wall_s)},
            skipped=skipped,
            errors=errors + [f"{a.answer.id}: {e}" for a in audits for e in a.errors],
            fetch_changes=changes,
            warnings=run_warnings(audits, overall, changes),
        )

    async def _archived(
        self, audits: Sequence[AnswerAudit]
    ) -> tuple[dict[str, bool | None] | None, list[str], list[str]]:
        """Wayback check of dead URLs: online and asked for only."""
        if self.config.fetch.offline:
            return None, ["wayback: offline"], []
        if not self.config.audit.wayback:
            return None, ["wayback: not requested (audit.wayback = false)"], []
        import httpx

        headers = {"User-Agent": self.config.fetch.user_agent}
        try:
            async with httpx.AsyncClient(headers=headers) as client:
                return await check_archived(archive_candidates(audits), client), [], []
        except Exception as exc:
            return None, [], [f"wayback: {type(exc).__name__}: {exc}"]

    def _cleanup_counts(self, audits: Sequence[AnswerAudit]) -> dict[str, int]:
        if self.cleanup is None:
            return {}
        from medverify.audit.cleanup import cleanup_counts

        return cleanup_counts([r for a in audits for r in a.cleanup])

    def _notes(self, audits: Sequence[AnswerAudit], wall_s: float) -> dict[str, Any]:
        pairs = [p for a in audits for c in a.claims for p in c.pairs]
        selected = sum(p.input_tokens for p in pairs)
        whole = sum(p.source_tokens for p in pairs)
        return {
            "wall_s": round(wall_s, 2),
            "pairs_judged": len(pairs),
            "judge_input_tokens": selected,
            "whole_source_tokens": whole,
            "token_ratio": round(selected / whole, 4) if whole else None,
            "selection": {
                "passage_tokens": self.selector.passage_tokens,
                "passages_per_source": self.selector.k,
                "mode": self.selector.mode,
                "embedder": self.selector.embedder.id,
            },
            "warnings": list(self.warnings),
        }

    @property
    def models(self) -> dict[str, str]:
        spec = self.model.spec if self.model else None
        out = {
            "judge": judge_id(self.judge),
            "embedder": self.selector.embedder.id,
        }
        if self.decomposer.name == "llm" and spec:
            out["decompose"] = spec
        if self.cleanup is not None and spec:
            out["cleanup"] = spec
        return out

    @property
    def prompt_versions(self) -> dict[str, str]:
        versions = {
            "decompose": self.decomposer.prompt_version,
            "judge": self.judge.prompt_version,
            "cleanup": self.cleanup.prompt_version if self.cleanup is not None else None,
        }
        return {stage: v for stage, v in versions.items() if v}

    # -- outputs and the run store -------------------------------------------------------

    def _write(self, out: Path, summary: AuditSummary, audits: Sequence[AnswerAudit]) -> None:
        from medverify.report.audit_html import write_audit_html

        atomic_write_text(out / SUMMARY_FILE, summary.model_dump_json(indent=2) + "\n")
        write_audit_html(out / REPORT_FILE, summary, audits)

    def _start(self, store: RunStore | None) -> str:
        if store is None:
            return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        return store.start_run(
            kind="audit",
            config=self.config.public(),
            models=self.models,
            prompt_versions=self.prompt_versions,
            kb_snapshot=None,
        )

    def _finish(
        self, store: RunStore | None, run_id: str, status: str, error: str | None
    ) -> None:
        if store is not None:
            store.finish_run(run_id, status=status, usage=self.ledger.as_dict(), error=error)


def _make_cleanup(
    wanted: bool, model: Model | None, judge: Judge, selector: PassageSelector
) -> SourceCleanup | None:
    if not wanted:
        return None
    if model is None:
        raise ConfigError("--cleanup rewrites statements with a model: pass --model SPEC")
    from medverify.audit.cleanup import SourceCleanup

    return SourceCleanup(model, judge, selector=selector)


def source_field_counts(audits: Sequence[AnswerAudit]) -> dict[str, int]:
    """Input fields that look like sources but were not read -> answers that have one."""
    counts: Counter[str] = Counter()
    for audit in audits:
        counts.update(unread_source_fields(audit.answer.meta))
    return dict(sorted(counts.items()))


def run_warnings(
    audits: Sequence[AnswerAudit], overall: AuditMetrics, changes: Sequence[FetchChange]
) -> list[str]:
    """What a reader must know before trusting the run's numbers: support not measured,
    source-like input fields that were not read, sources whose fetch outcome changed."""
    warnings = []
    if not overall.statement_support.measured:
        warnings.append("statement- and response-level support NOT MEASURED: "
                        f"{overall.statement_support.reason}")
    no_source = sum(1 for a in audits if not any(s.url or s.text for s in a.answer.sources))
    if no_source and overall.statement_support.measured:
        warnings.append(f"{no_source:,} of {len(audits):,} answers cite no source (their "
                        "statements count as unsupported)")
    for name, count in source_field_counts(audits).items():
        warnings.append(f"{count:,} answers have a field {name!r} that looks like it holds "
                        "sources but was not read (see docs/audit.md, Input)")
    warnings.extend(fetch_change_lines(changes)[:1])
    return warnings


def _group_by(audits: Sequence[AnswerAudit]) -> str | None:
    return "system" if any("system" in a.answer.meta for a in audits) else None


def _append(handle: IO[str], audit: AnswerAudit) -> None:
    handle.write(audit.model_dump_json() + "\n")
    handle.flush()


def load_done(path: Path, warnings: list[str] | None = None) -> dict[str, AnswerAudit]:
    """Audits already in ``answers.jsonl`` (the last line per answer id wins). Unreadable
    lines (a truncated last line after a crash) are dropped and the file is rewritten
    without them, so appending stays safe."""
    if not path.is_file():
        return {}
    done: dict[str, AnswerAudit] = {}
    lines = path.read_text("utf-8", errors="replace").split("\n")
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            audit = AnswerAudit.model_validate_json(line)
        except ValueError:
            bad += 1
            continue
        done[audit.answer.id] = audit
    if bad:
        if warnings is not None:
            warnings.append(f"{path}: {bad} unreadable line(s) dropped (interrupted run?)")
        body = "".join(a.model_dump_json() + "\n" for a in done.values())
        atomic_write_text(path, body)
    elif lines and lines[-1]:
        with path.open("a", encoding="utf-8") as handle:
            handle.write("\n")
    return done
