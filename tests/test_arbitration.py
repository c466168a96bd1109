"""Arbitration: the rules, the policy id, decisions through the check flow and the run store,
their display, and `medverify eval arbitration` (the policy sweep on labelled claims)."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import sqlite3
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

import medverify.judge.builtin as builtin
from medverify.arbitration import (
    arbitrate,
    arbitrate_all,
    arbitration_decision,
    policy_id,
    recheck_candidates,
)
from medverify.checker import Checker
from medverify.cli import main
from medverify.config import ARBITRATION_RULES, ArbitrationPolicy, Config
from medverify.errors import InputError
from medverify.evals.arbitration import (
    LabelledClaim,
    auto_grid,
    choose,
    evaluate,
    evaluate_policy,
    is_wrong,
    labelled_claim,
    pareto_front,
    policy_toml,
    sweep,
)
from medverify.evals.arbitration_chart import curve_svg
from medverify.evals.arbitration_input import judge_sources, read_source
from medverify.evals.pairs import Pair
from medverify.judge import JudgeItem
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
    Metrics,
    Verdict,
)
from medverify.report.html import render_html
from medverify.report.metrics import compute_metrics, decision_counts
from medverify.report.terminal import print_summary
from medverify.store.runs import RunStore, migrations
from medverify.testing import ScriptedProvider
from medverify.testing.judge import keyword_rule, scripted_judge
from medverify.testing.verifier import LexicalVerifier
from report_fixtures import example_report

POLICY = ArbitrationPolicy()


def _verdict(category: Category, probs: dict[str, float] | None = None,
             claim_id: str = "c") -> Verdict:
    if category is Category.ERROR:
        return Verdict(claim_id=claim_id, error="unparseable judge output")
    supported = category in (Category.FACT, Category.JUDGMENT_ERROR)
    contradicted = category in (Category.HALLUCINATION, Category.JUDGMENT_ERROR)
    return Verdict(claim_id=claim_id, factual=Analysis(holds=supported),
                   counterfactual=Analysis(holds=contradicted), probabilities=probs,
                   judge="fake:table")


def _result(category: Category, probs: dict[str, float] | None = None,
            risk: float | None = None, claim_id: str = "c") -> ClaimResult:
    claim = Claim(id=claim_id, text=f"claim {claim_id}")
    verdict = _verdict(category, probs, claim_id)
    result = (ClaimResult.failed(claim, "judge failed") if category is Category.ERROR
              else ClaimResult.from_verdict(claim, [], verdict))
    return result.model_copy(update={"hallucination_risk": risk})


UNSURE = "P(supported)=0.62, below the 0.81 needed for 70% precision"


def _assessed(result: ClaimResult, confident: bool | None,
              reason: str | None = UNSURE) -> ClaimResult:
    """``result`` with its verdict assessed: confident, not sure (with ``reason``) or not."""
    return result.model_copy(update={"confident": confident,
                                     "not_sure": reason if confident is False else None})


# ---- the rules -----------------------------------------------------------------------


@pytest.mark.parametrize(("category", "probs", "risk", "decision", "rule"), [
    (Category.ERROR, None, None, Decision.ESCALATE, "error"),
    (Category.ERROR, None, 0.99, Decision.ESCALATE, "error"),
    (Category.JUDGMENT_ERROR, None, 0.1, Decision.ESCALATE, "judgment_error"),
    (Category.FACT, None, 0.8, Decision.ESCALATE, "fact_high_risk"),
    (Category.FACT, None, 0.7, Decision.ESCALATE, "fact_high_risk"),  # at the bound: high
    (Category.FACT, None, 0.69, Decision.ACCEPT, "fact"),
    (Category.HALLUCINATION, None, 0.3, Decision.ESCALATE, "hallucination_low_risk"),
    (Category.HALLUCINATION, None, 0.31, Decision.FLAG, "hallucination"),
    (Category.COVERAGE_GAP, None, 0.9, Decision.ESCALATE, "coverage_gap_high_risk"),
    (Category.COVERAGE_GAP, None, 0.5, Decision.FLAG, "coverage_gap"),
    (Category.COVERAGE_GAP, None, None, Decision.FLAG, "coverage_gap"),
    (Category.HALLUCINATION, None, None, Decision.FLAG, "hallucination"),
    (Category.FACT, None, None, Decision.ACCEPT, "fact"),
])
def test_each_rule_of_the_default_policy(category: Category, probs: dict[str, float] | None,
                                         risk: float | None, decision: Decision,
                                         rule: str) -> None:
    arbitration = arbitrate(_result(category, probs, risk), POLICY)
    assert (arbitration.decision, arbitration.rule) == (decision, rule)
    assert arbitration.policy == policy_id(POLICY)
    assert arbitration.inputs["category"] == category.value and arbitration.inputs["risk"] == risk


def test_low_confidence_escalates_only_below_the_floor_of_its_category() -> None:
    policy = ArbitrationPolicy(min_confidence={"FACT": 0.6, "COVERAGE_GAP": 0.5})
    low = _result(Category.FACT, {"SUPPORTED": 0.55, "CONTRADICTED": 0.1})
    high = _result(Category.FACT, {"SUPPORTED": 0.6})
    assert arbitrate(low, policy).rule == "low_confidence"
    assert arbitrate(low, policy).decision is Decision.ESCALATE
    assert arbitrate(low, policy).inputs["judge_probability"] == pytest.approx(0.55)
    assert arbitrate(high, policy).rule == "fact"  # at the floor: not below it
    gap = _result(Category.COVERAGE_GAP, {"NOT_ENOUGH_INFO": 0.4})
    assert arbitrate(gap, policy).rule == "low_confidence"
    hallucination = _result(Category.HALLUCINATION, {"CONTRADICTED": 0.2})  # no floor set
    assert arbitrate(hallucination, policy).rule == "hallucination"
    no_probs = _result(Category.FACT)  # a judge without probabilities: the floor cannot apply
    assert arbitrate(no_probs, policy).rule == "fact"
    # the risk rules come first
    risky = _result(Category.FACT, {"SUPPORTED": 0.1}, risk=0.9)
    assert arbitrate(risky, policy).rule == "fact_high_risk"


def test_policy_settings_change_the_decisions() -> None:
    strict = ArbitrationPolicy(hallucination="ESCALATE", coverage_gap="ESCALATE",
                               disagreement="FLAG", error="FLAG", high_risk=0.5)
    assert arbitrate(_result(Category.HALLUCINATION), strict).decision is Decision.ESCALATE
    assert arbitrate(_result(Category.COVERAGE_GAP), strict).decision is Decision.ESCALATE
    assert arbitrate(_result(Category.ERROR), strict).decision is Decision.FLAG
    fact = _result(Category.FACT, risk=0.6)
    assert (arbitrate(fact, strict).decision, arbitrate(fact, strict).rule) == (
        Decision.FLAG, "fact_high_risk")
    assert arbitrate(fact, POLICY).rule == "fact"  # 0.6 is not high by default


def test_arbitration_decision_is_what_arbitrate_records() -> None:
    policy = ArbitrationPolicy(min_confidence={"FACT": 0.5})
    for result in (_result(Category.FACT, {"SUPPORTED": 0.4}, 0.5),
                   _result(Category.HALLUCINATION, {"CONTRADICTED": 0.9}, 0.1),
                   _result(Category.ERROR)):
        arbitration = arbitrate(result, policy)
        assert arbitration_decision(result.category, result.hallucination_risk,
                      arbitration.inputs["judge_probability"], policy) == (  # type: ignore[arg-type]
            arbitration.decision, arbitration.rule)


def test_policy_id_names_every_setting() -> None:
    ids = {policy_id(p) for p in (
        POLICY, ArbitrationPolicy(high_risk=0.8), ArbitrationPolicy(low_risk=0.2),
        ArbitrationPolicy(min_confidence={"FACT": 0.5}),
        ArbitrationPolicy(min_confidence={"FACT": 0.6}),
        ArbitrationPolicy(coverage_gap="ESCALATE"), ArbitrationPolicy(version="v9"),
        ArbitrationPolicy(not_sure="ESCALATE"))}
    assert len(ids) == 8
    assert policy_id(ArbitrationPolicy()) == policy_id(POLICY)
    assert policy_id(ArbitrationPolicy(version="v2")).startswith("arbitration/v2+")


def test_arbitrate_all_attaches_a_decision_to_every_result() -> None:
    results = [_result(c, claim_id=c.value) for c in Category]
    decided = arbitrate_all(results, POLICY)
    assert all(r.arbitration is not None for r in decided)
    assert all(r.arbitration is None for r in results)  # the inputs are not changed
    assert [r.claim.id for r in decided] == [r.claim.id for r in results]


# ---- not sure ------------------------------------------------------------------------


@pytest.mark.parametrize(("result", "decision", "rule"), [
    (_result(Category.FACT), Decision.FLAG, "not_sure"),
    (_result(Category.HALLUCINATION), Decision.FLAG, "not_sure"),
    (_result(Category.COVERAGE_GAP, risk=0.5), Decision.FLAG, "not_sure"),
    # the earlier rules decide first
    (_result(Category.ERROR), Decision.ESCALATE, "error"),
    (_result(Category.JUDGMENT_ERROR), Decision.ESCALATE, "judgment_error"),
    (_result(Category.FACT, risk=0.9), Decision.ESCALATE, "fact_high_risk"),
    (_result(Category.HALLUCINATION, risk=0.1), Decision.ESCALATE, "hallucination_low_risk"),
    (_result(Category.COVERAGE_GAP, risk=0.9), Decision.ESCALATE, "coverage_gap_high_risk"),
])
def test_a_not_sure_verdict_is_flagged_unless_an_earlier_rule_decided(
        result: ClaimResult, decision: Decision, rule: str) -> None:
    arbitration = arbitrate(_assessed(result, False), POLICY)
    assert (arbitration.decision, arbitration.rule) == (decision, rule)


def test_confident_or_not_assessed_verdicts_are_decided_as_before() -> None:
    for category, rule in ((Category.FACT, "fact"), (Category.HALLUCINATION, "hallucination"),
                           (Category.COVERAGE_GAP, "coverage_gap")):
        for confident in (True, None):
            arbitration = arbitrate(_assessed(_result(category), confident), POLICY)
            assert arbitration.rule == rule, (category, confident)
    sure = arbitrate(_assessed(_result(Category.FACT), True), POLICY)
    assert sure.decision is Decision.ACCEPT
    assert sure.inputs["confident"] is True and sure.inputs["not_sure"] is None
    unassessed = arbitrate(_result(Category.FACT), POLICY).inputs
    assert unassessed["confident"] is None and unassessed["not_sure"] is None


def test_the_decision_records_that_the_verdict_was_not_sure_and_why() -> None:
    arbitration = arbitrate(_assessed(_result(Category.FACT, {"SUPPORTED": 0.62}), False),
                            POLICY)
    assert arbitration.inputs == {"category": "FACT", "risk": None, "judge_probability": 0.62,
                                  "confident": False, "not_sure": UNSURE, "clinical": None}
    assert arbitration.inputs["confident"] is False  # a boolean, not 0.0


def test_not_sure_never_makes_a_decision_milder() -> None:
    unsure_fact = _assessed(_result(Category.FACT, {"SUPPORTED": 0.3}), False)
    floor = ArbitrationPolicy(min_confidence={"FACT": 0.35})
    assert arbitrate(unsure_fact, floor).rule == "low_confidence"  # ESCALATE beats FLAG
    strict = ArbitrationPolicy(hallucination="ESCALATE")
    unsure_hallucination = _assessed(_result(Category.HALLUCINATION), False)
    assert (arbitrate(unsure_hallucination, strict).decision,
            arbitrate(unsure_hallucination, strict).rule) == (Decision.ESCALATE, "hallucination")
    escalate = ArbitrationPolicy(not_sure="ESCALATE", min_confidence={"FACT": 0.35})
    assert (arbitrate(unsure_fact, escalate).decision, arbitrate(unsure_fact, escalate).rule) == (
        Decision.ESCALATE, "not_sure")  # as strict as the floor, and it comes first
    lenient = ArbitrationPolicy(not_sure="ACCEPT")
    assert arbitrate(_assessed(_result(Category.COVERAGE_GAP), False), lenient).decision is (
        Decision.FLAG)  # ACCEPT leaves the decision as it would be without the rule
    assert arbitrate(_assessed(_result(Category.FACT), False), lenient).decision is (
        Decision.ACCEPT)


def test_arbitration_decision_takes_the_verdicts_assessment_as_an_optional_keyword() -> None:
    assert arbitration_decision(Category.FACT, None, 0.9, POLICY) == (Decision.ACCEPT, "fact")
    assert arbitration_decision(Category.FACT, None, 0.9, POLICY, confident=None) == (
        Decision.ACCEPT, "fact")
    assert arbitration_decision(Category.FACT, None, 0.9, POLICY, confident=True) == (
        Decision.ACCEPT, "fact")
    assert arbitration_decision(Category.FACT, None, 0.9, POLICY, confident=False) == (
        Decision.FLAG, "not_sure")
    result = _assessed(_result(Category.COVERAGE_GAP, {"NOT_ENOUGH_INFO": 0.7}), False)
    arbitration = arbitrate(result, POLICY)
    assert arbitration_decision(result.category, None, 0.7, POLICY, confident=False) == (
        arbitration.decision, arbitration.rule)


def test_not_sure_escalations_can_be_rechecked() -> None:
    assert "not_sure" in ARBITRATION_RULES and "not_sure" in POLICY.recheck_rules
    policy = ArbitrationPolicy(not_sure="ESCALATE", recheck_judge="llm",
                               recheck_rules=["not_sure"], escalation_budget=1.0)
    results = arbitrate_all([_assessed(_result(Category.FACT, claim_id="a"), False),
                             _result(Category.ERROR, claim_id="b"),
                             _assessed(_result(Category.FACT, claim_id="c"), True)], policy)
    assert [r.arbitration.rule for r in results if r.arbitration] == [
        "not_sure", "error", "fact"]
    assert recheck_candidates(results, policy) == [0]


def test_eval_arbitration_measures_the_not_sure_rule() -> None:
    claims = [LabelledClaim(id="a", gold="CONTRADICTED", category=Category.FACT,
                            confident=False),
              LabelledClaim(id="b", gold="SUPPORTED", category=Category.FACT, confident=True),
              LabelledClaim(id="c", gold="SUPPORTED", category=Category.FACT)]
    point = evaluate_policy(claims, POLICY)
    assert (point.n_flagged, point.n_accepted, point.n_accepted_errors) == (1, 2, 0)
    off = evaluate_policy(claims, ArbitrationPolicy(not_sure="ACCEPT"))
    assert (off.n_flagged, off.n_accepted, off.n_accepted_errors) == (0, 3, 1)
    pair = Pair(id="p", claim="x", evidence="e", label="SUPPORTED")
    verdict = _verdict(Category.FACT).model_copy(update={"confident": False})
    assert labelled_claim(pair, verdict).confident is False
    assert labelled_claim(pair, _verdict(Category.ERROR)).confident is None


# ---- metrics, the check flow and the store ---------------------------------------------


def test_metrics_count_decisions_and_old_metrics_still_validate() -> None:
    results = arbitrate_all([_result(Category.FACT, claim_id="a"),
                             _result(Category.FACT, claim_id="b"),
                             _result(Category.HALLUCINATION, claim_id="c"),
                             _result(Category.ERROR, claim_id="d")], POLICY)
    assert compute_metrics(results).decisions == {"ACCEPT": 2, "FLAG": 1, "ESCALATE": 1}
    assert decision_counts([_result(Category.FACT)]) == {}
    assert compute_metrics([]).decisions == {}
    old = compute_metrics(results).model_dump(exclude={"decisions"})
    assert Metrics.model_validate(old).decisions == {}


DOCS_TEXT = ("Metformin is a first-line medicine for type 2 diabetes. The usual starting dose "
             "is 500 mg once or twice daily with meals.")
ANSWER = ("Metformin is a first-line medicine for type 2 diabetes. The usual starting dose is "
          "5000 mg daily. Aspirin is safe for children with the flu.")


@pytest.fixture
def checker(tmp_path: Path) -> Checker:
    from medverify.records import Document

    kb = KnowledgeBase.create(tmp_path / "kb", embedder="hash")
    kb.ingest([Document(doc_id="metformin", title="Metformin", text=DOCS_TEXT)])
    provider = ScriptedProvider(
        scripted_judge(keyword_rule(supported="first-line", contradicted="5000 mg")))
    config = Config(model="fake:x", decomposer="rules",
                    arbitration=ArbitrationPolicy(hallucination="ESCALATE"))
    made = Checker.from_config(config, kit=FlowKit(kb=kb, model=Model(provider)))
    made.owned = (*made.owned, kb)
    return made


def test_the_check_flow_decides_and_the_store_gives_the_decisions_back(
        checker: Checker, tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.db") as store:
        [report] = asyncio.run(checker.run([Answer(text=ANSWER, question="q")], store=store))
        [rebuilt] = store.reports(report.run_id or "")
    asyncio.run(checker.aclose())
    rules = {r.category: r.arbitration.rule for r in report.results if r.arbitration}
    assert all(r.arbitration is not None for r in report.results)
    assert rules[Category.FACT] == "fact" and rules[Category.HALLUCINATION] == "hallucination"
    hallucination = next(r for r in report.results if r.category is Category.HALLUCINATION)
    assert hallucination.arbitration and hallucination.arbitration.decision is Decision.ESCALATE
    assert hallucination.arbitration.policy == policy_id(checker.config.arbitration)
    assert report.metrics.decisions["ESCALATE"] >= 1
    assert sum(report.metrics.decisions.values()) == report.metrics.n_claims
    assert [r.arbitration for r in rebuilt.results] == [r.arbitration for r in report.results]
    assert rebuilt.metrics == report.metrics


def test_the_store_keeps_each_claims_risk_and_decision(tmp_path: Path) -> None:
    results = arbitrate_all([_result(Category.FACT, {"SUPPORTED": 0.9}, 0.85, "a"),
                             _result(Category.ERROR, risk=0.4, claim_id="b"),
                             _result(Category.COVERAGE_GAP, claim_id="c")],
                            ArbitrationPolicy(escalation_budget=1.0))
    with RunStore(tmp_path / "runs.db") as store:
        run_id = store.start_run(kind="check", config={}, models={}, prompt_versions={},
                                 kb_snapshot=None)
        store.save_answer(run_id, 0, Answer(text="t"), results)
        [report] = store.reports(run_id)
    assert [r.hallucination_risk for r in report.results] == [0.85, 0.4, None]
    assert [r.arbitration for r in report.results] == [r.arbitration for r in results]
    assert [r.arbitration.rule for r in report.results if r.arbitration] == [
        "fact_high_risk", "error", "coverage_gap"]


def test_claims_recorded_before_version_8_read_back_without_a_decision(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    db = sqlite3.connect(path)
    for version, sql in migrations():
        if version < 8:
            db.executescript(f"{sql}\nPRAGMA user_version = {version};")
    db.execute("INSERT INTO runs (id, kind, status, created_at, medverify_version, config, "
               "models, prompt_versions) VALUES ('r1', 'check', 'done', "
               "'2026-01-01T00:00:00+00:00', '0.1.0', '{}', '{}', '{}')")
    db.execute("INSERT INTO answers (run_id, position, answer_id, answer, status) VALUES "
               "('r1', 0, 'a1', ?, 'done')", (Answer(id="a1", text="t").model_dump_json(),))
    verdict = _verdict(Category.FACT, claim_id="c1")
    db.execute("INSERT INTO claims VALUES ('r1', 0, 'c1', ?, '[]', ?, NULL)",
               (Claim(id="c1", text="x").model_dump_json(), verdict.model_dump_json()))
    db.commit()
    db.close()
    with RunStore(path) as store:
        assert store.schema_version >= 8
        [report] = store.reports("r1")
    [result] = report.results
    assert result.category is Category.FACT
    assert result.arbitration is None and result.hallucination_risk is None
    assert report.metrics.decisions == {}


# ---- display -------------------------------------------------------------------------


def _decided_report() -> object:
    report = example_report()
    results = arbitrate_all(report.results, POLICY)
    return report.model_copy(update={"results": results, "metrics": compute_metrics(results)})


def test_terminal_shows_each_decision_and_the_counts() -> None:
    console = Console(record=True, width=160, file=io.StringIO())
    print_summary(_decided_report(), console)  # type: ignore[arg-type]
    text = console.export_text()
    assert "decision" in text and "ESCALATE" in text and "judgment_error" in text
    assert f"Decisions: ✓ ACCEPT 4, ⚠ FLAG 2, ⇧ ESCALATE 2 (policy {policy_id(POLICY)})" in text


def test_terminal_without_decisions_has_no_decision_column() -> None:
    console = Console(record=True, width=160, file=io.StringIO())
    print_summary(example_report(), console)
    text = console.export_text()
    assert "decision" not in text and "Decisions:" not in text


def test_html_groups_claims_by_decision_escalated_first() -> None:
    page = render_html(_decided_report())  # type: ignore[arg-type]
    escalate, flag, accept = (page.index(f'id="decision-{name}"')
                              for name in ("escalate", "flag", "accept"))
    assert escalate < flag < accept
    assert "Escalated for clinician review (2)" in page and "Claims by decision" in page
    # the ERROR and JUDGMENT_ERROR cards sit in the escalated group, with their rule
    assert escalate < page.index('id="claim-5"') < flag and escalate < page.index(
        'id="claim-6"') < flag
    assert "rule <code>judgment_error</code>" in page
    plain = render_html(example_report())
    assert 'id="decision-' not in plain and "Claims by decision" not in plain


# ---- eval arbitration ------------------------------------------------------------------


def test_errors_are_the_categories_that_disagree_with_gold() -> None:
    assert is_wrong(Category.FACT, "SUPPORTED") is False
    assert is_wrong(Category.FACT, "CONTRADICTED") is True
    assert is_wrong(Category.COVERAGE_GAP, "NOT_ENOUGH_INFO") is False
    assert is_wrong(Category.HALLUCINATION, "NOT_ENOUGH_INFO") is True
    assert is_wrong(Category.JUDGMENT_ERROR, "CONTRADICTED") is True
    assert is_wrong(Category.HALLUCINATION, "NOT_SUPPORTED") is False
    assert is_wrong(Category.COVERAGE_GAP, "NOT_SUPPORTED") is False
    assert is_wrong(Category.FACT, "NOT_SUPPORTED") is True
    assert is_wrong(Category.ERROR, "SUPPORTED") is None
    with pytest.raises(InputError):
        is_wrong(Category.FACT, "MAYBE")


# A tiny labelled set: (gold, judge category, the judge's probability for it)
TABLE: list[tuple[str, Category, float | None]] = [
    ("SUPPORTED", Category.FACT, 0.95),
    ("SUPPORTED", Category.FACT, 0.9),
    ("SUPPORTED", Category.FACT, 0.8),
    ("CONTRADICTED", Category.FACT, 0.55),  # costly errors: unsure facts
    ("NOT_ENOUGH_INFO", Category.FACT, 0.5),
    ("CONTRADICTED", Category.HALLUCINATION, 0.9),
    ("SUPPORTED", Category.HALLUCINATION, 0.52),  # an unsure wrong hallucination
    ("NOT_ENOUGH_INFO", Category.COVERAGE_GAP, 0.85),
    ("SUPPORTED", Category.COVERAGE_GAP, 0.45),
    ("CONTRADICTED", Category.JUDGMENT_ERROR, None),
    ("SUPPORTED", Category.ERROR, None),
]
KEY = {Category.FACT: "SUPPORTED", Category.HALLUCINATION: "CONTRADICTED",
       Category.COVERAGE_GAP: "NOT_ENOUGH_INFO"}


class TableJudge:
    """A fake judge: each claim's text names its row of TABLE."""

    name = "table"
    prompt_version = None

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        out = []
        for item in items:
            _, category, p = TABLE[int(item.claim.text.split()[-1])]
            probs = {KEY[category]: p} if category in KEY and p is not None else None
            out.append(_verdict(category, probs, item.claim.id))
        return out


