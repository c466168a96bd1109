"""Reviewed means settled (review/settled.py, issue 30): a claim a clinician decided gets the
reviewer's label when checked again (same text or a near-duplicate, same KB lineage), with
its provenance, is not queued again, survives the run store, and gives way only to newer
reviewed evidence; the same claim waiting for review is not queued twice."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from medverify.checker import Checker
from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.llm.facade import Model
from medverify.records import Answer, Category, ClaimResult, Decision, Document, Report
from medverify.review import (
    ReviewLabel,
    ReviewStatus,
    items_from_report,
    label_and_teach,
    revert,
)
from medverify.review.settled import SettledClaims, claim_key, near_duplicate
from medverify.store.review import ReviewStore
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider
from medverify.testing.judge import Decision as RuleDecision
from medverify.testing.judge import scripted_judge

DOCS = [Document(doc_id="statins", title="Statins",
                 text="Statins lower LDL cholesterol. Statins raise LDL cholesterol in some "
                      "reports."),
        Document(doc_id="metformin", title="Metformin",
                 text="Metformin is a first-line medicine for type 2 diabetes.")]
MIXED = "Statins lower LDL cholesterol."  # the scripted judge: JUDGMENT_ERROR
GAP = "Vitamin C cures the common cold."  # COVERAGE_GAP
UNRELATED = "Metformin is a first-line medicine for type 2 diabetes."  # FACT
SOURCE = "https://medlineplus.gov/statins.html"


def rule(claim: str, passages: dict[str, str]) -> RuleDecision:
    """Statins: both ways (JUDGMENT_ERROR) unless a clinician-reviewed statement is among
    the passages; a claim a passage holds word for word: supported; else a gap."""
    text = " ".join(passages.values()).casefold()
    body = claim.strip().rstrip(".").casefold()
    if "statins" in body and "clinician-reviewed" not in text:
        return True, True
    return body in text, "does not cure" in text and "vitamin c" in body


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as base:
        base.ingest(DOCS)
        yield base


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[RunStore]:
    with RunStore(tmp_path / "runs.db") as store:
        yield store


def _checker(kb: KnowledgeBase, **review: object) -> Checker:
    config = Config(model="fake:x", decomposer="rules", review=review,
                    arbitration={"coverage_gap": "ESCALATE"})
    return Checker.from_config(
        config, kit=FlowKit(kb=kb, model=Model(ScriptedProvider(scripted_judge(rule)))))


def _check(checker: Checker, runs: RunStore, *texts: str) -> list[ClaimResult]:
    reports = asyncio.run(checker.run([Answer(text=t) for t in texts], store=runs))
    return [r for report in reports for r in report.results]


def _queue(checker: Checker, runs: RunStore, *texts: str) -> tuple[list[Report], int]:
    reports = asyncio.run(checker.run([Answer(text=t) for t in texts], store=runs))
    items = [i for r in reports for i in items_from_report(r)]
    return reports, ReviewStore(runs).add_items(items)


def _label_all(runs: RunStore, kb: KnowledgeBase) -> None:
    queue = ReviewStore(runs)
    for it in queue.list(status=ReviewStatus.OPEN):
        if it.claim.text == MIXED:
            label_and_teach(queue, it.id, "rev-a", ReviewLabel.FACT, kb=kb,
                            correction=MIXED, source_url=SOURCE)
        elif it.claim.text == GAP:
            label_and_teach(queue, it.id, "rev-a", ReviewLabel.HALLUCINATION, kb=kb,
                            correction="Vitamin C does not cure the common cold.",
                            source_url="https://ods.od.nih.gov/factsheets/VitaminC")


# ---- matching ------------------------------------------------------------------------------


def test_claim_key_ignores_case_punctuation_and_spacing() -> None:
    assert claim_key("  Statins  lower LDL-cholesterol! ") == "statins lower ldl cholesterol"


@pytest.mark.parametrize(("a", "b", "same"), [
    ("Statins lower LDL cholesterol in adults", "Statins lower the LDL cholesterol in adults",
     True),
    ("Statins lower LDL cholesterol in adults", "Statins do not lower LDL cholesterol in adults",
     False),
    ("Statins lower LDL cholesterol by 30 percent", "Statins lower LDL cholesterol by 50 percent",
     False),
    ("Statins lower LDL cholesterol in adults", "Statins may lower LDL cholesterol in adults",
     False),
    ("Statins lower LDL cholesterol in adults", "Statins lower LDL cholesterol in children",
     False),
    ("Statins lower LDL", "Statins lower the LDL", False),  # short: exact text only
])
def test_near_duplicates_keep_numbers_negation_hedging_and_key_words(
        a: str, b: str, same: bool) -> None:
    assert (near_duplicate(claim_key(a), claim_key(b)) is not None) is same


# ---- the loop ------------------------------------------------------------------------------


def test_reviewed_claims_come_back_as_the_reviewers_decision_and_are_not_queued_again(
        kb: KnowledgeBase, runs: RunStore) -> None:
    checker = _checker(kb)
    reports, added = _queue(checker, runs, MIXED, GAP, UNRELATED)
    first = {r.claim.text: r for rep in reports for r in rep.results}
    assert first[MIXED].category is Category.JUDGMENT_ERROR
    assert first[GAP].category is Category.COVERAGE_GAP
    assert first[UNRELATED].category is Category.FACT and added == 2
    _label_all(runs, kb)
    reports, added = _queue(checker, runs, MIXED, GAP, UNRELATED)
    again = {r.claim.text: r for rep in reports for r in rep.results}
    assert added == 0  # neither reviewed claim is queued again
    fact, false = again[MIXED], again[GAP]
    assert (fact.category, fact.arbitration.decision) == (Category.FACT, Decision.ACCEPT)
    assert (false.category, false.arbitration.decision) == (Category.HALLUCINATION,
                                                            Decision.FLAG)
    for result, judged in ((fact, Category.JUDGMENT_ERROR), (false, None)):
        reviewed = result.arbitration.reviewed
        assert result.arbitration.rule == "reviewed" and reviewed is not None
        assert reviewed.reviewer == "rev-a" and reviewed.match == "same_text"
        assert reviewed.source_url and reviewed.correction and result.confident is True
        if judged is not None:
            assert reviewed.category_before is judged
    assert fact.arbitration.reviewed.decision_before is Decision.ESCALATE
    # the unrelated claim: same passages, same verdict
    assert [p.id for p in again[UNRELATED].passages] == [
        p.id for p in first[UNRELATED].passages]
    assert again[UNRELATED].category is Category.FACT
    assert again[UNRELATED].arbitration.rule != "reviewed"
    # the run store gives the reviewed decision back
    stored = runs.reports(reports[0].run_id or "")[0]
    assert stored.results[0].category is Category.FACT
    assert stored.results[0].arbitration.reviewed == fact.arbitration.reviewed
    assert stored.kb_lineage == kb.lineage


def test_a_near_duplicate_is_settled_a_negated_claim_is_not(kb: KnowledgeBase,
                                                          runs: RunStore) -> None:
    checker = _checker(kb)
    long_claim = "Statins lower LDL cholesterol in adults with diabetes."
    _queue(checker, runs, long_claim)
    queue = ReviewStore(runs)
    [it] = queue.list(status=ReviewStatus.OPEN)
    label_and_teach(queue, it.id, "rev-a", ReviewLabel.FACT, kb=None)
    near, negated = _check(checker, runs, "Statins lower the LDL cholesterol in adults with "
                           "diabetes.", "Statins do not lower LDL cholesterol in adults with "
                           "diabetes.")
    assert near.arbitration.rule == "reviewed" and near.category is Category.FACT
    assert near.arbitration.reviewed.match == "near_duplicate"
    assert 0.9 <= near.arbitration.reviewed.similarity < 1.0
    assert negated.arbitration.rule != "reviewed"


def test_cannot_tell_another_kb_a_reverted_change_or_settle_off_settle_nothing(
        kb: KnowledgeBase, runs: RunStore, tmp_path: Path) -> None:
    checker = _checker(kb)
    _queue(checker, runs, MIXED, GAP)
    queue = ReviewStore(runs)
    items = {i.claim.text: i for i in queue.list(status=ReviewStatus.OPEN)}
    label_and_teach(queue, items[GAP].id, "rev-a", ReviewLabel.CANNOT_TELL, kb=kb)
    _, change = label_and_teach(queue, items[MIXED].id, "rev-a", ReviewLabel.FACT, kb=kb,
                                correction=MIXED, source_url=SOURCE)
    mixed, gap = _check(checker, runs, MIXED, GAP)
    assert mixed.arbitration.rule == "reviewed" and gap.arbitration.rule != "reviewed"
    [off] = _check(_checker(kb, settle=False), runs, MIXED)
    assert off.arbitration.rule != "reviewed"
    with KnowledgeBase.create(tmp_path / "kb2", embedder="hash") as other:
        other.ingest(DOCS)
        assert other.lineage != kb.lineage
        [elsewhere] = _check(_checker(other), runs, MIXED)
        assert elsewhere.arbitration.rule != "reviewed"
    assert change is not None
    revert(change.id, kb, queue)
    [after_revert] = _check(checker, runs, MIXED)
    assert after_revert.arbitration.rule != "reviewed"


def test_newer_reviewed_evidence_that_disagrees_wins(kb: KnowledgeBase,
                                                     runs: RunStore) -> None:
    checker = _checker(kb)
    _queue(checker, runs, GAP)
    queue = ReviewStore(runs)
    [it] = queue.list(status=ReviewStatus.OPEN)
    label_and_teach(queue, it.id, "rev-a", ReviewLabel.COVERAGE_GAP, kb=None)
    settled = SettledClaims(queue, kb.lineage)
    assert len(settled) == 1
    # later, another item's correction is taught; the judge now calls the claim false on it
    _queue(_checker(kb, settle=False), runs, "Vitamin C cures colds in adults.")
    [other] = [i for i in queue.list(status=ReviewStatus.OPEN)]
    label_and_teach(queue, other.id, "rev-b", ReviewLabel.HALLUCINATION, kb=kb,
                    correction="Vitamin C does not cure the common cold.",
                    source_url="https://ods.od.nih.gov/factsheets/VitaminC")
    [result] = _check(checker, runs, GAP)
    assert result.category is Category.HALLUCINATION
    assert result.arbitration.rule != "reviewed"
    assert any("a later review" in w for w in result.warnings)


def test_a_later_taught_statement_of_another_claim_cannot_overrule_a_label_into_a_fact(
        kb: KnowledgeBase, runs: RunStore) -> None:
    """Issue 41: a taught document that does not state the claim settles nothing, so a FACT
    the judge finds on it (not sure) leaves the clinician's HALLUCINATION in force."""
    checker = _checker(kb)
    _queue(checker, runs, GAP)
    queue = ReviewStore(runs)
    [it] = queue.list(status=ReviewStatus.OPEN)
    label_and_teach(queue, it.id, "rev-a", ReviewLabel.HALLUCINATION, kb=None)
    _queue(_checker(kb, settle=False), runs, "Vitamin C cures the common cold in some adults.")
    [other] = [i for i in queue.list(status=ReviewStatus.OPEN)]
    label_and_teach(queue, other.id, "rev-b", ReviewLabel.FACT, kb=kb,
                    source_url="https://ods.od.nih.gov/factsheets/VitaminC")
    [result] = _check(checker, runs, GAP)
    assert result.category is Category.HALLUCINATION
    assert result.arbitration is not None and result.arbitration.rule == "reviewed"


