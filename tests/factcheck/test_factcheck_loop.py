from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from medverify.config import Config
from medverify.errors import ProviderError
from medverify.factcheck.loop import FactChecker, fact_verdict, token_summary
from medverify.factcheck.records import FactCheckReport, FactVerdict, RagAnswer
from medverify.factcheck.store import factchecks
from medverify.judge.builtin import BuiltinJudge
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.llm.base import ChatRequest
from medverify.llm.facade import Model
from medverify.records import Answer, Category, Document, Usage
from medverify.retrieve import Retriever
from medverify.store.runs import RunStore, migrations
from medverify.testing import ScriptedProvider
from medverify.testing.factcheck_model import (
    DEMO_ANSWER,
    DEMO_QUESTION,
    factcheck_model,
    fenced_blocks,
    prompt_stage,
)
from medverify.testing.verifier import LexicalVerifier

DOCS = [
    Document(doc_id="metformin", title="Metformin dosing",
             text="Metformin is a first-line medicine for type 2 diabetes. The usual starting "
             "dose of metformin is 500 mg once or twice daily, taken with meals. Stomach upset "
             "is a common side effect of metformin when starting treatment."),
    Document(doc_id="metformin-safety", title="Metformin contraindications",
             text="Metformin is contraindicated in people with severe kidney disease. Metformin "
             "should be paused before surgery or contrast imaging in some people."),
    Document(doc_id="aspirin", title="Aspirin",
             text="Low-dose aspirin reduces the risk of heart attack in some adults. Aspirin is "
             "not recommended for children with viral infections because of Reye syndrome."),
    Document(doc_id="hypertension", title="Hypertension",
             text="Lifestyle changes such as less salt, regular exercise and weight loss are "
             "recommended for everyone with high blood pressure."),
]
ANSWER = Answer(text=DEMO_ANSWER, question=DEMO_QUESTION)


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as base:
        base.ingest(DOCS)
        yield base


def _checker(kb: KnowledgeBase, provider: ScriptedProvider, **factcheck: object) -> FactChecker:
    config = Config(model="fake:x", factcheck=factcheck)
    return FactChecker.from_config(config, kit=FlowKit(kb=kb, model=Model(provider)))


def _check(checker: FactChecker, answer: Answer = ANSWER, **kw: object) -> FactCheckReport:
    return asyncio.run(checker.check(answer, **kw))  # type: ignore[arg-type]


def _fact(report: FactCheckReport, word: str):  # type: ignore[no-untyped-def]
    return next(f for f in report.facts if word in f.claim.text)


def _judged_claims(provider: ScriptedProvider) -> list[str]:
    """Every claim text sent to the judge, over all judge calls."""
    return [text for r in provider.requests if prompt_stage(r) == "judge"
            for header, text in fenced_blocks(r.messages[-1].content) if header.startswith("C")]


def _stages(provider: ScriptedProvider) -> list[str | None]:
    return [prompt_stage(r) for r in provider.requests]


def test_fake_flow_detects_and_corrects_both_errors(kb: KnowledgeBase) -> None:
    provider = ScriptedProvider(factcheck_model())
    report = _check(_checker(kb, provider))
    assert not report.errors
    dose, contra = _fact(report, "5000 mg"), _fact(report, "asthma")
    for fact in (dose, contra):
        assert [s.verdict for s in fact.steps] == [FactVerdict.FALSE, FactVerdict.TRUE]
        assert fact.final_verdict is FactVerdict.TRUE and fact.corrected
        assert fact.steps[0].rewrite is not None and fact.steps[0].rewrite.mode == "llm"
        assert fact.steps[1].rewrite is None
    assert "500 mg" in dose.final_text and "5000" not in dose.final_text
    assert "kidney" in contra.final_text
    others = [f for f in report.facts if f not in (dose, contra)]
    assert others and all(len(f.steps) == 1 and f.final_verdict is FactVerdict.TRUE
                          for f in others)
    assert [v.label for v in report.versions] == ["initial", "after round 1", "final"]
    assert report.final_mode == "llm" and report.rounds_run == 2
    assert "500 mg" in report.final_answer and "5000 mg" not in report.final_answer
    assert "asthma" not in report.final_answer
    assert report.counts()["corrected"] == 2
    referenced = {pid for f in report.facts for s in f.steps for pid in s.passage_ids}
    assert referenced <= set(report.passages)
    assert report.prompt_versions["rewrite"] == "correct/v1"
    assert report.usage["rewrite"].calls == 1  # both false facts in one call


