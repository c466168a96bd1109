"""The clinical loop (review/teaching.py): review items from a report, teaching the KB what a
review settled (with provenance), reverting it, and the loop report; plus the KB's document
removal and its index staying in step across processes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from medverify.checker import Checker
from medverify.config import ArbitrationPolicy, Config
from medverify.errors import InputError
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.llm.facade import Model
from medverify.records import (
    Analysis,
    Answer,
    Category,
    Claim,
    ClaimResult,
    Decision,
    Document,
    Report,
    Verdict,
)
from medverify.report.metrics import compute_metrics
from medverify.retrieve import Retriever
from medverify.review import (
    ItemLabel,
    KBChangeNotFound,
    LabelRole,
    ReviewLabel,
    ReviewStatus,
    items_from_report,
    lesson,
    loop_report,
    period_of,
    priority,
    revert,
    taught_document,
    teach,
)
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider
from medverify.testing.judge import Decision as RuleDecision
from medverify.testing.judge import scripted_judge

DOCS = [Document(doc_id="metformin", title="Metformin",
                 text="Metformin is a first-line medicine for type 2 diabetes. The usual "
                 "starting dose is 500 mg once or twice daily with meals.")]
ANSWER = Answer(question="What should I know about metformin?",
                text="Metformin is a first-line medicine for type 2 diabetes. "
                     "Metformin can cause lactic acidosis.", meta={"topic": "diabetes"})
SOURCE = "https://example.org/metformin-safety"


def in_passages(claim: str, passages: dict[str, str]) -> RuleDecision:
    """A judge that finds a claim supported when a passage holds it word for word."""
    text = " ".join(" ".join(passages.values()).split()).casefold()
    return claim.strip().rstrip(".").casefold() in text, False


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as base:
        base.ingest(DOCS)
        yield base


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[RunStore]:
    with RunStore(tmp_path / "runs.db") as store:
        yield store


def _checker(kb: KnowledgeBase) -> Checker:
    config = Config(model="fake:x", decomposer="rules",
                    arbitration={"coverage_gap": "ESCALATE"})
    return Checker.from_config(
        config, kit=FlowKit(kb=kb, model=Model(ScriptedProvider(scripted_judge(in_passages)))))


def _check(checker: Checker, runs: RunStore) -> Report:
    return asyncio.run(checker.run([ANSWER], store=runs))[0]


def _outcome(report: Report) -> list[tuple[str, str, list[str]]]:
    return [(r.claim.text, r.category.value, [p.doc_id for p in r.passages])
            for r in report.results]


# ----------------------------------------------------------------------- items


def test_items_from_a_report_are_its_escalated_claims(kb: KnowledgeBase,
                                                      runs: RunStore) -> None:
    report = _check(_checker(kb), runs)
    assert [r.category for r in report.results] == [Category.FACT, Category.COVERAGE_GAP]
    [it] = items_from_report(report, labels_needed=2)
    gap = report.results[1]
    assert it.claim == gap.claim and it.category == "COVERAGE_GAP"
    assert it.run_id == report.run_id and it.answer_id == ANSWER.id
    assert it.answer_text == ANSWER.text and it.question == ANSWER.question
    assert it.passages == gap.passages and it.topic == "diabetes"
    assert it.arbitration["decision"] == "ESCALATE" and it.labels_needed == 2
    assert it.status is ReviewStatus.OPEN and it.priority == priority(gap)
    assert it.arbitration["inputs"]["clinical"] == "drug"  # metformin: why it is there
    assert items_from_report(report, topic="safety")[0].topic == "safety"
    assert items_from_report(report)[0].id == it.id  # the same escalation, the same id
    with pytest.raises(InputError):
        items_from_report(report, labels_needed=3)


def _result(category: Category, *, risk: float | None = None,
            probabilities: dict[str, float] | None = None,
            text: str = "A claim.") -> ClaimResult:
    holds = {Category.FACT: (True, False), Category.HALLUCINATION: (False, True),
             Category.JUDGMENT_ERROR: (True, True), Category.COVERAGE_GAP: (False, False)}
    claim = Claim(id="c1", text=text)
    if category is Category.ERROR:
        return ClaimResult.failed(claim, "judge timed out")
    supported, contradicted = holds[category]
    verdict = Verdict(claim_id="c1", factual=Analysis(holds=supported, reason="why yes"),
                      counterfactual=Analysis(holds=contradicted, reason="why not"),
                      probabilities=probabilities)
    result = ClaimResult.from_verdict(claim, [], verdict)
    return result.model_copy(update={"hallucination_risk": risk})


def test_priority_is_clinical_severity_times_uncertainty() -> None:
    """Doses and drugs first, then groups and numbers, then the rest; a sure COVERAGE_GAP on
    a dose claim stays high (issue 41: the 5000 mg claim was last of 17 at 0.0008)."""
    def sure(result: ClaimResult) -> ClaimResult:
        return result.model_copy(update={"confident": True})

    dose = _result(Category.COVERAGE_GAP, text="Start metformin with 5000 mg daily.")
    group = _result(Category.COVERAGE_GAP, text="The vaccine is for children under 12.")
    other = _result(Category.COVERAGE_GAP, text="Gout attacks are painful.")
    assert priority(dose) == pytest.approx(1.02 * 0.9)  # severity x uncertainty
    assert priority(group) == pytest.approx(0.71 * 0.9)
    assert priority(other) == pytest.approx(0.4 * 0.9)
    assert priority(sure(dose)) == 0.51 > priority(sure(other)) == 0.2
    drug = _result(Category.COVERAGE_GAP, text="Metformin is first-line therapy.")
    assert priority(dose) > priority(drug)  # the dose of a drug before the drug
    assert priority(sure(dose)) > priority(sure(_result(Category.FACT, text="It helps.")))
    assert priority(_result(Category.HALLUCINATION, risk=0.5, text="Gout is rare.")) == \
        pytest.approx(0.4 + 0.1 + 0.05)  # a contradiction is evidence of an error
    # an unsure contradiction about a group before an unsure FACT about a dose
    wrong_group = _result(Category.HALLUCINATION, text="The vaccine is for children under 12.")
    right_dose = _result(Category.FACT, text="Only a single dose of the vaccine is needed.")
    assert priority(wrong_group) > priority(right_dose)
    assert priority(_result(Category.JUDGMENT_ERROR)) >= priority(sure(_result(Category.FACT)))


def test_results_without_a_decision_are_arbitrated_with_a_given_policy() -> None:
    results = [_result(Category.HALLUCINATION), _result(Category.JUDGMENT_ERROR)]
    report = Report(answer=ANSWER, results=results, metrics=compute_metrics(results))
    assert items_from_report(report) == []  # no decisions, no policy: nothing escalated
    [it] = items_from_report(report, policy=ArbitrationPolicy())  # JUDGMENT_ERROR escalates
    assert it.category == "JUDGMENT_ERROR" and it.arbitration["rule"] == "judgment_error"
    assert it.judge_reason == "supported: why yes; contradicted: why not"


# ----------------------------------------------------------------------- teach and revert


def test_teach_then_recheck_settles_the_claim_and_revert_restores_the_kb(
        kb: KnowledgeBase, runs: RunStore) -> None:
    checker, queue = _checker(kb), ReviewStore(runs)
    before = _check(checker, runs)
    snapshot = kb.snapshot_id
    assert queue.add_items(items_from_report(before)) == 1
    [it] = queue.list(status=ReviewStatus.OPEN)
    assert teach(it, kb, queue) is None  # open: nothing to teach yet
    closed = queue.label(it.id, "rev-a", ReviewLabel.FACT, source_url=SOURCE,
                         note="in the label")
    change = teach(closed, kb, queue)
    assert change is not None and change.doc_id == f"review-{it.id}"
    assert change.text == it.claim.text and change.source_url == SOURCE
    assert change.kb_path == str(kb.path) and change.label_id == closed.labels[0].id
    assert teach(closed, kb, queue) == change  # taught once
    assert kb.snapshot_id != snapshot

    meta, title, url = kb._conn.execute("SELECT meta, title, url FROM documents WHERE doc_id=?",
                                        (change.doc_id,)).fetchone()
    provenance = json.loads(meta)
    assert provenance["reviewer"] == "rev-a" and provenance["review_item"] == it.id
    assert provenance["label"] == "FACT" and provenance["reviewed_at"]
    assert title.startswith("Clinician-reviewed statement") and url == SOURCE
    [hit] = [p for p in Retriever(kb).search(it.claim.text) if p.doc_id == change.doc_id]
    assert hit.url == SOURCE

    after = _check(checker, runs)
    assert [r.category for r in after.results] == [Category.FACT, Category.FACT]
    assert after.kb_snapshot == kb.snapshot_id

    reverted = revert(change.id, kb, queue)
    assert reverted.reverted_at is not None and queue.kb_changes() == []
    assert revert(change.id, kb, queue) == reverted  # once
    assert kb.snapshot_id == snapshot
    again = _check(checker, runs)
    assert _outcome(again) == _outcome(before) and again.kb_snapshot == before.kb_snapshot
    with pytest.raises(KBChangeNotFound):
        revert(999, kb, queue)


def test_a_hallucination_teaches_its_correction(kb: KnowledgeBase, runs: RunStore) -> None:
    queue = ReviewStore(runs)
    [it] = items_from_report(_check(_checker(kb), runs))
    queue.add_items([it])
    closed = queue.label(it.id, "rev-a", ReviewLabel.HALLUCINATION,
                         correction="Metformin rarely causes lactic acidosis.")
    assert lesson(closed) is not None
    change = teach(closed, kb, queue)
    assert change is not None and change.text == "Metformin rarely causes lactic acidosis."
    assert change.source_url is None


@pytest.mark.parametrize(("label", "fields"), [
    (ReviewLabel.FACT, {}),  # FACT without a source
    (ReviewLabel.HALLUCINATION, {"source_url": SOURCE}),  # nothing to say instead
    (ReviewLabel.CANNOT_TELL, {"correction": "Something."}),
    (ReviewLabel.COVERAGE_GAP, {}),
])
def test_labels_that_teach_nothing(kb: KnowledgeBase, runs: RunStore, label: ReviewLabel,
                                   fields: dict[str, str]) -> None:
    queue = ReviewStore(runs)
    [it] = items_from_report(_check(_checker(kb), runs))
    queue.add_items([it])
    documents = kb.stats().documents
    assert teach(queue.label(it.id, "rev-a", label, **fields), kb, queue) is None
    assert kb.stats().documents == documents and queue.kb_changes() == []


def test_a_private_source_url_is_refused_before_the_kb_changes(
        kb: KnowledgeBase, runs: RunStore) -> None:
    queue = ReviewStore(runs)
    [it] = items_from_report(_check(_checker(kb), runs))
    queue.add_items([it])
    with pytest.raises(InputError, match="source_url"):
        queue.label(it.id, "rev-a", ReviewLabel.FACT, source_url="http://192.168.0.10/kb")
    # an item closed elsewhere with such a URL (say, an older store) is refused by teach too
    forged = it.model_copy(update={
        "status": ReviewStatus.CLOSED, "final_label": ReviewLabel.FACT,
        "labels": [ItemLabel(id=1, item_id=it.id, reviewer="rev-a", role=LabelRole.FIRST,
                             label=ReviewLabel.FACT, source_url="http://127.0.0.1:8080/x",
                             created_at=datetime.now(UTC))]})
    snapshot = kb.snapshot_id
    with pytest.raises(InputError, match="loopback"):
        teach(forged, kb, queue)
    assert kb.snapshot_id == snapshot and queue.kb_changes(include_reverted=True) == []


def test_revert_in_another_kb_is_refused(kb: KnowledgeBase, runs: RunStore,
                                         tmp_path: Path) -> None:
    queue = ReviewStore(runs)
    [it] = items_from_report(_check(_checker(kb), runs))
    queue.add_items([it])
    change = teach(queue.label(it.id, "rev-a", ReviewLabel.FACT, source_url=SOURCE), kb, queue)
    assert change is not None
    with KnowledgeBase.create(tmp_path / "other", embedder="hash") as other, \
            pytest.raises(InputError, match="not in"):
        revert(change.id, other, queue)


# ----------------------------------------------------------------------- the KB itself


def test_removed_documents_leave_every_index_and_other_processes_see_changes(
        kb: KnowledgeBase) -> None:
    query = "lactic acidosis metformin"
    with KnowledgeBase.open(kb.path) as other:  # another worker's view of the same KB
        assert [p.doc_id for p in Retriever(other).search(query, mode="dense")] == ["metformin"]
        kb.ingest([Document(doc_id="new", text="Metformin can cause lactic acidosis.")])
        assert "new" in [p.doc_id for p in Retriever(other).search(query, mode="dense")]
        assert "new" in [p.doc_id for p in Retriever(other).search(query, mode="lexical")]
        assert kb.remove_documents(["new", "never-there"]) == 1
        assert kb.remove_documents(["new"]) == 0
        for mode in ("dense", "lexical", "hybrid"):
            assert [p.doc_id for p in Retriever(other).search(query, mode=mode)] == \
                ["metformin"]
            assert [p.doc_id for p in Retriever(kb).search(query, mode=mode)] == ["metformin"]
    stats = kb.stats()
    assert (stats.documents, stats.vector_index) == (1, "fresh")
    assert kb.vector_index.loaded.ntotal == stats.chunks
    terms = dict(kb._conn.execute("SELECT term, df FROM terms").fetchall())
    assert terms.get("lactic", 0) == 0 and terms["metformin"] >= 1


# ----------------------------------------------------------------------- the loop report


def test_period_names() -> None:
    when = datetime(2026, 3, 4, 15, tzinfo=UTC)  # a Wednesday
    assert period_of(when, "week") == ("2026-W10", datetime(2026, 3, 2).date())
    assert period_of(when, "day") == ("2026-03-04", when.date())
    assert period_of(when, "month") == ("2026-03", datetime(2026, 3, 1).date())


def test_the_loop_report_counts_the_loop(kb: KnowledgeBase, runs: RunStore) -> None:
    checker, queue = _checker(kb), ReviewStore(runs)
    report = _check(checker, runs)
    queue.add_items(items_from_report(report))
    [it] = queue.list()
    change = teach(queue.label(it.id, "rev-a", ReviewLabel.FACT, source_url=SOURCE), kb, queue)
    assert change is not None
    _check(checker, runs)  # 2 more claims, none escalated
    revert(change.id, kb, queue)
    # an older escalation without a run, from another week, closed as the judge said
    old = it.model_copy(update={"id": "rv-old", "run_id": None,
                                "created_at": datetime.now(UTC) - timedelta(days=14)})
    queue.add_items([old])
    queue.label("rv-old", "rev-b", ReviewLabel.COVERAGE_GAP)

    result = loop_report(queue, by="week")
    this_week = period_of(datetime.now(UTC), "week")[0]
    now = next(p for p in result.periods if p.period == this_week)
    assert (now.claims_checked, now.escalated, now.escalation_rate) == (4, 1, 0.25)
    assert (now.labels, now.items_closed, now.kb_added, now.kb_reverted) == (2, 2, 1, 1)
    assert now.judge_agreement == 0.5  # FACT vs COVERAGE_GAP, COVERAGE_GAP as judged
    total = result.total
    assert (total.escalated, total.claims_checked, total.labels) == (2, 4, 2)
    assert total.escalation_rate == 0.25  # the item without a run is not in the rate
    assert [p.start for p in result.periods] == sorted(p.start for p in result.periods)
    assert result.queue["closed"] == 2
    assert loop_report(queue, by="month").by == "month"
    with pytest.raises(InputError):
        loop_report(queue, by="year")  # type: ignore[arg-type]


def test_an_empty_loop_report(runs: RunStore) -> None:
    result = loop_report(ReviewStore(runs))
    assert result.periods == [] and result.total.escalation_rate is None
    assert result.total.judge_agreement is None


def test_decisions_are_on_the_checked_results(kb: KnowledgeBase, runs: RunStore) -> None:
    report = _check(_checker(kb), runs)
    decisions = [r.arbitration.decision for r in report.results if r.arbitration]
    assert decisions == [Decision.ACCEPT, Decision.ESCALATE]


def test_start_up_teaches_what_a_crash_left_untaught_but_never_a_reverted_change(
        kb: KnowledgeBase, runs: RunStore) -> None:
    from medverify.review import finish_teaching

    checker, queue = _checker(kb), ReviewStore(runs)
    queue.add_items(items_from_report(_check(checker, runs)))
    [it] = queue.list(status=ReviewStatus.OPEN)
    closed = queue.label(it.id, "rev-a", ReviewLabel.FACT, source_url=SOURCE)
    kb.ingest([taught_document(closed, closed.labels[0], it.claim.text, SOURCE)])  # then: killed
    assert queue.kb_changes(item_id=it.id) == []
    assert finish_teaching(queue, kb) == 1
    [change] = queue.kb_changes(item_id=it.id)
    assert kb._conn.execute("SELECT COUNT(*) FROM documents WHERE doc_id = ?",
                            (change.doc_id,)).fetchone()[0] == 1
    assert finish_teaching(queue, kb) == 0  # taught: nothing left
    revert(change.id, kb, queue)
    assert finish_teaching(queue, kb) == 0  # a reverted change stays reverted


# ---- the loop with the real built-in judge (issue 27's cases) --------------------------------

LOOP_DOCS = [
    Document(doc_id="fibre", title="Dietary fibre",
             text="Dietary fibre does not lower cholesterol in everyone; its effect on "
                  "cholesterol is small and varies between people."),
    Document(doc_id="lisinopril", title="Lisinopril",
             text="Lisinopril is an ACE inhibitor. Lisinopril lowers blood pressure in adults "
                  "with hypertension, including adults with diabetes."),
]


def _builtin_checker(kb: KnowledgeBase) -> Checker:
    config = Config(decomposer="rules", retrieval={"mode": "lexical", "top_k": 3},
                    arbitration={"coverage_gap": "ESCALATE", "not_sure": "ESCALATE"})
    return Checker.from_config(config, kit=FlowKit(kb=kb))


def test_a_reviewed_claim_is_settled_and_teaching_leaves_unrelated_verdicts_alone(
        tmp_path: Path, runs: RunStore) -> None:
    statins = Answer(text="Statins lower LDL cholesterol.")
    lisinopril = Answer(text="Lisinopril lowers blood pressure in adults with diabetes.")
    with KnowledgeBase.create(tmp_path / "kb-real", embedder="hash") as base:
        base.ingest(LOOP_DOCS)
        checker, queue = _builtin_checker(base), ReviewStore(runs)
        try:
            before_l = asyncio.run(checker.run([lisinopril], store=runs))[0].results[0]
            first = asyncio.run(checker.run([statins], store=runs))[0]
            [result] = first.results
            assert result.category is not Category.FACT or result.confident is False
            assert queue.add_items(items_from_report(first)) == 1
            [it] = queue.list(status=ReviewStatus.OPEN)
            closed = queue.label(it.id, "rev-a", ReviewLabel.FACT, source_url=SOURCE)
            assert teach(closed, base, queue) is not None
            unrelated = Document(doc_id="review-x", title="Clinician-reviewed statement",
                                 source="clinician-review",
                                 text="Regular walking improves mood in older adults.")
            base.ingest([unrelated])
            [after] = asyncio.run(checker.run([statins], store=runs))[0].results
            after_l = asyncio.run(checker.run([lisinopril], store=runs))[0].results[0]
        finally:
            asyncio.run(checker.aclose())
    assert after.category is Category.FACT and after.confident is True
    assert "clinician-reviewed" in (after.verdict.factual.reason or "")
    assert after.arbitration is not None and after.arbitration.decision is Decision.ACCEPT
    assert after.arbitration.rule == "reviewed" and after.arbitration.reviewed is not None
    assert after.arbitration.reviewed.item_id == it.id
    # the taught documents are searched apart and are about something else: they do not
    # reach the lisinopril claim's evidence, whose passages and verdict do not move
    # (before issue 27 it flipped to JUDGMENT_ERROR; before issue 30 a taught document could
    # still displace one of its passages)
    assert not any(p.doc_id.startswith("review-") for p in after_l.passages)
    assert [p.id for p in after_l.passages] == [p.id for p in before_l.passages]
    assert (after_l.category, after_l.confident) == (before_l.category, before_l.confident)
