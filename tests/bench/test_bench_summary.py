from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from medverify.audit.evaluate import AgreementScores
from medverify.audit.metrics import audit_metrics
from medverify.audit.records import AnswerAudit, Estimate
from medverify.bench.layout import RunLayout
from medverify.bench.loading import RunRecords, load_run
from medverify.bench.records import (
    Attempt,
    BenchManifest,
    BenchSummary,
    ModelEntry,
    ModelReply,
    Question,
    ReplyStatus,
)
from medverify.bench.summary import (
    finish_run,
    model_cost,
    summarize,
)
from medverify.config import Config
from medverify.errors import InputError
from medverify.files import write_records
from medverify.records import Source
from test_bench_stats import answer_audit

GOOD, BAD = "alpha", "beta"
N_QUESTIONS = 8
PRICES = {"fake:alpha": (1.0, 2.0)}


# --- a synthetic run directory (also used by test_bench_report) -----------------------------


def fast_config(**bench: object) -> Config:
    return Config(audit={"bootstrap": 200}, bench={"permutations": 300, **bench})


def questions() -> list[Question]:
    return [Question(id=f"q{i}", text=f"What about condition {i}?",
                     source="medquad" if i % 2 == 0 else "k-qa")
            for i in range(N_QUESTIONS)]


def attempt(**kw: object) -> Attempt:
    base: dict[str, object] = {"raw": "{}", "prompt_tokens": 100, "completion_tokens": 50,
                               "latency_s": 0.5}
    return Attempt(**{**base, **kw})  # type: ignore[arg-type]


def good_audit(model: str, q: Question) -> AnswerAudit:
    return answer_audit(model, q.id, [True, True], valid=2, qsource=q.source,
                        domain="ncbi.nlm.nih.gov")


def bad_audit(model: str, q: Question, index: int) -> AnswerAudit:
    claims: list[bool | None] = [index % 3 == 0, False] if index % 2 else [True, None]
    return answer_audit(model, q.id, claims, valid=1, invalid=1, qsource=q.source,
                        domain="health-blog.com")


def reply(model: str, spec: str, q: Question, audit: AnswerAudit | None,
          status: ReplyStatus = ReplyStatus.OK, attempts: list[Attempt] | None = None,
          **kw: object) -> ModelReply:
    sources: list[Source] = [s.model_copy(update={"status": "not_fetched", "text": None})
                             for s in (audit.answer.sources if audit else [])]
    return ModelReply(question_id=q.id, model=model, spec=spec, status=status,
                      answer="An answer." if audit else "", sources=sources,
                      parsed_from="json" if audit else None,
                      attempts=attempts or [attempt()], prompt_version="v1",
                      **kw)  # type: ignore[arg-type]


def run_records(labels: tuple[str, str] = (GOOD, BAD)) -> RunRecords:
    """Two models over eight questions from two sources: ``labels[0]`` cites valid nih.gov
    pages that support every claim; ``labels[1]`` cites a blog (half its URLs invalid), is
    often unsupported, refuses q6 and fails on q7."""
    good, bad = labels
    qs = questions()
    replies: list[ModelReply] = []
    audits: list[AnswerAudit] = []
    for i, q in enumerate(qs):
        a = good_audit(good, q)
        extra: dict[str, object] = {}
        tries = [attempt()]
        if i == 0:
            tries = [attempt(problem="invalid JSON"), attempt(latency_s=1.5)]
        elif i == 1:
            tries = [attempt(cached=True, latency_s=None)]
        elif i == 2:
            extra = {"duplicate_urls": 2, "dropped_urls": 1}
        replies.append(reply(good, f"fake:{good}", q, a, attempts=tries, **extra))
        audits.append(a)
    for i, q in enumerate(qs[:6]):
        a = bad_audit(bad, q, i)
        replies.append(reply(bad, f"fake:{bad}", q, a))
        audits.append(a)
    refusal = answer_audit(bad, "q6", [], valid=0, qsource="medquad")
    refusal.errors.append("decompose: nothing to check")
    replies.append(reply(bad, f"fake:{bad}", qs[6], None, status=ReplyStatus.REFUSAL))
    audits.append(refusal)
    replies.append(reply(bad, f"fake:{bad}", qs[7], None, status=ReplyStatus.ERROR,
                         attempts=[attempt(error="HTTP 500 from provider", raw=None,
                                           prompt_tokens=0, completion_tokens=0)]))
    manifest = BenchManifest(
        run_id="run-test", models=[ModelEntry(label=m, spec=f"fake:{m}") for m in labels],
        questions_sha256="0" * 64, n_questions=N_QUESTIONS,
        config={"bench": {"temperature": 0.0}}, prompt_versions={"bench_answer": "v1"},
        judge="word-judge", medverify_version="0.1.0",
    )
    return RunRecords(manifest, qs, replies, audits)


