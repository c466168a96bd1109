"""Tidy tables of a benchmark study for pandas, R or a spreadsheet: ``RUN/exports/``.

Five tables, one row per unit, every column typed by a row record below:

- ``replies``: one row per model x question (status, URLs, claims, support, tokens);
- ``claims``: one row per claim of an audited answer;
- ``pairs``: one row per claim x source judgement (verdict category, supported);
- ``metrics``: one row per model [x question source] x metric (value, CI, n);
- ``comparisons``: one row per metric x model pair (difference, CI, p, Holm p).

CSV is always written (UTF-8, ``csv`` module quoting, empty cell = missing). Parquet is
written too when ``pyarrow`` is installed (``parquet=None``), or required (``True``).
"""

from __future__ import annotations

import csv
import io
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from medverify.audit.metrics import answer_metrics
from medverify.audit.records import AnswerAudit, AuditMetrics, ClaimAudit, PairJudgement
from medverify.audit.urls import registered_domain, url_host
from medverify.bench.agreement import defuse_cell
from medverify.bench.loading import RunRecords, audit_model
from medverify.bench.records import BenchOrigin, BenchSummary, Comparison, ModelReply
from medverify.bench.stats import ALPHA, METRICS, question_key
from medverify.errors import MissingDependencyError
from medverify.files import atomic_path, atomic_write_text

TABLES = ("replies", "claims", "pairs", "metrics", "comparisons")


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReplyRow(_Row):
    model: str
    spec: str
    question_id: str
    question_source: str | None
    answer_id: str
    status: str
    parsed_from: str | None
    attempts: int
    retried: bool
    n_urls: int
    duplicate_urls: int
    dropped_urls: int
    audited: bool
    n_valid_urls: int | None
    url_validity: float | None
    n_claims: int | None
    n_scored_claims: int | None
    n_supported: int | None
    statement_support: float | None
    response_support: bool | None
    n_unused_sources: int | None
    unused_source_share: float | None
    prompt_tokens: int
    completion_tokens: int
    estimated_tokens: bool
    cached_calls: int
    latency_s: float | None
    prompt_version: str


class ClaimRow(_Row):
    model: str
    question_id: str
    question_source: str | None
    answer_id: str
    claim_id: str
    claim: str
    supported: bool | None
    n_sources: int
    n_supporting: int
    n_pair_errors: int
    cited_source_ids: str
    error: str | None


class PairRow(_Row):
    model: str
    question_id: str
    answer_id: str
    claim_id: str
    source_id: str
    url: str | None
    domain: str | None
    verdict: str
    supported: bool | None
    judge: str
    error: str | None


class MetricRow(_Row):
    model: str
    question_source: str | None  # None: all questions
    metric: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    n_answers: int


class ComparisonRow(_Row):
    metric: str
    model_a: str
    model_b: str
    n_questions: int
    value_a: float | None
    value_b: float | None
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_holm: float | None
    significant: bool
    test: str


ROW_TYPES: dict[str, type[_Row]] = {
    "replies": ReplyRow, "claims": ClaimRow, "pairs": PairRow, "metrics": MetricRow,
    "comparisons": ComparisonRow,
}


# -- rows -------------------------------------------------------------------------------------


def _source_of(audit: AnswerAudit | None, sources: dict[str, str], question_id: str
               ) -> str | None:
    if question_id in sources:
        return sources[question_id]
    return BenchOrigin.of(audit.answer).question_source if audit else None


def _audit_fields(audit: AnswerAudit | None) -> dict[str, Any]:
    if audit is None:
        return {"audited": False, "n_valid_urls": None, "url_validity": None,
                "n_claims": None, "n_scored_claims": None, "n_supported": None,
                "statement_support": None, "response_support": None,
                "n_unused_sources": None, "unused_source_share": None}
    m = answer_metrics(audit)
    return {"audited": True, "n_valid_urls": m.n_valid_urls, "url_validity": m.url_validity,
            "n_claims": m.n_claims, "n_scored_claims": m.n_scored, "n_supported": m.n_supported,
            "statement_support": m.statement_support, "response_support": m.response_support,
            "n_unused_sources": m.n_unused_sources,
            "unused_source_share": m.unused_source_share}


def reply_row(reply: ModelReply, audit: AnswerAudit | None, source: str | None) -> ReplyRow:
    real = [a for a in reply.attempts if not a.cached and a.latency_s is not None]
    return ReplyRow(
        model=reply.model, spec=reply.spec, question_id=reply.question_id,
        question_source=source, answer_id=reply.answer_id, status=reply.status.value,
        parsed_from=reply.parsed_from, attempts=len(reply.attempts),
        retried=len(reply.attempts) > 1, n_urls=len(reply.sources),
        duplicate_urls=reply.duplicate_urls, dropped_urls=reply.dropped_urls,
        prompt_tokens=sum(a.prompt_tokens for a in reply.attempts),
        completion_tokens=sum(a.completion_tokens for a in reply.attempts),
        estimated_tokens=any(a.estimated_tokens for a in reply.attempts),
        cached_calls=sum(1 for a in reply.attempts if a.cached),
        latency_s=sum(a.latency_s or 0.0 for a in real) if real else None,
        prompt_version=reply.prompt_version, **_audit_fields(audit),
    )


def reply_rows(records: RunRecords) -> list[ReplyRow]:
    audits = {a.answer.id: a for a in records.audits}
    sources = {q.id: q.source for q in records.questions}
    return [reply_row(r, audits.get(r.answer_id),
                      _source_of(audits.get(r.answer_id), sources, r.question_id))
            for r in records.replies]


