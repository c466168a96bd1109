"""The check flow against a hostile model endpoint: one that stalls (accepts, never answers)
ends within ``[llm] call_budget_s`` / ``answer_budget_s`` as ERROR with the cause, and one
that sends a 50 MB reply gives ERROR claims (never a verdict) and a small report."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from medverify.checker import Checker
from medverify.config import Config, ModelSettings
from medverify.kb import KnowledgeBase
from medverify.kit import FlowKit
from medverify.records import Answer, Category, Document, Report
from medverify.testing import FakeChatServer, FakeResponse

DOCS = [Document(doc_id="metformin", title="Metformin",
                 text="Metformin is a first-line medicine for type 2 diabetes. The usual "
                 "starting dose is 500 mg once or twice daily with meals.")]
ANSWER = Answer(text="Metformin is a first-line medicine for type 2 diabetes. The usual "
                "starting dose is 5000 mg daily.", question="q")
SLACK_S = 1.0  # KB search, connection set-up and scheduling beyond the budget on busy CI


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    with KnowledgeBase.create(tmp_path / "kb", embedder="hash") as base:
        base.ingest(DOCS)
        yield base


def _check(kb: KnowledgeBase, server: FakeChatServer, llm: ModelSettings,
           decomposer: str = "rules") -> tuple[Report, float]:
    config = Config(model=f"openai-compatible:m@{server.base_url}", decomposer=decomposer,
                    llm=llm)
    checker = Checker.from_config(config, kit=FlowKit(kb=kb))

    async def run() -> Report:
        try:
            [report] = await checker.run([ANSWER])
            return report
        finally:
            await checker.aclose()

    started = time.perf_counter()
    report = asyncio.run(run())
    return report, time.perf_counter() - started


def test_a_stalled_endpoint_makes_error_claims_within_the_call_budget(
        kb: KnowledgeBase) -> None:
    """Default retries and per-attempt timeout (5 x 60 s before), a 1.5 s call budget."""
    with FakeChatServer(FakeResponse.stall()) as server:
        report, took = _check(kb, server, ModelSettings(call_budget_s=1.5, cache=False))
    assert report.results and {r.category for r in report.results} == {Category.ERROR}
    for result in report.results:
        assert "judge call failed" in (result.error or "")
        assert "call's time budget of 1.5 s ([llm] call_budget_s) ran out" in (result.error or "")
    assert 1.5 <= took < 1.5 + SLACK_S, f"{took:.2f} s"


def test_a_stalled_decomposer_call_ends_the_answer_within_the_call_budget(
        kb: KnowledgeBase) -> None:
    """With the LLM decomposer the first call stalls: the answer ends with the cause."""
    with FakeChatServer(FakeResponse.stall()) as server:
        settings = ModelSettings(call_budget_s=1.0, cache=False)
        report, took = _check(kb, server, settings, decomposer="llm")
    assert not report.results
    assert any("call's time budget of 1 s ([llm] call_budget_s)" in e
               for e in report.errors), report.errors
    assert 1.0 <= took < 1.0 + SLACK_S, f"{took:.2f} s"


def test_the_answer_budget_cuts_the_judge_after_a_slow_decomposition(
        kb: KnowledgeBase) -> None:
    """Decomposition answers after 0.8 s (inside its own 2 s), then the judge stalls: the
    answer's 2 s end it at 2 s, before the judge call's own budget would (2.8 s)."""
    decomposed = json.dumps({"claims": [
        {"text": "Metformin is a first-line medicine for type 2 diabetes.", "sentence": 0}]})
    script = [FakeResponse(text=decomposed, delay_s=0.8)]
    with FakeChatServer(FakeResponse.stall(), script=script) as server:
        settings = ModelSettings(call_budget_s=2.0, answer_budget_s=2.0, cache=False)
        report, took = _check(kb, server, settings, decomposer="llm")
    assert report.results, report.errors
    assert {r.category for r in report.results} == {Category.ERROR}
    assert all("answer's time budget of 2 s ([llm] answer_budget_s) ran out"
               in (r.error or "") for r in report.results), report.results[0].error
    assert 2.0 <= took < 2.0 + SLACK_S, f"{took:.2f} s"


def test_a_50_mb_judge_reply_is_an_error_and_the_report_stays_small(kb: KnowledgeBase) -> None:
    with FakeChatServer(FakeResponse.huge(50_000_000, declare_length=False)) as server:
        report, _ = _check(kb, server, ModelSettings(cache=False))
    assert report.results and {r.category for r in report.results} == {Category.ERROR}
    assert all("[llm] max_reply_bytes" in (r.error or "") for r in report.results)
    assert all(r.verdict is None or r.verdict.raw_output is None for r in report.results)
    assert len(report.model_dump_json()) < 50_000


@pytest.mark.slow
def test_with_default_settings_a_stalled_endpoint_is_an_error_within_30_s(
        kb: KnowledgeBase) -> None:
    """The defaults themselves (before: 314 s): the judge call's 30 s budget."""
    with FakeChatServer(FakeResponse.stall()) as server:
        report, took = _check(kb, server, ModelSettings(cache=False))
    assert {r.category for r in report.results} == {Category.ERROR}
    assert took < 30 + SLACK_S, f"{took:.2f} s"
