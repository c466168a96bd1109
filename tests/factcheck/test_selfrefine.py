from __future__ import annotations

import asyncio

import pytest

from medverify.errors import InputError, ProviderError
from medverify.factcheck.selfrefine import (
    FEEDBACK_STAGE,
    NO_QUESTION,
    REFINE_STAGE,
    SelfRefine,
)
from medverify.llm.base import ChatRequest
from medverify.llm.facade import Model
from medverify.testing import ScriptedProvider

QUESTION = "What is the usual starting dose of metformin?"
ANSWER = "Metformin is usually started at 5000 mg daily."
FEEDBACK = "- The dose is wrong: metformin is usually started at 500 mg once or twice daily."
REFINED = "Metformin is usually started at 500 mg once or twice daily with meals."


def _by_stage(request: ChatRequest) -> str:
    """The feedback prompt asks to review; the refine prompt carries the feedback."""
    return REFINED if "FEEDBACK (data)" in request.messages[-1].content else FEEDBACK


def test_feedback_then_refine_with_the_same_model() -> None:
    provider = ScriptedProvider(_by_stage)
    model = Model(provider, spec="fake:x")
    result = asyncio.run(SelfRefine(model, max_tokens=300).refine(QUESTION, f" {ANSWER}\n"))

    assert (result.feedback, result.refined, result.error) == (FEEDBACK, REFINED, None)
    assert result.initial_answer == ANSWER and result.model == "fake:x"
    feedback_request, refine_request = provider.requests
    assert all(r.temperature == 0.0 and r.max_tokens == 300 for r in provider.requests)
    feedback_user = feedback_request.messages[-1].content
    assert QUESTION in feedback_user and ANSWER in feedback_user and FEEDBACK not in feedback_user
    refine_user = refine_request.messages[-1].content
    assert QUESTION in refine_user and ANSWER in refine_user
    fence = refine_user.split("<<<", 1)[1].split(" ", 1)[0]
    assert f"<<<{fence} feedback>>>\n{FEEDBACK}\n<<<END {fence}>>>" in refine_user
    assert f"<<<{fence} answer>>>\n{ANSWER}\n<<<END {fence}>>>" in refine_user
    assert list(model.usage) == [FEEDBACK_STAGE, REFINE_STAGE]
    assert set(result.usage) == {FEEDBACK_STAGE, REFINE_STAGE}
    for stage in (FEEDBACK_STAGE, REFINE_STAGE):
        assert result.usage[stage] == model.usage[stage]
        assert result.usage[stage].calls == 1 and result.usage[stage].prompt_tokens > 0
    assert result.prompt_versions == {FEEDBACK_STAGE: "selfrefine_feedback/v1",
                                      REFINE_STAGE: "selfrefine_refine/v1"}


def test_a_failed_refine_keeps_the_feedback() -> None:
    provider = ScriptedProvider([FEEDBACK, ProviderError("server said no", status=400)])
    model = Model(provider)
    result = asyncio.run(SelfRefine(model).refine(QUESTION, ANSWER))
    assert result.feedback == FEEDBACK and result.refined is None
    assert result.error is not None and result.error.startswith(REFINE_STAGE)
    assert "server said no" in result.error
    assert set(result.usage) == {FEEDBACK_STAGE}


def test_a_failed_feedback_stops_before_refining() -> None:
    provider = ScriptedProvider([ProviderError("down", status=400), REFINED])
    result = asyncio.run(SelfRefine(Model(provider)).refine(QUESTION, ANSWER))
    assert result.feedback is None and result.refined is None
    assert result.error is not None and result.error.startswith(FEEDBACK_STAGE)
    assert len(provider.requests) == 1 and provider.remaining == 1


def test_an_empty_refine_reply_is_an_error() -> None:
    result = asyncio.run(SelfRefine(Model(ScriptedProvider([FEEDBACK, " "]))).refine(None, ANSWER))
    assert result.feedback == FEEDBACK and result.refined is None
    assert result.error == f"{REFINE_STAGE}: the model returned an empty reply"


def test_without_a_question() -> None:
    provider = ScriptedProvider(_by_stage)
    result = asyncio.run(SelfRefine(Model(provider)).refine(None, ANSWER))
    assert result.refined == REFINED
    assert all(NO_QUESTION in r.messages[-1].content for r in provider.requests)


def test_an_empty_answer_is_refused() -> None:
    provider = ScriptedProvider(_by_stage)
    with pytest.raises(InputError):
        asyncio.run(SelfRefine(Model(provider)).refine(QUESTION, "  "))
    assert not provider.requests
