"""The summary of a citation audit run (:class:`~medverify.audit.records.AuditSummary`), from
its answers' audits with no model call: metrics with bootstrap CIs, breakdowns, URL analysis
(with the Wayback check of dead URLs, online and asked for only), cleanup counts, token
notes, provenance (models, prompt versions), and the warnings a reader must see before
trusting the numbers (:func:`run_warnings`).

:class:`AuditSummaries` is a mixin of :class:`medverify.audit.runner.Auditor` (its fields).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from medverify.audit.inputs import unread_source_fields
from medverify.audit.metrics import audit_metrics, breakdowns
from medverify.audit.records import AnswerAudit, AuditMetrics, AuditSummary, FetchChange
from medverify.audit.select import PassageSelector
from medverify.audit.urls import (
    analyze_urls,
    archive_candidates,
    check_archived,
    fetch_change_lines,
    fetch_changes,
)
from medverify.config import Config
from medverify.decompose import Decomposer
from medverify.harness import Provenance, prompt_versions, stage_id
from medverify.judge import Judge
from medverify.llm.facade import Model, UsageLedger

if TYPE_CHECKING:
    from medverify.audit.cleanup import SourceCleanup


class AuditSummaries:
    """An audit run's summary and provenance (a mixin: the fields are the Auditor's)."""

    config: Config
    judge: Judge
    model: Model | None
    decomposer: Decomposer
    cleanup: SourceCleanup | None
    selector: PassageSelector
    ledger: UsageLedger
    input_path: str | None
    warnings: list[str]

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
            judge=stage_id(self.judge),
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
            "judge": stage_id(self.judge),
            "embedder": self.selector.embedder.id,
        }
        if self.decomposer.prompt_version is not None and spec:  # it asks the model
            out["decompose"] = spec
        if self.cleanup is not None and spec:
            out["cleanup"] = spec
        return out

    @property
    def prompt_versions(self) -> dict[str, str]:
        return prompt_versions({"decompose": self.decomposer, "judge": self.judge,
                                "cleanup": self.cleanup})

    @property
    def provenance(self) -> Provenance:
        return Provenance(self.models, self.prompt_versions)


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
