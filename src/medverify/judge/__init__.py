"""The judge seam: decide, for each claim, whether its evidence supports it (factual
analysis) and whether it supports its negation (counterfactual analysis).

A judge implements one method, ``judge(items) -> verdicts`` (one Verdict per item, same
order). A judge never raises for one bad item: it returns a Verdict with ``error`` set.

Judges are named in :data:`JUDGES` (``llm``, ``llm-scored``, ``builtin``, ``cascade`` and
those of installed plugins, entry-point group ``medverify.judges``);
:func:`medverify.judge.build.create_judge` makes the configured one (``JUDGES.create``
with the confidence card of ``[judge_settings] calibration``,
:mod:`medverify.judge.confidence`). See docs/plugins.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

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


class JudgeRegistry(Registry[Judge]):
    """Judge factories by name, each called as ``factory(config, model)``."""

    def create(self, name: str, config: Config, model: Model | None = None) -> Judge:
        """The judge ``name`` made from ``config`` and ``model`` (the configured
        :class:`~medverify.llm.facade.Model`, or None); see :mod:`medverify.registry`."""
        return self.build(name, config, model)


JUDGES = JudgeRegistry("judge", group="medverify.judges", protocol=Judge,
                       needs="it needs name, prompt_version and an async judge(items) method")
"""Judge factories by name: ``JUDGES.create(name, config, model)``. Plugins add names
through the ``medverify.judges`` entry-point group (see docs/plugins.md)."""
JUDGES.register("llm", "medverify.judge.llm:LLMJudge.from_config")
JUDGES.register("builtin", "medverify.judge.builtin:BuiltinJudge.from_config")
JUDGES.register("cascade", "medverify.judge.cascade:CascadeJudge.from_config")
JUDGES.register("llm-scored", "medverify.judge.llm_scored:ScoredLLMJudge.from_config")


def model_required(name: str) -> ConfigError:
    """The error of a judge that needs a model and was given none."""
    return ConfigError(
        f"the {name} judge needs a model: pass --model SPEC (or use --judge builtin, "
        "which runs offline)"
    )


def declares(name: str, trait: str) -> bool:
    """Whether the class behind judge ``name``'s factory declares ``trait = True``; a judge
    that says nothing declares nothing. The traits, so that no caller branches on a name:

    * ``offline``: never calls a model (the built-in judge);
    * ``needs_model``: cannot run without a model (``llm``, ``llm-scored``, ``cascade``);
    * ``io_bound``: its time is spent waiting on model calls, so the model layer's
      concurrency limit is the one that counts (``llm``);
    * ``composite``: routes claims between other judges (``cascade``);
    * ``second_stage``: can be a cascade's second stage, and has the ``claims_per_call`` and
      ``max_passages`` its call count needs (``llm``, ``llm-scored``);
    * ``fails_trial_study``: measured unable to grade the clinical-trial study against
      curated summaries (``builtin``: docs/trials.md, "The 15-question study"), so
      ``medverify trials study`` warns in the terminal and in its report."""
    factory = JUDGES.get(name)
    return has_trait(getattr(factory, "__self__", factory), trait)


def has_trait(judge: object, trait: str) -> bool:
    """Whether a judge (an instance or its class) declares ``trait = True``: what
    :func:`declares` asks of a registered name, for a judge already made."""
    return bool(getattr(judge, trait, False))


J = TypeVar("J", bound=Judge)


def rebatched(judge: J, claims_per_call: int, max_passages: int) -> J:
    """``judge`` asking ``claims_per_call`` claims per model call with up to
    ``max_passages`` passages, when it batches claims (its ``batched`` method: the LLM
    judge, a cascade, a judge with a confidence card around one); any other judge as it is
    (its batching does not depend on them). How one worker's fact-checker shares the
    check's judge with its own batching (``[factcheck] facts_per_call``)."""
    pick = getattr(judge, "batched", None)
    return judge if pick is None else pick(claims_per_call, max_passages)  # type: ignore[no-any-return]


def second_stages() -> list[str]:
    """The registered judges that can be a cascade's second stage (``second_stage =
    True``): the choices of ``[judge_settings] cascade_second`` and ``--cascade-second``."""
    return [name for name in JUDGES.names() if declares(name, "second_stage")]


def runs_offline(name: str) -> bool:
    """Whether judge ``name`` never calls a model (``offline = True``)."""
    return declares(name, "offline")
