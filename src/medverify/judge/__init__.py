"""The judge seam: decide, for each claim, whether its evidence supports it (factual
analysis) and whether it supports its negation (counterfactual analysis).

A judge implements one method, ``judge(items) -> verdicts`` (one Verdict per item, same
order). A judge never raises for one bad item: it returns a Verdict with ``error`` set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from medverify.config import Config
from medverify.errors import ConfigError
from medverify.records import Claim, Passage, Verdict
from medverify.registry import Registry

if TYPE_CHECKING:
    from medverify.llm.facade import Model


class JudgeItem(BaseModel):
    """One claim with the evidence it is to be judged against."""

    model_config = ConfigDict(extra="forbid")

    claim: Claim
    passages: list[Passage]


@runtime_checkable
class Judge(Protocol):
    name: str
    prompt_version: str | None

    async def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]: ...


def judge_id(judge: Judge) -> str:
    """What a run records as the judge: its ``judge_id`` (name + weights or model) when it
    declares one, else its registry name."""
    return str(getattr(judge, "judge_id", judge.name))


JUDGES: Registry[Judge] = Registry("judge")
JUDGES.register("llm", "medverify.judge.llm:LLMJudge")
JUDGES.register("builtin", "medverify.judge.builtin:BuiltinJudge")
JUDGES.register("cascade", "medverify.judge.cascade:CascadeJudge")

_NEEDS_MODEL = ("llm", "cascade")


def make_judge(name: str, **options: Any) -> Judge:
    """Create a judge by registry name (``llm``, ``builtin``, ``cascade``).

    ``options`` are passed to the judge's constructor (e.g. ``model=``)."""
    if name not in JUDGES.names():
        raise ConfigError(f"judge {name!r} is not available; known: {JUDGES.names()}")
    if name in _NEEDS_MODEL and options.get("model") is None:
        raise ConfigError(
            f"the {name} judge needs a model: pass --model SPEC (or use --judge builtin, "
            "which runs offline)"
        )
    return JUDGES.create(name, **options)


def judge_options(name: str, config: Config, model: Model | None) -> dict[str, Any]:
    """Constructor options of judge ``name`` from the config (and the model, if any)."""
    settings = config.judge_settings
    builtin = {
        "path": settings.verifier,
        "support_threshold": settings.support_threshold,
        "contradict_threshold": settings.contradict_threshold,
        "batch_size": settings.batch_size,
    }
    if name == "builtin":
        return builtin
    llm = {"model": model, "claims_per_call": config.claims_per_call}
    if name == "cascade":
        return {**builtin, **llm, "high": settings.cascade_high, "low": settings.cascade_low}
    return llm if model is not None else {}