def _pairs_file(path: Path, risks: Sequence[float | None] | None = None) -> Path:
    lines = []
    for n, (gold, _, _) in enumerate(TABLE):
        row: dict[str, object] = {"id": f"p{n}", "dataset": "toy", "claim": f"row {n}",
                                  "evidence": "e", "label": gold, "labels": "3-way"}
        if risks is not None:
            row["risk"] = risks[n]
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def _claims(tmp_path: Path, risks: Sequence[float | None] | None = None
            ) -> list[LabelledClaim]:
    source = read_source(_pairs_file(tmp_path / "pairs.jsonl", risks))
    return asyncio.run(judge_sources([source], TableJudge()))  # type: ignore[list-item]


def test_judged_pairs_become_labelled_claims(tmp_path: Path) -> None:
    claims = _claims(tmp_path)
    assert [c.category for c in claims] == [row[1] for row in TABLE]
    assert claims[3].confidence == pytest.approx(0.55) and claims[9].confidence is None
    assert [c.wrong for c in claims] == [False, False, False, True, True, False, True, False,
                                         True, True, None]
    assert claims[-1].error == "unparseable judge output"


def test_the_sweep_measures_every_policy_and_finds_the_front(tmp_path: Path) -> None:
    claims = _claims(tmp_path)
    grid = [0.6, 0.85]
    points = sweep(claims, POLICY, grid)
    assert len(points) == 3 ** 3  # each category: off, 0.6, 0.85
    # the counts of every swept policy are those of the policy applied claim by claim
    for point in points[::5]:
        assert point.model_dump(exclude={"policy_id"}) == evaluate_policy(
            claims, point.policy(POLICY)).model_dump(exclude={"policy_id"})
    none = next(p for p in points if not p.min_confidence)
    # the default escalates the ERROR and the JUDGMENT_ERROR claims only
    assert (none.n, none.n_errors, none.n_escalated, none.n_caught) == (11, 5, 2, 1)
    assert (none.n_escalated_scored, none.precision) == (1, 1.0)
    assert none.n_accepted_errors == 2 and none.accepted_error_rate == pytest.approx(2 / 5)
    front = pareto_front(points)
    assert front[0].min_confidence == {}
    assert all(a.n_escalated < b.n_escalated and a.n_caught < b.n_caught
               for a, b in itertools.pairwise(front))
    assert all(not (q.n_escalated <= p.n_escalated and q.n_caught > p.n_caught)
               for p in front for q in points)
    best = choose(points, 0.4)  # at most 4 of 11 claims: the two unsure facts
    assert best is not None and best.min_confidence == {"FACT": 0.6}
    assert (best.n_escalated, best.n_caught, best.n_accepted_errors) == (4, 3, 0)
    every = choose(points, 0.6)  # at most 6: every error
    assert every is not None and (every.n_escalated, every.n_caught) == (6, 5)
    assert every.min_confidence == {"FACT": 0.6, "HALLUCINATION": 0.6, "COVERAGE_GAP": 0.6}
    assert choose(points, 0.1) is None  # ERROR + JUDGMENT_ERROR alone are 18 %


