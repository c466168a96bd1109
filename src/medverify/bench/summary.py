"""The results of a benchmark study, recomputed from the records of its run directory.

:func:`finish_run` reads ``run.json``, ``questions.jsonl``, ``replies.jsonl`` and the audit
(``audit/answers.jsonl``), computes the :class:`BenchSummary` (the paper's metrics per model
and per model x question source with bootstrap CIs, pairwise tests, top cited domains,
reply outcomes, tokens and cost, judge agreement with human labels when imported) and
writes ``summary.json``, ``report.html`` and ``exports/``. No model is called: changing a
metric or a price costs a re-run of this, never of the study.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from pydantic import ValidationError

from medverify.audit.evaluate import AgreementScores
from medverify.audit.metrics import audit_metrics, group_audits, not_measured_reason
from medverify.audit.records import AnswerAudit, AuditMetrics, FetchChange
from medverify.audit.urls import DomainCount, fetch_change_lines, fetch_changes, group_stats
from medverify.bench.export import export_tables
from medverify.bench.layout import RunLayout
from medverify.bench.loading import RunRecords, load_run
from medverify.bench.records import (
    FETCH_CHANGES,
    MISSING_STATUS,
    RUN_WARNINGS,
    Attempt,
    BenchSummary,
    ModelCost,
    ModelEntry,
    ModelReply,
    ReplyStats,
    ReplyStatus,
)
from medverify.bench.report import write_bench_html
from medverify.bench.stats import compare_models
from medverify.config import Config
from medverify.files import atomic_write_text
from medverify.records import Usage

SOURCE_FIELD = "question_source"  # the meta key of BenchOrigin.question_source
MODEL_FIELD = "model"  # the meta key of BenchOrigin.model
AUDIT_SUMMARY_FILE = "summary.json"
ANSWERED = frozenset({ReplyStatus.OK, ReplyStatus.FALLBACK, ReplyStatus.NO_SOURCES})


# -- pieces of the summary ----------------------------------------------------------------------


def _options(config: Config) -> dict[str, Any]:
    return {"n_boot": config.audit.bootstrap, "seed": config.audit.seed}


def by_source(audits: Sequence[AnswerAudit], config: Config) -> dict[str, AuditMetrics]:
    """Metrics of one model's answers per question source."""
    groups = group_audits(audits, SOURCE_FIELD)
    return {name: audit_metrics(group, **_options(config)) for name, group in groups.items()}


def top_domains(audits: Sequence[AnswerAudit]) -> list[DomainCount]:
    """The five registered domains a model cited most, with counts and shares of its URLs."""
    return group_stats(audits, paywalled=[]).top_domains


def reply_stats(
    replies: Sequence[ModelReply], audits: Sequence[AnswerAudit], n_questions: int
) -> ReplyStats:
    """Outcomes of one model's replies (every status, zeros included); questions not (yet)
    asked count as ``missing``.
    URLs per answer is over replies with an answer (ok, fallback, no_sources)."""
    counts = Counter(r.status.value for r in replies)
    statuses = {s.value: counts[s.value] for s in ReplyStatus}
    if n_questions > len(replies):
        statuses[MISSING_STATUS] = n_questions - len(replies)
    answered = [len(r.sources) for r in replies if r.status in ANSWERED]
    return ReplyStats(
        n_questions=max(n_questions, len(replies)),
        statuses=statuses,
        retried=sum(1 for r in replies if len(r.attempts) > 1),
        duplicate_urls=sum(r.duplicate_urls for r in replies),
        dropped_urls=sum(r.dropped_urls for r in replies),
        urls_per_answer=fmean(answered) if answered else None,
        answers_without_claims=sum(1 for a in audits if not a.claims),
    )


def price_for(prices: Mapping[str, tuple[float, float]], entry: ModelEntry
              ) -> tuple[float, float] | None:
    """The configured (USD per 1M input, per 1M output tokens) of a model: by spec, else
    by label."""
    return prices.get(entry.spec) or prices.get(entry.label)


def model_cost(attempts: Sequence[Attempt], price: tuple[float, float] | None) -> ModelCost:
    """Calls, tokens, cost and mean latency of one model's attempts. Cost and latency
    count real calls only: a cached call cost nothing in this run."""
    real = [a for a in attempts if not a.cached]
    latencies = [a.latency_s for a in real if a.latency_s is not None]
    cost = None
    if price is not None:
        cost = sum(a.prompt_tokens * price[0] + a.completion_tokens * price[1]
                   for a in real) / 1e6
    return ModelCost(
        calls=len(attempts),
        cached_calls=len(attempts) - len(real),
        prompt_tokens=sum(a.prompt_tokens for a in attempts),
        completion_tokens=sum(a.completion_tokens for a in attempts),
        estimated=any(a.estimated_tokens for a in attempts),
        cost_usd=cost,
        latency_s=fmean(latencies) if latencies else None,
    )


def _entries(records: RunRecords) -> dict[str, ModelEntry]:
    entries = {m.label: m for m in records.manifest.models}
    for reply in records.replies:
        entries.setdefault(reply.model, ModelEntry(label=reply.model, spec=reply.spec))
    return {label: entries.get(label, ModelEntry(label=label, spec="")) for label in
            records.labels}


