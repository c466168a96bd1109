"""Re-check before escalating (``[arbitration] recheck_*``): risk-guided compute in front of
the clinician queue. The candidates, the decision after a re-check, the policy id, and the
check flow with a second judge (which may fail)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from medverify.arbitration import after_recheck, arbitrate, policy_id, recheck_candidates
from medverify.checker import Checker
from medverify.config import ArbitrationPolicy, Config
from medverify.judge import JUDGES
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
    Verdict,
)
from medverify.store.runs import RunStore
from medverify.testing import ScriptedProvider
from medverify.testing.judge import WordJudge, keyword_rule, scripted_judge

ON = ArbitrationPolicy(recheck_judge="words", hallucination="ESCALATE")


def _result(category: Category, risk: float | None, claim_id: str,
            policy: ArbitrationPolicy = ON) -> ClaimResult:
    claim = Claim(id=claim_id, text=f"claim {claim_id}")
    if category is Category.ERROR:
        verdict = Verdict(claim_id=claim_id, error="judge down")
    else:
        verdict = Verdict(claim_id=claim_id,
                          factual=Analysis(holds=category is Category.FACT),
                          counterfactual=Analysis(holds=category is Category.HALLUCINATION))
    result = ClaimResult.from_verdict(claim, [], verdict)
    result = result.model_copy(update={"hallucination_risk": risk})
    return result.model_copy(update={"arbitration": arbitrate(result, policy)})


def test_the_policy_id_ignores_recheck_settings_while_recheck_is_off() -> None:
    off = ArbitrationPolicy()
    assert policy_id(off) == policy_id(ArbitrationPolicy(recheck_budget=0.5, recheck_top_k=9))
    assert policy_id(ON) != policy_id(ON.model_copy(update={"recheck_budget": 0.5}))
    assert policy_id(ON) != policy_id(ArbitrationPolicy(hallucination="ESCALATE"))


def test_an_unknown_rule_is_refused() -> None:
    with pytest.raises(ValidationError, match="unknown arbitration rule"):
        ArbitrationPolicy(recheck_rules=["fact", "hallucinaton"])


def test_candidates_are_escalations_by_listed_rules_riskiest_first() -> None:
    results = [_result(Category.FACT, 0.9, "fact-high"),      # fact_high_risk: escalates
               _result(Category.FACT, 0.1, "fact-low"),       # accepted: never rechecked
               _result(Category.HALLUCINATION, 0.5, "hall"),  # hallucination: escalates
               _result(Category.ERROR, None, "error"),        # error: escalates, no risk
               _result(Category.COVERAGE_GAP, 0.2, "gap")]    # flagged
    assert [r.arbitration.decision for r in results if r.arbitration] == [
        Decision.ESCALATE, Decision.ACCEPT, Decision.ESCALATE, Decision.ESCALATE, Decision.FLAG]
    assert recheck_candidates(results, ON) == [0, 2, 3]
    # a budget of 2 of 3 escalations: the unscored one and the riskiest scored one
    assert recheck_candidates(results, ON.model_copy(update={"recheck_budget": 0.67})) == [0, 3]
    assert recheck_candidates(results, ON.model_copy(update={"recheck_budget": 0.0})) == []
    only = ON.model_copy(update={"recheck_rules": ["hallucination"]})
    assert recheck_candidates(results, only) == [2]
    assert recheck_candidates(results, ArbitrationPolicy(hallucination="ESCALATE")) == []


def test_after_recheck_decides_again_or_keeps_the_first_decision_on_failure() -> None:
    before = _result(Category.HALLUCINATION, 0.5, "x")
    fact = _result(Category.FACT, None, "x")
    after = after_recheck(before, fact, ON, "words")
    assert after.category is Category.FACT and after.hallucination_risk == 0.5
    assert after.arbitration is not None and after.arbitration.decision is Decision.ACCEPT
    note = after.arbitration.recheck
    assert note is not None and note.error is None and note.judge == "words"
    assert (note.category_before, note.decision_before, note.rule_before) == (
        Category.HALLUCINATION, Decision.ESCALATE, "hallucination")
    failed = after_recheck(before, _result(Category.ERROR, None, "x"), ON, "words")
    assert failed.category is Category.HALLUCINATION
    assert failed.arbitration is not None and failed.arbitration.decision is Decision.ESCALATE
    assert failed.arbitration.recheck is not None
    assert failed.arbitration.recheck.error == "judge down"


DOC = ("Metformin is a first-line medicine for type 2 diabetes. The usual starting dose "
       "is 500 mg once or twice daily with meals.")
ANSWER = ("Metformin is a first-line medicine for type 2 diabetes. The usual starting dose is "
          "5000 mg daily.")


@pytest.fixture
def words(monkeypatch: pytest.MonkeyPatch) -> list[WordJudge]:
    made: list[WordJudge] = []

    def factory(config: Config, model: Any, fail: bool = False) -> WordJudge:
        judge = WordJudge(fail=(lambda item: "second judge down") if fail else None)
        made.append(judge)
        return judge

    monkeypatch.setitem(JUDGES._factories, "words", factory)
    monkeypatch.setitem(JUDGES._factories, "words-down",
                        lambda config, model: factory(config, model, fail=True))
    return made


def _check(tmp_path: Path, policy: ArbitrationPolicy) -> tuple[Checker, Any]:
    kb = KnowledgeBase.create(tmp_path / "kb", embedder="hash")
    kb.ingest([Document(doc_id="metformin", title="Metformin", text=DOC)])
    provider = ScriptedProvider(
        scripted_judge(keyword_rule(supported="first-line", contradicted="5000 mg")))
    config = Config(model="fake:x", decomposer="rules", arbitration=policy)
    checker = Checker.from_config(config, kit=FlowKit(kb=kb, model=Model(provider)))
    checker.owned = (*checker.owned, kb)
    with RunStore(tmp_path / "runs.db") as store:
        [report] = asyncio.run(checker.run([Answer(text=ANSWER, question="q")], store=store))
        [rebuilt] = store.reports(report.run_id or "")
    asyncio.run(checker.aclose())
    assert [r.arbitration for r in rebuilt.results] == [r.arbitration for r in report.results]
    return checker, report


def test_the_check_flow_rechecks_an_escalation_with_the_second_judge(
        tmp_path: Path, words: list[WordJudge]) -> None:
    _, report = _check(tmp_path, ON.model_copy(update={"recheck_top_k": 3}))
    fact, dose = report.results
    assert fact.arbitration is not None and fact.arbitration.recheck is None  # accepted
    assert [i.claim.id for i in words[0].items] == [dose.claim.id]  # only the escalation
    # the second judge finds "5000" in no passage: a coverage gap, flagged, not escalated
    assert dose.category is Category.COVERAGE_GAP
    assert dose.arbitration is not None and dose.arbitration.decision is Decision.FLAG
    note = dose.arbitration.recheck
    assert note is not None and note.decision_before is Decision.ESCALATE
    assert note.category_before is Category.HALLUCINATION and note.passages == len(dose.passages)
    assert 1 <= note.passages <= 3
    assert report.models["recheck"] == "words"


def test_a_failed_recheck_leaves_the_claim_escalated(tmp_path: Path,
                                                     words: list[WordJudge]) -> None:
    _, report = _check(tmp_path, ON.model_copy(update={"recheck_judge": "words-down"}))
    dose = report.results[1]
    assert dose.category is Category.HALLUCINATION
    assert dose.arbitration is not None and dose.arbitration.decision is Decision.ESCALATE
    assert dose.arbitration.recheck is not None
    assert dose.arbitration.recheck.error == "second judge down"
