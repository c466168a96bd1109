"""Cascade judge: the built-in verifier settles the claims it is confident about, the LLM
judge the rest.

A claim is *settled* by the built-in judge when its verdict is

- ``FACT`` with max P(SUPPORTED) >= ``high`` and no passage's P(CONTRADICTED) at or above
  its threshold, or
- ``HALLUCINATION`` with max P(CONTRADICTED) >= ``high`` and no passage's P(SUPPORTED) at or
  above its threshold, or
- ``COVERAGE_GAP`` with both maxima <= ``low`` (every passage is clearly off the point).

Everything else (in-between probabilities, ``JUDGMENT_ERROR``, a verifier error) goes to the
LLM judge. With ``route="not_sure"`` the rule is the built-in judge's own confidence
instead: a verdict it gives confidently (docs/judges.md, "How sure") is settled, every other
one goes on. The second stage is any registered judge that declares ``second_stage``
(:func:`medverify.judge.second_stages`: the LLM judge, generated JSON, or the scored judge,
:mod:`medverify.judge.llm_scored`), made by ``JUDGES.create`` from the name
``[judge_settings] cascade_second``.

Each Verdict's ``judge`` says which judge decided; LLM verdicts keep the built-in
probabilities in ``probabilities`` for comparison. :func:`cascade_notes` counts the settled
claims and the model calls they saved, for ``Report.notes["judge.cascade"]``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Protocol

from medverify.config import Config
from medverify.errors import ConfigError
from medverify.judge import (
    JUDGES,
    Judge,
    JudgeItem,
    declares,
    has_trait,
    model_required,
    rebatched,
    second_stages,
)
from medverify.judge.builtin import (
    CONTRADICTED,
    SUPPORTED,
    BuiltinJudge,
    ClaimScores,
    VerifierLike,
)
from medverify.judge.llm import LLMJudge, plan_batches
from medverify.llm.facade import Model
from medverify.records import Category, ClaimResult, Verdict

NOTE_KEY = "judge.cascade"


class SecondStage(Judge, Protocol):
    """What the cascade asks of its second stage (a judge with ``second_stage = True``):
    its batching, to count the calls the cascade saved, and its id."""

    claims_per_call: int
    max_passages: int

    @property
    def judge_id(self) -> str: ...


def second_stage(config: Config, model: Model) -> SecondStage:
    """The judge ``[judge_settings] cascade_second`` names, made by ``JUDGES.create`` from
    ``config`` and ``model``, never asking for log-probabilities (as the cascade's second
    stage always ran). ConfigError when the made judge does not declare ``second_stage``
    (or the name is a composite judge, which would build itself again)."""
    name = config.judge_settings.cascade_second

    def refused() -> ConfigError:
        return ConfigError(f"judge {name!r} cannot be a cascade's second stage; those "
                           f"that can: {', '.join(second_stages())}")

    if declares(name, "composite"):
        raise refused()
    settings = config.judge_settings.model_copy(update={"logprobs": False})
    made = JUDGES.create(name, config.model_copy(update={"judge_settings": settings}), model)
    if not has_trait(made, "second_stage"):
        raise refused()
    return made  # type: ignore[return-value]


class CascadeJudge:
    """Built-in judge first, LLM judge for the claims it is not confident about."""

    name = "cascade"
    needs_model = True  # medverify.judge.declares
    composite = True

    def __init__(
        self,
        model: Model | None = None,
        *,
        builtin: BuiltinJudge | None = None,
        llm: SecondStage | None = None,
        verifier: VerifierLike | None = None,
        high: float = 0.9,
        low: float = 0.1,
        claims_per_call: int = 4,
        route: str = "margins",
        **builtin_options: Any,
    ) -> None:
        if llm is None and model is None:
            raise ConfigError("the cascade judge needs a model: pass --model SPEC")
        if not 0.0 <= low <= high <= 1.0:
            raise ConfigError(f"cascade margins need 0 <= low <= high <= 1, got {low}, {high}")
        if route not in ("margins", "not_sure"):
            raise ConfigError(f"cascade route {route!r}: expected margins or not_sure")
        self.builtin = builtin or BuiltinJudge(verifier, **builtin_options)
        if llm is None:
            llm = LLMJudge(model, claims_per_call=claims_per_call)  # type: ignore[arg-type]
        self.llm: SecondStage = llm
        self.high = high
        self.low = low
        self.route = route

    @classmethod
    def config_options(cls, config: Config, model: Model | None) -> dict[str, Any]:
        """Constructor options from the config: the built-in judge's ``[judge_settings]``,
        the second stage (:func:`second_stage`, when there is a model), and the cascade
        margins."""
        settings = config.judge_settings
        return {
            **BuiltinJudge.config_options(config, model),
            "model": model,
            "llm": None if model is None else second_stage(config, model),
            "claims_per_call": config.claims_per_call,
            "high": settings.cascade_high,
            "low": settings.cascade_low,
            "route": settings.cascade_route,
        }

    @classmethod
    def from_config(cls, config: Config, model: Model | None) -> CascadeJudge:
        """The registry factory: ConfigError when there is no model."""
        if model is None:
            raise model_required(cls.name)
        return cls(**cls.config_options(config, model))

    @property
    def prompt_version(self) -> str | None:
        return self.llm.prompt_version

    @property
    def judge_id(self) -> str:
        return f"cascade:{self.builtin.judge_id}+{self.llm.judge_id}"

    def for_dataset(self, dataset: str) -> CascadeJudge:
        """This cascade with its built-in stage calibrated for ``dataset`` (calibration
        family ``auto`` in ``eval pairs`` / ``eval judges``)."""
        other = copy.copy(self)
        other.builtin = self.builtin.for_dataset(dataset)
        return other

    def batched(self, claims_per_call: int, max_passages: int) -> CascadeJudge:
        """This cascade with its second stage batched so (see :func:`rebatched`)."""
        other = copy.copy(self)
        other.llm = rebatched(self.llm, claims_per_call, max_passages)  # type: ignore[assignment]
        return other

    def settled(self, scores: ClaimScores, verdict: Verdict) -> bool:
        """Whether the built-in verdict is confident enough to skip the LLM judge."""
        if not verdict.ok:
            return False
        if not scores.item.passages:
            return True  # COVERAGE_GAP without a model call, as the LLM judge does
        if self.route == "not_sure":
            return verdict.confident is True
        p_support, _ = scores.best(SUPPORTED)
        p_contradict, _ = scores.best(CONTRADICTED)
        category = verdict.category
        # A passage that passes both thresholds is decided by the larger probability, but
        # that is not confidence: such claims go to the LLM judge.
        if category == Category.FACT:
            return p_support >= self.high and p_contradict < self.builtin.contradict_threshold
        if category == Category.HALLUCINATION:
            return p_contradict >= self.high and p_support < self.builtin.support_threshold
        if category == Category.COVERAGE_GAP:
            return max(p_support, p_contradict) <= self.low
        return False

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        scored = await self.builtin.judge_scored(items)
        verdicts = [verdict for _, verdict in scored]
        routed = [i for i, (s, v) in enumerate(scored) if not self.settled(s, v)]
        if not routed:
            return verdicts
        decided = {v.claim_id: v for v in await self.llm.judge([items[i] for i in routed])}
        for i in routed:
            verdict = decided.get(items[i].claim.id)
            if verdict is not None:
                update = {"probabilities": verdicts[i].probabilities}
                verdicts[i] = verdict.model_copy(update=update)
        return verdicts

    def notes(self, results: Sequence[ClaimResult]) -> dict[str, Any]:
        """What the cascade saved on one answer (see :func:`cascade_notes`)."""
        return cascade_notes(results, self.builtin.judge_id, self.llm)


def cascade_notes(
    results: Sequence[ClaimResult], builtin_id: str, llm: SecondStage
) -> dict[str, Any]:
    """Claims settled by the built-in judge and the LLM calls that saved.

    ``calls_saved`` = the calls the LLM judge would make for all claims with evidence,
    minus those it needs for the routed ones, under its own batching rule
    (``claims_per_call`` claims sharing at most ``max_passages`` passages per call).
    Claims without evidence never cost a call and are not counted as saved."""
    items = [JudgeItem(claim=r.claim, passages=r.passages) for r in results
             if r.verdict is not None]
    routed = [JudgeItem(claim=r.claim, passages=r.passages) for r in results
              if r.verdict is not None and not r.verdict.judge.startswith(builtin_id)]
    all_calls = len(plan_batches(items, llm.claims_per_call, llm.max_passages))
    needed = len(plan_batches(routed, llm.claims_per_call, llm.max_passages))
    settled = len(items) - len(routed)
    return {
        "claims": len(items),
        "settled_by_builtin": settled,
        "sent_to_llm": len(routed),
        "llm_calls_without_cascade": all_calls,
        "llm_calls_needed": needed,
        "calls_saved": all_calls - needed,
        "summary": (
            f"{settled} of {len(items)} claims settled by the built-in judge; "
            f"{all_calls - needed} of {all_calls} LLM judge calls saved"
        ),
    }