def costs(records: RunRecords, config: Config) -> dict[str, ModelCost]:
    replies = records.replies_by_model()
    return {
        label: model_cost([a for r in replies[label] for a in r.attempts],
                          price_for(config.bench.prices, entry))
        for label, entry in _entries(records).items()
    }


def _read_json(path: Path, warnings: list[str]) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text("utf-8"))
    except (ValueError, OSError) as exc:
        warnings.append(f"{path} could not be read: {exc}")
        return None


def audit_usage(layout: RunLayout | None, warnings: list[str]) -> dict[str, Usage]:
    """Token usage of the audit's own model calls (its ``summary.json``), when recorded."""
    data = _read_json(layout.audit_dir / AUDIT_SUMMARY_FILE, warnings) if layout else None
    usage = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(usage, dict):
        return {}
    try:
        return {str(k): Usage.model_validate(v) for k, v in usage.items()}
    except ValidationError as exc:
        warnings.append(f"audit usage could not be read: {exc.errors()[0]['msg']}")
        return {}


def agreement(
    records: RunRecords, config: Config
) -> tuple[AgreementScores | None, dict[str, AgreementScores]]:
    """Judge agreement with imported human labels (``medverify.bench.agreement``), when that
    module and a layout are available."""
    try:
        from medverify.bench.agreement import load_agreement
    except ImportError:
        return None, {}
    if records.layout is None:
        return None, {}
    return load_agreement(records.layout, records.audits, **_options(config))


def run_errors(replies: Iterable[ModelReply], audits: Iterable[AnswerAudit]) -> list[str]:
    """Replies that failed for good, and errors recorded by the audit."""
    failed = [
        f"{r.model} / {r.question_id}: "
        + next((a.error for a in reversed(r.attempts) if a.error), "provider call failed")
        for r in replies if r.status == ReplyStatus.ERROR
    ]
    return failed + [f"{a.answer.id}: {e}" for a in audits for e in a.errors]


def notes(records: RunRecords, config: Config) -> dict[str, Any]:
    found: dict[str, Any] = {
        "questions": len(records.questions),
        "models": records.labels,
        "sources": records.sources(),
        "statistics": {"bootstrap": config.audit.bootstrap,
                       "permutations": config.bench.permutations, "seed": config.audit.seed},
    }
    layout = records.layout
    timing = _read_json(layout.timing, records.warnings) if layout else None
    if isinstance(timing, dict):
        found["timing"] = timing
    imported = _read_json(layout.question_import, records.warnings) if layout else None
    if isinstance(imported, dict):
        found["question_import"] = imported
    if records.warnings:
        found["warnings"] = list(records.warnings)
    changes = fetch_changes(records.audits)
    if changes:
        found[FETCH_CHANGES] = [c.model_dump(mode="json") for c in changes]
    warnings = study_warnings(records, changes)
    if warnings:
        found[RUN_WARNINGS] = warnings
    return found


def study_warnings(records: RunRecords, changes: Sequence[FetchChange]) -> list[str]:
    """Models whose statement support could not be measured (with why), and the headline
    of the fetch outcomes that changed between attempts (a resumed run whose sources
    moved): never absorbed silently into the numbers."""
    warnings = []
    for label, audits in records.audits_by_model().items():
        reason = not_measured_reason(audits) if audits else None
        if reason is not None:
            warnings.append(f"{label}: statement- and response-level support NOT MEASURED: "
                            f"{reason}")
    return warnings + fetch_change_lines(changes)[:1]


# -- the summary ------------------------------------------------------------------------------


def summarize(records: RunRecords, config: Config) -> BenchSummary:
    """Every metric of the study from its records (no model call)."""
    audits = records.audits_by_model()
    replies = records.replies_by_model()
    manifest = records.manifest
    n_questions = len(records.questions) or manifest.n_questions
    overall_agreement, agreement_by_model = agreement(records, config)
    usage = audit_usage(records.layout, records.warnings)
    return BenchSummary(
        run_id=manifest.run_id,
        models=list(_entries(records).values()),
        sources=records.sources(),
        overall={m: audit_metrics(a, **_options(config)) for m, a in audits.items()},
        by_source={m: by_source(a, config) for m, a in audits.items()},
        comparisons=compare_models(audits, n_perm=config.bench.permutations,
                                   **_options(config)),
        top_domains={m: top_domains(a) for m, a in audits.items()},
        replies={m: reply_stats(replies[m], audits[m], n_questions) for m in audits},
        cost=costs(records, config),
        audit_usage=usage,
        judge=manifest.judge,
        prompt_versions=manifest.prompt_versions,
        config=manifest.config,
        agreement=overall_agreement,
        agreement_by_model=agreement_by_model,
        notes=notes(records, config),
        errors=run_errors(records.replies, records.audits),
    )


def finish_run(layout: RunLayout, config: Config) -> BenchSummary:
    """Load a run, summarise it and write ``summary.json``, ``report.html`` and the
    ``exports/`` tables; returns the summary."""
    records = load_run(layout, [])
    summary = summarize(records, config)
    atomic_write_text(layout.summary, summary.model_dump_json(indent=2) + "\n")
    write_bench_html(layout.report, summary, records)
    export_tables(records, summary, layout.exports)
    return summary
