"""Claims keep their subject: pronouns, imperatives and elliptic predicates take the
previous claim's subject, else the question's topic (medverify.decompose.subjects)."""

from __future__ import annotations

import asyncio
import json

import pytest

from medverify.decompose import LLMDecomposer, RuleDecomposer
from medverify.decompose.subjects import (
    is_dummy_it,
    question_topic,
    resolve_subjects,
    subject_of,
)
from medverify.llm.facade import Model
from medverify.prompts import load_prompt
from medverify.records import Answer, Category, Claim, ClaimResult
from medverify.report.html import render_html
from medverify.testing import ScriptedProvider
from report_fixtures import example_report

README = "Metformin is first-line therapy for type 2 diabetes. Start with 5000 mg daily."


def texts(text: str, question: str | None = None) -> list[str]:
    return [c.text for c in RuleDecomposer().decompose_text(text, question)]


def test_the_readme_example_names_the_drug_beside_its_dose() -> None:
    claims = asyncio.run(RuleDecomposer().decompose(
        Answer(question="How is type 2 diabetes treated?", text=README)))
    assert [c.text for c in claims] == [
        "Metformin is first-line therapy for type 2 diabetes.",
        "Start metformin with 5000 mg daily."]
    assert [c.original for c in claims] == [None, "Start with 5000 mg daily."]
    assert claims[1].span is not None
    assert README[claims[1].span.start:claims[1].span.end] == "Start with 5000 mg daily."


@pytest.mark.parametrize(("text", "expected"), [
    ("Metformin lowers glucose. It is taken with meals.",
     "Metformin is taken with meals."),
    ("Metformin lowers glucose. It's cheap and widely available.",
     "Metformin is cheap and widely available."),
    ("Ivermectin is a prescription drug. Its safety in pregnancy has not been established.",
     "Ivermectin's safety in pregnancy has not been established."),
    ("Statins lower LDL cholesterol. They are usually taken at night.",
     "Statins are usually taken at night."),
    ("Statins lower LDL cholesterol. These drugs can cause muscle pain.",
     "Statins can cause muscle pain."),
    ("Clindamycin is an antibiotic. This drug should only be used in penicillin allergy.",
     "Clindamycin should only be used in penicillin allergy."),
    ("Conjunctivitis is an inflammation of the eye. This condition is usually caused by "
     "viruses.", "Conjunctivitis is usually caused by viruses."),
    ("Shingles is caused by a virus. However, it can also cause long-lasting pain.",
     "However, shingles can also cause long-lasting pain."),
    ("Enlarged prostate is common in older men. In younger men, it is often caused by "
     "prostatitis.", "In younger men, enlarged prostate is often caused by prostatitis."),
])
def test_a_pronoun_takes_the_previous_claims_subject(text: str, expected: str) -> None:
    assert texts(text)[-1] == expected


@pytest.mark.parametrize("sentence", [
    "It is important to keep the skin dry.",
    "It is recommended that adults get vaccinated every year.",
    "It's worth noting that results vary.",
    "It is possible to overdose on antihistamines.",
    "It is generally safe to take most antibiotics with acetaminophen.",
    "It takes 2 to 4 weeks to see the full effect.",
    "It is common for people with diabetes to have dry skin.",
])
def test_a_dummy_it_is_kept(sentence: str) -> None:
    assert is_dummy_it(sentence)
    assert texts(f"Metformin lowers glucose. {sentence}")[-1] == sentence


def test_a_pronoun_after_a_dummy_it_is_resolved() -> None:
    assert texts("Isotretinoin treats severe acne. It is important to note that this "
                 "medication can cause birth defects.")[-1] == (
        "It is important to note that isotretinoin can cause birth defects.")
    assert texts("Clobetasol is a strong steroid cream. It is recommended to use it for "
                 "two weeks at most.")[-1] == (
        "It is recommended to use clobetasol for two weeks at most.")


def test_a_referring_it_is_not_taken_for_a_dummy() -> None:
    assert not is_dummy_it("It is used to treat acne.")
    assert not is_dummy_it("It is safe in pregnancy.")
    assert texts("Isotretinoin is a retinoid. It is used to treat acne.")[-1] == (
        "Isotretinoin is used to treat acne.")


@pytest.mark.parametrize(("text", "expected"), [
    ("Metformin lowers glucose. Take it with food.", "Take metformin with food."),
    ("Metformin lowers glucose. Take 500 mg twice daily.",
     "Take metformin 500 mg twice daily."),
    ("Metformin lowers glucose. Avoid drinking alcohol.",
     "For metformin, avoid drinking alcohol."),
    ("Metformin lowers glucose. Do not crush the extended-release tablets.",
     "For metformin, do not crush the extended-release tablets."),
    ("Metformin lowers glucose. Take metformin with meals.", "Take metformin with meals."),
])
def test_an_imperative_names_its_subject(text: str, expected: str) -> None:
    assert texts(text)[-1] == expected


def test_an_elliptic_predicate_gets_its_subject() -> None:
    assert texts("Isotretinoin is a retinoid. Used to treat severe acne.")[-1] == (
        "Isotretinoin is used to treat severe acne.")
    assert texts("Antacids neutralize stomach acid. Available over the counter.")[-1] == (
        "Antacids are available over the counter.")


