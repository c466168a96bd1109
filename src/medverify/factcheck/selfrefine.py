"""The Self-Refine baseline (Madaan et al. 2023), as Vladika et al. (2025) compare against it.

The same model first critiques the answer's medical accuracy and completeness (stage
``selfrefine_feedback``: a list of concrete problems), then rewrites the answer using that
feedback (stage ``selfrefine_refine``: the improved answer only). No knowledge base is
involved: the model checks itself. The question, the answer and the feedback go into the
prompts fenced as untrusted text. A failed call is recorded as the result's ``error``,
keeping whatever was obtained before it.
"""

from __future__ import annotations

from medverify.answerer import check_question, usage_of
from medverify.errors import InputError, ProviderError
from medverify.factcheck.records import SelfRefineResult
from medverify.llm.base import Message
from medverify.llm.facade import Model
from medverify.prompts import load_prompt
from medverify.prompts.untrusted import fence_id, fenced

FEEDBACK_STAGE = "selfrefine_feedback"
REFINE_STAGE = "selfrefine_refine"
NO_QUESTION = "(no question was given)"


class _Failed(Exception):
    """One call failed; the message goes into the result's ``error``."""


class SelfRefine:
    """One round of feedback, then refine, with one model."""

    def __init__(self, model: Model, *, max_tokens: int = 1024,
                 prompt_version: str = "v1") -> None:
        self.model = model
        self.max_tokens = max_tokens
        self._feedback = load_prompt(FEEDBACK_STAGE, prompt_version)
        self._refine = load_prompt(REFINE_STAGE, prompt_version)

    @property
    def prompt_versions(self) -> dict[str, str]:
        """Stage -> prompt id, e.g. ``{"selfrefine_feedback": "selfrefine_feedback/v1"}``."""
        return {FEEDBACK_STAGE: self._feedback.id, REFINE_STAGE: self._refine.id}

    def feedback_messages(self, question: str | None, answer: str) -> list[Message]:
        fence = fence_id([question or "", answer])
        return self._feedback.render(question=_question_block(fence, question),
                                     answer=fenced(fence, "answer", answer))

    def refine_messages(self, question: str | None, answer: str,
                        feedback: str) -> list[Message]:
        fence = fence_id([question or "", answer, feedback])
        return self._refine.render(question=_question_block(fence, question),
                                   answer=fenced(fence, "answer", answer),
                                   feedback=fenced(fence, "feedback", feedback))

    async def refine(self, question: str | None, answer: str) -> SelfRefineResult:
        """Feedback, then refine. Raises :class:`InputError` for an empty answer; a failed
        call gives a result with ``error`` set (the feedback kept when it was obtained)."""
        answer = answer.strip()
        if not answer:
            raise InputError("the answer is empty: nothing to refine")
        question = check_question(question) if question and question.strip() else None
        result = SelfRefineResult(initial_answer=answer, model=self.model.spec,
                                  prompt_versions=self.prompt_versions)
        try:
            result.feedback = await self._call(
                result, FEEDBACK_STAGE, self.feedback_messages(question, answer))
            result.refined = await self._call(
                result, REFINE_STAGE, self.refine_messages(question, answer, result.feedback))
        except _Failed as exc:
            result.error = str(exc)
        return result

    async def _call(self, result: SelfRefineResult, stage: str,
                    messages: list[Message]) -> str:
        """One call at temperature 0; its usage goes into ``result.usage[stage]``."""
        try:
            completion = await self.model.complete(messages, stage=stage, temperature=0.0,
                                                   max_tokens=self.max_tokens)
        except ProviderError as exc:
            raise _Failed(f"{stage}: {exc}") from exc
        result.usage[stage] = usage_of(completion)
        text = completion.text.strip()
        if not text:
            raise _Failed(f"{stage}: the model returned an empty reply")
        return text


def _question_block(fence: str, question: str | None) -> str:
    return fenced(fence, "question", question) if question else NO_QUESTION

