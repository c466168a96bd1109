"""The ``primary outcome`` and ``secondary outcomes`` sections: the outcomes as registered,
every one (the secondary section also holds the other pre-specified outcomes)."""

from __future__ import annotations

from typing import Any

from medverify.trials.summary import (
    OUTCOMES,
    Line,
    Sentence,
    not_given,
)


def _registered(study: dict[str, Any], key: str, label: str) -> list[Sentence]:
    out = []
    items = Line(study).get((*OUTCOMES, key)) or []
    for i in range(len(items)):
        base = (*OUTCOMES, key, i)
        line = Line(study)
        line.lit(f"{label}: ").opt("", (*base, "measure"))
        line.opt(" (time frame: ", (*base, "timeFrame"), ")").lit(".")
        line.opt(" ", (*base, "description"))
        out.append(line.sentence())
    return out


def primary_outcome(study: dict[str, Any]) -> list[Sentence]:
    return (_registered(study, "primaryOutcomes", "Primary outcome")
            or not_given("The registry record registers no primary outcome."))


def secondary_outcomes(study: dict[str, Any]) -> list[Sentence]:
    return (_registered(study, "secondaryOutcomes", "Secondary outcome")
            + _registered(study, "otherOutcomes", "Other pre-specified outcome")
            or not_given("The registry record registers no secondary outcomes."))
