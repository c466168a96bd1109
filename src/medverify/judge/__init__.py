"""The judge seam: decide, for each claim, whether its evidence supports it (factual
analysis) and whether it supports its negation (counterfactual analysis).

A judge implements one method, ``judge(items) -> verdicts`` (one Verdict per item, same
order). A judge never raises for one bad item: it returns a Verdict with ``error`` set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from medverify.errors import ConfigError
from medverify.records import Claim, Passage, Verdict
from medverify.registry import Registry


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


JUDGES: Registry[Judge] = Registry("judge")
JUDGES.register("llm", "medverify.judge.llm:LLMJudge")


def make_judge(name: str, **options: Any) -> Judge:
    """Create a judge by registry name (``llm``; ``builtin`` and ``cascade`` register later).

    ``options`` are passed to the judge's constructor (e.g. ``model=``)."""
    if name not in JUDGES.names():
        hint = (
            " (configure a model with --model SPEC to use the LLM judge)"
            if name == "builtin"
            else ""
        )
        raise ConfigError(f"judge {name!r} is not available{hint}; known: {JUDGES.names()}")
    return JUDGES.create(name, **options)
