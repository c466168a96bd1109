"""The ``primary outcome`` and ``secondary outcomes`` sections: the outcomes as registered."""

from __future__ import annotations

from typing import Any

from medverify.trials.summary import (
    MAX_OUTCOMES,
    OUTCOMES,
    Line,
    Sentence,
    not_given,
)


def _registered(study: dict[str, Any], key: str, limit: int) -> list[Sentence]:
    out = []
    items = Line(study).get((*OUTCOMES, key)) or []
    for i in range(min(len(items), limit)):
        base = (*OUTCOMES, key, i)
        line = Line(study)
        line.lit("Outcome: ").val((*base, "measure"))
        line.opt(" (time frame: ", (*base, "timeFrame"), ")").lit(".")
        line.opt(" ", (*base, "description"))
        out.append(line.sentence())
    if len(items) > limit:
        out.append(Sentence(text="Further outcomes are listed in the registry record.",
                            pointers=[]))
    return out


def primary_outcome(study: dict[str, Any]) -> list[Sentence]:
    return (_registered(study, "primaryOutcomes", MAX_OUTCOMES)
            or not_given("The registry record registers no primary outcome."))


def secondary_outcomes(study: dict[str, Any]) -> list[Sentence]:
    return (_registered(study, "secondaryOutcomes", MAX_OUTCOMES)
            or not_given("The registry record registers no secondary outcomes."))
