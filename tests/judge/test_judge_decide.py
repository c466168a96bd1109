"""The claim-level rule over several passages (medverify.judge.decide) and its confidence."""

from __future__ import annotations

import numpy as np

from medverify.judge.calibration import (
    Family,
    confident_threshold,
    family_for,
    load_calibration,
    pair_features,
    robust_threshold,
)
from medverify.judge.decide import (
    CONTRADICT,
    SUPPORT,
    PassageScore,
    assess,
    outcome_from_passages,
    states_claim,
    uncovered,
)
from medverify.records import CheckFinding, CheckKind, Passage
from medverify.terms import key_terms, relevance

CLAIM = "Statins lower LDL cholesterol in adults."


def row(pid: str, text: str, raw: tuple[float, float, float], label: int | None, *,
        source: str | None = None, findings: list[CheckFinding] | None = None,
        calibrated: tuple[float, float, float] | None = None) -> PassageScore:
    return PassageScore(
        passage=Passage(id=pid, doc_id=pid, text=text, source=source), raw=list(raw),
        calibrated=list(calibrated) if calibrated else None, label=label,
        relevance=relevance(key_terms(CLAIM), text),
        states_claim=states_claim(CLAIM, text, verbatim=False), findings=findings or [])


def family(thresholds: dict[str, float | None]) -> Family:
    n = 10
    return Family(name="test", trained_on=[], rows=0, mean=[0.0] * n, scale=[1.0] * n,
                  coef=[[0.0] * n] * 3, intercept=[0.0] * 3, thresholds=thresholds)


def test_an_unrelated_passage_cannot_contradict() -> None:
    support = row("s", "Statins lower LDL cholesterol levels in adults with high risk.",
                  (0.9, 0.05, 0.05), SUPPORT)
    fibre = row("f", "Dietary fibre may help with constipation.", (0.2, 0.48, 0.32), CONTRADICT)
    assert fibre.relevance < 0.25
    outcome = outcome_from_passages([support, fibre])
    assert outcome.support is support and outcome.contradict is None and not outcome.doubts


def test_judgment_error_only_when_both_sides_are_strong_and_relevant() -> None:
    strong_s = row("s", "In adults, statins lowered LDL cholesterol considerably.",
                   (0.9, 0.05, 0.05), SUPPORT)
    assert not strong_s.states_claim
    weak_c = row("c", "In adults statins did not change LDL cholesterol much.",
                 (0.1, 0.4, 0.5), CONTRADICT)
    outcome = outcome_from_passages([strong_s, weak_c])
    assert outcome.support is strong_s and outcome.contradict is None
    assert outcome.outweighed is weak_c and outcome.doubts  # not sure: shown why
    strong_c = row("c2", "Statins do not lower LDL cholesterol in adults.",
                   (0.05, 0.9, 0.05), CONTRADICT)
    both = outcome_from_passages([strong_s, strong_c])
    assert both.support is strong_s and both.contradict is strong_c


def test_a_passage_that_states_the_claim_settles_support() -> None:
    stated = row("v", "Statins lower LDL cholesterol in adults.", (0.2, 0.3, 0.5), None)
    assert stated.states_claim
    other = row("o", "Statins raise LDL cholesterol in adults, one small study found.",
                (0.1, 0.45, 0.45), CONTRADICT)
    outcome = outcome_from_passages([stated, other])
    assert outcome.support is stated and outcome.contradict is None and not outcome.doubts
    strong_other = row("o2", "Statins do not lower LDL cholesterol in adults.",
                       (0.05, 0.9, 0.05), CONTRADICT)
    outcome = outcome_from_passages([stated, strong_other])  # settled, but shown as not sure
    assert outcome.support is stated and outcome.contradict is None and outcome.doubts


def test_near_verbatim_needs_the_same_numbers_and_negation() -> None:
    claim = "Adults aged 50 to 75 should be screened every 2 years."
    assert states_claim(claim, "Adults aged 50 to 75 should be screened every 2 years!",
                        verbatim=False)
    assert not states_claim(claim, "Adults aged 50 to 75 should be screened every 10 years.",
                            verbatim=False)
    assert not states_claim(claim, "Adults aged 50 to 75 should not be screened every 2 years.",
                            verbatim=False)


