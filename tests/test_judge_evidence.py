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
from medverify.config import Config
from medverify.factcheck.rewrite import ExtractiveRewriter
from medverify.judge.evidence import (
    UnknownPassage,
    quote_in_text,
    resolve_passage,
    verify_analysis,
)
from medverify.judge.llm import LLMJudge, parse_judge_output
from medverify.kb import KnowledgeBase
from medverify.kb.embed import HashEmbedder
from medverify.llm.facade import Model
from medverify.pipeline import Checker
from medverify.records import Analysis, Answer, Category, Claim, Document, Passage, Source, Verdict
from medverify.report.html import render_html
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
        Config(model="fake:x", decomposer="rules"), kb=kb, model=Model(ScriptedProvider(reply))
    )
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
        Config(model="fake:x", decomposer="rules"), kb=kb, model=Model(ScriptedProvider(reply))
    )
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
    claims = [Claim(id="c1", text="Metformin cures type 1 diabetes in one week.", markers=["s1"])]
    for reply, supported in [
        (_reply(supported=True, passage="P1", quote=INVENTED), False),
        (_reply(supported=True, passage="P7", quote=INVENTED), None),
        (_reply(supported=True, passage="P1", quote="the usual starting dose is 500 mg"), True),
    ]:
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
