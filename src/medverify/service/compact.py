"""The compact form of a :class:`~medverify.records.Report` that ``POST /v1/check`` answers
by default (``?detail=full``: the whole report).

A full report carries, for every claim, the text of each retrieved passage (7 by default,
up to a few KB each), the retrieval's per-passage scores, the judge's raw output (with the
built-in judge: its probabilities for every passage) and, once per report, the whole
public config: for a 2-claim answer over the MedQuAD sample about 59 KB, 90 % of it
passage text (docs/service.md has the measurements). The compact form keeps what a client
acts on and drops the rest, staying a valid ``Report``:

- every claim with its category, score, decision (``arbitration``), confidence and
  not-sure reason, deciding passage id and quote, findings, warnings and errors; its
  verdict without ``raw_output``;
- of its passages only those something names (the deciding one, the passages of the
  verdict's analyses and findings), each with id, doc id, title, url, source, span and
  score, its ``text`` empty and its ``scores`` left out;
- the report's run id, KB snapshot and lineage, models, prompt versions, usage, errors,
  metrics and notes; ``config`` empty.

``notes["response"]`` says the report is compact and where the whole one is: the run
store keeps it (``GET /v1/runs/{run_id}``), and ``?detail=full`` answers it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from medverify.records import ClaimResult, Passage, Report, Verdict

RESPONSE_NOTE = "response"
"""The key of :attr:`Report.notes` that marks a compact report."""


class Detail(StrEnum):
    """How much of the report ``POST /v1/check`` answers with."""

    COMPACT = "compact"
    FULL = "full"


def compact_report(report: Report) -> Report:
    """``report`` without what a client does not act on (see the module)."""
    full = (f"GET /v1/runs/{report.run_id}" if report.run_id else "the run store") + \
        " or POST /v1/check?detail=full"
    note: dict[str, Any] = {
        "detail": Detail.COMPACT.value,
        "omitted": "passage texts and retrieval scores, passages no verdict part names, "
                   "the judge's raw output, the config",
        "full_report": full}
    return report.model_copy(update={
        "results": [_compact_result(result) for result in report.results],
        "config": {},
        "notes": {**report.notes, RESPONSE_NOTE: note}})


def _compact_result(result: ClaimResult) -> ClaimResult:
    named = _named_passages(result)
    passages = [_bare(p) for p in result.passages if p.id in named]
    verdict = result.verdict
    if verdict is not None:
        verdict = verdict.model_copy(update={"raw_output": None})
    return result.model_copy(update={"passages": passages, "verdict": verdict})


def _named_passages(result: ClaimResult) -> set[str]:
    """The ids of the passages the result's evidence, analyses and findings name."""
    named = {result.evidence_passage_id}
    verdict: Verdict | None = result.verdict
    if verdict is not None:
        named.update(a.passage_id for a in (verdict.factual, verdict.counterfactual)
                     if a is not None)
        named.update(f.passage_id for f in verdict.findings)
    named.discard(None)
    return named  # type: ignore[return-value]


def _bare(passage: Passage) -> Passage:
    return passage.model_copy(update={"text": "", "scores": {}})