def test_reviewed_passages_outrank_unreviewed_ones_only_on_the_claim_they_state() -> None:
    contra = row("c", "Statins do not lower LDL cholesterol in adults.", (0.05, 0.9, 0.05),
                 CONTRADICT)
    stated = row("r", "Statins lower LDL cholesterol in adults.", (0.6, 0.1, 0.3), SUPPORT,
                 source="clinician-review")
    outcome = outcome_from_passages([stated, contra])
    assert outcome.support is stated and outcome.contradict is None
    # taught for a narrower claim ("in adults" missing): ordinary evidence, no outranking
    other = row("r2", "Statins lower LDL cholesterol.", (0.6, 0.1, 0.3), SUPPORT,
                source="clinician-review")
    assert other.taught and not other.reviewed(SUPPORT)
    outcome = outcome_from_passages([other, contra])
    assert outcome.contradict is contra  # strong evidence both ways: JUDGMENT_ERROR
    assert outcome.support is other


def test_a_veto_removes_support_and_explains_it() -> None:
    finding = CheckFinding(kind=CheckKind.NUMBER, veto=True, passage_id="n",
                           claim_says="every 2 years", passage_says="every 10 years",
                           reason="the claim says every 2 years; the passage says every 10 years")
    vetoed = row("n", "Statins lower LDL cholesterol in adults every 10 years.",
                 (0.9, 0.05, 0.05), SUPPORT, findings=[finding])
    outcome = outcome_from_passages([vetoed])
    assert outcome.support is None and outcome.vetoed is vetoed
    _, doubts = assess("COVERAGE_GAP", outcome, [vetoed], family({"COVERAGE_GAP": 0.1}))
    assert any("every 10 years" in d for d in doubts)


def test_confidence_needs_the_family_threshold() -> None:
    good = row("s", "Statins lower LDL cholesterol in adults with diabetes.", (0.9, 0.05, 0.05),
               SUPPORT, calibrated=(0.8, 0.1, 0.1))
    outcome = outcome_from_passages([good])
    conf, doubts = assess("FACT", outcome, [good], family({"FACT": 0.75}))
    assert conf == 0.8 and doubts == []
    conf, doubts = assess("FACT", outcome, [good], family({"FACT": 0.85}))
    assert doubts and "below the 0.85" in doubts[0]
    _, doubts = assess("FACT", outcome, [good], family({"FACT": None}))
    assert doubts and "does not reach 70% precision" in doubts[0]


def test_a_finding_without_veto_makes_fact_not_sure() -> None:
    finding = CheckFinding(kind=CheckKind.POPULATION, veto=False, claim_says="adults",
                           passage_says="children", reason="the claim says adults; the passage "
                           "says children")
    r = row("s", "Statins lower LDL cholesterol in adults.", (0.9, 0.05, 0.05), SUPPORT,
            findings=[finding], calibrated=(0.9, 0.05, 0.05))
    _, doubts = assess("FACT", outcome_from_passages([r]), [r], family({"FACT": 0.5}))
    assert doubts == [finding.reason]


def test_confident_threshold_holds_at_every_higher_cut() -> None:
    p = np.array([0.99, 0.98, 0.97, 0.5, 0.4, 0.3, 0.2])
    correct = np.array([1, 1, 0, 1, 0, 0, 0], dtype=bool)
    assert confident_threshold(p, correct, 0.6, min_rows=2, z=0) == 0.4  # 3 of 5
    assert confident_threshold(p, correct, 0.65, min_rows=2, z=0) == 0.5  # 3 of 4
    assert confident_threshold(p, correct, 0.9, min_rows=2, z=0) == 0.98
    assert confident_threshold(p, correct, 0.99, min_rows=3, z=0) is None
    # with the 95 % lower bound, 2 of 2 right is not enough evidence for 0.6
    assert confident_threshold(p, correct, 0.6, min_rows=2) is None
    many = np.linspace(1, 0, 200)
    assert confident_threshold(many, many > 0.3, 0.6) is not None


def test_robust_threshold_must_hold_on_each_stratum() -> None:
    p = np.concatenate([np.linspace(0.9, 0.5, 20), np.linspace(0.9, 0.5, 20)])
    correct = np.array([True] * 20 + [False] * 19 + [True])
    strata = np.array(["a"] * 20 + ["b"] * 20)
    everywhere = np.ones(40, dtype=bool)
    assert robust_threshold(p, correct, everywhere, strata, 0.5) is None  # b never reaches it
    assert robust_threshold(p[:20], correct[:20], everywhere[:20], strata[:20], 0.5) == 0.5


def test_the_shipped_calibration_loads_and_maps_data_sets_to_families() -> None:
    calibration = load_calibration()
    assert {"general", "checkcovid", "citint", "scifact"} <= set(calibration.families)
    assert family_for("checkcovid_dev", calibration) == "checkcovid"
    assert family_for("healthver", calibration) == "general"
    probs = calibration.family("general").probabilities(
        np.asarray([pair_features(CLAIM, "Statins lower LDL.", [0.8, 0.1, 0.1],
                                  verbatim=False)]))
    assert probs.shape == (1, 3) and abs(float(probs.sum()) - 1.0) < 1e-9


