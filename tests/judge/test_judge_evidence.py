"""Evidence the judge cannot invent (issue 13, defect 1): a verdict rests on a passage that
was shown to the judge, with a quote found in it, in check, audit and fact-check alike."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from medverify.audit.select import PassageSelector
from medverify.audit.verify import PairVerifier
from medverify.checker import Checker
from medverify.config import Config
from medverify.factcheck.rewrite import ExtractiveRewriter
from medverify.judge.evidence import (
    UnknownPassage,
    check_quote,
    quote_in_text,
    resolve_passage,
    verify_analysis,
)
from medverify.judge.llm import LLMJudge, parse_judge_output
from medverify.kb import KnowledgeBase
from medverify.kb.embed_base import HashEmbedder
from medverify.kit import FlowKit
from medverify.llm.facade import Model
from medverify.records import Analysis, Answer, Category, Claim, Document, Passage, Source, Verdict
from medverify.report.html import render_html
from medverify.terms import MODALS, STOPWORDS, cue
from medverify.testing import ScriptedProvider
from medverify.testing.judge import prompt_blocks

TEXT = "Metformin is a first-line medicine for type 2 diabetes. The usual starting dose is 500 mg."
INVENTED = "metformin cures type 1 diabetes in one week"
PASSAGES = {"P1": Passage(id="kb:1#0", doc_id="1", text=TEXT)}


def _reply(
    *, supported: bool = False, contradicted: bool = False, passage: object = "P1",
    quote: object = None, c_passage: object = None, c_quote: object = None,
) -> Callable[[Any], str]:
    """A judge reply function answering every claim of the prompt the same way."""

    def reply(request: Any) -> str:
        _, claims = prompt_blocks(request.messages[-1].content)
        results = [
            {
                "claim_id": label,
                "factual": {"reasoning": "r", "supported": supported, "passage": passage,
                            "quote": quote},
                "counterfactual": {"negation": "n", "reasoning": "r",
                                   "contradicted": contradicted, "passage": c_passage,
                                   "quote": c_quote},
            }
            for label in claims
        ]
        return json.dumps({"results": results})

    return reply


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as base:
        base.ingest([Document(doc_id="metformin", title="Metformin", text=TEXT)])
        yield base


def _check(kb: KnowledgeBase, reply: Callable[[Any], str], text: str) -> list[Any]:
    checker = Checker.from_config(
        Config(model="fake:x", decomposer="rules"),
        kit=FlowKit(kb=kb, model=Model(ScriptedProvider(reply))))
    [report] = asyncio.run(checker.run([Answer(text=text, question="q")]))
    return report.results


def test_the_probe_unknown_passage_and_invented_quote_is_an_error(kb: KnowledgeBase) -> None:
    """The reproduced defect: supported, passage P99, a quote found nowhere -> was FACT."""
    reply = _reply(supported=True, passage="P99", quote=INVENTED)
    [result] = _check(kb, reply, "Metformin cures type 1 diabetes in one week.")
    assert result.category is Category.ERROR
    assert "P99" in (result.error or "") and "not shown" in (result.error or "")
    assert result.evidence_quote is None


def test_invented_quote_in_a_shown_passage_is_not_counted_nor_shown(
    kb: KnowledgeBase,
) -> None:
    reply = _reply(supported=True, passage="P1", quote=INVENTED)
    [result] = _check(kb, reply, "Metformin cures type 1 diabetes in one week.")
    assert result.category is Category.COVERAGE_GAP
    assert result.evidence_quote is None
    assert result.warnings and "not counted" in result.warnings[0]
    assert result.verdict.factual.holds and result.verdict.factual.verified is False
    page = render_html(_report_of(kb, reply))
    assert "<blockquote>" + INVENTED not in page
    assert "not counted" in page


def _report_of(kb: KnowledgeBase, reply: Callable[[Any], str]) -> Any:
    checker = Checker.from_config(
        Config(model="fake:x", decomposer="rules"),
        kit=FlowKit(kb=kb, model=Model(ScriptedProvider(reply))))
    [report] = asyncio.run(checker.run([Answer(text="Metformin cures type 1 diabetes.")]))
    return report


def test_a_hallucination_verdict_also_needs_its_quote(kb: KnowledgeBase) -> None:
    reply = _reply(contradicted=True, c_passage="P1", c_quote="insulin is never needed")
    [result] = _check(kb, reply, "Metformin is never used for type 2 diabetes.")
    assert result.category is Category.COVERAGE_GAP
    assert result.evidence_quote is None and result.warnings


def test_a_holding_analysis_without_a_passage_does_not_count(kb: KnowledgeBase) -> None:
    reply = _reply(supported=True, passage=None, quote="first-line medicine for type 2")
    [result] = _check(kb, reply, "Metformin is a first-line medicine for type 2 diabetes.")
    assert result.category is Category.COVERAGE_GAP and result.warnings


def test_a_verified_quote_makes_a_fact(kb: KnowledgeBase) -> None:
    quote = "\u201cMetformin is a first\u2013line  medicine \u2026 type 2 diabetes.\u201d"
    reply = _reply(supported=True, passage="[p1]", quote=quote)
    [result] = _check(kb, reply, "Metformin is a first-line medicine for type 2 diabetes.")
    assert result.category is Category.FACT and not result.warnings
    assert result.evidence_quote == quote
    assert result.verdict.factual.verified is True


def test_audit_pairs_rest_on_verified_quotes_too() -> None:
    source = Source(id="s1", url="https://a.org/x", text=TEXT, status="given")
    invented = "Metformin cures type 1 diabetes in one week."
    dose = "The usual starting dose of metformin is 500 mg."
    start = "the usual starting dose is 500 mg"
    for text, reply, supported in [
        (invented, _reply(supported=True, passage="P1", quote=INVENTED), False),
        (invented, _reply(supported=True, passage="P7", quote=INVENTED), None),
        # a real sentence of the source, about something else: not evidence (issue 27)
        (invented, _reply(supported=True, passage="P1", quote=start), False),
        (dose, _reply(supported=True, passage="P1", quote=start), True),
    ]:
        claims = [Claim(id="c1", text=text, markers=["s1"])]
        judge = LLMJudge(Model(ScriptedProvider(reply)))
        verifier = PairVerifier(judge, PassageSelector(HashEmbedder(), passage_tokens=64, k=2))
        [audit] = asyncio.run(verifier.verify(claims, [source]))
        assert audit.supported is supported


def test_fact_check_corrections_never_use_an_invented_quote() -> None:
    passage = PASSAGES["P1"]
    invented = Analysis(holds=True, passage_id=passage.id, quote=INVENTED)
    verdict = Verdict(
        claim_id="f1",
        factual=Analysis(holds=False),
        counterfactual=verify_analysis(invented, passage),
    )
    rewrite = ExtractiveRewriter().one("Metformin cures type 1 diabetes.", [passage], verdict)
    assert INVENTED not in (rewrite.after or "") and INVENTED not in (rewrite.evidence_quote or "")


@pytest.mark.parametrize(
    ("quote", "found"),
    [
        ("first-line medicine for type 2 diabetes", True),
        ("FIRST-LINE   medicine\nfor type 2", True),
        ("Metformin is ... starting dose is 500 mg", True),
        ("starting dose ... Metformin is a first-line", False),  # pieces out of order
        ("diabetes", False),  # one word proves nothing
        ("500 mg", False),
        ("", False),
        ("...", False),
        ("first-line medicine for type 1 diabetes", False),
        ("etformin is a first-line", False),  # starts inside a word
        ("first-line medicine for type 2 diabet", False),  # ends inside a word
        ("line medicine for type 2", False),  # cut out of "first-line"
        ("m ... e ... t", False),  # letters joined by ellipses
        ("metformin ... for ... type", False),  # pieces never summed to 3 words
        ("is a ... for type", False),  # a piece of stopwords only
        ("Metformin is a first-line ... 2 diabetes", True),
        ("Metformin is a first-line ... 5 ... mg", False),  # a lone number is no piece
        ("The usual starting dose is 5 mg", False),  # "5" cut out of "500"
    ],
)
def test_quote_matching(quote: str, found: bool) -> None:
    assert quote_in_text(quote, TEXT) is found


def test_a_short_passage_may_be_quoted_whole() -> None:
    assert quote_in_text("Yes.", "yes")


@pytest.mark.parametrize("label", ["P2", "C1", "passage 9", 3, ["P1"], {"id": "P1"}])
def test_unknown_or_malformed_labels_raise(label: object) -> None:
    with pytest.raises(UnknownPassage):
        resolve_passage(label, PASSAGES)


@pytest.mark.parametrize("label", ["P1", "p1", "[P1]", " P1 ", "Passage 1", "1"])
def test_label_spellings_resolve(label: str) -> None:
    assert resolve_passage(label, PASSAGES) is PASSAGES["P1"]


@pytest.mark.parametrize("label", [None, "", "null", "None", "n/a"])
def test_null_labels(label: object) -> None:
    assert resolve_passage(label, PASSAGES) is None


_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=4),
    max_leaves=12,
)
_BLOCK = st.fixed_dictionaries(
    {},
    optional={
        "supported": st.booleans() | _ANY_JSON,
        "contradicted": st.booleans() | _ANY_JSON,
        "passage": st.sampled_from(["P1", "P2", "P99", "", None, "p1"]) | _ANY_JSON,
        "quote": st.sampled_from([INVENTED, "first-line medicine for type 2", None]) | _ANY_JSON,
        "reasoning": _ANY_JSON,
        "negation": _ANY_JSON,
    },
)


@settings(max_examples=400, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(factual=_BLOCK | _ANY_JSON, counterfactual=_BLOCK | _ANY_JSON,
       claim_id=st.sampled_from(["C1", "C2", 1, None]))
def test_fuzz_no_verdict_rests_on_unshown_or_invented_evidence(
    factual: Any, counterfactual: Any, claim_id: Any
) -> None:
    raw = json.dumps({"results": [{"claim_id": claim_id, "factual": factual,
                                   "counterfactual": counterfactual}]})
    parsed = parse_judge_output(raw, ["C1"], PASSAGES)["C1"]
    if isinstance(parsed, str):
        return  # an ERROR claim: never a verdict
    verdict = Verdict(claim_id="C1", factual=parsed[0], counterfactual=parsed[1])
    for analysis in parsed:
        if analysis.counts:
            assert analysis.passage_id == "kb:1#0"
            assert analysis.quote and quote_in_text(analysis.quote, TEXT)
    if verdict.category in (Category.FACT, Category.JUDGMENT_ERROR):
        assert parsed[0].verified is True
    if verdict.category in (Category.HALLUCINATION, Category.JUDGMENT_ERROR):
        assert parsed[1].verified is True


# -- issue 27: the stricter quote rule (check_quote) -------------------------------------

CLAIM = "Metformin cures type 1 diabetes in one week."
KIDNEY = ("Metformin is a first-line medicine for type 2 diabetes. Metformin should not be used "
          "in patients with severe kidney disease. Kidney function of the patient is checked "
          "every year. Insulin treats type 1 diabetes within one week of diagnosis.")


@pytest.mark.parametrize(
    ("quote", "claim", "problem"),
    [
        # the five attacks of issue 27 (the fifth, duplicate keys, is in test_judge_parse.py)
        ("be used in patients with severe kidney disease", CLAIM,
         "cut just after 'should not'"),
        ("Kidney function of the patient is checked every year.", CLAIM,
         "about 'kidney', not 'metformin'"),
        ("the patient is checked every year", CLAIM, "too little"),
        ("of the patient", CLAIM, "too little"),
        ("m ... e ... t", CLAIM, "longest piece has 1 word"),
        # and more
        ("Insulin treats type 1 diabetes within one week of diagnosis", CLAIM,
         "about 'insulin', not 'metformin'"),
        ("Metformin is a first-line medicine ... type 1 diabetes within one week", CLAIM,
         "different sentences"),
        ("Metformin should ... be used in patients with severe kidney disease",
         "Metformin should be used in severe kidney disease.", "skips 'not'"),
        ("Metformin is a first-line medicine for type 2 diabetes",
         "Metformin is a first-line medicine for type 1 diabetes.", "number '1'"),
        ("type 2 diabetes ... Metformin is a first-line medicine",
         "Metformin is a first-line medicine for type 2 diabetes.", "order"),
        ("Metformin is a first-line medicine for type 2 diabetes",
         "Metformin is a first-line medicine for type 2 diabetes in the UK.", "'uk'"),
        ("", CLAIM, "empty"),
        ("... [...] \u2026", CLAIM, "empty"),
    ],
)
def test_check_quote_rejects(quote: str, claim: str, problem: str) -> None:
    found = check_quote(quote, KIDNEY, claim)
    assert found is not None and problem in found, found


@pytest.mark.parametrize(
    ("quote", "claim", "direction"),
    [
        ("Metformin is a first-line medicine for type 2 diabetes.",
         "Metformin is a first-line medicine for type 2 diabetes.", "supported"),
        ("Metformin is a first-line medicine ... type 2 diabetes",
         "Metformin is a first-line medicine for type 2 diabetes.", "supported"),
        ("Metformin is a first-line medicine for type 2 diabetes",
         "Metformin is the preferred first-line drug in type 2 diabetes.", "supported"),
        ("Metformin should not be used in patients with severe kidney disease",
         "Metformin should not be given in severe kidney disease.", "supported"),
        ("Metformin should not be used in patients with severe kidney disease",
         "Metformin is safe in severe kidney disease.", "contradicted"),
        ("Insulin treats type 1 diabetes within one week of diagnosis",
         "Insulin treats type 1 diabetes within one month of diagnosis.", "contradicted"),
        ("Insulin treats type 1 diabetes within one week",
         "Insulin treats type 1 diabetes within 3 weeks.", "contradicted"),
    ],
)
def test_check_quote_accepts(quote: str, claim: str, direction: str) -> None:
    assert check_quote(quote, KIDNEY, claim, direction) is None


def test_a_negation_before_a_comma_still_governs() -> None:
    text = "Metformin is not, as many believe, a cure for type 1 diabetes."
    problem = check_quote("a cure for type 1 diabetes", text, "A cure for type 1 diabetes.")
    assert problem and "cut after" in problem and "not" in problem
    assert check_quote("Metformin is not, as many believe, a cure", text) is None


def test_a_modal_before_the_quote_governs_it() -> None:
    text = "In rare cases metformin may cause lactic acidosis."
    assert "'may'" in (check_quote("cause lactic acidosis", text) or "")
    assert check_quote("metformin may cause lactic acidosis", text) is None


def test_a_clause_break_ends_the_reach_of_a_negation() -> None:
    text = "It is not for children; adults take metformin with meals."
    assert check_quote("adults take metformin with meals", text) is None


def test_a_negation_after_a_comma_does_not_belong_to_the_quote() -> None:
    text = "Aspirin is effective for pain, not for viral infections."
    assert check_quote("Aspirin is effective for pain", text) is None


def test_one_clean_placement_is_enough() -> None:
    text = "Metformin should not be used in kidney failure. Insulin will be used in kidney failure."
    assert check_quote("be used in kidney failure", text) is None  # the second sentence


def test_the_direction_is_checked() -> None:
    with pytest.raises(ValueError, match="direction"):
        check_quote("Metformin is a first-line medicine", TEXT, CLAIM, "refuted")


def test_verify_analysis_sets_the_problem_and_keeps_found() -> None:
    passage = Passage(id="kb:2#0", doc_id="2", text=KIDNEY)
    cut = Analysis(holds=True, passage_id=passage.id,
                   quote="be used in patients with severe kidney disease")
    checked = verify_analysis(cut, passage, CLAIM)
    assert checked.quote_found is True and checked.verified is False and not checked.counts
    assert checked.quote_problem == "the quote is cut just after 'should not', which governs it"
    unchecked = verify_analysis(cut.model_copy(update={"holds": False}), passage, CLAIM)
    assert unchecked.verified is None and unchecked.quote_problem is None
    nothing = verify_analysis(Analysis(holds=True, passage_id=passage.id), passage, CLAIM)
    assert nothing.verified is False and "quoted nothing" in (nothing.quote_problem or "")
    nowhere = verify_analysis(cut, None, CLAIM)
    assert nowhere.verified is False and nowhere.quote_found is False


def test_the_warning_names_the_problem(kb: KnowledgeBase) -> None:
    reply = _reply(supported=True, passage="P1", quote="The usual starting dose is 500 mg")
    [result] = _check(kb, reply, "Metformin cures type 1 diabetes in one week.")
    assert result.category is Category.COVERAGE_GAP
    assert "shares too little of the claim's content" in result.warnings[0]
    assert result.evidence_quote is None


# -- properties -------------------------------------------------------------------------

_LETTERS = st.text(alphabet="abcdefghijklmnoprstuvwy", min_size=6, max_size=6)
_WORDS = st.lists(_LETTERS.filter(lambda w: cue(w) is None), min_size=6, max_size=30,
                  unique=True)


def _sentences(words: list[str], size: int = 6) -> str:
    chunks = [words[i:i + size] for i in range(0, len(words), size)]
    return " ".join(" ".join(c).capitalize() + "." for c in chunks)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(words=_WORDS, data=st.data())
def test_a_span_cut_inside_a_word_never_counts(words: list[str], data: st.DataObject) -> None:
    """Every word has 6 letters, so a cut inside one leaves an edge of 1-5 letters that is
    no word: the quote can only be matched inside a word."""
    text = _sentences(words)
    start = data.draw(st.integers(0, len(text) - 10))
    end = data.draw(st.integers(start + 8, min(len(text), start + 80)))
    inside = (text[start - 1:start + 1].isalpha() if start else False) or \
        (text[end - 1:end + 1].isalpha() if end < len(text) else False)
    if not inside:
        return
    quote = text[start:end]
    assert not quote_in_text(quote, text)
    assert check_quote(quote, text, quote) is not None


@settings(max_examples=150, derandomize=True, deadline=None)
@given(words=_WORDS, data=st.data())
def test_single_letters_and_stopwords_never_count(words: list[str], data: st.DataObject) -> None:
    common = data.draw(st.lists(st.sampled_from(sorted(STOPWORDS - MODALS)), min_size=1,
                                max_size=6))
    text = _sentences(words) + " " + " ".join(common) + "."
    letters = data.draw(st.lists(st.sampled_from(sorted(set(text.lower()) - set(" ."))),
                                 min_size=1, max_size=6))
    for quote in (" ... ".join(letters), " ".join(common), " ... ".join(common)):
        assert not quote_in_text(quote, text)
        assert check_quote(quote, text) is not None


@settings(max_examples=150, derandomize=True, deadline=None)
@given(words=_WORDS, data=st.data())
def test_a_sentence_that_states_the_claim_always_counts(
    words: list[str], data: st.DataObject
) -> None:
    size = data.draw(st.integers(3, min(8, len(words))))
    at = data.draw(st.integers(0, len(words) - size))
    number = data.draw(st.none() | st.integers(1, 5000))
    claim_words = words[at:at + size] + ([str(number)] if number is not None else [])
    claim = " ".join(claim_words).capitalize() + "."
    before, after = _sentences(words[:at]), _sentences(words[at + size:])
    text = " ".join(t for t in (before, claim, after) if t)
    assert quote_in_text(claim, text)
    assert check_quote(claim, text, claim, "supported") is None
    assert check_quote(claim, text, claim, "contradicted") is None


@settings(max_examples=150, derandomize=True, deadline=None)
@given(words=_WORDS, cue_word=st.sampled_from(["not", "never", "should", "may", "cannot"]),
       data=st.data())
def test_a_fragment_after_a_negation_or_modal_never_counts(
    words: list[str], cue_word: str, data: st.DataObject
) -> None:
    cut = data.draw(st.integers(1, len(words) - 3))
    head, tail = words[:cut], words[cut:]
    text = (" ".join(head) + f" {cue_word} " + " ".join(tail)).capitalize() + "."
    quote = " ".join(tail[: data.draw(st.integers(3, len(tail)))])
    assert quote_in_text(quote, text)  # it is copied from the text ...
    problem = check_quote(quote, text)  # ... but cut after the word that governs it
    assert problem is not None and cue_word in problem