def write_run(root: Path, records: RunRecords | None = None, *, audit: bool = True) -> RunLayout:
    records = records or run_records()
    layout = RunLayout(root)
    root.mkdir(parents=True, exist_ok=True)
    layout.manifest.write_text(records.manifest.model_dump_json(), "utf-8")
    write_records(layout.questions, records.questions)
    write_records(layout.replies, records.replies)
    if audit:
        write_records(layout.audit_answers, records.audits)
        usage = {"judge": {"calls": 12, "cached_calls": 2, "prompt_tokens": 900,
                           "completion_tokens": 80}}
        (layout.audit_dir / "summary.json").write_text(json.dumps({"usage": usage}), "utf-8")
    (root / "timing.json").write_text(json.dumps({"ask_s": 1.25, "audit_s": 3.5}), "utf-8")
    return layout


@pytest.fixture
def summary_of_run(tmp_path: Path) -> tuple[RunLayout, RunRecords, BenchSummary]:
    layout = write_run(tmp_path / "run")
    records = load_run(layout, [])
    return layout, records, summarize(records, fast_config(prices=PRICES))


# --- loading --------------------------------------------------------------------------------


def test_a_directory_without_run_json_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a benchmark run directory"):
        load_run(RunLayout(tmp_path), [])


def test_a_broken_manifest_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{not json", "utf-8")
    with pytest.raises(InputError, match="not a benchmark manifest"):
        load_run(RunLayout(tmp_path), [])


def test_load_run_reads_every_record(tmp_path: Path) -> None:
    layout = write_run(tmp_path)
    warnings: list[str] = []
    records = load_run(layout, warnings)
    assert len(records.questions) == N_QUESTIONS
    assert len(records.replies) == 16
    assert len(records.audits) == 15
    assert records.labels == [GOOD, BAD]
    assert warnings == []


def test_load_run_is_tolerant_and_never_rewrites(tmp_path: Path) -> None:
    layout = write_run(tmp_path, audit=False)
    with layout.replies.open("a", encoding="utf-8") as handle:
        handle.write('{"question_id": "q9", "mod')  # a run still appending
    before = layout.replies.read_bytes()
    warnings: list[str] = []
    records = load_run(layout, warnings)
    assert records.audits == [] and len(records.replies) == 16
    assert any("unreadable" in w for w in warnings)
    assert any("answers.jsonl" in w for w in warnings)
    assert layout.replies.read_bytes() == before
    summary = summarize(records, fast_config())
    assert summary.overall[GOOD].n_answers == 0
    assert summary.replies[GOOD].statuses["ok"] == N_QUESTIONS


# --- the summary ----------------------------------------------------------------------------


def test_metrics_per_model_and_source_are_the_audit_metrics(
    summary_of_run: tuple[RunLayout, RunRecords, BenchSummary],
) -> None:
    _, records, summary = summary_of_run
    by_model = records.audits_by_model()
    assert summary.overall[GOOD] == audit_metrics(by_model[GOOD], n_boot=200, seed=0)
    assert summary.overall[GOOD].response_support.value == 1.0
    assert summary.overall[BAD].url_validity.value == pytest.approx(0.5)
    assert summary.sources == ["k-qa", "medquad"]
    assert set(summary.by_source[BAD]) == {"k-qa", "medquad"}
    medquad = [a for a in by_model[BAD] if a.answer.meta["question_source"] == "medquad"]
    assert summary.by_source[BAD]["medquad"] == audit_metrics(medquad, n_boot=200, seed=0)
    assert [m.label for m in summary.models] == [GOOD, BAD]


def test_comparisons_cover_every_metric(
    summary_of_run: tuple[RunLayout, RunRecords, BenchSummary],
) -> None:
    _, _, summary = summary_of_run
    assert [c.metric for c in summary.comparisons] == [
        "url_validity", "statement_support", "response_support", "unused_sources"]
    support = summary.comparisons[2]
    # n counts the questions where both models have a response-level value
    assert (support.model_a, support.model_b, support.n_questions) == (GOOD, BAD, 3)
    assert support.difference is not None and support.difference > 0
    assert "300 random per-question swaps" in support.test


def test_top_domains_and_reply_outcomes(
    summary_of_run: tuple[RunLayout, RunRecords, BenchSummary],
) -> None:
    _, _, summary = summary_of_run
    top = summary.top_domains[GOOD]
    assert [(d.domain, d.count, d.share) for d in top] == [("nih.gov", 16, 1.0)]
    assert summary.top_domains[BAD][0].domain == "health-blog.com"
    good, bad = summary.replies[GOOD], summary.replies[BAD]
    assert good.statuses["ok"] == 8 and good.retried == 1
    assert (good.duplicate_urls, good.dropped_urls) == (2, 1)
    assert good.urls_per_answer == 2.0
    assert bad.statuses == {"ok": 6, "fallback": 0, "no_sources": 0, "refusal": 1,
                            "empty": 0, "error": 1}
    assert bad.urls_per_answer == 2.0  # refusal and error are not answers
    assert bad.answers_without_claims == 1


def test_missing_replies_are_counted(tmp_path: Path) -> None:
    records = run_records()
    records.replies = [r for r in records.replies if r.question_id != "q5"]
    summary = summarize(records, fast_config())
    assert summary.replies[GOOD].statuses["missing"] == 1
    assert summary.replies[GOOD].n_questions == N_QUESTIONS


def test_cost_from_attempts_and_prices(
    summary_of_run: tuple[RunLayout, RunRecords, BenchSummary],
) -> None:
    _, _, summary = summary_of_run
    good = summary.cost[GOOD]
    assert (good.calls, good.cached_calls) == (9, 1)
    assert (good.prompt_tokens, good.completion_tokens) == (900, 450)
    # 8 real calls of 100 + 50 tokens at $1 / $2 per million
    assert good.cost_usd == pytest.approx(8 * (100 * 1.0 + 50 * 2.0) / 1e6)
    assert good.latency_s == pytest.approx((6 * 0.5 + 0.5 + 1.5) / 8)
    assert summary.cost[BAD].cost_usd is None  # no price configured


def test_price_by_label_and_estimated_tokens() -> None:
    cost = model_cost([Attempt(prompt_tokens=1_000_000, completion_tokens=0,
                               estimated_tokens=True)], (3.0, 15.0))
    assert cost.cost_usd == pytest.approx(3.0) and cost.estimated
    records = run_records()
    summary = summarize(records, fast_config(prices={BAD: (0.0, 1.0)}))
    assert summary.cost[BAD].cost_usd == pytest.approx(7 * 50 / 1e6)


def test_provenance_notes_usage_and_errors(
    summary_of_run: tuple[RunLayout, RunRecords, BenchSummary],
) -> None:
    _, _, summary = summary_of_run
    assert summary.judge == "word-judge"
    assert summary.prompt_versions == {"bench_answer": "v1"}
    assert summary.config == {"bench": {"temperature": 0.0}}
    assert summary.audit_usage["judge"].calls == 12
    assert summary.notes["timing"] == {"ask_s": 1.25, "audit_s": 3.5}
    assert summary.notes["models"] == [GOOD, BAD]
    assert summary.notes["sources"] == ["k-qa", "medquad"]
    assert summary.errors == [f"{BAD} / q7: HTTP 500 from provider",
                              f"{BAD}::q6: decompose: nothing to check"]


def test_agreement_comes_from_the_agreement_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = write_run(tmp_path)
    scores = AgreementScores(n=5, kappa=Estimate(value=0.6, ci=(0.2, 0.9), n=5))
    calls: list[tuple[int, int]] = []

    def load_agreement(layout_: RunLayout, audits: list[AnswerAudit], *, n_boot: int,
                       seed: int) -> tuple[AgreementScores | None, dict[str, AgreementScores]]:
        assert layout_ == layout
        calls.append((n_boot, len(audits)))
        return scores, {GOOD: scores}

    module = type(sys)("medverify.bench.agreement")
    module.load_agreement = load_agreement  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "medverify.bench.agreement", module)
    summary = summarize(load_run(layout, []), fast_config())
    assert calls == [(200, 15)]
    assert summary.agreement == scores and summary.agreement_by_model == {GOOD: scores}