def test_max_rounds_respected_when_rewrite_stays_false(kb: KnowledgeBase) -> None:
    provider = ScriptedProvider(factcheck_model(stubborn=("5000 mg",)))
    report = _check(_checker(kb, provider, max_rounds=3))
    dose = _fact(report, "5000 mg")
    assert [s.verdict for s in dose.steps] == [FactVerdict.FALSE] * 3
    assert [s.round for s in dose.steps] == [1, 2, 3]
    assert dose.steps[-1].rewrite is None  # the last round rewrites nothing
    assert dose.final_verdict is FactVerdict.FALSE and dose.corrected
    assert report.rounds_run == 3
    assert _fact(report, "asthma").final_verdict is FactVerdict.TRUE
    assert "5000 mg" not in report.final_answer and "kidney" in report.final_answer
    assert "Stomach upset" in report.final_answer


def test_true_facts_are_never_judged_again(kb: KnowledgeBase) -> None:
    provider = ScriptedProvider(factcheck_model())
    report = _check(_checker(kb, provider))
    judged = _judged_claims(provider)
    assert len(judged) == len(report.facts) + 2
    assert sum("Stomach upset" in c for c in judged) == 1


def test_unparseable_rewrite_keeps_error_and_fact_stays_false(kb: KnowledgeBase) -> None:
    base = factcheck_model()

    def reply(request: ChatRequest) -> str:
        return "I cannot do that" if prompt_stage(request) == "correct" else base(request)

    provider = ScriptedProvider(reply)
    report = _check(_checker(kb, provider))
    dose = _fact(report, "5000 mg")
    rewrite = dose.steps[0].rewrite
    assert rewrite is not None and rewrite.after is None
    assert "unparseable rewrite reply" in (rewrite.error or "")
    assert rewrite.raw_output == "I cannot do that"
    assert len(dose.steps) == 1 and dose.final_verdict is FactVerdict.FALSE
    assert not dose.corrected and dose.final_text == dose.claim.text
    assert report.rounds_run == 1 and "5000 mg" not in report.final_answer


def test_judge_errors_are_never_rewritten(kb: KnowledgeBase) -> None:
    base = factcheck_model()

    def reply(request: ChatRequest) -> str:
        if prompt_stage(request) == "judge":
            raise ProviderError("bad request", status=400)
        return base(request)

    provider = ScriptedProvider(reply)
    report = _check(_checker(kb, provider))
    assert {f.final_verdict for f in report.facts} == {FactVerdict.ERROR}
    assert all(len(f.steps) == 1 and f.steps[0].rewrite is None for f in report.facts)
    assert "correct" not in _stages(provider) and "rewrite_answer" not in _stages(provider)
    assert report.final_answer == DEMO_ANSWER and report.final_mode == "unchanged"


def test_offline_extractive_correction_is_marked(kb: KnowledgeBase) -> None:
    judge = BuiltinJudge(LexicalVerifier(contradict=0.4))
    checker = FactChecker.from_config(Config(), kit=FlowKit(kb=kb, judge=judge))
    assert checker.model is None and checker.models["rewrite"] == "extractive"
    report = _check(checker)
    dose = _fact(report, "5000 mg")
    rewrite = dose.steps[0].rewrite
    assert dose.steps[0].verdict is FactVerdict.FALSE and rewrite is not None
    assert rewrite.mode == "extractive" and rewrite.evidence_passage_id
    assert rewrite.after == rewrite.evidence_quote and "500 mg" in rewrite.after
    assert rewrite.after in Retriever(kb).search("metformin starting dose", 1)[0].text
    assert dose.final_verdict is FactVerdict.TRUE
    assert report.final_mode == "extractive"
    assert f"[corrected from evidence: {rewrite.after}]" in report.final_answer
    assert "5000 mg" not in report.final_answer
    assert not report.usage  # no model call at all


def test_passages_send_fewer_judge_tokens_than_chunks(kb: KnowledgeBase) -> None:
    spent = {}
    for evidence in ("chunks", "passages"):
        provider = ScriptedProvider(factcheck_model())
        checker = _checker(kb, provider, evidence=evidence, max_rounds=1, passage_tokens=16,
                           passages_per_fact=2)
        report = _check(checker)
        assert [f.initial_verdict for f in report.facts].count(FactVerdict.FALSE) == 2
        spent[evidence] = report.usage["judge"].prompt_tokens
    assert spent["passages"] < spent["chunks"]


