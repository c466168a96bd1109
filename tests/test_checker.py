from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import medverify
from medverify.checker import Checker
from medverify.config import Config
from medverify.errors import ConfigError, KBError, ProviderError
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.llm.facade import Model
from medverify.records import Answer, Category, Decision, Document, Report
from medverify.review import escalator
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider, register_fake, unregister_fake
from medverify.testing.judge import keyword_rule, scripted_judge

DOCS = [
    Document(
        doc_id="metformin",
        title="Metformin",
        text="Metformin is a first-line medicine for type 2 diabetes. The usual starting dose "
        "is 500 mg once or twice daily with meals.",
    ),
    Document(
        doc_id="aspirin",
        title="Aspirin",
        text="Low-dose aspirin reduces the risk of heart attack in some adults. Aspirin is not "
        "recommended for children with viral infections because of Reye syndrome.",
    ),
]
ANSWER = (
    "Metformin is a first-line medicine for type 2 diabetes. The usual starting dose is "
    "5000 mg daily. Aspirin is safe for children with the flu."
)


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as base:
        base.ingest(DOCS)
        yield base


def _checker(kb: KnowledgeBase, provider: ScriptedProvider, **config: object) -> Checker:
    model = Model(provider)
    return Checker.from_config(
        Config(model="fake:x", decomposer="rules", **config), kit=FlowKit(kb=kb, model=model))


def test_end_to_end_categories_and_store(kb: KnowledgeBase, tmp_path: Path) -> None:
    provider = ScriptedProvider(
        scripted_judge(keyword_rule(supported="first-line", contradicted="5000 mg"))
    )
    checker = _checker(kb, provider)
    with RunStore(tmp_path / "runs.db") as store:
        [report] = asyncio.run(checker.run([Answer(text=ANSWER, question="q")], store=store))
        [rebuilt] = store.reports(report.run_id or "")
    categories = [r.category for r in report.results]
    assert categories[:2] == [Category.FACT, Category.HALLUCINATION]
    assert Category.COVERAGE_GAP in categories
    assert report.metrics.statement_support == pytest.approx(1 / len(categories))
    assert report.metrics.response_support is False
    assert report.prompt_versions["judge"] == "judge/v1"
    assert report.kb_snapshot == kb.snapshot_id
    assert report.usage["judge"].calls == len(provider.requests) >= 1
    assert all(r.passages for r in report.results)
    assert rebuilt.model_dump(exclude={"created_at", "usage"}) == report.model_dump(
        exclude={"created_at", "usage"}
    )


def test_failed_judge_calls_are_errors_not_verdicts(kb: KnowledgeBase) -> None:
    provider = ScriptedProvider(lambda _r: ProviderError("bad request", status=400))
    [report] = asyncio.run(_checker(kb, provider).run([Answer(text=ANSWER)]))
    assert {r.category for r in report.results} == {Category.ERROR}
    assert all("judge call failed" in (r.error or "") for r in report.results)
    assert report.metrics.n_scored == 0 and report.metrics.statement_support is None


def test_unparseable_output_keeps_raw(kb: KnowledgeBase) -> None:
    provider = ScriptedProvider(lambda _r: '{"results": [{"claim_id": "C1", "factual": ')
    [report] = asyncio.run(_checker(kb, provider).run([Answer(text=ANSWER)]))
    result = report.results[0]
    assert result.category is Category.ERROR and result.verdict is not None
    assert result.verdict.raw_output and result.verdict.raw_output.startswith('{"results"')


def test_one_bad_answer_does_not_stop_the_batch(kb: KnowledgeBase) -> None:
    provider = ScriptedProvider(scripted_judge(keyword_rule(supported="metformin")))
    answers = [
        Answer(text="   "),
        Answer(text="Metformin treats type 2 diabetes."),
        Answer(text="x" * 300_000),
    ]
    reports = asyncio.run(_checker(kb, provider).run(answers))
    assert "empty" in reports[0].errors[0]
    assert reports[1].results[0].category is Category.FACT and not reports[1].errors
    assert "over the limit" in reports[2].errors[0]


