"""The offline rule decomposer: segmentation, markers, coordination, drops, spans, limits."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from medverify.citations import find_markers, normalize_marker, strip_markers
from medverify.decompose import (
    DECOMPOSERS,
    Decomposer,
    RuleDecomposer,
    segment,
    split_coordination,
)
from medverify.errors import ConfigError
from medverify.records import Answer, Claim


def texts(text: str) -> list[str]:
    return [s.text for s in segment(text)]


def claims(text: str) -> list[Claim]:
    return asyncio.run(RuleDecomposer().decompose(Answer(text=text)))


def claim_texts(text: str) -> list[str]:
    return [c.text for c in claims(text)]


# --------------------------------------------------------------------------- segmentation

@pytest.mark.parametrize("text", [
    "Aspirin (e.g. Bayer) is an NSAID. It inhibits COX enzymes.",
    "NSAIDs, i.e. Ibuprofen and naproxen, reduce pain. They can irritate the stomach.",
    "Metformin vs. Placebo was tested in 2019. The trial was positive.",
    "Dr. Smith treated the patient. The patient recovered.",
    "The dose is approx. 5 mg per day. Higher doses are toxic.",
    "Give 500 mg p.o. b.i.d. with meals. Monitor renal function.",
    "Give 1 g i.v. q.d. for 5 days. Then switch to oral therapy.",
    "See Fig. 2 for the curve. It shows a dose response.",
    "Smith et al. (2020) found a benefit. Jones found none.",
    "The F.D.A. approved it in the U.S. in 1995. It is widely used.",
    "A dose of 0.5 mg was safe. Doses of 2.5-5 mg/kg were toxic.",
    "The usual dose is 10 mg/day. Take it in the morning.",
    "The range was 5.5-7.0 mmol/L in adults. Children had lower values.",
    "John F. Kennedy had Addison disease. He took steroids.",
    "Hepatitis B. virus is common. It spreads through blood.",
])
def test_abbreviations_and_numbers_do_not_split_sentences(text: str) -> None:
    first, second = text.rsplit(". ", 1)
    assert texts(text) == [first + ".", second]


@pytest.mark.parametrize(("text", "expected"), [
    ("Take vitamin D. It helps bone health.", ["Take vitamin D.", "It helps bone health."]),
    ("It ends here! Does it? Yes.", ["It ends here!", "Does it?", "Yes."]),
    ("Wait... Then it works.", ["Wait...", "Then it works."]),
    ('He said "stop now." Then he left.', ['He said "stop now."', "Then he left."]),
    ("It lowers glucose.[1] It is cheap.", ["It lowers glucose.[1]", "It is cheap."]),
    ("It lowers glucose. [1, 2] It is cheap.", ["It lowers glucose. [1, 2]", "It is cheap."]),
    ("It is common in the U.S. The cause is unknown.",
     ["It is common in the U.S.", "The cause is unknown."]),
    ("It is regulated by the U.S. Food and Drug Administration.",
     ["It is regulated by the U.S. Food and Drug Administration."]),
    ("Fever, cough, etc. Rest helps.", ["Fever, cough, etc.", "Rest helps."]),
    ("Dose: 5 mg. 20% of patients respond.", ["Dose: 5 mg.", "20% of patients respond."]),
])
def test_sentence_boundaries(text: str, expected: list[str]) -> None:
    assert texts(text) == expected


def test_lists_headings_and_newlines() -> None:
    text = (
        "# Diabetes\n\nCommon symptoms include:\n- Fever\n* Dry cough [3]\n"
        "1. Insulin may be needed in type 1 diabetes.\n2) Metformin is first line.\n\n"
        "**Treatment**\nStatins lower LDL\ncholesterol in most adults. Exercise helps.\n"
        "> Quoted advice is text too.\n---\n| a | b |\n"
    )
    segs = segment(text)
    assert [(s.kind, s.text) for s in segs] == [
        ("heading", "Diabetes"),
        ("sentence", "Common symptoms include:"),
        ("item", "Fever"),
        ("item", "Dry cough [3]"),
        ("item", "Insulin may be needed in type 1 diabetes."),
        ("item", "Metformin is first line."),
        ("heading", "**Treatment**"),
        ("sentence", "Statins lower LDL\ncholesterol in most adults."),
        ("sentence", "Exercise helps."),
        ("sentence", "Quoted advice is text too."),
        ("sentence", "| a | b |"),
    ]
    assert [s.lead for s in segs[2:6]] == ["Common symptoms include"] * 4
    assert [s.index for s in segs] == list(range(len(segs)))


def test_indented_continuation_of_a_list_item() -> None:
    segs = segment("- Metformin lowers glucose\n  and is cheap.\n- Insulin works.")
    assert [s.text for s in segs] == ["Metformin lowers glucose\n  and is cheap.", "Insulin works."]


def test_crlf_and_unicode_bullets() -> None:
    assert texts("• Aspirin thins blood.\r\n• Heparin too.\r\n") == [
        "Aspirin thins blood.", "Heparin too."]


# --------------------------------------------------------------------------- markers

@pytest.mark.parametrize(("raw", "text", "labels"), [
    ("Aspirin thins blood [1].", "Aspirin thins blood.", ["1"]),
    ("Aspirin thins blood [1, 2].", "Aspirin thins blood.", ["1", "2"]),
    ("Aspirin thins blood [1-3].", "Aspirin thins blood.", ["1", "2", "3"]),
    ("Aspirin thins blood [1][4].", "Aspirin thins blood.", ["1", "4"]),
    ("Aspirin thins blood[^2].", "Aspirin thins blood.", ["2"]),
    ("Aspirin thins blood (Smith et al., 2020).", "Aspirin thins blood.", ["Smith et al. 2020"]),
    ("Aspirin thins blood (Smith & Jones 2019; Lee, 2021).", "Aspirin thins blood.",
     ["Smith & Jones 2019", "Lee 2021"]),
    ("Aspirin thins blood 【3†source】.", "Aspirin thins blood.", ["3"]),
    ("Aspirin thins blood [2](https://x.org/a).", "Aspirin thins blood.", ["2"]),
    ("See the [NHS page](https://nhs.uk/a) now.", "See the NHS page now.", ["https://nhs.uk/a"]),
    ("It is at https://nih.gov/x. Really.", "It is at. Really.", ["https://nih.gov/x"]),
    ("Doses (e.g. 5 mg) vary [3].", "Doses (e.g. 5 mg) vary.", ["3"]),
])
def test_strip_markers(raw: str, text: str, labels: list[str]) -> None:
    assert strip_markers(raw) == (text, labels)


def test_marker_spans_and_limits() -> None:
    raw = "A [1-1000] b [3]"
    markers = find_markers(raw)
    assert [raw[m.start:m.end] for m in markers] == ["[1-1000]", "[3]"]
    assert markers[0].labels == ("1", "1000")  # huge ranges are not expanded


@pytest.mark.parametrize(("raw", "labels"), [
    ("[2]", ["2"]), ("2", ["2"]), (" [1-3] ", ["1", "2", "3"]), ("^4", ["4"]),
    ("(Smith et al., 2020)", ["Smith et al. 2020"]), ("Smith 2020", ["Smith 2020"]), ("", []),
])
def test_normalize_marker(raw: str, labels: list[str]) -> None:
    assert normalize_marker(raw) == labels


def test_claims_keep_markers_and_drop_them_from_text() -> None:
    [claim] = claims("Exposure to violence harms children's health [3] [5].")
    assert claim.text == "Exposure to violence harms children's health."
    assert claim.markers == ["3", "5"]


# --------------------------------------------------------------------------- coordination

@pytest.mark.parametrize(("text", "expected"), [
    ("Metformin lowers blood glucose and reduces hepatic glucose production.",
     ["Metformin lowers blood glucose.", "Metformin reduces hepatic glucose production."]),
    ("Statins can lower LDL and reduce cardiovascular events.",
     ["Statins can lower LDL.", "Statins can reduce cardiovascular events."]),
    ("Statins lower LDL and reduce cardiovascular events.",
     ["Statins lower LDL.", "Statins reduce cardiovascular events."]),
    ("The drug is absorbed in the gut and excreted unchanged in urine.",
     ["The drug is absorbed in the gut.", "The drug is excreted unchanged in urine."]),
    ("Metformin does not cause weight gain and is well tolerated.",
     ["Metformin does not cause weight gain.", "Metformin is well tolerated."]),
    ("Aspirin relieves pain, reduces fever, and prevents clots.",
     ["Aspirin relieves pain.", "Aspirin reduces fever.", "Aspirin prevents clots."]),
    ("Glucose control improves outcomes but increases hypoglycaemia.",
     ["Glucose control improves outcomes.", "Glucose control increases hypoglycaemia."]),
    ("Insulin lowers glucose; it also promotes fat storage in adipose tissue.",
     # the pronoun takes the subject of the first clause (subject resolution)
     ["Insulin lowers glucose.", "Insulin also promotes fat storage in adipose tissue."]),
])
def test_coordinated_predicates_are_split_with_the_subject_repeated(
        text: str, expected: list[str]) -> None:
    assert claim_texts(text) == expected


@pytest.mark.parametrize("text", [
    "The dose is between 5 and 10 mg daily.",
    "Salt and pepper are both required.",
    "Metformin and insulin are both required in some patients.",
    "Symptoms include fever, cough and fatigue.",
    "Smoking is a risk factor and cause of lung cancer.",
    "Metformin causes nausea and increased thirst in some people.",
    "The drug is recommended if the patient has diabetes and takes insulin.",
    "Metformin reduces the glucose that the liver produces and releases.",
    "Statins cause muscle pain and damage to muscle cells.",
    "It is safe and effective in adults.",
    "Aspirin (which thins blood and reduces clotting) is cheap.",
    "Blood pressure, heart rate and oxygen saturation are measured.",
])
def test_fixed_pairs_and_lists_are_not_split(text: str) -> None:
    assert claim_texts(text) == [text]


def test_split_parts_keep_their_own_markers() -> None:
    found = claims("Metformin lowers glucose [1] and reduces hepatic output [2]. It is cheap [3].")
    assert [(c.text, c.markers) for c in found] == [
        ("Metformin lowers glucose.", ["1"]),
        ("Metformin reduces hepatic output.", ["2"]),
        ("Metformin is cheap.", ["3"]),  # "It" names its subject (subject resolution)
    ]
    shared = claims("Metformin lowers glucose and reduces hepatic output [4].")
    assert [c.markers for c in shared] == [["4"], ["4"]]


def test_split_coordination_can_be_turned_off() -> None:
    text = "Metformin lowers blood glucose and reduces hepatic glucose production."
    assert [c.text for c in RuleDecomposer(split_coordinated=False).decompose_text(text)] == [text]
    long_clause = "x " * 400 + "lowers a and reduces b"
    assert split_coordination(long_clause) == [long_clause]


# --------------------------------------------------------------------------- drops

@pytest.mark.parametrize("text", [
    "Great question!", "What a great question.", "Thanks for asking!", "I hope this helps!",
    "I hope this information helps you.", "Let me know if you have more questions.",
    "Feel free to ask more.", "Sure!", "Hello there!", "I'm happy to help with that.",
    "I am not a doctor.", "I'm not a medical professional, but here is some information.",
    "This is not medical advice.", "Please consult your healthcare provider.",
    "Always talk to your doctor before starting a new medication.",
    "It is important to consult with a qualified health professional.",
    "This information is for informational purposes only.",
    "As an AI, I cannot provide medical advice.",
    "What causes type 2 diabetes?", "Is metformin safe in pregnancy?",
    "Treatment options include:", "**Causes**", "## Overview", "Causes of diabetes",
    "Key points", "Yes.",
])
def test_non_claims_are_dropped(text: str) -> None:
    assert claim_texts(text) == []


def test_claims_with_greeting_words_inside_are_kept() -> None:
    text = "Certainly, metformin is the first-line treatment for type 2 diabetes in adults."
    assert claim_texts(text) == [text]


def test_list_lead_in_is_joined_to_fragment_items() -> None:
    text = ("Common symptoms of influenza include:\n- Fever [1]\n- Dry cough\n"
            "- HbA1c levels\n- Fatigue usually lasts two weeks or longer.\n\nOther text is here.\n"
            "- Loose item")
    found = claims(text)
    assert [(c.text, c.markers) for c in found] == [
        ("Common symptoms of influenza include fever.", ["1"]),
        ("Common symptoms of influenza include dry cough.", []),
        ("Common symptoms of influenza include HbA1c levels.", []),
        ("Fatigue usually lasts two weeks or longer.", []),
        ("Other text is here.", []),
    ]
    assert text[found[0].span.start:found[0].span.end] == "Fever [1]"


# --------------------------------------------------------------------------- records

def test_claim_records_spans_ids_and_sentences() -> None:
    text = ("Great question! Metformin lowers glucose and reduces weight [2].\n\n"
            "- Aspirin thins blood.")
    found = claims(text)
    assert [c.id for c in found] == ["c1", "c2", "c3"]
    assert [c.sentence for c in found] == [1, 1, 2]
    assert {c.decomposer for c in found} == {"rules"}
    assert text[found[0].span.start:found[0].span.end] == (
        "Metformin lowers glucose and reduces weight [2].")
    assert text[found[2].span.start:found[2].span.end] == "Aspirin thins blood."
    assert claims(text) == found  # stable for the same input


def test_empty_and_whitespace_answers_give_no_claims() -> None:
    assert claims("   \n\t ") == []
    assert segment("") == []


def test_replacement_characters_and_odd_input_do_not_crash() -> None:
    text = "Metformin \ufffd\ufffd lowers glucose.\x0b\x0c Aspirin thins blood \ufffd. [\n(\n**"
    found = claims(text)
    assert [c.text for c in found] == ["Metformin \ufffd\ufffd lowers glucose.",
                                       "Aspirin thins blood \ufffd."]


def test_registry_and_factory() -> None:
    assert DECOMPOSERS.names() == ["llm", "rules"]
    rules = DECOMPOSERS.create("rules", None)
    assert isinstance(rules, RuleDecomposer) and isinstance(rules, Decomposer)
    assert rules.name == "rules" and rules.prompt_version is None
    with pytest.raises(ConfigError, match="needs a model"):
        DECOMPOSERS.create("llm", None)
    with pytest.raises(ConfigError, match="unknown decomposer"):
        DECOMPOSERS.create("nope", None)


# --------------------------------------------------------------------------- properties

_PIECES = [
    "Metformin lowers glucose", " and reduces weight", "[1]", " [2, 3]", ".", ". ", "? ", "! ",
    "\n", "\n\n", "- ", "1. ", "e.g. ", "Dr. ", "0.5 mg", " vs. ", "U.S. ", "(Smith et al., 2020)",
    "https://x.org/a.b ", "**bold**", "# ", ":", "\ufffd", "  ", "It is safe", "Fever",
    "Great question!", "\r\n", "; ", ", ", "[^1]", "[x](https://y.z)", "...", "\t",
]


def _check_spans(text: str) -> None:
    segs = segment(text)
    previous_end = 0
    for i, seg in enumerate(segs):
        assert seg.index == i
        assert text[seg.start:seg.end] == seg.text
        assert seg.text == seg.text.strip() and seg.text
        assert seg.start >= previous_end
        previous_end = seg.end
    for claim in RuleDecomposer().decompose_text(text):
        assert claim.span is not None and claim.sentence is not None
        assert text[claim.span.start:claim.span.end] == segs[claim.sentence].text
        assert claim.text.strip() == claim.text and claim.text


def test_span_exactness_on_random_compositions() -> None:
    rng = random.Random(7)
    for _ in range(400):
        _check_spans("".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 30))))


def test_span_exactness_property() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=200, deadline=None)
    @hypothesis.given(st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=8)),
                               max_size=25))
    def check(parts: list[str]) -> None:
        _check_spans("".join(parts))

    check()


# --------------------------------------------------------------------------- size limits

_PROSE = (
    "Metformin lowers blood glucose and reduces hepatic glucose production [1]. The usual "
    "starting dose is 500 mg p.o. b.i.d. with meals, e.g. at breakfast and dinner [2, 3]. "
    "Dr. Smith et al. (2020) reported that a 0.5 mg/kg dose of the comparator was no better "
    "than placebo (see https://example.org/trial). Is it safe? Common side effects include:\n"
    "- Nausea\n- Diarrhoea [4]\n- Abdominal pain\n\nIt is regulated by the U.S. Food and Drug "
    "Administration, and lactic acidosis is rare (approx. 3 per 100,000 patient-years).\n\n"
)


def _big_answer(size: int) -> str:
    return (_PROSE * (size // len(_PROSE) + 1))[:size]


def test_half_a_megabyte_answer_is_decomposed() -> None:
    # Speed is measured by benchmarks/bench_decompose.py, not asserted here.
    text = _big_answer(500_000)
    found = RuleDecomposer().decompose_text(text)
    assert len(found) > 5_000


@pytest.mark.slow
def test_five_megabyte_answer_within_budget() -> None:
    text = _big_answer(5_000_000)
    found = RuleDecomposer().decompose_text(text)
    assert len(found) > 50_000


def test_pathological_inputs_stay_linear() -> None:
    for text in ("word " * 100_000, "[" * 200_000, "(" * 200_000, "\n" * 200_000,
                 "e.g. " * 50_000, "https://x.org/" + "a" * 200_000, "and " * 100_000,
                 "[1-" * 50_000, "Smith et al " * 20_000):
        # A hang guard, not a speed target: catastrophic backtracking on 200k characters
        # would take hours; a linear pass takes well under a second.
        started = time.perf_counter()
        RuleDecomposer().decompose_text(text)
        assert time.perf_counter() - started < 30.0, text[:20]
