"""The ``eligibility`` section: sex, ages, healthy volunteers, study population, criteria."""

from __future__ import annotations

from typing import Any

from medverify.trials.summary import (
    ELIG,
    Line,
    Sentence,
    not_given,
    pointer,
)


def eligibility(study: dict[str, Any]) -> list[Sentence]:
    out = []
    line = Line(study)
    if line.has((*ELIG, "sex")) or line.has((*ELIG, "minimumAge")):
        line.lit("Eligible participants:")
        line.opt(" sex ", (*ELIG, "sex"), ";", enum=True)
        line.opt(" minimum age ", (*ELIG, "minimumAge"), ";")
        line.opt(" maximum age ", (*ELIG, "maximumAge"), ";")
        healthy = line.get((*ELIG, "healthyVolunteers"))
        if isinstance(healthy, bool):
            line.lit(" healthy volunteers accepted;" if healthy
                     else " healthy volunteers not accepted;")
            line.pointers.append(pointer((*ELIG, "healthyVolunteers")))
        line.parts[-1] = line.parts[-1].rstrip(";")
        out.append(line.lit(".").sentence())
    line = Line(study)
    if line.has((*ELIG, "studyPopulation")):
        out.append(line.lit("Study population: ").val((*ELIG, "studyPopulation")).sentence())
    line = Line(study)
    if line.has((*ELIG, "eligibilityCriteria")):
        out.append(line.lit("Criteria: ").val((*ELIG, "eligibilityCriteria")).sentence())
    return out or not_given("The registry record gives no eligibility criteria for this trial.")