def test_evaluate_reports_the_policy_as_pastable_toml(tmp_path: Path) -> None:
    result = evaluate(_claims(tmp_path), POLICY, max_escalation=0.4, grid=[0.6, 0.85])
    assert (result.n, result.n_errors, result.n_judge_errors, result.n_judgment_errors) == (
        11, 5, 1, 1)
    assert result.errors_by["FACT"] == {"CONTRADICTED": 1, "NOT_ENOUGH_INFO": 1}
    assert result.high_risk_grid == [] and result.n_with_risk == 0
    assert result.chosen is not None and result.chosen_toml is not None
    assert result.chosen.policy_id == policy_id(result.chosen.policy(POLICY))
    pasted = ArbitrationPolicy.model_validate(tomllib.loads(result.chosen_toml)["arbitration"])
    assert policy_id(pasted) == result.chosen.policy_id
    assert result.base.min_confidence == {} and result.base.n_escalated == 2
    assert policy_toml(POLICY).startswith("[arbitration]\nversion = \"v3\"")
    ET.fromstring(curve_svg(result))  # well-formed
    assert "chosen" in curve_svg(result) and "configured" in curve_svg(result)


def test_the_default_grid_follows_the_judges_confidences(tmp_path: Path) -> None:
    claims = _claims(tmp_path)
    grid = auto_grid(claims)
    assert grid["FACT"] == [0.5, 0.55, 0.8, 0.9, 0.95]
    assert grid["HALLUCINATION"] == [0.52, 0.9] and grid["COVERAGE_GAP"] == [0.45, 0.85]
    assert evaluate(claims, POLICY).grid == grid