def test_no_agreement_module_means_no_agreement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "medverify.bench.agreement", None)
    summary = summarize(load_run(write_run(tmp_path), []), fast_config())
    assert summary.agreement is None and summary.agreement_by_model == {}


# --- finishing a run ------------------------------------------------------------------------


def test_finish_run_writes_summary_report_and_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import medverify.llm.facade as facade

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("a report must not call a model")

    monkeypatch.setattr(facade, "get_model", no_model)
    layout = write_run(tmp_path / "run")
    summary = finish_run(layout, fast_config())
    stored = BenchSummary.model_validate_json(layout.summary.read_text("utf-8"))
    assert stored == summary
    assert layout.report.read_text("utf-8").startswith("<!DOCTYPE html>")
    assert (layout.exports / "replies.csv").is_file()
    again = finish_run(layout, fast_config())
    assert again.overall == summary.overall and again.comparisons == summary.comparisons


def test_the_summary_does_not_depend_on_the_order_answers_finished(tmp_path: Path) -> None:
    layout = write_run(tmp_path / "run")
    config = fast_config()
    before = summarize(load_run(layout, []), config)
    for path in (layout.audit_answers, layout.replies):
        lines = path.read_text("utf-8").splitlines()
        path.write_text("\n".join(reversed(lines)) + "\n", "utf-8")
    after = summarize(load_run(layout, []), config)
    assert after.overall == before.overall and after.comparisons == before.comparisons
    assert after.by_source == before.by_source