def test_the_same_claim_waiting_for_review_is_not_queued_twice(kb: KnowledgeBase,
                                                               runs: RunStore) -> None:
    checker = _checker(kb)
    assert _queue(checker, runs, GAP)[1] == 1
    assert _queue(checker, runs, GAP, "  vitamin C cures the COMMON cold ")[1] == 0
    assert len(ReviewStore(runs).list()) == 1


def test_reports_show_the_review_that_settled_a_claim(kb: KnowledgeBase, runs: RunStore) -> None:
    from rich.console import Console

    from medverify.report.html import render_html
    from medverify.report.terminal import claims_table

    checker = _checker(kb)
    _queue(checker, runs, GAP)
    queue = ReviewStore(runs)
    [it] = queue.list(status=ReviewStatus.OPEN)
    label_and_teach(queue, it.id, "rev-<b>a</b>", ReviewLabel.HALLUCINATION, kb=None,
                    correction="Vitamin C <script>x()</script> does not cure colds.",
                    source_url="https://ods.od.nih.gov/factsheets/VitaminC")
    report = asyncio.run(checker.run([Answer(text=GAP)], store=runs))[0]
    html = render_html(report)
    assert "Clinician-reviewed: HALLUCINATION" in html and it.id in html
    assert "<script>x()</script>" not in html and "&lt;script&gt;x()" in html
    assert "rev-&lt;b&gt;a&lt;/b&gt;" in html and "The judge had said COVERAGE_GAP" in html
    console = Console(record=True, width=200)
    console.print(claims_table(report))
    assert "reviewed by rev-<b>a</b>" in console.export_text()