def test_risks_in_the_input_sweep_the_risk_thresholds(tmp_path: Path) -> None:
    risks = [0.1, 0.2, 0.1, 0.9, 0.8, 0.9, 0.2, 0.1, 0.9, None, None]
    claims = _claims(tmp_path, risks)
    assert [c.risk for c in claims] == risks
    result = evaluate(claims, POLICY, max_escalation=0.6, grid=[0.6],
                      high_risk=[0.7, 0.95], low_risk=[0.3])
    assert result.n_with_risk == 9 and result.high_risk_grid == [0.7, 0.95]
    assert result.n_policies == 2 ** 3 * 2
    # high risk 0.7 escalates both wrong facts (0.9, 0.8), the wrong hallucination (0.2 low)
    # and the wrong coverage gap (0.9): every error caught without a confidence floor, six
    # claims escalated with the JUDGMENT_ERROR and the ERROR
    assert result.chosen is not None and result.chosen.caught == 1.0
    assert result.chosen.n_escalated == 6
    assert result.chosen.high_risk == 0.7 and result.chosen.min_confidence == {}
    assert "high_risk = 0.7" in (result.chosen_toml or "")


def test_an_earlier_json_output_is_swept_again_and_eval_pairs_json_is_refused(
        tmp_path: Path) -> None:
    result = evaluate(_claims(tmp_path), POLICY, grid=[0.6])
    saved = tmp_path / "arb.json"
    saved.write_text(result.model_dump_json(), "utf-8")
    source = read_source(saved)
    assert source.pairs == [] and source.judged == result.claims
    again = asyncio.run(judge_sources([source], None))
    assert evaluate(again, POLICY, grid=[0.6]).front == result.front
    pairs_json = tmp_path / "pairs.json"
    pairs_json.write_text(json.dumps({"judge": "x", "files": []}), "utf-8")
    with pytest.raises(InputError, match="per-pair verdicts"):
        read_source(pairs_json)
    with pytest.raises(InputError, match="no judge"):
        asyncio.run(judge_sources([read_source(_pairs_file(tmp_path / "p.jsonl"))], None))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**Pair(id="x", claim="c", evidence="e", label="SUPPORTED")
                               .model_dump(), "risk": 3}) + "\n", "utf-8")
    with pytest.raises(InputError, match="not a probability"):
        read_source(bad)