def test_claims_sharing_evidence_are_batched(kb: KnowledgeBase) -> None:
    provider = ScriptedProvider(scripted_judge(keyword_rule(supported="metformin")))
    text = " ".join(f"Metformin fact number {i} concerns type 2 diabetes." for i in range(8))
    [report] = asyncio.run(_checker(kb, provider, claims_per_call=4).run([Answer(text=text)]))
    assert len(report.results) == 8
    assert len(provider.requests) < 8


def test_public_check_records_run_and_uses_cache(kb: KnowledgeBase, tmp_path: Path) -> None:
    kb_path = kb.path
    kb.close()
    fake = register_fake("pipeline", ScriptedProvider(scripted_judge(keyword_rule("metformin"))))
    try:
        config = Config.load(decomposer="rules")
        report = medverify.check(
            "Metformin treats type 2 diabetes.", kb=kb_path, model="fake:pipeline", config=config
        )
        again = medverify.check(
            "Metformin treats type 2 diabetes.", kb=kb_path, model="fake:pipeline", config=config
        )
    finally:
        unregister_fake("pipeline")
    assert report.results[0].category is Category.FACT
    assert len(fake.requests) == 1, "the rerun must be served from the request cache"
    assert again.usage["judge"].cached_calls == 1
    with RunStore(Config.load().store_path) as store:
        assert len(store.list_runs()) == 2


def test_missing_kb_and_missing_judge_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(KBError, match="kb ingest"):
        Checker.from_config(Config(kb=tmp_path / "nope", model="fake:x"))
    # without a model the built-in judge is used; without its weights that says what to do
    no_weights = Config(kb=tmp_path / "nope", judge_settings={"verifier": tmp_path / "none"})
    with pytest.raises(ConfigError, match="--model"):
        Checker.from_config(no_weights, kit=FlowKit(kb=object()))  # type: ignore[arg-type]




def _escalating_run(kb: KnowledgeBase, store: RunStore) -> list[Report]:
    """One answer checked with the review queue on, hallucinations escalated."""
    provider = ScriptedProvider(
        scripted_judge(keyword_rule(supported="first-line", contradicted="5000 mg")))
    checker = _checker(kb, provider, review={"enabled": True},
                       arbitration={"hallucination": "ESCALATE"})
    escalate = escalator(checker.config)
    assert escalate is not None
    return asyncio.run(checker.run([Answer(text=ANSWER, question="q")], store=store,
                                   escalate=escalate))


def test_escalations_are_queued_with_their_answer(kb: KnowledgeBase, tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.db") as store:
        [report] = _escalating_run(kb, store)
        escalated = [r.claim.id for r in report.results
                     if r.arbitration and r.arbitration.decision is Decision.ESCALATE]
        items = ReviewStore(store).list(limit=None)
        assert escalated and sorted(i.claim.id for i in items) == sorted(escalated)
        assert {i.run_id for i in items} == {report.run_id}
        assert len(store.reports(report.run_id or "")[0].results) == len(report.results)


def test_a_failed_queue_write_leaves_no_answer_behind(
        kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer and its escalations are one transaction: a failure after the queue's
    inserts (a process dying there) rolls back both, never an answer whose escalated
    claims are missing from the queue."""
    add_items = ReviewStore.add_items

    def dies_after_inserting(self: ReviewStore, items: object) -> int:
        assert add_items(self, items) > 0  # type: ignore[arg-type]
        raise RuntimeError("died after the inserts")

    monkeypatch.setattr(ReviewStore, "add_items", dies_after_inserting)
    with RunStore(tmp_path / "runs.db") as store:
        with pytest.raises(RuntimeError, match="died after the inserts"):
            _escalating_run(kb, store)
        [run] = store.list_runs()
        assert run.status == "failed"
        assert store.reports(run.id) == []
        assert ReviewStore(store).list(limit=None) == []