def test_passage_windows_keep_their_document(kb: KnowledgeBase) -> None:
    provider = ScriptedProvider(factcheck_model())
    report = _check(_checker(kb, provider, passage_tokens=16, passages_per_fact=2))
    windows = [p for p in report.passages.values() if ":w" in p.id]
    assert windows
    for window in windows:
        doc = next(d for d in DOCS if d.doc_id == window.doc_id)
        assert window.title == doc.title and window.span is not None
        assert doc.text[window.span.start:window.span.end] == window.text
    assert all(len(f.steps[0].passage_ids) <= 2 for f in report.facts)


def test_tokens_against_the_rag_answer(kb: KnowledgeBase) -> None:
    provider = ScriptedProvider(factcheck_model())
    rag = RagAnswer(question=DEMO_QUESTION, text=DEMO_ANSWER,
                    usage=Usage(calls=1, prompt_tokens=900, completion_tokens=100))
    report = _check(_checker(kb, provider), rag=rag)
    tokens = report.tokens
    assert tokens.initial_answer_tokens == 1000 and report.rag == rag
    assert tokens.check_tokens == sum(u.prompt_tokens + u.completion_tokens
                                      for u in report.usage.values()) > 0
    assert tokens.ratio == pytest.approx(tokens.check_tokens / 1000, abs=1e-3)
    assert set(tokens.per_stage) >= {"decompose", "judge", "rewrite", "rewrite_answer"}


def test_verdict_mapping_and_summary_without_rag() -> None:
    assert fact_verdict(Category.FACT) is FactVerdict.TRUE
    assert fact_verdict(Category.HALLUCINATION) is FactVerdict.FALSE
    assert fact_verdict(Category.JUDGMENT_ERROR) is FactVerdict.UNVERIFIABLE
    assert fact_verdict(Category.COVERAGE_GAP) is FactVerdict.UNVERIFIABLE
    assert fact_verdict(Category.COVERAGE_GAP, "false") is FactVerdict.FALSE
    assert fact_verdict(Category.ERROR) is FactVerdict.ERROR
    summary = token_summary({"answer": Usage(prompt_tokens=5), "judge": Usage(prompt_tokens=7)},
                            None)
    assert summary.check_tokens == 7 and summary.ratio is None


def test_empty_answer_is_an_error_not_an_exception(kb: KnowledgeBase) -> None:
    provider = ScriptedProvider(factcheck_model())
    report = _check(_checker(kb, provider), Answer(text="  "))
    assert not report.facts and "empty" in report.errors[0]
    assert report.final_answer == "  " and report.final_mode == "unchanged"


def test_run_records_factchecks(kb: KnowledgeBase, tmp_path: Path) -> None:
    provider = ScriptedProvider(factcheck_model())
    checker = _checker(kb, provider)
    answers = [ANSWER, Answer(text="Aspirin reduces the risk of heart attack in some adults.")]
    seen: list[int] = []
    with RunStore(tmp_path / "runs.db") as store:
        reports = asyncio.run(checker.run(answers, store=store,
                                          progress=lambda done, _n: seen.append(done)))
        run_id = reports[0].run_id or ""
        stored = factchecks(store, run_id)
        info = store.get_run(run_id)
        listed = store.list_runs()[0]
    assert seen == [1, 2] and info.kind == "factcheck" and info.status == "done"
    # `runs list` counts the answers and facts of a factcheck run
    assert listed.n_answers == 2 and listed.n_claims == sum(len(r.facts) for r in reports) > 0
    assert info.prompt_versions["rewrite_answer"] == "rewrite_answer/v1"
    assert [r.model_dump() for r in stored] == [r.model_dump() for r in reports]
    assert reports[1].final_mode == "unchanged"


def test_version_4_store_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    for version, sql in migrations():
        if version <= 4:
            db.executescript(f"{sql}\nPRAGMA user_version = {version};")
    db.close()
    with RunStore(path) as store:
        assert store.schema_version >= 5
        run_id = store.start_run(kind="factcheck", config={}, models={}, prompt_versions={},
                                 kb_snapshot=None)
        report = FactCheckReport(initial_answer="a", final_answer="a")
        store.save_factcheck(run_id, 0, "a-1", report)
        assert factchecks(store, run_id)[0].initial_answer == "a"
