"""A judge with a confidence card: the wrapped judge decides, the card says how sure.

Every verdict of the wrapped judge gets ``confidence`` (the card's P(right) for its
category) and ``confident`` (that probability reaches the category's threshold). The card
never overrides a doubt the judge raised itself: a verdict the judge marked not sure (the
built-in judge's uncovered claim, a hedge, a vetoed passage, or its own calibration's
threshold) stays not sure, with its reason. A judge whose only "not sure" is its own
calibration declares ``card_replaces_calibration = True`` (the scored LLM judge): the card
then decides alone.
A card fitted for another judge or prompt warns once and gives no confidence: every verdict
is marked not sure with the reason. ERROR verdicts pass through untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from medverify.judge import Judge, JudgeItem, has_trait, rebatched
from medverify.judge.confidence.card import ConfidenceCard
from medverify.judge.confidence.signals import verdict_features
from medverify.records import Category, Verdict

log = logging.getLogger(__name__)


class CardJudge:
    """``inner`` with ``card``'s confidence (see the module docstring)."""

    def __init__(self, inner: Judge, card: ConfidenceCard) -> None:
        self.inner = inner
        self.card = card
        self.name = inner.name
        self.mismatch = card.fits(self.judge_id, inner.prompt_version)
        self.keeps_doubts = not has_trait(inner, "card_replaces_calibration")
        if self.mismatch:
            log.warning("confidence card %s is %s: no verdict of this judge gets a confidence",
                        card.card_id, self.mismatch)

    @property
    def prompt_version(self) -> str | None:
        return self.inner.prompt_version

    @property
    def judge_id(self) -> str:
        return str(getattr(self.inner, "judge_id", self.inner.name))

    def for_dataset(self, dataset: str | None) -> CardJudge:
        """``eval pairs``: the wrapped judge's choice for ``dataset``, with this card."""
        pick = getattr(self.inner, "for_dataset", None)
        return self if pick is None else CardJudge(pick(dataset), self.card)

    def batched(self, claims_per_call: int, max_passages: int) -> CardJudge:
        """The wrapped judge batched so (:func:`medverify.judge.rebatched`), with this card."""
        inner = rebatched(self.inner, claims_per_call, max_passages)
        return self if inner is self.inner else CardJudge(inner, self.card)

    def __getattr__(self, name: str) -> object:
        # traits (offline, needs_model, ...) and helpers of the wrapped judge
        return getattr(self.__dict__["inner"], name)

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        verdicts = await self.inner.judge(items)
        return [self.assess(item, v) for item, v in zip(items, verdicts, strict=True)]

    def assess(self, item: JudgeItem, verdict: Verdict) -> Verdict:
        """``verdict`` with the card's confidence."""
        category = verdict.category
        if category == Category.ERROR:
            return verdict
        if self.mismatch:
            return verdict.model_copy(update={
                "confidence": None, "confident": False,
                "not_sure": f"the confidence card {self.card.card_id} is {self.mismatch}"})
        fit = self.card.categories.get(category.value)
        if fit is None:
            return verdict.model_copy(update={
                "confidence": None, "confident": False,
                "not_sure": f"{category.value} verdicts are never sure for this judge"})
        x = np.asarray([verdict_features(item.claim.text, item.passages, verdict)])
        p = float(fit.probability(x)[0])
        doubt = verdict.not_sure if self.keeps_doubts and verdict.confident is False else None
        return verdict.model_copy(update=_sureness(doubt, category.value, p, fit.threshold))


def _sureness(doubt: str | None, category: str, p: float, threshold: float | None
              ) -> dict[str, object]:
    update: dict[str, object] = {"confidence": round(p, 4)}
    if doubt:
        return update | {"confident": False, "not_sure": doubt}  # the judge's doubt stands
    if threshold is None:
        return update | {"confident": False, "not_sure": (
            f"{category} is never sure for this judge (the card's precision never held)")}
    if p < threshold:
        return update | {"confident": False, "not_sure": (
            f"calibrated probability {p:.2f} is below the card's threshold {threshold:.2f}")}
    return update | {"confident": True, "not_sure": None}
