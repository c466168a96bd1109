"""Exact checks (issue 27, part 3): cheap text comparisons of a claim with a passage said to
support it (:func:`medverify.judge.checks.find_conflicts`)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medverify.judge.checks import MAX_PASSAGE_CHARS, conflicts, find_conflicts
from medverify.judge.checks.quantities import quantities
from medverify.judge.checks.text import parse, stem
from medverify.judge.checks.words import WORDNET_DIR, wordnet_antonyms
from medverify.records import CheckFinding, CheckKind

NUMBER, NEGATION, DIRECTION = CheckKind.NUMBER, CheckKind.NEGATION, CheckKind.DIRECTION
POPULATION, DRUG = CheckKind.POPULATION, CheckKind.DRUG


def vetoes(claim: str, passage: str) -> list[CheckFinding]:
    return [f for f in conflicts(claim, passage, "kb:1#0") if f.veto]


def kinds(findings: list[CheckFinding]) -> set[CheckKind]:
    return {f.kind for f in findings}


# --------------------------------------------------------------------------- positives

POSITIVES = [
    # (claim, passage, kind, veto)
    ("Adults should be screened every 2 years.",
     "Adults should be screened every 10 years.", NUMBER, True),
    ("Start metformin with 5000 mg daily.", "Start metformin with 500 mg daily.", NUMBER, True),
    ("Take metformin twice daily with meals.", "Take metformin once daily with meals.", NUMBER,
     True),
    ("Adults aged 50 to 75 should be screened for colorectal cancer.",
     "Adults aged 45 to 75 should be screened for colorectal cancer.", NUMBER, True),
    ("Patients with type 2 diabetes should have an eye exam every 2 years.",
     "Patients with type 2 diabetes should have an eye exam every 3 years.", NUMBER, True),
    ("Statins reduce LDL cholesterol by 50%.", "Statins reduce LDL cholesterol by 30%.", NUMBER,
     True),
    ("One in two surgical trials are discontinued early.",
     "One in five surgical trials are discontinued early.", NUMBER, True),
    ("The target LDL cholesterol is 100 mg/dL in high-risk patients.",
     "The target LDL cholesterol is 70 mg/dL in high-risk patients.", NUMBER, True),
    ("Metformin can be used in severe kidney disease.",
     "Metformin should not be used in severe kidney disease.", NEGATION, True),
    ("Vaccines cause autism.", "Vaccines do not cause autism.", NEGATION, True),
    ("Vaccines cause autism.", "There is no evidence that vaccines cause autism.", NEGATION,
     True),
    ("Vitamin D supplementation reduces the risk of fractures.",
     "Vitamin D supplementation did not reduce the risk of fractures.", NEGATION, True),
    ("Hydroxychloroquine improves survival in COVID-19.",
     "Hydroxychloroquine failed to improve survival in COVID-19.", NEGATION, True),
    ("Antibiotics should be used for viral colds.",
     "Antibiotics should never be used for viral colds.", NEGATION, True),
    ("Masks do not reduce transmission of influenza.",
     "Masks reduce transmission of influenza in households.", NEGATION, True),
    ("Statins lower LDL cholesterol.", "Statins raise LDL cholesterol.", DIRECTION, True),
    ("Exercise slows cognitive decline in older adults.",
     "Exercise accelerates cognitive decline in older adults.", DIRECTION, True),
    ("Smoking increases the risk of lung cancer.", "Smoking reduces the risk of lung cancer.",
     DIRECTION, True),
    ("Early mobilisation improves functional outcomes after surgery.",
     "Early mobilisation worsens functional outcomes after surgery.", DIRECTION, True),
    ("LDL cholesterol was reduced by atorvastatin.",
     "LDL cholesterol was increased by atorvastatin.", DIRECTION, True),
    ("Birth weight is positively associated with breast cancer.",
     "Birth weight is negatively associated with breast cancer.", DIRECTION, True),
    ("Lisinopril lowers blood pressure in children.",
     "Lisinopril lowers blood pressure in adults.", POPULATION, False),
    ("Montelukast is approved for children with asthma.",
     "Montelukast is approved only for adults with asthma.", POPULATION, True),
    ("Metformin is first-line treatment for type 1 diabetes.",
     "Metformin is first-line treatment for type 2 diabetes.", POPULATION, True),
    ("Aspirin reduces heart attacks in women.", "Aspirin reduces heart attacks in men.",
     POPULATION, False),
    ("Iron supplements improve anaemia in pregnant women.",
     "Iron supplements improve anaemia in non-pregnant women.", POPULATION, True),
    ("Atorvastatin lowers LDL cholesterol in adults.",
     "Rosuvastatin lowers LDL cholesterol in adults.", DRUG, False),
    ("Vitamin D shortens the duration of colds.", "Vitamin C shortens the duration of colds.",
     DRUG, False),
    ("Aspirin reduces mortality after stroke.", "Aspirin may not reduce mortality after stroke.",
     NEGATION, False),
]


@pytest.mark.parametrize(("claim", "passage", "kind", "veto"), POSITIVES)
def test_each_check_finds_its_difference(claim: str, passage: str, kind: CheckKind,
                                         veto: bool) -> None:
    findings = [f for f in conflicts(claim, passage, "kb:1#0") if f.kind == kind]
    assert findings, conflicts(claim, passage)
    assert findings[0].veto is veto
    assert findings[0].passage_id == "kb:1#0"
    assert findings[0].reason.startswith("the claim says ")
    assert "; the passage says " in findings[0].reason


REASONS = [
    ("Adults should be screened every 2 years.", "Adults should be screened every 10 years.",
     "the claim says every 2 years; the passage says every 10 years"),
    ("Start metformin with 5000 mg daily.", "Start metformin with 500 mg daily.",
     "the claim says 5000 mg; the passage says 500 mg"),
    ("Take metformin twice daily with meals.", "Take metformin once daily with meals.",
     "the claim says twice daily; the passage says once daily"),
    ("Adults aged 50 to 75 should be screened.", "Adults aged 45 to 75 should be screened.",
     "the claim says aged 50 to 75; the passage says aged 45 to 75"),
    ("Vaccines cause autism.", "Vaccines do not cause autism.",
     "the claim says cause autism; the passage says do not cause autism"),
    ("Statins lower LDL cholesterol.", "Statins raise LDL cholesterol.",
     "the claim says lower LDL cholesterol; the passage says raise LDL cholesterol"),
    ("Lisinopril lowers blood pressure in children.",
     "Lisinopril lowers blood pressure in adults.",
     "the claim says in children; the passage says in adults"),
    ("Atorvastatin lowers LDL cholesterol in adults.",
     "Rosuvastatin lowers LDL cholesterol in adults.",
     "the claim says atorvastatin; the passage says rosuvastatin"),
]


@pytest.mark.parametrize(("claim", "passage", "reason"), REASONS)
def test_reasons_say_what_each_side_says(claim: str, passage: str, reason: str) -> None:
    assert [f.reason for f in conflicts(claim, passage)][:1] == [reason]


def test_a_finding_names_the_words_on_each_side() -> None:
    (finding,) = conflicts("Adults should be screened every 2 years.",
                           "Adults should be screened every 10 years.", "kb:7#2")
    assert finding == CheckFinding(
        kind=NUMBER, veto=True, passage_id="kb:7#2", claim_says="every 2 years",
        passage_says="every 10 years",
        reason="the claim says every 2 years; the passage says every 10 years")


# --------------------------------------------------------------------------- false-positive guards

GUARDS = [
    # paraphrase with the same numbers, in words or other units
    ("Adults should be screened every 2 years.",
     "Screening every 2 years is recommended for adults."),
    ("Patients with type 2 diabetes should be screened for retinopathy every two years.",
     "Patients with type 2 diabetes should be screened for retinopathy every 2 years."),
    ("Take amoxicillin twice daily.", "Amoxicillin is taken two times a day."),
    ("Take amoxicillin twice daily.", "Amoxicillin 500 mg BID is usually taken."),
    ("Start with 1 g of metformin daily.", "Start with 1000 mg of metformin daily."),
    ("A 0.5 mg dose of the drug was given.", "A 500 mcg dose of the drug was given."),
    ("Adults should be screened every 24 months.", "Adults should be screened every 2 years."),
    ("The dose was 2.5 mg.", "The dose was 2.50 mg."),
    # the claim's value elsewhere in the passage, or in a list or range of the sentence
    ("Start metformin with 500 mg daily.",
     "The maximum dose of metformin is 2550 mg daily. Start metformin at 500 mg daily."),
    ("A dose of 500 mg of paracetamol was used.",
     "Doses of 250, 500 or 1000 mg of paracetamol were used."),
    ("Adults aged 60 should be screened.", "Adults aged 50 to 75 should be screened."),
    # approximations, comparators, rounding, derived percentages
    ("About 30% of adults have hypertension.", "In 2019, 29.7% of adults had hypertension."),
    ("More than 20% of patients relapsed.", "In total, 25% of patients relapsed."),
    ("The drug reduced events by 50%.", "Events fell from 10% to 5% with the drug."),
    # other kinds of quantity: percent vs mg, citations, years, names with digits
    ("A 20 mg dose of atorvastatin lowers LDL cholesterol.",
     "Atorvastatin lowers LDL cholesterol by 40%."),
    ("Statins reduce LDL cholesterol by 30%.",
     "Statins reduce LDL cholesterol by 30% [12] (2019)."),
    ("Patients with COVID-19 should isolate for 5 days.",
     "Patients with COVID-19 should isolate for 5 days after a positive SARS-CoV-2 test."),
    ("Isolation for 5 days is advised for COVID-19.",
     "Isolation for 5 days is advised for COVID-19 [19]."),
    ("HbA1c fell by 1% with metformin.", "HbA1c fell by 1% with metformin in 2 trials."),
    # negation about something else, double negation, "not only"
    ("X lowers LDL.", "X lowers LDL; it does not affect HDL."),
    ("Exercise lowers blood pressure.",
     "Exercise not only lowers blood pressure but also improves mood."),
    ("Nausea is common with metformin.", "Nausea with metformin is not uncommon."),
    ("Patients who received the vaccine had lower mortality.",
     "Patients who did not receive the vaccine had higher mortality."),
    ("Metformin lowers glucose without causing hypoglycaemia.",
     "Metformin lowers glucose without causing hypoglycaemia."),
    # direction: synonyms, both directions for different things, comparisons
    ("Statins reduce LDL cholesterol.", "Statins lower LDL cholesterol."),
    ("Warfarin reduces the risk of stroke.",
     "Warfarin reduces the risk of stroke but increases the risk of bleeding."),
    ("Mortality was higher in smokers than in non-smokers.",
     "Mortality was lower in non-smokers than in smokers."),
    # populations and drugs the passage covers
    ("Lisinopril lowers blood pressure in adults.",
     "Lisinopril lowers blood pressure in adults and children."),
    ("Statins lower LDL cholesterol in older adults.", "Statins lower LDL cholesterol in adults."),
    ("Atorvastatin lowers LDL cholesterol.",
     "Atorvastatin and rosuvastatin lower LDL cholesterol."),
    # a passage about something else
    ("Adults should be screened every 2 years.", "Influenza vaccines are given every 1 year."),
]


@pytest.mark.parametrize(("claim", "passage"), GUARDS)
def test_no_veto_when_the_passage_does_not_say_otherwise(claim: str, passage: str) -> None:
    assert vetoes(claim, passage) == []


def test_guards_that_must_stay_silent_altogether() -> None:
    for claim, passage in GUARDS[:19]:
        assert not kinds(conflicts(claim, passage)) & {NUMBER}, (claim, passage)


def test_a_number_in_a_name_does_not_count_as_the_claims_value() -> None:
    """"type 2" must not satisfy "every 2 years"."""
    findings = vetoes("Screen patients every 2 years.",
                      "Screen patients with type 2 diabetes every 3 years.")
    assert [f.kind for f in findings] == [NUMBER]


def test_a_negation_with_no_or_without_marks_without_veto() -> None:
    findings = conflicts("The drug lowers risk in patients with a history of stroke.",
                         "The drug lowers risk in patients with no history of stroke.")
    assert findings and not any(f.veto for f in findings)


def test_no_findings_for_empty_unrelated_or_oversized_inputs() -> None:
    assert find_conflicts("", "Metformin lowers glucose.") == []
    assert find_conflicts("Metformin lowers glucose.", "") == []
    assert find_conflicts("Metformin", "Metformin is not used.") == []  # too little content
    assert find_conflicts("Metformin lowers glucose.", "x" * (MAX_PASSAGE_CHARS + 1)) == []
    assert find_conflicts(None, "text") == []  # type: ignore[arg-type]
    assert find_conflicts("claim here", 5) == []  # type: ignore[arg-type]


def test_the_guard_turns_an_internal_error_into_no_findings() -> None:
    # a passage id that is not a string fails the record's validation inside the checks
    assert find_conflicts("Vaccines cause autism.", "Vaccines do not cause autism.",
                          7) == []  # type: ignore[arg-type]


# --------------------------------------------------------------------------- quantities


@pytest.mark.parametrize(("text", "expected"), [
    ("COVID-19 and SARS-CoV-2 in type 2 diabetes, HbA1c, IL-6 and CD4 [12] (2019)", []),
    ("every 2 years", [(2.0, "interval")]),
    ("aged 50 to 75", [(50.0, "age"), (75.0, "age")]),
    ("250, 500 or 1000 mg", [(250.0, "mass"), (500.0, "mass"), (1000.0, "mass")]),
    ("twice daily", [(2.0, "freq/day")]),
    ("1·3 million deaths", [(1.3, "count:death")]),
    ("50 000 people", [(50000.0, "count:peopl")]),
    ("p < 0.05 and 95% CI", [(0.05, "stat"), (95.0, "stat")]),
    ("the 2003 coronavirus, reported on July 21 for 2019-nCoV", []),
    ("$5 billion within 6 feet", [(5.0, "money:$"), (6.0, "length")]),
    ("one in five trials", [(0.2, "ratio"), (5.0, "count:trial")]),
])
def test_quantities_read_units_roles_and_skip_names(text: str,
                                                    expected: list[tuple[float, str]]) -> None:
    assert [(q.written, q.dim) for q in quantities(parse(text))] == expected


def test_units_convert_to_one_base_unit() -> None:
    (grams,) = quantities(parse("1 g"))
    (milligrams,) = quantities(parse("1000 mg"))
    assert grams.value == milligrams.value == 1000.0


# --------------------------------------------------------------------------- properties

_PIECES = [
    "Metformin", "does not", "lower", "raise", "LDL", "every 2 years", "5000 mg", "twice daily",
    "in children", "in adults", "type 2 diabetes", "COVID-19", "[12]", "(2019)", "no evidence",
    "that", "only", "not only", "but also", "50%", "1·3 million", "∼", ".", ";", ",", "\n",
    "vitamin D", "aged 50 to 75", "more than", "than", "who", "without", "n't", "é", "’",
    "1.1.529", "9" * 40, "(", ")", "[", "]", "—", "µg", "/", "-",
]
_texts = st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=6)), max_size=40).map(
    " ".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(claim=st.one_of(_texts, st.text()), passage=st.one_of(_texts, st.text()))
def test_checks_never_raise_and_return_findings(claim: str, passage: str) -> None:
    findings = conflicts(claim, passage, "p")  # unguarded: an error would fail the test
    assert isinstance(findings, list)
    assert all(isinstance(f, CheckFinding) and f.reason for f in findings)
    assert find_conflicts(claim, passage, "p") == findings


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_texts)
def test_a_passage_never_vetoes_its_own_words(text: str) -> None:
    assert not [f for f in conflicts(text, text) if f.veto]
    assert not [f for f in conflicts(text, f"Unrelated words here. {text}") if f.veto]


def test_hostile_inputs_finish_quickly() -> None:
    start = time.perf_counter()
    for passage in ("[" * 50_000, "1 " * 50_000, "not " * 40_000, "é" * 100_000,
                    "mg " * 30_000, ("Metformin lowers LDL. " * 5_000)):
        find_conflicts("Metformin does not lower LDL by 5 mg.", passage)
    assert time.perf_counter() - start < 20


def test_a_thousand_character_passage_takes_well_under_a_millisecond() -> None:
    passage = (
        "Metformin is the first-line medicine for type 2 diabetes in adults. The usual "
        "starting dose is 500 mg once or twice daily with meals, increased gradually to a "
        "maximum of 2000 mg daily. It lowers HbA1c by about 1% and does not cause weight gain. "
        "Metformin should not be used in severe kidney disease (eGFR below 30). Lactic "
        "acidosis is rare. Gastrointestinal side effects such as nausea and diarrhoea are "
        "common, especially at the start of treatment, and often improve with time. "
        "Extended-release tablets may be better tolerated. Vitamin B12 levels should be "
        "checked every 2 to 3 years in long-term users [12]. In older adults, kidney "
        "function should be checked at least once a year. Metformin can be combined with "
        "other glucose-lowering drugs such as sulfonylureas, DPP-4 inhibitors or insulin. "
        "It is not recommended during acute illness with dehydration (2019)."
    )
    claim = "Metformin should be started at 5000 mg twice daily in children."
    find_conflicts(claim, passage)
    times = []
    for _ in range(200):
        start = time.perf_counter()
        find_conflicts(claim, passage)
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    print(f"find_conflicts: {median * 1e6:.0f} µs median for {len(passage)} chars")
    assert median < 2e-3  # about 0.3 ms on an idle core; loose for a shared machine


# --------------------------------------------------------------------------- WordNet


def _fake_wordnet(root: Path) -> Path:
    adj = (
        "  1 This software and database is being provided to you, the LICENSEE\n"
        "00001740 00 a 01 stable 0 001 ! 00002098 a 0101 | firm\n"
        "00002098 00 a 01 unstable(a) 0 001 ! 00001740 a 0101 | not firm\n"
        "00002312 00 a 01 broken 0 000 | a line with no pointers\n"
        "garbage line\n"
    )
    (root / "data.adj").write_text(adj, "utf-8")
    return root


def test_wordnet_antonyms_are_read_from_the_data_files(tmp_path: Path) -> None:
    antonyms = wordnet_antonyms(_fake_wordnet(tmp_path))
    assert antonyms[stem("stable")] == frozenset({stem("unstable")})
    assert antonyms[stem("unstable")] == frozenset({stem("stable")})
    assert wordnet_antonyms(tmp_path / "absent") == {}


@pytest.mark.skipif(not (WORDNET_DIR / "data.adj").is_file(),
                    reason="WordNet is not installed (Debian package wordnet-base puts it in "
                           "/usr/share/wordnet); the curated direction list still works")
def test_installed_wordnet_extends_direction_without_veto() -> None:
    assert stem("unstable") in wordnet_antonyms()[stem("stable")]
    findings = conflicts("The fracture remained stable after surgery in most patients.",
                         "The fracture remained unstable after surgery in most patients.")
    assert [(f.kind, f.veto) for f in findings] == [(DIRECTION, False)]


def test_a_labelled_count_is_a_count_not_a_statistic() -> None:
    # "Enrollment: 97 participants" (a registry summary's label form) used to be read as a
    # statistic ("OR: 1.5") and never checked
    [finding] = conflicts("Enrollment: 97 participants.", "Enrollment: 31 participants (actual).")
    assert finding.veto and finding.reason == ("the claim says 97 participants; the passage "
                                               "says 31 participants")
    assert conflicts("Enrollment: 31 participants.", "Enrollment: 31 participants (actual).") == []
    # a statistic after its label's colon still never vetoes
    assert not any(f.veto for f in conflicts("The odds ratio was OR: 1.5 in adults.",
                                             "In adults the odds ratio was OR: 2.5."))


def test_an_interval_against_the_same_schedule_told_as_a_time() -> None:
    claim = ("People who keep living in yellow fever areas need a booster dose of the vaccine "
             "every 2 years.")
    passage = ("If you continue to live or travel in yellow fever-endemic areas, you should "
               "receive a booster dose of yellow fever vaccine after 10 years.")
    [finding] = conflicts(claim, passage)
    assert finding.veto and finding.reason == ("the claim says every 2 years; the passage "
                                               "says 10 years")
    assert conflicts(claim.replace("every 2 years", "every 10 years"), passage) == []
    # an interval against an unrelated duration: a finding, never a veto
    assert not any(f.veto for f in conflicts("Take the tablet every 8 hours.",
                                             "The tablet works for 12 hours after a dose."))