def test_the_questions_topic_is_the_fallback() -> None:
    assert texts("It is considered safe in pregnancy.", "Is metformin safe in pregnancy?") == [
        "Metformin is considered safe in pregnancy."]
    assert texts("Start with 500 mg daily.", "How should I take metformin?") == [
        "Start metformin with 500 mg daily."]
    # a subject of the answer that the question names is preferred over the question's words
    topic = question_topic("What happens if I miss a dose of Saxenda?",
                           [subject_of("Liraglutide (Saxenda) is a prescription drug.")])
    assert topic is not None and topic.text == "Liraglutide (Saxenda)"


def test_without_a_confident_subject_the_claim_is_kept() -> None:
    assert texts("It is taken with meals.") == ["It is taken with meals."]
    # number disagrees ("they" after a singular subject, no plural topic)
    assert texts("Buspirone is an anxiolytic. These drugs have few side effects.")[-1] == (
        "These drugs have few side effects.")
    # "this" for an event, not a noun phrase
    assert texts("Muscle strain is common. This can happen during exercise.")[-1] == (
        "This can happen during exercise.")


def test_claims_that_have_a_subject_are_unchanged() -> None:
    text = ("Metformin is first-line therapy. Most patients tolerate metformin well. "
            "Lactic acidosis is rare. There are several other options.")
    claims = RuleDecomposer().decompose_text(text, "How is type 2 diabetes treated?")
    assert [c.text for c in claims] == [
        "Metformin is first-line therapy.", "Most patients tolerate metformin well.",
        "Lactic acidosis is rare.", "There are several other options."]
    assert all(c.original is None for c in claims)


def test_resolution_can_be_turned_off() -> None:
    claims = RuleDecomposer(name_subjects=False).decompose_text(README)
    assert [c.text for c in claims][-1] == "Start with 5000 mg daily."
    assert claims[-1].original is None


def test_a_subject_keeps_its_capitals_only_where_the_answer_has_them() -> None:
    assert texts("Lexapro is an SSRI. Take it with food.", "Is Lexapro safe?")[-1] == (
        "Take Lexapro with food.")
    assert texts("Metformin is cheap. Take it with food.")[-1] == "Take metformin with food."
    # a person is not what an instruction is about
    assert texts("Doctors prescribe metformin first. Avoid drinking alcohol.")[-1] == (
        "Avoid drinking alcohol.")
    assert resolve_subjects(["The shingles vaccine is given to adults.",
                             "Take it once."])[-1] == "Take the shingles vaccine once."


def test_subject_of_reads_short_noun_phrases_only() -> None:
    found = subject_of("Escitalopram, sold under the brand name Lexapro, is an SSRI.")
    assert found is not None and (found.text, found.plural) == ("Escitalopram", False)
    found = subject_of("Yes, oral antiviral medications such as valacyclovir can help.")
    assert found is not None and (found.text, found.plural) == (
        "oral antiviral medications", True)
    assert subject_of("The exact cause of blepharitis is unknown.") is None
    assert subject_of("It is taken with meals.") is None
    assert subject_of("Take it with meals.") is None


def test_the_llm_decomposer_uses_prompt_v2_and_resolves_what_the_model_left() -> None:
    raw = json.dumps({"claims": [
        {"text": "Metformin is first-line therapy for type 2 diabetes.", "sentence": 0},
        {"text": "Start with 5000 mg daily.", "sentence": 1}]})
    provider = ScriptedProvider([raw])
    decomposer = LLMDecomposer(Model(provider))
    claims = asyncio.run(decomposer.decompose(
        Answer(question="How is type 2 diabetes treated?", text=README)))
    assert decomposer.prompt_version == "decompose/v2"
    assert [c.text for c in claims][-1] == "Start metformin with 5000 mg daily."
    assert [c.original for c in claims] == [None, "Start with 5000 mg daily."]
    system = provider.requests[0].messages[0].content
    assert "names what it is about" in system and "refers to nothing" in system


def test_prompt_v1_stays_loadable() -> None:
    provider = ScriptedProvider([json.dumps({"claims": []})])
    assert LLMDecomposer(Model(provider), version="v1").prompt_version == "decompose/v1"
    assert load_prompt("decompose").id == "decompose/v2"


def test_the_html_report_shows_the_answers_words_beside_a_rewritten_claim() -> None:
    claim = Claim(id="c9", text="Start metformin with 5000 mg daily.",
                  original="Start with <b>5000</b> mg daily.")
    same = Claim(id="c8", text="Metformin is first-line.", original="Metformin is first-line.")
    results = [ClaimResult(claim=c, category=Category.COVERAGE_GAP, score=0.0)
               for c in (same, claim)]
    page = render_html(example_report(results=results))
    assert "The answer's words: “Start with &lt;b&gt;5000&lt;/b&gt; mg daily.”" in page
    assert page.count('class="claim-original"') == 1


def test_a_pronoun_after_a_claim_ending_on_a_pronoun_takes_the_topic_not_its_subject() -> None:
    """"A blood test can confirm it. It is usually treated ...": the second "it" names what
    the first one does, not the blood test."""
    got = texts("A blood test can confirm it. It is usually treated with iron tablets.",
                "What are the common causes of iron deficiency anaemia?")
    assert got == ["A blood test can confirm it.",
                   "Iron deficiency anaemia is usually treated with iron tablets."]


@pytest.mark.parametrize(("question", "topic"), [
    ("What are the common causes of iron deficiency anaemia?", "iron deficiency anaemia"),
    ("What are the symptoms of Fabry disease?", "Fabry disease"),
    ("How is type 2 diabetes treated?", "type 2 diabetes"),
])
def test_the_topic_of_a_question_about_an_aspect_of_something_is_the_thing(
        question: str, topic: str) -> None:
    found = question_topic(question, [])
    assert found is not None and found.text == topic