def test_a_judges_verdict_passes_the_exact_checks() -> None:
    from medverify.judge.decide import check_verdict
    from medverify.records import Analysis, Category, Verdict

    claim = "Adults need a yellow fever booster dose every 2 years."
    passage = Passage(id="p1", doc_id="yf", text="A booster dose of yellow fever vaccine is "
                      "recommended every 10 years for adults at continued risk.")
    verdict = Verdict(claim_id="c", passage_ids=["p1"],
                      factual=Analysis(holds=True, passage_id="p1", verified=True,
                                       quote="A booster dose of yellow fever vaccine"),
                      counterfactual=Analysis(holds=False), judge="llm:fake")
    assert verdict.category is Category.FACT
    checked = check_verdict(verdict, claim, [passage])
    assert checked.category is not Category.FACT
    assert checked.confident is False and "every 10 years" in (checked.not_sure or "")
    assert checked.findings and checked.findings[0].veto
    clean = Verdict(claim_id="c", passage_ids=["p1"], judge="llm:fake",
                    factual=Analysis(holds=True, passage_id="p1", verified=True, quote="x y z"),
                    counterfactual=Analysis(holds=False))
    same = check_verdict(clean, "Adults at continued risk need a yellow fever booster dose.",
                         [passage])
    assert same.category is Category.FACT and same.confident is None  # LLM: not calibrated


def test_a_fact_is_sure_only_when_its_passage_covers_the_claim() -> None:
    """The coverage rule: every number, name and content word of the claim (or a listed
    synonym) must be in the deciding passage before a FACT can be confident."""
    claim = "Shingles vaccine protects against chickenpox in adults over 60."
    text = "A vaccine called Zostavax was approved to prevent shingles in adults over 60."
    assert uncovered(claim, text) == ["protect", "against", "chickenpox"]
    assert uncovered(claim, text.replace("prevent shingles", "protect against varicella "
                                         "and shingles")) == []
    assert uncovered("Two doses are recommended.", "A single dose is recommended.") == ["two"]
    assert uncovered("2 doses are recommended.", "A single dose is recommended.") == ["2"]
    taught = PassageScore(passage=Passage(id="t", doc_id="t", text=text,
                                          source="clinician-review"),
                          raw=[0.9, 0.05, 0.05], calibrated=[0.95, 0.02, 0.03], label=SUPPORT,
                          relevance=relevance(key_terms(claim), text),
                          states_claim=states_claim(claim, text, verbatim=False))
    assert taught.taught and not taught.reviewed(SUPPORT)
    conf, doubts = assess("FACT", outcome_from_passages([taught]), [taught], family({"FACT": 0.5}),
                          claim=claim)
    assert conf == 0.95 and any("does not mention" in d and "chickenpox" in d for d in doubts)


def test_a_veto_from_a_passage_that_does_not_support_the_claim_needs_its_subject() -> None:
    """Off-support findings (a passage on the claim's point that the judge did not call
    supporting) veto only where the differing sentence names the claim's subject."""
    from medverify.judge.checks import find_conflicts
    from medverify.judge.decide import off_support_findings

    claim = "Statins lower LDL cholesterol."
    other = "Eating saturated fat can also raise your LDL cholesterol."
    assert find_conflicts(claim, other, "p")  # a direction veto on another subject ...
    assert off_support_findings(claim, other, find_conflicts(claim, other, "p")) == []
    rabies = "Squirrels, hamsters and rabbits are a common cause of rabies."
    kb = "Squirrels, hamsters, guinea pigs and rabbits are almost never infected with rabies."
    found = off_support_findings(rabies, kb, find_conflicts(rabies, kb, "p"))
    assert any(f.veto for f in found), found


def test_a_passage_that_states_the_claim_is_never_vetoed() -> None:
    finding = CheckFinding(kind=CheckKind.NUMBER, veto=True, passage_id="v",
                           claim_says="in adults", passage_says="in 12 adults",
                           reason="another sentence of the passage")
    stated = row("v", "Statins lower LDL cholesterol in adults. 12 adults took part.",
                 (0.2, 0.3, 0.5), None, findings=[finding])
    assert stated.states_claim and stated.vetoed
    outcome = outcome_from_passages([stated])
    assert outcome.support is stated and outcome.vetoed is None