@pytest.fixture
def fake_verifier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builtin, "load_verifier", lambda path=None: LexicalVerifier())


@pytest.mark.usefixtures("fake_verifier")
def test_cli_sweeps_writes_json_and_svg_and_resweeps_the_json(tmp_path: Path) -> None:
    rows = [("The starting dose of metformin is 500 mg.", "SUPPORTED"),
            ("The starting dose of metformin is 5000 mg.", "CONTRADICTED"),
            ("Gout attacks happen at night.", "NOT_ENOUGH_INFO"),
            ("Metformin starting dose with meals.", "NOT_ENOUGH_INFO"),
            ("Metformin is taken with meals.", "SUPPORTED")]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({
        "id": f"p{n}", "claim": claim, "label": label, "labels": "3-way",
        "evidence": "The usual starting dose of metformin is 500 mg daily with meals."}) + "\n"
        for n, (claim, label) in enumerate(rows)), "utf-8")
    out, svg = tmp_path / "arb.json", tmp_path / "arb.svg"
    runner = CliRunner(env={"COLUMNS": "200"})
    result = runner.invoke(main, ["eval", "arbitration", str(pairs), "--max-escalation", "1",
                                  "--json", str(out), "--svg", str(svg)])
    assert result.exit_code == 0, result.output
    assert "[arbitration]" in result.output and "min_confidence" in result.output
    assert "configured" in result.output
    data = json.loads(out.read_text("utf-8"))
    assert data["judge"] == "builtin:lexical-fake" and len(data["claims"]) == 5
    ET.fromstring(svg.read_text("utf-8"))
    again = runner.invoke(main, ["eval", "arbitration", str(out), "--grid", "0.5,0.9"])
    assert again.exit_code == 0, again.output
    assert json.loads(out.read_text("utf-8"))["front"]  # the first run's file is untouched
    bad = runner.invoke(main, ["eval", "arbitration", str(pairs), "--grid", "x"])
    assert bad.exit_code != 0 and "--grid" in bad.output
