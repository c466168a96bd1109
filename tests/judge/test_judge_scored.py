"""The scored LLM judge: two Yes/No passes read from option log-probabilities."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

from medverify.judge import JUDGES, JudgeItem
from medverify.judge.calibration import Family
from medverify.judge.llm_scored import (
    FEATURES,
    LLMCalibration,
    ScoredLLMJudge,
    load_llm_calibrations,
    yes_probability,
)
from medverify.llm.base import ChatRequest
from medverify.llm.facade import Model
from medverify.records import Category, Claim, Passage
from medverify.testing import ScriptedProvider
from medverify.testing.fake_provider import logprob_reply


def _by_pass(factual: dict[str, float], counterfactual: dict[str, float]
             ) -> Callable[[ChatRequest], object]:
    def reply(request: ChatRequest) -> object:
        asked = request.messages[-1].content
        return logprob_reply([factual if "Factual analysis" in asked else counterfactual])
    return reply


def _item(claim: str = "Metformin is first-line for type 2 diabetes.",
          passage: str = "Metformin is the first-line drug for type 2 diabetes.") -> JudgeItem:
    return JudgeItem(claim=Claim(id="c1", text=claim),
                     passages=[Passage(id="p1", doc_id="d1", text=passage)])


def _judge(provider: ScriptedProvider, **options: object) -> ScoredLLMJudge:
    return ScoredLLMJudge(Model(provider), **options)  # type: ignore[arg-type]


def test_yes_probability_sums_spellings_and_refuses_neither() -> None:
    assert yes_probability([("Yes", -0.1), (" yes", -3.0), ("No", -2.0)]) == pytest.approx(
        (np.exp(-0.1) + np.exp(-3.0)) / (np.exp(-0.1) + np.exp(-3.0) + np.exp(-2.0)))
    assert yes_probability([("Maybe", -0.1), ("The", -1.0)]) is None


def test_raw_rule_without_calibration_is_never_confident() -> None:
    provider = ScriptedProvider(_by_pass({"Yes": 0.9, "No": 0.1}, {"Yes": 0.2, "No": 0.8}))
    [verdict] = asyncio.run(_judge(provider, calibration=None).judge([_item()]))
    assert verdict.category == Category.FACT
    assert verdict.confident is False and "no calibration" in (verdict.not_sure or "")
    assert len(provider.requests) == 2
    # both passes share the prompt up to the question (prefix reuse)
    first, second = (r.messages[-1].content for r in provider.requests)
    assert first.split("Factual analysis")[0] == second.split("Counterfactual analysis")[0]
    assert all(r.max_tokens == 1 and r.top_logprobs for r in provider.requests)


def test_contradiction_pass_gives_hallucination() -> None:
    provider = ScriptedProvider(_by_pass({"Yes": 0.1, "No": 0.9}, {"Yes": 0.8, "No": 0.2}))
    [verdict] = asyncio.run(_judge(provider, calibration=None).judge([_item()]))
    assert verdict.category == Category.HALLUCINATION


def test_a_reply_without_yes_or_no_is_an_error_not_a_verdict() -> None:
    provider = ScriptedProvider(_by_pass({"Maybe": 0.9, "The": 0.1}, {"Yes": 0.5, "No": 0.5}))
    [verdict] = asyncio.run(_judge(provider, calibration=None).judge([_item()]))
    assert verdict.category == Category.ERROR and "neither Yes nor No" in (verdict.error or "")


def test_no_passage_is_a_coverage_gap_without_a_call() -> None:
    provider = ScriptedProvider([])
    item = JudgeItem(claim=Claim(id="c", text="x"), passages=[])
    [verdict] = asyncio.run(_judge(provider).judge([item]))
    assert verdict.category == Category.COVERAGE_GAP and not provider.requests


def _calibration(model_id: str, bias: list[float], fact_threshold: float | None
                 ) -> LLMCalibration:
    n = len(FEATURES)
    family = Family(name="general", trained_on=["t"], rows=10, mean=[0.0] * n,
                    scale=[1.0] * n, coef=[[0.0] * n] * 3, intercept=bias,
                    thresholds={"FACT": fact_threshold, "HALLUCINATION": None,
                                "COVERAGE_GAP": None})
    return LLMCalibration(model=model_id, prompt="judge_scored/v1", features=list(FEATURES),
                          family=family)


def test_the_prior_correction_overrides_a_yes_biased_model() -> None:
    provider = ScriptedProvider(_by_pass({"Yes": 0.99, "No": 0.01}, {"Yes": 0.5, "No": 0.5}))
    model = Model(provider)
    prior = _calibration(model.id, [0.0, 0.0, 3.0], 0.6)  # the model's Yes means little
    [verdict] = asyncio.run(ScoredLLMJudge(model, calibration=prior).judge([_item()]))
    assert verdict.category == Category.COVERAGE_GAP and verdict.confident is False
    confident = _calibration(model.id, [3.0, 0.0, 0.0], 0.6)
    [verdict] = asyncio.run(ScoredLLMJudge(model, calibration=confident).judge([_item()]))
    assert verdict.category == Category.FACT and verdict.confident is True
    assert verdict.judge.endswith("+calibrated")


def test_exact_checks_still_veto_a_wrong_number() -> None:
    provider = ScriptedProvider(_by_pass({"Yes": 0.95, "No": 0.05}, {"Yes": 0.1, "No": 0.9}))
    item = _item("The usual dose is 500 mg twice daily.", "The usual dose is 850 mg twice daily.")
    [verdict] = asyncio.run(_judge(provider, calibration=None).judge([item]))
    assert verdict.factual is not None and verdict.factual.vetoed
    assert verdict.category != Category.FACT


def test_registered_and_shipped_calibrations_load() -> None:
    from medverify.config import Config

    provider = ScriptedProvider([])
    judge = JUDGES.create("llm-scored", Config(), Model(provider))
    assert isinstance(judge, ScoredLLMJudge) and judge.calibration is None  # fake model
    for entry in load_llm_calibrations():
        assert entry.prompt.startswith("judge_scored/") and entry.family.rows > 0
