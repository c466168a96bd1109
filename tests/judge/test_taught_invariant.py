"""The invariant for taught documents (docs/judges.md, "Taught documents"), as properties: a
clinician-taught statement settles support only for a claim it states; a near-miss claim
made from it (another entity, number or dose count, an added condition, the negation
dropped or added, another population) is never a confident FACT on it, however sure the
verifier and its calibration are."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from medverify.judge.calibration import Family
from medverify.judge.checks import find_conflicts
from medverify.judge.decide import (
    SUPPORT,
    PassageScore,
    assess,
    outcome_from_passages,
    states_claim,
)
from medverify.records import Passage
from medverify.terms import key_terms, relevance

STATEMENTS = [
    "A vaccine called Zostavax was approved to prevent shingles in people age 60 and older.",
    "Only a single dose of the shingles vaccine is recommended.",
    "Pinworm infection is treated with mebendazole, pyrantel pamoate, or albendazole.",
    "Household pets like dogs and cats cannot become infected with human pinworms.",
    "Colchicine is most effective when taken within the first 12 hours of an acute attack.",
    "Hypothyroidism occurs when the thyroid gland does not make enough thyroid hormone.",
    "Adults aged 50 to 75 should be screened for colorectal cancer every 2 years.",
    "Metformin is first-line therapy for type 2 diabetes in adults.",
]
ENTITIES = ["chickenpox", "measles", "tetanus", "insulin", "warfarin", "asthma", "malaria"]
CONDITIONS = ["in patients with kidney disease", "after surgery", "during pregnancy",
              "in people with HIV"]
POPULATIONS = ["children", "infants", "pregnant women", "teenagers"]
_NUMBER = re.compile(r"\b\d+\b")
_CONTENT = re.compile(r"\b[a-z]{5,}\b")


def swap_entity(text: str, pick: int) -> str:
    words = _CONTENT.findall(text)
    return text.replace(words[pick % len(words)], ENTITIES[pick % len(ENTITIES)], 1)


def change_number(text: str, pick: int) -> str:
    if _NUMBER.search(text):
        return _NUMBER.sub(lambda m: str(int(m.group()) + 1 + pick % 7), text, count=1)
    return text.replace("a single dose", "two doses").replace("Only a single", "Three")


def add_condition(text: str, pick: int) -> str:
    return text.rstrip(".") + f" {CONDITIONS[pick % len(CONDITIONS)]}."


def flip_negation(text: str, pick: int) -> str:
    for negated, plain in (("does not make", "makes"), ("cannot become", "can become")):
        if negated in text:
            return text.replace(negated, plain)
    return re.sub(r"\b(is|are|should be)\b", r"\1 not", text, count=1)


def other_population(text: str, pick: int) -> str:
    group = POPULATIONS[pick % len(POPULATIONS)]
    for word in ("people", "Adults", "adults", "pets like dogs and cats"):
        if word in text:
            return text.replace(word, group, 1)
    return text.rstrip(".") + f" in {group}."


MUTATIONS = [swap_entity, change_number, add_condition, flip_negation, other_population]
SURE = Family(name="sure", trained_on=[], rows=0, mean=[0.0] * 10, scale=[1.0] * 10,
              coef=[[0.0] * 10] * 3, intercept=[0.0] * 3,
              thresholds={"FACT": 0.5, "HALLUCINATION": 0.5, "COVERAGE_GAP": 0.5})


def judged(claim: str, taught: str) -> tuple[str, list[str]]:
    """The verdict's category and doubts when the only passage is the taught statement and
    the verifier is sure it supports the claim."""
    row = PassageScore(
        passage=Passage(id="t", doc_id="review-x", text=taught, source="clinician-review"),
        raw=[0.97, 0.02, 0.01], calibrated=[0.97, 0.02, 0.01], label=SUPPORT,
        relevance=relevance(key_terms(claim), taught),
        states_claim=states_claim(claim, taught, verbatim=False),
        findings=find_conflicts(claim, taught, "t"))
    outcome = outcome_from_passages([row], (0.5, 0.5))
    category = "FACT" if outcome.support is not None else "COVERAGE_GAP"
    _, doubts = assess(category, outcome, [row], SURE, claim=claim)
    return category, doubts


@settings(max_examples=200, deadline=None)
@given(statement=st.sampled_from(STATEMENTS), mutation=st.sampled_from(MUTATIONS),
       pick=st.integers(0, 50))
def test_a_near_miss_of_a_taught_statement_is_never_a_confident_fact(
        statement: str, mutation: object, pick: int) -> None:
    claim = mutation(statement, pick)  # type: ignore[operator]
    if claim == statement:
        return
    category, doubts = judged(claim, statement)
    assert category != "FACT" or doubts, (claim, statement)


def test_the_taught_statement_itself_still_settles() -> None:
    for statement in STATEMENTS:
        assert judged(statement, statement) == ("FACT", [])


def test_a_near_verbatim_claim_differing_by_a_meaning_word_is_not_stated() -> None:
    """"most" / "least" and "before" / "after" are stopwords for relevance, but a claim that
    differs from a sentence by them is another claim: not stated, not settled."""
    from medverify.review.settled import claim_key, near_duplicate

    taught = "Colchicine is most effective when taken within the first 12 hours of an attack."
    for claim in ("Colchicine is least effective when taken within the first 12 hours of an "
                  "attack.", "Colchicine is most effective when taken after the first 12 hours "
                  "of an attack."):
        assert not states_claim(claim, taught, verbatim=False)
        assert near_duplicate(claim_key(claim), claim_key(taught)) is None
    restated = "Colchicine is most effective when it is taken within the first 12 hours of an " \
        "attack."
    assert states_claim(restated, taught, verbatim=False)
    assert near_duplicate(claim_key(restated), claim_key(taught)) is not None


def test_a_clause_before_a_semicolon_states_a_claim() -> None:
    """A correction that states the claim and adds a remark after a semicolon still states
    it (the review loop's browser test teaches one)."""
    taught = "Statins lower LDL cholesterol in adults; the letter that says otherwise is wrong."
    assert states_claim("Statins lower LDL cholesterol in adults.", taught, verbatim=False)
    assert not states_claim("Statins lower LDL cholesterol in children.", taught,
                            verbatim=False)