def claim_row(audit: AnswerAudit, claim: ClaimAudit, source: str | None) -> ClaimRow:
    return ClaimRow(
        model=audit_model(audit), question_id=question_key(audit), question_source=source,
        answer_id=audit.answer.id, claim_id=claim.claim.id, claim=claim.claim.text,
        supported=claim.supported, n_sources=len({p.source_id for p in claim.pairs}),
        n_supporting=len({p.source_id for p in claim.pairs if p.supported}),
        n_pair_errors=sum(1 for p in claim.pairs if p.supported is None),
        cited_source_ids=";".join(claim.cited_source_ids), error=claim.error,
    )


def claim_rows(records: RunRecords) -> list[ClaimRow]:
    sources = {q.id: q.source for q in records.questions}
    return [claim_row(a, c, _source_of(a, sources, question_key(a)))
            for a in records.audits for c in a.claims]


def _domain(url: str | None) -> str | None:
    host = url_host(url)
    return registered_domain(host) if host else None


def pair_row(audit: AnswerAudit, pair: PairJudgement) -> PairRow:
    urls = {s.id: s.url for s in audit.answer.sources}
    url = urls.get(pair.source_id)
    return PairRow(
        model=audit_model(audit), question_id=question_key(audit), answer_id=audit.answer.id,
        claim_id=pair.claim_id, source_id=pair.source_id, url=url, domain=_domain(url),
        verdict=pair.verdict.category.value, supported=pair.supported,
        judge=pair.verdict.judge, error=pair.verdict.error,
    )


def pair_rows(records: RunRecords) -> list[PairRow]:
    return [pair_row(a, p) for a in records.audits for c in a.claims for p in c.pairs]


def _metric_rows(model: str, source: str | None, metrics: AuditMetrics) -> list[MetricRow]:
    rows = []
    for key in METRICS:
        estimate = getattr(metrics, key)
        low, high = estimate.ci if estimate.ci is not None else (None, None)
        rows.append(MetricRow(model=model, question_source=source, metric=key,
                              value=estimate.value, ci_low=low, ci_high=high, n=estimate.n,
                              n_answers=metrics.n_answers))
    return rows


def metric_rows(summary: BenchSummary) -> list[MetricRow]:
    rows = [r for model, m in summary.overall.items() for r in _metric_rows(model, None, m)]
    rows += [r for model, groups in summary.by_source.items()
             for source, m in groups.items() for r in _metric_rows(model, source, m)]
    return rows


def comparison_row(item: Comparison) -> ComparisonRow:
    low, high = item.ci if item.ci is not None else (None, None)
    return ComparisonRow(
        metric=item.metric, model_a=item.model_a, model_b=item.model_b,
        n_questions=item.n_questions, value_a=item.value_a, value_b=item.value_b,
        difference=item.difference, ci_low=low, ci_high=high, p_value=item.p_value,
        p_holm=item.p_holm, significant=item.p_holm is not None and item.p_holm < ALPHA,
        test=item.test,
    )


def table_rows(records: RunRecords, summary: BenchSummary) -> dict[str, Sequence[_Row]]:
    """Every table's rows, by table name (see the module docstring)."""
    return {
        "replies": reply_rows(records),
        "claims": claim_rows(records),
        "pairs": pair_rows(records),
        "metrics": metric_rows(summary),
        "comparisons": [comparison_row(c) for c in summary.comparisons],
    }


# -- writing ----------------------------------------------------------------------------------


def csv_cell(value: Any) -> str:
    """A CSV cell: empty for missing, ``true``/``false`` for booleans, full precision;
    text that a spreadsheet would run as a formula (model-written claims and URLs can start
    with ``=``) gets a leading apostrophe. Numbers stay numbers; Parquet stays raw."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return defuse_cell(value)
    return str(value)


def to_csv(columns: Sequence[str], rows: Sequence[_Row]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        data = row.model_dump()
        writer.writerow([csv_cell(data[c]) for c in columns])
    return buffer.getvalue()


def _base_type(annotation: Any) -> type:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation  # type: ignore[no-any-return]


def _arrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        return None
    return pyarrow


def _arrow_schema(pa: Any, row_type: type[_Row]) -> Any:
    kinds = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
    return pa.schema([(name, kinds[_base_type(f.annotation)])
                      for name, f in row_type.model_fields.items()])


def write_parquet(pa: Any, path: Path, row_type: type[_Row], rows: Sequence[_Row]) -> Path:
    """One table as Parquet, written atomically (a temporary file, then ``os.replace``)."""
    table = pa.Table.from_pylist([r.model_dump() for r in rows],
                                 schema=_arrow_schema(pa, row_type))
    with atomic_path(path) as tmp:
        pa.parquet.write_table(table, str(tmp))
    return path


def _parquet_module(parquet: bool | None) -> Any:
    if parquet is False:
        return None
    pa = _arrow()
    if pa is None and parquet:
        raise MissingDependencyError("pyarrow")
    return pa


def export_tables(
    records: RunRecords, summary: BenchSummary, out_dir: Path, *, parquet: bool | None = None
) -> list[Path]:
    """Write every table as ``NAME.csv`` (and ``NAME.parquet``) under ``out_dir``; returns
    the paths written. ``parquet``: None = when pyarrow is installed, True = required
    (MissingDependencyError without it), False = never. Parquet files left from an
    earlier export are removed when none is written, so no stale table stays."""
    pa = _parquet_module(parquet)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, rows in table_rows(records, summary).items():
        row_type = ROW_TYPES[name]
        written.append(atomic_write_text(out_dir / f"{name}.csv",
                                         to_csv(list(row_type.model_fields), rows)))
        if pa is not None:
            written.append(write_parquet(pa, out_dir / f"{name}.parquet", row_type, rows))
        else:
            (out_dir / f"{name}.parquet").unlink(missing_ok=True)
    return written
