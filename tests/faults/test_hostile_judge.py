"""A hostile LLM judge, end to end (issue 27, part 4): the real check flow (knowledge base,
retrieval, the LLM judge's prompt, parser and evidence rule, reports) over a scripted model
that answers with each reply of the hostile corpus (``tests/judge/test_quote_cases.py``).

No hostile reply may make its claim FACT (nor a true claim HALLUCINATION); a reply with a
duplicate JSON key makes the claim ERROR with the cause; every honest reply still counts.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from judge.test_quote_cases import HONEST, HOSTILE, QuoteCase, corpus_reply
from medverify.checker import Checker
from medverify.config import Config
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.llm.facade import Model
from medverify.records import Answer, Category, ClaimResult, Document
from medverify.testing import ScriptedProvider


def _check(tmp_path: Path, case: QuoteCase) -> tuple[ClaimResult, ScriptedProvider]:
    provider = ScriptedProvider(corpus_reply({case.claim: case}))
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as kb:
        kb.ingest([Document(doc_id="doc", title="Evidence", text=case.passage)])
        checker = Checker.from_config(
            Config(model="fake:x", decomposer="rules"), kit=FlowKit(kb=kb, model=Model(provider)))
        [report] = asyncio.run(checker.run([Answer(text=case.claim, question="q")]))
    [result] = report.results
    assert result.claim.text == case.claim and provider.requests, "the judge must be asked"
    return result, provider


@pytest.mark.parametrize("case", HOSTILE, ids=lambda c: c.name)
def test_no_hostile_reply_makes_a_fact(tmp_path: Path, case: QuoteCase) -> None:
    result, _ = _check(tmp_path, case)
    assert result.category is not Category.FACT
    if case.raw is not None:  # duplicate keys: the reply is unusable, the claim an ERROR
        assert result.category is Category.ERROR
        assert case.expect in (result.error or ""), result.error
        return
    assert result.category is not Category.HALLUCINATION
    held: Any = result.verdict.factual if case.supported else result.verdict.counterfactual
    assert held.holds and held.verified is False
    assert case.expect in (held.quote_problem or ""), held.quote_problem
    assert result.evidence_quote is None  # never shown as evidence
    assert any(case.expect in w and "not counted" in w for w in result.warnings)


@pytest.mark.parametrize("case", HONEST, ids=lambda c: c.name)
def test_honest_replies_still_count(tmp_path: Path, case: QuoteCase) -> None:
    result, _ = _check(tmp_path, case)
    assert result.category is case.category, result.warnings
    assert result.evidence_quote == case.quote
